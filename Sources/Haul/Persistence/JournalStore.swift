import Dispatch
import Foundation
import GRDB
import Logging
import NIOConcurrencyHelpers

/// The SQLite ``Journal`` as one manager's ``JobStore``: the journal's queries, and that
/// manager's ``JournalWriter``, which batches its fire-and-forget writes into few
/// transactions.
///
/// One per manager, as the writer is: its order, its logger, its signals and its
/// ``close()`` are that manager's, while the journal (and its owner token) may be shared.
///
/// Coordination is the kernel's: an owner is alive while it holds its lock in
/// ``OwnerLocks``, so a job changes hands only when its owner died (or its lock file was
/// removed), and every write is fenced on the owner (a refused one is reported as
/// ``StoreSignal/lost(_:)``). An owner token is one process's, never reused, and a
/// process holds a job under one claim at a time: the token is the claim's attempt too. SQLite
/// cannot tell another process of a change, so ``signals`` polls, every `pollInterval`,
/// while the manager listens.
final class JournalStore: JobStore {
    let journal: Journal
    let writer: JournalWriter
    let signals: AsyncStream<StoreSignal>
    private let lost: NIOLockedValueBox<[DownloadID]>
    /// The jobs this owner holds through this store: claimed, and not yet ended, given
    /// back or lost (a write about them refused). What ``confirmCompletion(_:bytes:)``
    /// answers from.
    private let held: NIOLockedValueBox<Set<DownloadID>>
    private let closed = NIOLockedValueBox(false)
    /// Where the blocking control statements of ``leave(_:for:)`` run: this store's own,
    /// not one the process shares (the library owns no globals).
    private let controlQueue = DispatchQueue(label: "haul.journal.control")

    init(journal: Journal, logger: Logger, pollInterval: Duration = .milliseconds(250)) {
        self.journal = journal
        let lost = NIOLockedValueBox<[DownloadID]>([])
        self.lost = lost
        let held = NIOLockedValueBox<Set<DownloadID>>([])
        self.held = held
        writer = JournalWriter(journal: journal, logger: logger) { ids in
            held.withLockedValue { $0.subtract(ids) }
            lost.withLockedValue { $0.append(contentsOf: ids) }
        }
        let closed = self.closed
        signals = AsyncStream(unfolding: {
            let refused = lost.withLockedValue { lost in
                defer { lost = [] }
                return lost
            }
            if !refused.isEmpty { return .lost(refused) }
            do { try await Task.sleep(for: pollInterval) } catch { return nil }
            return closed.withLockedValue { $0 } ? nil : .wake
        })
    }

    func ownerToken() throws(DownloadError) -> Int64 { try journal.ownerToken() }

    func claim(_ job: JobRecord, force: Bool) async throws(DownloadError) -> JobClaim {
        let owner = try ownerToken()
        // Through the writer, so that it is ordered after this manager's earlier writes.
        let writer = self.writer
        let result = await withCheckedContinuation {
            (continuation: CheckedContinuation<Result<JobClaim, DownloadError>, Never>) in
            writer.submit(.claim(job, owner: owner, force: force) { continuation.resume(returning: $0) })
        }
        let claim = try result.get()
        if case .claimed(let claimed) = claim { hold([claimed.id]) }
        return claim
    }

    /// Notes that this owner holds `ids` now (claimed).
    private func hold(_ ids: some Sequence<DownloadID>) {
        held.withLockedValue { $0.formUnion(ids) }
    }

    /// Notes that this owner no longer holds `id` (ended).
    private func letGo(_ id: DownloadID) {
        _ = held.withLockedValue { $0.remove(id) }
    }

    func submit(_ jobs: [JobRecord], forcing: Set<String>, claimingUpTo limit: Int) async throws(DownloadError)
        -> SubmittedJobs
    {
        let owner = try ownerToken()
        // Claims are ordered after this manager's earlier writes, as ``claim(_:force:)``'s are.
        if limit > 0 { await writer.flush() }
        let submitted = try await journal.insert(jobs, session: owner, forcing: forcing, claimingUpTo: limit)
        hold(submitted.claimed.map(\.id))
        return submitted
    }

    func adoptUnfinished(keepingPaused: Bool) async throws(DownloadError) -> (count: Int, attachments: [JobAttachment]) {
        let session = try ownerToken()
        return try await off { () throws(DownloadError) in
            try self.journal.adoptUnfinished(session: session, keepingPaused: keepingPaused)
        }
    }

    func claimQueued(limit: Int) async throws(DownloadError) -> [ClaimedJob] {
        // The journal's owners lose jobs only by dying: nobody else writes a claimed partial.
        let claimed = try await journal.claim(limit: limit, session: ownerToken()).map {
            ClaimedJob(record: $0, progress: StoredProgress($0))
        }
        hold(claimed.map(\.id))
        return claimed
    }

    func commands() async throws(DownloadError) -> [(id: DownloadID, command: JobLifecycle.Command)] {
        try await journal.commands(for: ownerToken()).compactMap { id, text in
            JobLifecycle.Command(rawValue: text).map { (id, $0) }
        }
    }

    func watch(_ ids: [DownloadID]) async throws(DownloadError) -> JobWatch {
        let (rows, live) = try await journal.watch(ids)
        return JobWatch(rows: rows, live: live)
    }

    func leave(_ command: JobLifecycle.Command, for id: DownloadID) async throws(DownloadError) -> Bool {
        _ = try ownerToken()
        return try await off { () throws(DownloadError) in
            switch command {
            case .pause: try self.journal.pause(id) == .applied
            case .cancel: try self.journal.cancelRow(id).0 == .applied
            case .resume: try self.journal.retry(id) == .applied
            }
        }
    }

    /// Runs blocking journal work on the control queue, off the Swift concurrency pool.
    private func off<T: Sendable>(_ body: @escaping @Sendable () throws(DownloadError) -> T)
        async throws(DownloadError) -> T
    {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, DownloadError>, Never>) in
            controlQueue.async {
                do throws(DownloadError) { continuation.resume(returning: .success(try body())) } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }

    func recordStarted(_ id: DownloadID) {
        guard let owner = journal.owners.token else { return }
        writer.submit(.started(id: id.rawValue, owner: owner))
    }

    func recordState(_ id: DownloadID, _ change: StateChange, errorCode: String?, error: String?) {
        if change == .cancelled || change == .failed { letGo(id) }
        writer.submit(.state(id: id.rawValue, change.state, errorCode: errorCode, error: error))
    }

    func recordFailed(_ id: DownloadID, _ error: DownloadError) {
        recordState(id, .failed, errorCode: error.code.description, error: error.message)
    }

    func recordCompleted(
        _ id: DownloadID, bytes: Int64, transferred: Int64, unchanged: Bool, finalURL: String, path: String?,
        file: CompletedFile?
    ) {
        letGo(id)
        writer.submit(
            .completed(
                id: id.rawValue, bytes: bytes, transferred: transferred, unchanged: unchanged, finalURL: finalURL,
                path: path, file: file))
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

    func clearCommand(_ command: JobLifecycle.Command, for id: DownloadID) {
        writer.submit(.clearCommand(id: id.rawValue, command: command.rawValue))
    }

    func recordSources(_ id: DownloadID, location: URL?, mirrors: [URL]) {
        writer.submit(
            .sources(id: id.rawValue, location: location?.absoluteString, mirrors: JobRecord.encode(urls: mirrors)))
    }

    func release() {
        held.withLockedValue { $0.removeAll() }
        guard let owner = journal.owners.token else { return }
        writer.submit(.release(owner: owner))
    }

    /// The kernel proves this owner alive while it runs (``OwnerLocks``), so nobody takes
    /// over a job it holds: what it claimed and has not ended, given back or been refused a
    /// write about is still its own. Answered at once, from memory, without a write: the
    /// completion is recorded by
    /// ``recordCompleted(_:bytes:transferred:unchanged:finalURL:path:file:)``, fenced on the
    /// owner as every write is.
    func confirmCompletion(_ id: DownloadID, bytes: Int64) -> CompletionConfirmation {
        do { _ = try ownerToken() } catch { return .refused(error) }
        guard held.withLockedValue({ $0.contains(id) }) else {
            return .refused(
                .runningElsewhere("\(id): another process took the job over; its file is left where it is"))
        }
        return .confirmed
    }

    func flush() async { await writer.flush() }

    func close() async {
        closed.withLockedValue { $0 = true }
        await writer.close()
    }
}
