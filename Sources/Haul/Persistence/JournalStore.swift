import Logging

/// The SQLite ``Journal`` as one manager's ``JobStore``: the journal's queries, and that
/// manager's ``JournalWriter``, which batches its fire-and-forget writes into few
/// transactions.
///
/// One per manager, as the writer is: its order, its logger and its ``close()`` are that
/// manager's, while the journal (and its owner token) may be shared.
final class JournalStore: JobStore {
    let journal: Journal
    let writer: JournalWriter

    init(journal: Journal, logger: Logger) {
        self.journal = journal
        writer = JournalWriter(journal: journal, logger: logger)
    }

    func ownerToken() throws(DownloadError) -> Int64 { try journal.ownerToken() }

    func claim(_ job: JobRecord, owner: Int64, force: Bool) async throws(DownloadError) -> JobClaim {
        // Through the writer, so that it is ordered after this manager's earlier writes.
        let writer = self.writer
        let result = await withCheckedContinuation {
            (continuation: CheckedContinuation<Result<JobClaim, DownloadError>, Never>) in
            writer.submit(.claim(job, owner: owner, force: force) { continuation.resume(returning: $0) })
        }
        return try result.get()
    }

    func insert(_ jobs: [JobRecord], session: Int64, forcing: Set<String>) async throws(DownloadError)
        -> [JobAttachment]
    {
        try await journal.insert(jobs, session: session, forcing: forcing)
    }

    func adoptUnfinished(session: Int64, keepingPaused: Bool) async throws(DownloadError)
        -> (count: Int, attachments: [JobAttachment])
    {
        try journal.adoptUnfinished(session: session, keepingPaused: keepingPaused)
    }

    func claimQueued(limit: Int, session: Int64) async throws(DownloadError) -> [JobRecord] {
        try await journal.claim(limit: limit, session: session)
    }

    func commands(for owner: Int64) async throws(DownloadError) -> [(id: DownloadID, command: String)] {
        try await journal.commands(for: owner)
    }

    func watch(_ ids: [DownloadID]) async throws(DownloadError)
        -> (rows: [DownloadID: JobRecord], live: [Int64: JournalOwner])
    {
        try await journal.watch(ids)
    }

    func leave(_ command: JobLifecycle.Command, for id: DownloadID) throws(DownloadError) {
        switch command {
        case .pause: try journal.pause(id)
        case .cancel: try journal.cancel(id)
        case .resume: try journal.retry(id)
        }
    }

    func recordStarted(_ id: DownloadID, owner: Int64) {
        writer.submit(.started(id: id.rawValue, owner: owner))
    }

    func recordState(_ id: DownloadID, _ state: JobState, errorCode: String?, error: String?) {
        writer.submit(.state(id: id.rawValue, state, errorCode: errorCode, error: error))
    }

    func recordCompleted(_ id: DownloadID, bytes: Int64, finalURL: String, file: CompletedFile?) {
        writer.submit(.completed(id: id.rawValue, bytes: bytes, finalURL: finalURL, file: file))
    }

    func recordCheckpoint(
        _ id: DownloadID, bytes: Int64, total: Int64?, validator: String?, bytesPerSecond: Double, bootID: String?
    ) {
        writer.submit(
            .checkpoint(
                id: id.rawValue, bytes: bytes, total: total, validator: validator, bytesPerSecond: bytesPerSecond,
                bootID: bootID))
    }

    func recordAttempt(_ id: DownloadID, _ attempts: Int) {
        writer.submit(.attempt(id: id.rawValue, attempts))
    }

    func clearCommand(_ command: String, for id: DownloadID) {
        writer.submit(.clearCommand(id: id.rawValue, command: command))
    }

    func release(owner: Int64) {
        writer.submit(.release(owner: owner))
    }

    func flush() async { await writer.flush() }

    func close() async { await writer.close() }
}
