import Foundation
import Logging

/// Admission from the journal: this manager's owner token, claims of single downloads,
/// and queued jobs moved into memory a window at a time.
extension DownloadManager {
    /// This manager's owner token, taken on first use.
    func ownerToken() throws(DownloadError) -> Int64 {
        guard let journal else { return 0 }
        if me == 0 { me = try journal.ownerToken() }
        return me
    }

    /// Claims `record`'s job in the journal, through the writer so that it is ordered
    /// after this manager's earlier writes.
    func claim(_ record: JobRecord, owner: Int64, force: Bool, writer: JournalWriter) async throws(DownloadError)
        -> JournalWriter.Claim
    {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<JournalWriter.Claim, DownloadError>, Never>) in
            writer.submit(.claim(record, owner: owner, force: force) { continuation.resume(returning: $0) })
        }
        return try result.get()
    }


    /// Moves queued journal jobs of this manager into memory, up to the admission window.
    func admit() async {
        guard let journal, !admitting, !isShutDown, journalMayHaveWork else {
            checkIdle()
            return
        }
        admitting = true
        defer {
            admitting = false
            checkIdle()
        }
        await journalWriter?.flush()
        while !isShutDown, queue.count < configuration.admissionWindow {
            let wanted = configuration.admissionWindow - queue.count
            guard let records = try? await journal.claim(limit: wanted, session: me) else { break }
            // A window's jobs mostly share a directory: check each directory once per window.
            var checkedDirectories: Set<String> = []
            for record in records where jobs[DownloadID(record.id)] == nil {
                guard var request = try? record.request(),
                    let (paths, endpoint) = try? Self.validate(request, skippingDirectoryCheckFor: checkedDirectories)
                else {
                    journalWriter?.submit(
                        .state(id: record.id, .failed, errorCode: "invalidRequest", error: "the journal entry is invalid"))
                    continue
                }
                if let paths, let other = jobsByPath[paths.partial] {
                    // Two queued URLs would write the same file: the second one fails.
                    journalWriter?.submit(
                        .state(
                            id: record.id, .failed, errorCode: "duplicate",
                            error: "\(record.id) would be saved to the same file as \(other)"))
                    continue
                }
                do throws(DownloadError) {
                    try vault.restore(&request, from: record)
                } catch {
                    // Never run without the credentials: leave it paused, and say why.
                    journalWriter?.submit(
                        .state(id: record.id, .paused, errorCode: error.code.description, error: error.message))
                    managerEvents.yield(Event(id: request.id, event: .failed(error)))
                    continue
                }
                if let paths { checkedDirectories.insert(paths.directory.path) }
                let job = add(request, paths: paths, endpoint: endpoint)
                job.journaled = .init(
                    committed: record.bytesCommitted, bootID: record.bootID, completedFile: record.completedFile())
                enqueue(job)
            }
            schedule()
            if records.count < wanted {
                journalMayHaveWork = false
                break
            }
        }
    }
}
