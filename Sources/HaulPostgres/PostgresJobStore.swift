import Foundation
package import Haul
package import Logging
import NIOConcurrencyHelpers
package import NIOPosix
import PostgresNIO

/// The shared queue as one worker's ``JobStore``: the second implementation of the
/// protocol the SQLite journal's `JournalStore` is the first of. The manager admits the
/// jobs this store leases (``claimQueued(limit:session:)``) and runs them with its usual
/// transfer, and every write it makes comes back here, where it is fenced.
///
/// The store remembers the lease (owner and attempt) of every job it claimed, so the
/// manager's writes, which name only a job's ID, become fenced statements: each is
/// conditioned on `lease_owner` and `attempt` and does nothing once another worker took
/// the job over. A checkpoint that finds its lease gone reports the job lost
/// (``onLost``), and the worker stops it.
///
/// Fire-and-forget writes run in order on one task, as the protocol requires.
package final class PostgresJobStore: JobStore, Sendable {
    struct Held: Sendable, Hashable {
        var attempt: Int
        var maxAttempts: Int
        /// The queued URL: a completion that was not redirected has nothing more to record.
        var url: String = ""
    }

    private struct State {
        /// The jobs this worker holds, by key.
        var leases: [String: Held] = [:]
        /// Jobs whose completion was recorded, until their details are.
        var completing: [String: Held] = [:]
    }

    let queue: PostgresQueue
    let owner: Int64
    let settings: QueueWorker.Settings
    let logger: Logger
    /// The worker's I/O threads, for the blocking copy of a partial taken over.
    let threadPool: NIOThreadPool
    /// Told of jobs whose lease turned out to be lost.
    let onLost: @Sendable ([DownloadID]) -> Void
    /// Told when a job stops counting against the worker's slots (completed, failed, given
    /// back, lost), so that the manager looks for more work at once: a claim made while
    /// every slot was taken found no room, and the manager then waits for the next poll.
    let onRoom: @Sendable () -> Void
    private let state = NIOLockedValueBox(State())
    private let completions = NIOLockedValueBox(Completions())
    private let writes: AsyncStream<Write>.Continuation
    private let writer: Task<Void, Never>

    private enum Write: Sendable {
        case run(@Sendable () async -> Void)
        case flush(CheckedContinuation<Void, Never>)
    }

    package init(
        queue: PostgresQueue, owner: Int64, settings: QueueWorker.Settings, logger: Logger, threadPool: NIOThreadPool,
        onLost: @escaping @Sendable ([DownloadID]) -> Void, onRoom: @escaping @Sendable () -> Void = {}
    ) {
        self.queue = queue
        self.owner = owner
        self.settings = settings
        self.logger = logger
        self.threadPool = threadPool
        self.onLost = onLost
        self.onRoom = onRoom
        let (stream, continuation) = AsyncStream.makeStream(of: Write.self)
        writes = continuation
        writer = Task {
            for await write in stream {
                switch write {
                case .run(let body): await body()
                case .flush(let continuation): continuation.resume()
                }
            }
        }
    }

    deinit {
        writes.finish()
    }

    var client: PostgresClient { queue.client }
    var leaseSeconds: Double { settings.lease.timeInterval }

    /// The keys and leases this store holds now.
    var held: [String: Held] { state.withLockedValue { $0.leases } }

    private func lease(of id: DownloadID) -> Held? {
        state.withLockedValue { $0.leases[id.rawValue] }
    }

    /// Forgets the lease of `key` if it is still `held`'s.
    private func forget(_ key: String, _ held: Held) {
        let forgotten = state.withLockedValue { state in
            guard state.leases[key] == held else { return false }
            state.leases[key] = nil
            return true
        }
        if forgotten { onRoom() }
    }

    private func submit(_ body: @escaping @Sendable () async -> Void) {
        writes.yield(.run(body))
    }

    /// Runs a fenced statement for `id`'s lease; says whether a row matched. No lease, no
    /// statement.
    private func fenced(
        _ id: DownloadID, forgetting: Bool, reportingLoss: Bool = false,
        _ makeQuery: @escaping @Sendable (_ attempt: Int) -> PostgresQuery
    ) {
        guard let held = lease(of: id) else { return }
        let key = id.rawValue
        if forgetting { forget(key, held) }
        submit { [self] in
            do {
                var matched = false
                for try await _ in try await client.query(makeQuery(held.attempt), logger: logger).decode(Int64.self) {
                    matched = true
                }
                if !matched {
                    logger.debug("write refused: the lease is gone", metadata: ["id": "\(key)"])
                    if !forgetting, reportingLoss {
                        logger.warning(
                            "lost the lease of \(key) (another worker took the job over): its write was refused; stopping it")
                        forget(key, held)
                        onLost([id])
                    }
                }
            } catch {
                logger.debug("write failed", metadata: ["id": "\(key)", "error": "\(String(reflecting: error))"])
            }
        }
    }

    // MARK: - Owners

    package func ownerToken() throws(DownloadError) -> Int64 { owner }

    // MARK: - Admission

    package func claim(_ job: JobRecord, owner: Int64, force: Bool) async throws(DownloadError) -> JobClaim {
        throw DownloadError.queue("a worker takes jobs from the shared queue; add them with PostgresQueue.enqueue")
    }

    package func insert(_ jobs: [JobRecord], session: Int64, forcing: Set<String>) async throws(DownloadError)
        -> [JobAttachment]
    {
        throw DownloadError.queue("a worker takes jobs from the shared queue; add them with PostgresQueue.enqueue")
    }

    package func adoptUnfinished(session: Int64, keepingPaused: Bool) async throws(DownloadError)
        -> (count: Int, attachments: [JobAttachment])
    {
        // Expired leases are claimed like available jobs: there is nothing to adopt.
        (0, [])
    }

    /// Leases up to `limit` jobs (no more than the worker's slots minus what it holds), by
    /// priority then age, skipping rows other claims have locked. With a per-host cap, the
    /// claims of all workers take one advisory lock in turn, so that the count of running
    /// jobs per host they read cannot be raced past the cap.
    package func claimQueued(limit: Int, session: Int64) async throws(DownloadError) -> [JobRecord] {
        let room = min(limit, settings.slots - state.withLockedValue { $0.leases.count + $0.completing.count })
        guard room > 0 else { return [] }
        let cap = settings.perHost ?? Int(Int32.max)
        let scan = max(room * 8, 64)
        let owner = self.owner
        let lease = leaseSeconds
        let perHost = settings.perHost != nil
        let logger = self.logger
        typealias Row = (String, Int, Int, String, String?, String, Int, Int64, Int64?, String?, String?, Bool)
        let rows: [Row]
        do {
            rows = try await client.withTransaction(logger: logger) { connection -> [Row] in
                if perHost {
                    try await connection.query("SELECT pg_advisory_xact_lock(\(PostgresQueue.claimLock))", logger: logger)
                }
                let result = try await connection.query(
                    """
                    WITH candidates AS (
                        SELECT id, host, priority, scheduled_at, state, lease_owner FROM haul_jobs
                        WHERE (state IN ('available', 'retryable') AND scheduled_at <= now())
                           OR (state = 'running' AND lease_expires_at <= now())
                        ORDER BY priority DESC, scheduled_at, id
                        LIMIT \(scan)
                        FOR UPDATE SKIP LOCKED
                    ), busy AS (
                        SELECT host, count(*) AS n FROM haul_jobs
                        WHERE state = 'running' AND lease_expires_at > now() GROUP BY host
                    ), ranked AS (
                        SELECT c.id, c.priority, c.scheduled_at, c.state, c.lease_owner,
                               coalesce(b.n, 0) + row_number() OVER (
                                   PARTITION BY c.host ORDER BY c.priority DESC, c.scheduled_at, c.id) AS slot
                        FROM candidates c LEFT JOIN busy b ON b.host = c.host
                    ), chosen AS (
                        SELECT id, state AS previous_state, lease_owner AS previous_owner FROM ranked WHERE slot <= \(cap)
                        ORDER BY priority DESC, scheduled_at, id LIMIT \(room)
                    )
                    UPDATE haul_jobs j SET state = 'running', lease_owner = \(owner), attempt = j.attempt + 1,
                        lease_expires_at = now() + make_interval(secs => \(lease)), command = NULL, updated_at = now()
                    FROM chosen WHERE j.id = chosen.id
                    RETURNING j.key, j.attempt, j.max_attempts, j.url, j.destination, j.options::text, j.priority,
                              j.bytes_committed, j.total_bytes, j.validator, j.boot_id,
                              (chosen.previous_state = 'running' AND chosen.previous_owner IS DISTINCT FROM \(owner))
                    """, logger: logger)
                var rows: [Row] = []
                for try await row in result.decode(Row.self) { rows.append(row) }
                return rows
            }
        } catch {
            throw DownloadError.queue("could not claim jobs: \(String(reflecting: error))")
        }
        var records: [JobRecord] = []
        for (key, attempt, maxAttempts, url, name, options, priority, committed, total, validator, boot, rescued) in rows {
            let held = Held(attempt: attempt, maxAttempts: maxAttempts, url: url)
            let reclaimed = state.withLockedValue { state in
                defer { state.leases[key] = held }
                return state.leases[key] != nil
            }
            // Its own lease, expired and claimed back before anyone else did: this worker
            // still runs the job, now under the new attempt.
            if reclaimed { continue }
            do throws(DownloadError) {
                var record = try makeRecord(key: key, url: url, name: name, options: options, priority: priority)
                record.bytesCommitted = committed
                record.totalBytes = total ?? record.totalBytes
                record.validator = validator
                record.bootID = boot
                if rescued { try await detachPartial(of: record) }
                records.append(record)
            } catch {
                recordFailed(DownloadID(key), error)
            }
        }
        return records
    }

    /// Gives the partial file of a job taken over from another worker (its lease expired)
    /// a file of its own: a copy of the partial (and of its sidecar) renamed over it.
    ///
    /// The other worker may not be dead, only stopped (SIGSTOP, a VM paused, a long
    /// stall), with the partial still open. On storage the workers share, it would write
    /// into whatever file that descriptor names once it runs again, and this worker renames
    /// its partial into place as the final file: without the copy, the stale worker's
    /// late writes would land in the finished file. After the copy they land in a file no
    /// name leads to any more.
    private func detachPartial(of record: JobRecord) async throws(DownloadError) {
        let partial = record.partialPath
        guard partial.hasSuffix(".haul-partial") else { return }
        let metadata = String(partial.dropLast(".haul-partial".count)) + ".haul-meta"
        let logger = self.logger
        let key = record.id
        do {
            try await threadPool.runIfActive {
                for path in [partial, metadata] where try Self.replaceWithCopy(path) {
                    logger.debug("took over a partial file with a copy of it", metadata: ["id": "\(key)", "path": "\(path)"])
                }
            }
        } catch {
            throw DownloadError.queue("\(key): could not take over the partial file: \(error)")
        }
    }

    /// Replaces the file at `path` with a copy of itself (a new inode); `false` if there is
    /// no such file. Blocking: for the I/O pool.
    static func replaceWithCopy(_ path: String) throws(QueueError) -> Bool {
        let source = open(path, O_RDONLY | O_CLOEXEC)
        guard source >= 0 else {
            if errno == ENOENT { return false }
            throw QueueError("cannot open \(path): \(String(cString: strerror(errno)))")
        }
        defer { closeDescriptor(source) }
        let temporary = path + ".haul-takeover"
        let target = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard target >= 0 else { throw QueueError("cannot create \(temporary): \(String(cString: strerror(errno)))") }
        var failure: QueueError?
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        copying: while true {
            let count = read(source, &buffer, buffer.count)
            if count < 0, errno == EINTR { continue }
            if count < 0 {
                failure = QueueError("cannot read \(path): \(String(cString: strerror(errno)))")
                break
            }
            if count == 0 { break }
            var offset = 0
            while offset < count {
                let written = buffer.withUnsafeBytes { write(target, $0.baseAddress! + offset, count - offset) }
                if written < 0, errno == EINTR { continue }
                if written <= 0 {
                    failure = QueueError("cannot write \(temporary): \(String(cString: strerror(errno)))")
                    break copying
                }
                offset += written
            }
        }
        if failure == nil, fsync(target) != 0 { failure = QueueError("cannot fsync \(temporary): \(String(cString: strerror(errno)))") }
        closeDescriptor(target)
        if failure == nil, rename(temporary, path) != 0 {
            failure = QueueError("cannot rename \(temporary): \(String(cString: strerror(errno)))")
        }
        if let failure {
            _ = unlink(temporary)
            throw failure
        }
        return true
    }

    /// The library's priority for a queue priority: the queue's 0 (the default) is
    /// `normal`, -2 and below `veryLow`, 2 and above `veryHigh`. (Rows are claimed by the
    /// queue's number; this orders the jobs a worker holds the same way.)
    static func priority(fromQueue priority: Int) -> DownloadPriority {
        DownloadPriority(rawValue: min(max(priority, -2), 2) + DownloadPriority.normal.rawValue) ?? .normal
    }

    /// The record a claimed row stands for, saved into the worker's directory.
    private func makeRecord(key: String, url: String, name: String?, options: String, priority: Int)
        throws(DownloadError) -> JobRecord
    {
        guard let url = URL(string: url) else { throw .queue("\(key): the queued URL '\(url)' is not a URL") }
        let decoded = (try? JSONDecoder().decode(QueueRequest.Options.self, from: Data(options.utf8)))
        var request = DownloadRequest(
            url: url, destination: .directory(settings.directory, name: name), id: DownloadID(key),
            priority: Self.priority(fromQueue: priority), expectedSize: decoded?.expectedSize,
            checksum: try decoded?.checksum.map { text throws(DownloadError) in try Checksum(parsing: text) },
            headers: (decoded?.headers ?? []).compactMap { $0.count == 2 ? (name: $0[0], value: $0[1]) : nil })
        request.maxBytesPerSecond = decoded?.maxBytesPerSecond
        return try JobRecord.make(for: request)
    }

    // MARK: - Coordination

    package func commands(for owner: Int64) async throws(DownloadError) -> [(id: DownloadID, command: String)] {
        do {
            var commands: [(id: DownloadID, command: String)] = []
            let rows = try await client.query(
                """
                SELECT key, command FROM haul_jobs
                WHERE lease_owner = \(self.owner) AND state = 'running' AND command IS NOT NULL
                """, logger: logger)
            for try await (key, command) in rows.decode((String, String).self) {
                commands.append((DownloadID(key), command))
            }
            return commands
        } catch {
            throw DownloadError.queue("could not read commands: \(String(reflecting: error))")
        }
    }

    package func watch(_ ids: [DownloadID]) async throws(DownloadError)
        -> (rows: [DownloadID: JobRecord], live: [Int64: JournalOwner])
    {
        ([:], [:])
    }

    package func leave(_ command: JobLifecycle.Command, for id: DownloadID) throws(DownloadError) {
        throw DownloadError.queue("pause, cancel and retry jobs of the shared queue with PostgresQueue")
    }

    // MARK: - Fire-and-forget writes

    package func recordStarted(_ id: DownloadID, owner: Int64) {}

    package func recordState(_ id: DownloadID, _ state: JobState, errorCode: String?, error: String?) {
        let owner = self.owner
        let key = id.rawValue
        switch state {
        case .queued, .running, .waiting, .completed:
            // The job stays leased to this worker: its heartbeat keeps the lease.
            return
        case .paused where errorCode == Journal.shutdownCode:
            release(id)
        case .paused:
            fenced(id, forgetting: true) { attempt in
                """
                UPDATE haul_jobs SET state = 'paused', lease_expires_at = NULL, updated_at = now(),
                    last_error_code = \(errorCode), last_error = \(error)
                WHERE key = \(key) AND state = 'running' AND lease_owner = \(owner) AND attempt = \(attempt) RETURNING id
                """
            }
        case .cancelled where errorCode == "evicted":
            release(id)
        case .cancelled, .failed:
            let final = state.rawValue
            fenced(id, forgetting: true) { attempt in
                """
                UPDATE haul_jobs SET state = \(final), lease_expires_at = NULL, updated_at = now(), finished_at = now(),
                    last_error_code = \(errorCode), last_error = \(error)
                WHERE key = \(key) AND state = 'running' AND lease_owner = \(owner) AND attempt = \(attempt) RETURNING id
                """
            }
        }
    }

    /// Gives job `id` back to the queue, available at once, with its committed bytes.
    private func release(_ id: DownloadID) {
        let owner = self.owner
        let key = id.rawValue
        fenced(id, forgetting: true) { attempt in
            """
            UPDATE haul_jobs SET state = 'available', scheduled_at = now(), lease_expires_at = NULL, updated_at = now()
            WHERE key = \(key) AND state = 'running' AND lease_owner = \(owner) AND attempt = \(attempt) RETURNING id
            """
        }
        submit { [self] in
            _ = try? await client.query("SELECT pg_notify(\(PostgresQueue.channel), '')", logger: logger)
        }
    }

    /// A failed attempt: retried later, after the backoff (or `Retry-After`), by whichever
    /// worker claims it then; or failed for good (see ``LeasedJob/decide(after:attempt:maxAttempts:policy:)``).
    package func recordFailed(_ id: DownloadID, _ error: DownloadError) {
        guard let held = lease(of: id) else { return }
        let owner = self.owner
        let key = id.rawValue
        let code = error.code.description
        let message = error.message
        switch LeasedJob.decide(after: error, attempt: held.attempt, maxAttempts: held.maxAttempts, policy: settings.retry) {
        case .retry(let delay):
            let seconds = delay.timeInterval
            fenced(id, forgetting: true) { attempt in
                """
                UPDATE haul_jobs SET state = 'retryable', scheduled_at = now() + make_interval(secs => \(seconds)),
                    lease_expires_at = NULL, updated_at = now(), last_error_code = \(code), last_error = \(message)
                WHERE key = \(key) AND state = 'running' AND lease_owner = \(owner) AND attempt = \(attempt) RETURNING id
                """
            }
        case .fail:
            fenced(id, forgetting: true) { attempt in
                """
                UPDATE haul_jobs SET state = 'failed', lease_expires_at = NULL, updated_at = now(), finished_at = now(),
                    last_error_code = \(code), last_error = \(message)
                WHERE key = \(key) AND state = 'running' AND lease_owner = \(owner) AND attempt = \(attempt) RETURNING id
                """
            }
        }
    }

    package func recordCompleted(_ id: DownloadID, bytes: Int64, finalURL: String, file: CompletedFile?) {
        let key = id.rawValue
        let owner = self.owner
        guard let held = state.withLockedValue({ $0.completing.removeValue(forKey: key) }) else { return }
        onRoom()
        // The completion itself was recorded (fenced) before the rename; only a redirect
        // leaves something to add.
        guard finalURL != held.url else { return }
        submit { [self] in
            _ = try? await client.query(
                """
                UPDATE haul_jobs SET final_url = \(finalURL), updated_at = now()
                WHERE key = \(key) AND state = 'completed' AND lease_owner = \(owner) AND attempt = \(held.attempt)
                """, logger: logger)
        }
    }

    package func recordCheckpoint(
        _ id: DownloadID, bytes: Int64, total: Int64?, validator: String?, bytesPerSecond: Double, bootID: String?
    ) {
        let owner = self.owner
        let key = id.rawValue
        let lease = leaseSeconds
        // Saving progress extends the lease, as a heartbeat does.
        fenced(id, forgetting: false, reportingLoss: true) { attempt in
            """
            UPDATE haul_jobs SET bytes_committed = \(bytes), total_bytes = coalesce(\(total), total_bytes),
                validator = coalesce(\(validator), validator), boot_id = \(bootID),
                lease_expires_at = now() + make_interval(secs => \(lease)), updated_at = now()
            WHERE key = \(key) AND state = 'running' AND lease_owner = \(owner) AND attempt = \(attempt) RETURNING id
            """
        }
    }

    package func recordAttempt(_ id: DownloadID, _ attempts: Int) {
        // Retries are the queue's (each is a new claim), not the transfer's.
    }

    package func clearCommand(_ command: String, for id: DownloadID) {
        let key = id.rawValue
        submit { [self] in
            _ = try? await client.query(
                "UPDATE haul_jobs SET command = NULL WHERE key = \(key) AND command = \(command)", logger: logger)
        }
    }

    package func release(owner: Int64) {
        let keys = state.withLockedValue { state in
            defer { state.leases = [:] }
            return state.leases
        }
        guard !keys.isEmpty else { return }
        let names = Array(keys.keys)
        let attempts = names.map { keys[$0]!.attempt }
        let me = self.owner
        submit { [self] in
            _ = try? await client.query(
                """
                UPDATE haul_jobs j SET state = 'available', scheduled_at = now(), lease_expires_at = NULL, updated_at = now()
                FROM unnest(\(names)::text[], \(attempts)::int8[]) AS held(key, attempt)
                WHERE j.key = held.key AND j.attempt = held.attempt AND j.state = 'running' AND j.lease_owner = \(me)
                """, logger: logger)
            _ = try? await client.query("SELECT pg_notify(\(PostgresQueue.channel), '')", logger: logger)
        }
    }

    // MARK: - Fencing

    package var fencesCompletion: Bool { true }

    /// Confirms that this worker still holds job `id` and marks it completed, fenced on its
    /// lease, before its file is renamed into place.
    ///
    /// Completions are written in batches (group commit, see ``GroupCommit``): one that
    /// arrives while another's statement is in flight waits, and all that waited go in the
    /// next statement together; each caller learns whether its own row matched.
    package func confirmCompletion(_ id: DownloadID, bytes: Int64) async throws(DownloadError) {
        // Everything this worker wrote for the job before comes first.
        await flush()
        let key = id.rawValue
        guard let held = lease(of: id) else {
            logger.warning(
                "lost the lease of \(key) (another worker took the job over): its completion is refused, its file stays where it is")
            throw DownloadError.lostLease(id)
        }
        let matched: Bool
        do {
            matched = try await withCheckedThrowingContinuation { continuation in
                let pending = PendingCompletion(key: key, attempt: held.attempt, bytes: bytes, continuation: continuation)
                let (batch, ready) = completions.withLockedValue { completions in
                    let batch = completions.group.arrive(pending)
                    completions.arrivals += 1
                    let arrivals = completions.arrivals
                    var ready: [CheckedContinuation<Void, Never>] = []
                    completions.watchers.removeAll { watcher in
                        guard arrivals >= watcher.count else { return false }
                        ready.append(watcher.continuation)
                        return true
                    }
                    return (batch, ready)
                }
                for watcher in ready { watcher.resume() }
                // Not a child of the caller: cancelling a transfer must not cancel a statement
                // others wait on too.
                if let batch { Task { await self.sendCompletions(batch) } }
            }
        } catch {
            throw DownloadError.queue("could not record the completion of \(key): \(String(reflecting: error))")
        }
        state.withLockedValue { state in
            if state.leases[key] == held { state.leases[key] = nil }
            if matched { state.completing[key] = held }
        }
        guard matched else {
            onRoom()
            logger.warning(
                "lost the lease of \(key) (another worker took the job over): its completion is refused, its file stays where it is")
            throw DownloadError.lostLease(id)
        }
    }

    /// A completion waiting for its statement.
    struct PendingCompletion: Sendable {
        var key: String
        var attempt: Int
        var bytes: Int64
        var continuation: CheckedContinuation<Bool, any Error>
    }

    struct Completions: Sendable {
        var group = GroupCommit<PendingCompletion>()
        /// Completions asked for so far.
        var arrivals = 0
        /// Tests waiting for completions to be asked for.
        var watchers: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    /// Returns once `count` completions have been asked for since the store was made, each
    /// sent or waiting for the statement in flight (for tests).
    func waitForCompletionArrivals(_ count: Int) async {
        await withCheckedContinuation { continuation in
            let now = completions.withLockedValue { completions in
                if completions.arrivals >= count { return true }
                completions.watchers.append((count, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Sends `first`, then every batch that queued up meanwhile, until none did.
    private func sendCompletions(_ first: [PendingCompletion]) async {
        var next: [PendingCompletion]? = first
        while let batch = next {
            do {
                let matched = try await completeResolving(batch)
                for pending in batch { pending.continuation.resume(returning: matched.contains(pending.key)) }
            } catch {
                for pending in batch { pending.continuation.resume(throwing: error) }
            }
            next = completions.withLockedValue { $0.group.sent() }
        }
    }

    /// Runs the completion statement for `batch`; after a failure (the connection broke,
    /// the database restarted) runs it again until it gets an answer, for as long as a
    /// lease lasts and at least 30 seconds. The statement is idempotent (see
    /// ``complete(_:)``), so an answer lost with the connection is learnt the second time.
    private func completeResolving(_ batch: [PendingCompletion]) async throws -> Set<String> {
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: max(settings.lease, .seconds(30)))
        var delay = Duration.milliseconds(100)
        while true {
            do {
                return try await complete(batch)
            } catch {
                guard clock.now.advanced(by: delay) < deadline else { throw error }
                logger.warning(
                    "could not record \(batch.count) completion(s), trying again",
                    metadata: ["error": "\(String(reflecting: error))"])
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
            }
        }
    }

    /// Marks the jobs of `batch` completed, each fenced on its lease, in one statement;
    /// returns the keys whose row matched. A row already completed under the same lease
    /// (owner and attempt) counts as matched: only this worker's completion can have put
    /// it there, in an earlier run of this statement whose answer was lost.
    private func complete(_ batch: [PendingCompletion]) async throws -> Set<String> {
        let keys = batch.map(\.key)
        let attempts = batch.map(\.attempt)
        let bytes = batch.map(\.bytes)
        var matched: Set<String> = []
        let rows = try await client.query(
            """
            WITH batch AS (
                SELECT * FROM unnest(\(keys)::text[], \(attempts)::int8[], \(bytes)::int8[]) AS b(key, attempt, bytes)
            ), done AS (
                UPDATE haul_jobs j SET state = 'completed', bytes_committed = b.bytes, total_bytes = b.bytes,
                    lease_expires_at = NULL, last_error = NULL, last_error_code = NULL, updated_at = now(),
                    finished_at = now()
                FROM batch b
                WHERE j.key = b.key AND j.attempt = b.attempt AND j.state = 'running' AND j.lease_owner = \(owner)
                RETURNING j.key
            )
            SELECT key FROM done
            UNION
            SELECT j.key FROM haul_jobs j JOIN batch b ON j.key = b.key AND j.attempt = b.attempt
            WHERE j.state = 'completed' AND j.lease_owner = \(owner)
            """, logger: logger)
        for try await key in rows.decode(String.self) { matched.insert(key) }
        return matched
    }

    // MARK: - Leases

    /// Extends the leases of every job this worker holds, and its own heartbeat; returns
    /// the jobs whose lease turned out to be gone (forgotten here).
    func renewLeases() async throws -> [DownloadID] {
        let snapshot = held
        let owner = self.owner
        let lease = leaseSeconds
        let names = Array(snapshot.keys)
        let attempts = names.map { snapshot[$0]!.attempt }
        var renewed: Set<String> = []
        let rows = try await client.query(
            """
            UPDATE haul_jobs j SET lease_expires_at = now() + make_interval(secs => \(lease))
            FROM unnest(\(names)::text[], \(attempts)::int8[]) AS held(key, attempt)
            WHERE j.key = held.key AND j.attempt = held.attempt AND j.state = 'running' AND j.lease_owner = \(owner)
            RETURNING j.key
            """, logger: logger)
        for try await key in rows.decode(String.self) { renewed.insert(key) }
        try await client.query("UPDATE haul_workers SET heartbeat_at = now() WHERE id = \(owner)", logger: logger)
        var lost: [DownloadID] = []
        for (key, held) in snapshot where !renewed.contains(key) {
            let gone = state.withLockedValue { state in
                guard state.leases[key] == held else { return false }
                state.leases[key] = nil
                return true
            }
            if gone { lost.append(DownloadID(key)) }
        }
        if !lost.isEmpty { onRoom() }
        return lost
    }

    /// Forgets every lease (the worker could not renew them in time and stops their
    /// transfers); returns their jobs.
    func dropAllLeases() -> [DownloadID] {
        state.withLockedValue { state in
            defer { state.leases = [:] }
            return state.leases.keys.map { DownloadID($0) }
        }
    }

    package func flush() async {
        await withCheckedContinuation { continuation in
            if case .terminated = writes.yield(.flush(continuation)) { continuation.resume() }
        }
    }

    package func close() async {
        await flush()
        writes.finish()
        await writer.value
    }
}

/// `close(2)` (inside the store, `close` names its own method).
private func closeDescriptor(_ descriptor: Int32) {
    _ = close(descriptor)
}

extension DownloadError {
    /// An error of the shared queue's database.
    static func queue(_ message: String) -> DownloadError {
        DownloadError.sharedQueue(message)
    }

    /// This worker no longer holds job `id`: another one took it over after its lease expired.
    static func lostLease(_ id: DownloadID) -> DownloadError {
        DownloadError.runningElsewhere(
            "\(id): another worker took the job over (this worker's lease expired); its file is left where it is")
    }
}
