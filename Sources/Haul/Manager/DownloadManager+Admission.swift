import Foundation
import Logging

/// Admission from the journal: this manager's owner token, claims of single downloads,
/// and queued jobs moved into memory a window at a time.
extension DownloadManager {
    /// This manager's owner token, taken on first use.
    func ownerToken() throws(DownloadError) -> Int64 {
        guard let store else { return 0 }
        if me == 0 { me = try store.ownerToken() }
        return me
    }

    /// Moves queued journal jobs of this manager into memory, up to the admission window.
    func admit() async {
        guard let store, !admitting, !isShutDown, journalMayHaveWork else {
            checkIdle()
            return
        }
        admitting = true
        defer {
            admitting = false
            let waiters = admissionWaiters
            admissionWaiters = []
            for waiter in waiters { waiter.resume() }
            checkIdle()
        }
        await store.flush()
        while !isShutDown, queue.count < configuration.admissionWindow {
            let wanted = configuration.admissionWindow - queue.count
            guard let claims = try? await store.claimQueued(limit: wanted) else { break }
            // A window's jobs mostly share a directory: check each directory once per window.
            var checkedDirectories: Set<String> = []
            for claimed in claims where jobs[claimed.id] == nil {
                let record = claimed.record
                guard var request = try? record.request(),
                    let (paths, endpoint) = try? Self.validate(request, skippingDirectoryCheckFor: checkedDirectories)
                else {
                    store.recordState(
                        DownloadID(record.id), .failed, errorCode: "invalidRequest", error: "the journal entry is invalid")
                    continue
                }
                if let paths, let other = jobsByPath[paths.partial] {
                    // Two queued URLs would write the same file: the second one fails.
                    store.recordState(
                        DownloadID(record.id), .failed, errorCode: "duplicate",
                        error: "\(record.id) would be saved to the same file as \(other)")
                    continue
                }
                do throws(DownloadError) {
                    try vault.restore(&request, from: record)
                } catch {
                    // Never run without the credentials: leave it paused, and say why.
                    store.recordState(request.id, .paused, errorCode: error.code.description, error: error.message)
                    managerEvents.yield(Event(id: request.id, event: .failed(error)))
                    continue
                }
                if let paths { checkedDirectories.insert(paths.directoryPath) }
                let journaled: TransferOperation.JournaledProgress?
                do throws(DownloadError) { journaled = try await takeUp(claimed, paths: paths) } catch {
                    store.recordFailed(request.id, error)
                    continue
                }
                let job = add(request, paths: paths, endpoint: endpoint)
                job.journaled = journaled
                enqueue(job)
            }
            schedule()
            if claims.count < wanted {
                journalMayHaveWork = false
                break
            }
        }
    }
}
