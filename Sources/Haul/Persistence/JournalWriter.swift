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
        /// Inserts the job, or takes over an existing row with the same ID (keeping its
        /// committed bytes unless it finished or points elsewhere).
        case upsert(JobRecord)
        case started(id: String, owner: Int32)
        case state(id: String, JobState, errorCode: String?, error: String?)
        case completed(id: String, bytes: Int64, finalURL: String)
        /// `bytes` are on stable storage.
        case checkpoint(id: String, bytes: Int64, total: Int64?, validator: String?, bytesPerSecond: Double, bootID: String?)
        case attempt(id: String, Int)
        /// Clears `command` once it has been acted on; a newer command left meanwhile stays.
        case clearCommand(id: String, command: String)
        /// Gives up ownership of every unfinished job this process owns.
        case release(owner: Int32)
    }

    private struct State {
        var pending: [Operation] = []
        var submitted = 0
        var applied = 0
        var waiters: [(ticket: Int, continuation: CheckedContinuation<Void, Never>)] = []
        var closed = false
    }

    /// How long the worker lets operations gather before it writes them, unless a flush
    /// is waiting or a full batch is already there.
    static let gatherDelay: Duration = .milliseconds(20)
    /// A batch big enough to write at once.
    static let batchTarget = 256

    let journal: Journal
    private let state = NIOLockedValueBox(State())
    private let wakeups: AsyncStream<Void>.Continuation
    private let worker: Task<Void, Never>

    init(journal: Journal, logger: Logger) {
        self.journal = journal
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        wakeups = continuation
        let state = self.state
        worker = Task {
            for await _ in stream {
                // Let a burst gather into one transaction: thousands of small downloads
                // each submit a few operations, and a transaction per wakeup costs a WAL
                // write, locks and thread hand-offs each time. Nobody waits on a flush
                // during the pause (a flush skips it).
                if state.withLockedValue({ $0.waiters.isEmpty && $0.pending.count < Self.batchTarget }) {
                    try? await Task.sleep(for: Self.gatherDelay)
                }
                let batch = state.withLockedValue { state -> [Operation] in
                    defer { state.pending = [] }
                    return state.pending
                }
                guard !batch.isEmpty else { continue }
                do {
                    try await journal.writer.write { db in
                        // One timestamp per batch: converting dates is not free.
                        let now = Date().databaseValue
                        for operation in Self.coalesced(batch) { try Self.apply(operation, in: db, now: now) }
                    }
                } catch {
                    logger.warning("journal write failed", metadata: ["error": "\(error)"])
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
            let done = state.withLockedValue { state -> Bool in
                if state.applied >= state.submitted { return true }
                state.waiters.append((state.submitted, continuation))
                return false
            }
            if done { continuation.resume() }
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
        for case .completed(let id, _, _) in batch { completed.insert(id) }
        guard !completed.isEmpty else { return batch }
        var result: [Operation] = []
        result.reserveCapacity(batch.count)
        var seenCompletion: Set<String> = []
        for operation in batch {
            switch operation {
            case .started(let id, _), .checkpoint(let id, _, _, _, _, _):
                if completed.contains(id), !seenCompletion.contains(id) { continue }
            case .completed(let id, _, _):
                seenCompletion.insert(id)
            default:
                break
            }
            result.append(operation)
        }
        return result
    }

    static func apply(_ operation: Operation, in db: Database, now: DatabaseValue) throws {
        switch operation {
        case .upsert(let record):
            try upsert(record, in: db)
        case .started(let id, let owner):
            try db.cachedStatement(
                sql: """
                    UPDATE job SET state = 'running', owner = ?, session = ?, updatedAt = ?, finishedAt = NULL
                    WHERE id = ?
                    """).execute(arguments: [owner, owner, now, id])
        case .state(let id, let state, let errorCode, let error):
            let finished = !state.isUnfinished
            try db.cachedStatement(
                sql: """
                    UPDATE job SET state = ?, errorCode = ?, lastError = ?, updatedAt = ?,
                        finishedAt = CASE WHEN ? THEN ? ELSE NULL END, bytesPerSecond = 0
                    WHERE id = ?
                    """).execute(arguments: [state.rawValue, errorCode, error, now, finished, now, id])
        case .completed(let id, let bytes, let finalURL):
            try db.cachedStatement(
                sql: """
                    UPDATE job SET state = 'completed', bytesCommitted = ?, totalBytes = ?, finalURL = ?,
                        errorCode = NULL, lastError = NULL, updatedAt = ?, finishedAt = ?, bytesPerSecond = 0,
                        owner = NULL
                    WHERE id = ?
                    """).execute(arguments: [bytes, bytes, finalURL, now, now, id])
        case .checkpoint(let id, let bytes, let total, let validator, let rate, let bootID):
            try db.cachedStatement(
                sql: """
                    UPDATE job SET bytesCommitted = ?, totalBytes = COALESCE(?, totalBytes),
                        validator = COALESCE(?, validator), bytesPerSecond = ?, bootID = ?, updatedAt = ?
                    WHERE id = ?
                    """).execute(arguments: [bytes, total, validator, rate, bootID, now, id])
        case .attempt(let id, let attempts):
            try db.cachedStatement(sql: "UPDATE job SET attempts = ?, updatedAt = ? WHERE id = ?").execute(arguments: [attempts, now, id])
        case .clearCommand(let id, let command):
            try db.cachedStatement(sql: "UPDATE job SET command = NULL WHERE id = ? AND command = ?")
                .execute(arguments: [id, command])
        case .release(let owner):
            try db.cachedStatement(
                sql: """
                    UPDATE job SET owner = NULL, session = NULL,
                        state = CASE WHEN state = 'running' THEN 'paused' ELSE state END
                    WHERE (owner = ? OR session = ?) AND state IN ('queued', 'running', 'paused', 'waiting')
                    """).execute(arguments: [owner, owner])
        }
    }

    /// Inserts `record`, or takes over the row with its ID: a finished row, or one for
    /// another URL or partial file, starts again from zero; an unfinished one keeps its
    /// committed bytes. A row that a live process is running is left alone.
    static func upsert(_ record: JobRecord, in db: Database) throws {
        // One prepared statement, reused for every row of a batch.
        try db.cachedStatement(
            sql: """
                INSERT INTO job (id, url, destinationKind, destinationPath, destinationName, partialPath, state,
                    priority, attempts, bytesCommitted, totalBytes, expectedSize, checksum, headers, createdAt,
                    updatedAt, owner, session, bytesPerSecond, credentials)
                VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, 0, 0, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?)
                ON CONFLICT(id) DO UPDATE SET
                    bytesCommitted = CASE
                        WHEN job.state IN ('completed', 'cancelled') OR job.url != excluded.url
                            OR job.partialPath != excluded.partialPath THEN 0
                        ELSE job.bytesCommitted END,
                    validator = CASE
                        WHEN job.state IN ('completed', 'cancelled') OR job.url != excluded.url
                            OR job.partialPath != excluded.partialPath THEN NULL
                        ELSE job.validator END,
                    url = excluded.url, destinationKind = excluded.destinationKind,
                    destinationPath = excluded.destinationPath, destinationName = excluded.destinationName,
                    partialPath = excluded.partialPath, state = 'queued', priority = excluded.priority,
                    attempts = 0, totalBytes = COALESCE(excluded.totalBytes, job.totalBytes),
                    expectedSize = excluded.expectedSize, checksum = excluded.checksum, headers = excluded.headers,
                    updatedAt = excluded.updatedAt, finishedAt = NULL, lastError = NULL, errorCode = NULL,
                    command = NULL, owner = excluded.owner, session = excluded.session, bytesPerSecond = 0,
                    credentials = excluded.credentials
                WHERE job.state != 'running' OR job.owner IS NULL OR job.owner = excluded.owner
                    OR NOT haul_alive(job.owner)
                """
        ).execute(
            arguments: [
                record.id, record.url, record.destinationKind, record.destinationPath, record.destinationName,
                record.partialPath, record.priority, record.totalBytes, record.expectedSize, record.checksum,
                record.headers, record.createdAt, record.updatedAt, record.owner, record.session,
                record.credentials,
            ])
    }
}
