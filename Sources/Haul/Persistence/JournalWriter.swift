import Foundation
import GRDB
import Logging
import NIOConcurrencyHelpers

/// Batches the manager's journal writes into few transactions, off the transfer path.
///
/// Submitting never blocks: operations queue under a lock and one task applies
/// everything queued so far in a single transaction, in submission order. ``flush()``
/// waits until what was submitted before it is on disk.
final class JournalWriter: Sendable {
    enum Operation: Sendable {
        /// Inserts the job for `owner`, or takes over an existing row with the same ID
        /// unless another live process holds it; `reply` gets the outcome once it is
        /// written (see ``JobClaim``).
        case claim(JobRecord, owner: Int64, force: Bool, reply: @Sendable (Result<JobClaim, DownloadError>) -> Void)
        case started(id: String, owner: Int64)
        case state(id: String, JobState, errorCode: String?, error: String?)
        /// Completed: `bytes` in all, `transferred` of them over the network in this run, or
        /// `unchanged` (a `304`).
        case completed(
            id: String, bytes: Int64, transferred: Int64, unchanged: Bool, finalURL: String, path: String?,
            file: CompletedFile?)
        /// `bytes` are on stable storage.
        case checkpoint(id: String, bytes: Int64, total: Int64?, validator: String?, bytesPerSecond: Double, bootID: String?)
        case attempt(id: String, Int)
        /// The content's addresses changed: where it is fetched from now, and its mirrors.
        case sources(id: String, location: String?, mirrors: String?)
        /// Clears `command` once it has been acted on; a newer command left meanwhile stays.
        case clearCommand(id: String, command: String)
        /// Gives up ownership of every unfinished job this process owns.
        case release(owner: Int64)

        /// The job a fenced write is about.
        var jobID: String? {
            switch self {
            case .started(let id, _), .state(let id, _, _, _), .completed(let id, _, _, _, _, _, _),
                .checkpoint(let id, _, _, _, _, _), .attempt(let id, _), .sources(let id, _, _):
                id
            case .claim, .clearCommand, .release: nil
            }
        }
    }

    private struct State {
        var pending: [Operation] = []
        var submitted = 0
        var applied = 0
        var waiters: [(ticket: Int, continuation: CheckedContinuation<Void, Never>)] = []
        var closed = false
        /// The worker while it lets a burst gather: a flush wakes it at once.
        var gathering: CheckedContinuation<Void, Never>?
    }

    /// How long the worker lets operations gather before it writes them, unless a flush
    /// is waiting or a full batch is already there (20 ms unless a test says otherwise).
    let gatherDelay: Duration
    /// A batch big enough to write at once.
    static let batchTarget = 256

    let journal: Journal
    private let state = NIOLockedValueBox(State())
    private let wakeups: AsyncStream<Void>.Continuation
    private let worker: Task<Void, Never>

    /// `refused` hears of the jobs whose fenced writes matched no row this owner holds.
    init(
        journal: Journal, logger: Logger, gatherDelay: Duration = .milliseconds(20),
        refused: @escaping @Sendable ([DownloadID]) -> Void = { _ in }
    ) {
        self.journal = journal
        self.gatherDelay = gatherDelay
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        wakeups = continuation
        let state = self.state
        worker = Task {
            for await _ in stream {
                // Let a burst gather into one transaction: thousands of small downloads
                // each submit a few operations, and a transaction per wakeup costs a WAL
                // write, locks and thread hand-offs each time. Nobody waits on a flush
                // during the pause (a flush skips it). A wakeup that finds nothing pending
                // (its operation went out with an earlier batch) does not pause: at the end
                // of a command it would hold `close()` for the whole delay.
                if state.withLockedValue({ Self.pauses(pending: $0.pending, flushing: !$0.waiters.isEmpty) }) {
                    await Self.gather(state, for: gatherDelay)
                }
                let batch = state.withLockedValue { state -> [Operation] in
                    defer { state.pending = [] }
                    return state.pending
                }
                guard !batch.isEmpty else { continue }
                do {
                    let writeStarted = ContinuousClock.now
                    let replies = try await journal.writer.write { db in
                        // One timestamp per batch: converting dates is not free.
                        let now = JournalDate.databaseValue(Date())
                        var replies: [@Sendable () -> Void] = []
                        var live: [Int64: JournalOwner]?
                        var lost: [DownloadID] = []
                        let me = journal.owners.token
                        let outbox = journal.outbox
                        for operation in Self.coalesced(batch) {
                            if case .claim(let record, let owner, let force, let reply) = operation {
                                let owners = live ?? journal.refreshLiveOwners(db)
                                live = owners
                                let claim = try Self.claim(record, owner: owner, force: force, live: owners, in: db)
                                replies.append { reply(.success(claim)) }
                            } else {
                                // A webhook tells of a change of state: the state before counts.
                                let before = try outbox.flatMap { _ in try Self.stateBeforeEnd(operation, in: db) }
                                if try !Self.apply(operation, me: me, in: db, now: now) {
                                    if let id = operation.jobID { lost.append(DownloadID(id)) }
                                } else if let outbox {
                                    try Self.enqueueWebhooks(for: operation, outbox: outbox, before: before, in: db, now: now)
                                }
                            }
                        }
                        if !lost.isEmpty { refused(lost) }
                        return replies
                    }
                    journal.wrote(in: ContinuousClock.now - writeStarted)
                    for reply in replies { reply() }
                } catch {
                    logger.warning("journal write failed", metadata: ["error": "\(error)"])
                    let failure = Journal.failure(error)
                    for case .claim(_, _, _, let reply) in batch { reply(.failure(failure)) }
                }
                let ready = state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
                    state.applied += batch.count
                    let applied = state.applied
                    let ready = state.waiters.filter { $0.ticket <= applied }.map(\.continuation)
                    state.waiters.removeAll { $0.ticket <= applied }
                    return ready
                }
                for continuation in ready { continuation.resume() }
            }
        }
    }

    deinit {
        wakeups.finish()
    }

    /// Whether a wakeup that finds `pending` waits for more before writing: not when nothing
    /// is pending, a flush waits, a full batch is there or a claim (whose caller waits for
    /// its reply) is among them.
    static func pauses(pending: [Operation], flushing: Bool) -> Bool {
        !pending.isEmpty && !flushing && pending.count < batchTarget
            && !pending.contains { if case .claim = $0 { true } else { false } }
    }

    /// Waits ``gatherDelay``, or less if a flush comes meanwhile (someone waits for what
    /// is pending: a command ending, a list, a shutdown).
    private static func gather(_ state: NIOLockedValueBox<State>, for gatherDelay: Duration) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let waited = state.withLockedValue { state -> Bool in
                guard state.waiters.isEmpty else { return false }
                state.gathering = continuation
                return true
            }
            guard waited else { return continuation.resume() }
            Task {
                try? await Task.sleep(for: gatherDelay)
                state.withLockedValue { state in
                    defer { state.gathering = nil }
                    return state.gathering
                }?.resume()
            }
        }
    }

    /// Queues `operation`; returns at once.
    func submit(_ operation: Operation) {
        state.withLockedValue { state in
            state.pending.append(operation)
            state.submitted += 1
        }
        wakeups.yield()
    }

    /// Waits until every operation submitted before this call is written.
    func flush() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let (done, gathering) = state.withLockedValue { state -> (Bool, CheckedContinuation<Void, Never>?) in
                if state.applied >= state.submitted { return (true, nil) }
                state.waiters.append((state.submitted, continuation))
                defer { state.gathering = nil }
                return (false, state.gathering)
            }
            if done { continuation.resume() }
            // The worker writes what is pending now rather than after its pause.
            gathering?.resume()
        }
    }

    /// Flushes, then stops the worker.
    func close() async {
        await flush()
        wakeups.finish()
        await worker.value
    }

    /// `batch` without the operations a later one in the same batch makes pointless: a
    /// small download often starts and completes within one batch, and its completion
    /// writes everything its start and checkpoints would have.
    static func coalesced(_ batch: [Operation]) -> [Operation] {
        var completed: Set<String> = []
        for case .completed(let id, _, _, _, _, _, _) in batch { completed.insert(id) }
        guard !completed.isEmpty else { return batch }
        var result: [Operation] = []
        result.reserveCapacity(batch.count)
        var seenCompletion: Set<String> = []
        for operation in batch {
            switch operation {
            case .started(let id, _), .checkpoint(let id, _, _, _, _, _):
                if completed.contains(id), !seenCompletion.contains(id) { continue }
            case .completed(let id, _, _, _, _, _, _):
                seenCompletion.insert(id)
            default:
                break
            }
            result.append(operation)
        }
        return result
    }

    /// Applies `operation`, fenced on owner `me`: a write about a job changes its row only
    /// while `me` holds it. Returns `false` when such a write matched no row.
    @discardableResult
    static func apply(_ operation: Operation, me: Int64?, in db: Database, now: DatabaseValue) throws -> Bool {
        switch operation {
        case .claim:
            preconditionFailure("claims are applied by the worker, which replies")
        case .started(let id, let owner):
            try db.cachedStatement(
                sql: """
                    UPDATE job SET state = 'running', owner = ?, session = ?, updatedAt = ?, finishedAt = NULL
                    WHERE id = ? AND owner = ?
                    """).execute(arguments: [owner, owner, now, id, owner])
        case .state(let id, let state, let errorCode, let error):
            let finished = !state.isUnfinished
            try db.cachedStatement(
                sql: """
                    UPDATE job SET state = ?, errorCode = ?, lastError = ?, updatedAt = ?,
                        finishedAt = CASE WHEN ? THEN ? ELSE NULL END, bytesPerSecond = 0
                    WHERE id = ? AND owner = ?
                    """).execute(arguments: [state.rawValue, errorCode, error, now, finished, now, id, me])
        case .completed(let id, let bytes, let transferred, let unchanged, let finalURL, let path, let file):
            try db.cachedStatement(
                sql: """
                    UPDATE job SET state = 'completed', bytesCommitted = ?, totalBytes = ?, finalURL = ?,
                        errorCode = NULL, lastError = NULL, updatedAt = ?, finishedAt = ?, bytesPerSecond = 0,
                        owner = NULL, command = NULL, filePath = ?, fileSize = ?, fileModified = ?, fileValidator = ?,
                        fileTag = ?, bytesTransferred = ?, unchanged = ?
                    WHERE id = ? AND owner = ?
                    """
            ).execute(
                arguments: [
                    bytes, bytes, finalURL, now, now, file?.path ?? path, file?.size, file?.modified,
                    JobRecord.encode(validator: file?.validator), file?.objectTag, transferred, unchanged, id, me,
                ])
        case .checkpoint(let id, let bytes, let total, let validator, let rate, let bootID):
            try db.cachedStatement(
                sql: """
                    UPDATE job SET bytesCommitted = ?, totalBytes = COALESCE(?, totalBytes),
                        validator = COALESCE(?, validator), bytesPerSecond = ?, bootID = ?, updatedAt = ?
                    WHERE id = ? AND owner = ?
                    """).execute(arguments: [bytes, total, validator, rate, bootID, now, id, me])
        case .attempt(let id, let attempts):
            try db.cachedStatement(sql: "UPDATE job SET attempts = ?, updatedAt = ? WHERE id = ? AND owner = ?")
                .execute(arguments: [attempts, now, id, me])
        case .sources(let id, let location, let mirrors):
            try db.cachedStatement(sql: "UPDATE job SET location = ?, mirrors = ?, updatedAt = ? WHERE id = ? AND owner = ?")
                .execute(arguments: [location, mirrors, now, id, me])
        case .clearCommand(let id, let command):
            try db.cachedStatement(sql: "UPDATE job SET command = NULL WHERE id = ? AND command = ?")
                .execute(arguments: [id, command])
            return true
        case .release(let owner):
            try db.cachedStatement(
                sql: """
                    UPDATE job SET owner = NULL, session = NULL,
                        state = CASE WHEN state = 'running' THEN 'paused' ELSE state END
                    WHERE (owner = ? OR session = ?) AND state IN ('queued', 'running', 'paused', 'waiting')
                    """).execute(arguments: [owner, owner])
            return true
        }
        switch operation {
        case .started, .state, .completed, .checkpoint, .attempt: return db.changesCount > 0
        default: return true
        }
    }

    /// The state of the job that `operation` ends (completes, fails or pauses), before it
    /// does; `nil` for other operations.
    static func stateBeforeEnd(_ operation: Operation, in db: Database) throws -> String? {
        switch operation {
        case .completed(let id, _, _, _, _, _, _), .state(let id, .failed, _, _), .state(let id, .paused, _, _):
            try String.fetchOne(db, sql: "SELECT state FROM job WHERE id = ?", arguments: [id])
        default:
            nil
        }
    }

    /// Adds a webhook per receiver of `outbox` for the end `operation` recorded (a
    /// completion, a failure, or a person's pause when the outbox takes pauses), in the same
    /// transaction, with what its body will say. A job already in that state (`before`: a
    /// paused job paused again as its process stops) changed nothing and sends nothing.
    static func enqueueWebhooks(
        for operation: Operation, outbox: Journal.Outbox, before: String?, in db: Database, now: DatabaseValue
    ) throws {
        let id: String
        let kind: Journal.Outbox.Kind
        var path: String?
        var bytes: Int64?
        var errorCode: String?
        var error: String?
        switch operation {
        case .completed(let job, let count, _, _, _, let saved, _):
            (id, kind, path, bytes) = (job, .completed, saved, count)
        case .state(let job, .failed, let code, let message):
            (id, kind, errorCode, error) = (job, .failed, code, message)
        case .state(let job, .paused, let code, let message) where code != Journal.shutdownCode:
            (id, kind, errorCode, error) = (job, .paused, code, message)
        default:
            return
        }
        guard outbox.kinds.contains(kind), before != kind.rawValue else { return }
        for target in outbox.targets {
            try db.cachedStatement(
                sql: """
                    INSERT INTO outbox (eventID, target, jobID, kind, url, path, bytes, errorCode, error, createdAt,
                        nextAttemptAt)
                    SELECT ?, ?, id, ?, url, ?, ?, ?, ?, ?, ? FROM job WHERE id = ?
                    """
            ).execute(
                arguments: [UUID().uuidString.lowercased(), target, kind.rawValue, path, bytes, errorCode, error, now, now, id])
        }
    }

    /// Claims `record`'s job for `owner`: inserts it, or takes over the row with its ID
    /// unless another live process holds it. Says what the row knew of the job's files.
    /// `isNew` says the caller knows no row has the job's ID (nothing to look up).
    static func claim(
        _ record: JobRecord, owner: Int64, force: Bool, live: [Int64: JournalOwner], in db: Database, isNew: Bool = false
    ) throws -> JobClaim {
        var record = record
        var previous = isNew ? nil : try JobRecord.fetchOne(db, id: record.id)
        if let taken = previous {
            let id = JobIdentity.id(
                record.id, url: record.url, destination: record.identityDestination, taken: taken.identityDestination)
            if id != record.id {
                record.id = id
                previous = try JobRecord.fetchOne(db, id: id)
            }
        }
        if let previous, previous.isHeld(byOtherThan: owner, live: Set(live.keys)) {
            guard let attachment = try Journal.attach([previous], live: live, in: db).first else {
                preconditionFailure("a held row has a holder")
            }
            return .heldElsewhere(attachment)
        }
        record.owner = owner
        record.session = owner
        _ = try upsert(record, me: owner, force: force, in: db)
        guard let previous, previous.url == record.url, previous.partialPath == record.partialPath else {
            return .claimed(ClaimedJob(record: record, progress: nil))
        }
        if previous.state.isUnfinished {
            return .claimed(
                ClaimedJob(record: record, progress: StoredProgress(committed: previous.bytesCommitted, bootID: previous.bootID)))
        }
        if previous.state == .completed, !force, previous.checksum == record.checksum,
            previous.expectedSize == record.expectedSize, let file = previous.completedFile()
        {
            return .claimed(ClaimedJob(record: record, progress: StoredProgress(committed: 0, bootID: nil, completedFile: file)))
        }
        return .claimed(ClaimedJob(record: record, progress: nil))
    }

    /// Inserts `record` (queued, or paused when the record is: a download added paused), or
    /// takes over the row with its ID: a finished row, or one for
    /// another URL or partial file, starts again from zero; an unfinished one keeps its
    /// committed bytes. A row another live process holds is left alone (needs
    /// ``Journal/refreshLiveOwners(_:)`` first in the transaction): returns whether the
    /// row was written.
    ///
    /// A completed row for the same URL, file, checksum and size keeps its completed
    /// file's details, so the transfer can revalidate that file instead of downloading it
    /// again; `force` drops them.
    @discardableResult
    static func upsert(_ record: JobRecord, me: Int64, force: Bool, in db: Database) throws -> Bool {
        try upsert(record, me: me, force: force, with: db.cachedStatement(sql: upsertSQL), in: db)
    }

    /// ``upsert(_:me:force:in:)`` with the statement of ``upsertSQL``, prepared once for a
    /// batch of rows (looking the cached one up hashes its text each time).
    static func upsert(_ record: JobRecord, me: Int64, force: Bool, with statement: Statement, in db: Database)
        throws -> Bool
    {
        let created = JournalDate.databaseValue(record.createdAt)
        let updated = record.updatedAt == record.createdAt ? created : JournalDate.databaseValue(record.updatedAt)
        try statement.execute(
            arguments: [
                record.id, record.url, record.destinationKind, record.destinationPath, record.destinationName,
                record.partialPath, record.state == .paused ? JobState.paused.rawValue : JobState.queued.rawValue,
                record.priority, record.totalBytes, record.expectedSize, record.checksum,
                record.headers, created, updated, record.owner, record.session,
                record.credentials, record.maxBytesPerSecond, record.connections, record.mirrors, record.pieces, record.location, record.delta, record.stream, force, force, force, force, force, me,
                me,
            ])
        return db.changesCount > 0
    }

    /// The statement of ``upsert(_:me:force:in:)``.
    static let upsertSQL = """
        INSERT INTO job (id, url, destinationKind, destinationPath, destinationName, partialPath, state,
            priority, attempts, bytesCommitted, totalBytes, expectedSize, checksum, headers, createdAt,
            updatedAt, owner, session, bytesPerSecond, credentials, maxBytesPerSecond, connections, mirrors,
            pieces, location, delta, stream)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT(id) DO UPDATE SET
            bytesCommitted = CASE
                WHEN job.state IN ('completed', 'cancelled') OR job.url != excluded.url
                    OR job.partialPath != excluded.partialPath THEN 0
                ELSE job.bytesCommitted END,
            validator = CASE
                WHEN job.state IN ('completed', 'cancelled') OR job.url != excluded.url
                    OR job.partialPath != excluded.partialPath THEN NULL
                ELSE job.validator END,
            filePath = CASE WHEN \(keepsFile) THEN job.filePath END,
            fileSize = CASE WHEN \(keepsFile) THEN job.fileSize END,
            fileModified = CASE WHEN \(keepsFile) THEN job.fileModified END,
            fileValidator = CASE WHEN \(keepsFile) THEN job.fileValidator END,
            fileTag = CASE WHEN \(keepsFile) THEN job.fileTag END,
            url = excluded.url, destinationKind = excluded.destinationKind,
            destinationPath = excluded.destinationPath, destinationName = excluded.destinationName,
            partialPath = excluded.partialPath, state = excluded.state, priority = excluded.priority,
            attempts = 0, totalBytes = COALESCE(excluded.totalBytes, job.totalBytes),
            expectedSize = excluded.expectedSize, checksum = excluded.checksum, headers = excluded.headers,
            updatedAt = excluded.updatedAt, finishedAt = NULL, lastError = NULL, errorCode = NULL,
            command = NULL, owner = excluded.owner, session = excluded.session, bytesPerSecond = 0,
            credentials = excluded.credentials, maxBytesPerSecond = excluded.maxBytesPerSecond,
            connections = excluded.connections, mirrors = excluded.mirrors,
            pieces = excluded.pieces, location = excluded.location, delta = excluded.delta,
            stream = excluded.stream,
            bytesTransferred = NULL, unchanged = 0
        WHERE NOT \(Journal.heldElsewhereSQL)
        """

    /// SQL that is true when a completed row's file details stay valid for `excluded`
    /// (with `force` bound before it).
    private static let keepsFile = """
        NOT ? AND job.state = 'completed' AND job.url = excluded.url AND job.partialPath = excluded.partialPath
            AND job.checksum IS excluded.checksum AND job.expectedSize IS excluded.expectedSize
        """
}
