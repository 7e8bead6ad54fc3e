package import Foundation
package import Haul
package import Logging
import NIOConcurrencyHelpers
import PostgresNIO

/// The shared queue as one worker's ``JobStore``: the second implementation of the
/// protocol the SQLite journal's `JournalStore` is the first of. The manager admits the
/// jobs this store leases (``claimQueued(limit:)``) and runs them with its usual
/// transfer, and every write it makes comes back here, where it is fenced.
///
/// The store remembers the lease (owner and attempt) of every job it claimed, so the
/// manager's writes, which name only a job's ID, become fenced statements: each is
/// conditioned on `lease_owner` and `attempt` and does nothing once another worker took
/// the job over. A checkpoint that finds its lease gone reports the job lost
/// (``StoreSignal/lost(_:)``), and the manager stops it.
///
/// Coordination is by leases: an owner holds a job while its lease lasts (renewed by
/// ``renewLeases()``), and a job whose lease expired is claimed again by whoever comes
/// first, reported as ``ClaimedJob/mayBeWritten`` (its old owner may only be stopped).
/// ``signals`` passes on `NOTIFY haul_jobs` (see ``coordinate(started:)``), and ticks every
/// poll interval for what nobody announces: retries falling due, leases expiring.
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
    package let signals: AsyncStream<StoreSignal>
    private let signalling: AsyncStream<StoreSignal>.Continuation
    private let state = NIOLockedValueBox(State())
    private let completions = NIOLockedValueBox(Completions())
    private let writes: AsyncStream<Write>.Continuation
    private let writer: Task<Void, Never>

    private enum Write: Sendable {
        case run(@Sendable () async -> Void)
        case flush(CheckedContinuation<Void, Never>)
    }

    /// Counts the leases lost and rescued, for the worker's metrics.
    let leaseCounts: LeaseCounts

    package init(
        queue: PostgresQueue, owner: Int64, settings: QueueWorker.Settings, logger: Logger,
        leaseCounts: LeaseCounts = LeaseCounts()
    ) {
        self.leaseCounts = leaseCounts
        self.queue = queue
        self.owner = owner
        self.settings = settings
        self.logger = logger
        (signals, signalling) = AsyncStream.makeStream(of: StoreSignal.self)
        let (stream, continuation) = AsyncStream.makeStream(of: Write.self)
        writes = continuation
        let deadline = Self.deadline(lease: settings.lease)
        writer = Task {
            for await write in stream {
                switch write {
                case .run(let body):
                    do { try await answering(within: deadline) { await body() } } catch {
                        logger.notice("a write to the database was given up: \(error)")
                    }
                case .flush(let continuation): continuation.resume()
                }
            }
        }
    }

    deinit {
        writes.finish()
        signalling.finish()
    }

    /// A job stopped counting against the worker's slots (completed, failed, given back,
    /// lost): the manager looks for more work at once, since a claim made while every slot
    /// was taken found no room.
    private func onRoom() { signalling.yield(.wake) }

    /// Tells the manager it no longer holds `ids`.
    private func onLost(_ ids: [DownloadID]) {
        guard !ids.isEmpty else { return }
        leaseCounts.lost(ids.count)
        signalling.yield(.lost(ids))
    }

    /// The worker's side of the coordination, until cancelled: renews the leases (see
    /// ``renewLeases()``), passes `NOTIFY haul_jobs` on as ``StoreSignal/wake`` (listening
    /// again after the connection breaks), and wakes every poll interval for what no
    /// notification announces (retries falling due, leases expiring). `started` is called
    /// once the first `LISTEN` is in place.
    func coordinate(started: @escaping @Sendable () -> Void) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.keepLeases() }
            group.addTask { [self] in
                while !Task.isCancelled {
                    do { try await Task.sleep(for: settings.pollInterval) } catch { return }
                    signalling.yield(.wake)
                }
            }
            group.addTask { [self] in
                var announced = false
                while !Task.isCancelled {
                    do {
                        try await client.withConnection { connection in
                            try await connection.listen(on: PostgresQueue.channel) { notifications in
                                if !announced {
                                    announced = true
                                    started()
                                    // Whatever was added before the listening began.
                                    signalling.yield(.wake)
                                }
                                for try await _ in notifications { signalling.yield(.wake) }
                            }
                        }
                    } catch {
                        logger.debug("listening stopped", metadata: ["error": "\(String(reflecting: error))"])
                    }
                    do { try await Task.sleep(for: settings.pollInterval) } catch { return }
                }
            }
            await group.waitForAll()
        }
    }

    /// Renews the leases every quarter of the lease; reports the jobs whose lease was
    /// taken as lost, and all of them when renewing failed for too long (see ``LeaseGuard``).
    private func keepLeases() async {
        let clock = ContinuousClock()
        var guardian = LeaseGuard(duration: settings.lease, startedAt: clock.now)
        // Nothing is held yet, and registering set the heartbeat: the first renewal is due
        // a renewal interval from now.
        var next = clock.now.advanced(by: guardian.renewalInterval)
        while true {
            do { try await Task.sleep(until: max(next, clock.now.advanced(by: .milliseconds(10))), clock: clock) } catch {
                return
            }
            let sent = clock.now
            do {
                let lost = try await answering(within: deadline) { try await self.renewLeases() }
                guardian.renewed(sentAt: sent)
                for id in lost {
                    logger.warning(
                        "lost the lease of \(id) (another worker took the job over): stopping it", metadata: ["id": "\(id)"])
                }
                onLost(lost)
            } catch {
                logger.debug("could not renew the leases", metadata: ["error": "\(String(reflecting: error))"])
            }
            if guardian.mustStop(at: clock.now) {
                // Before any other worker can take the jobs over: stop them here.
                let dropped = dropAllLeases()
                if !dropped.isEmpty {
                    logger.warning(
                        "could not renew the leases for three quarters of a lease: stopping \(dropped.count) job(s) before another worker may take them over, partial files kept")
                    onLost(dropped)
                }
            }
            // Wake at the next renewal, or when the leases stop being safe if sooner.
            next = min(clock.now.advanced(by: guardian.renewalInterval), guardian.safeUntil)
        }
    }

    var client: PostgresClient { queue.client }

    /// How long any call to the database may take before it is given up (see
    /// ``answering(within:_:)``): a quarter of the lease, the time between renewals, and at
    /// least a second.
    static func deadline(lease: Duration) -> Duration { max(lease / 4, .seconds(1)) }
    var deadline: Duration { Self.deadline(lease: settings.lease) }
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

    /// Runs a statement that needs no lease; a failure is said as a warning naming `what`
    /// could not be done (nothing waits on these writes to act on it).
    private func write(_ what: String, _ query: PostgresQuery) async {
        do {
            _ = try await client.query(query, logger: logger)
        } catch {
            logger.warning("could not \(what) in the queue", metadata: ["error": "\(String(reflecting: error))"])
        }
    }

    /// Runs `update` (an `UPDATE haul_jobs SET …` with no `WHERE`) fenced on `id`'s lease:
    /// it changes the row only while this worker's claim of it (its attempt) holds. No lease,
    /// no statement. The fence is written here, once, for every fenced write.
    private func fenced(
        _ id: DownloadID, forgetting: Bool, reportingLoss: Bool = false, _ update: PostgresQuery
    ) {
        guard let held = lease(of: id) else { return }
        let key = id.rawValue
        if forgetting { forget(key, held) }
        let query = Self.fencing(update, key: key, owner: owner, attempt: held.attempt)
        submit { [self] in
            do {
                var matched = false
                for try await _ in try await client.query(query, logger: logger).decode(Int64.self) {
                    matched = true
                }
                if !matched {
                    logger.debug("write refused: the lease is gone", metadata: ["id": "\(key)"])
                    if !forgetting, reportingLoss {
                        logger.warning(
                            "lost the lease of \(key) (another worker took the job over): its write was refused; stopping it",
                            metadata: ["id": "\(key)"])
                        forget(key, held)
                        onLost([id])
                    }
                }
            } catch {
                logger.warning(
                    "could not record a change of \(key) in the queue (its lease decides what happens to it)",
                    metadata: ["id": "\(key)", "error": "\(String(reflecting: error))"])
            }
        }
    }

    /// `update` limited to the row of `key` that owner `owner` runs under claim `attempt`,
    /// returning its ID when it matched.
    static func fencing(_ update: PostgresQuery, key: String, owner: Int64, attempt: Int) -> PostgresQuery {
        var binds = update.binds
        let first = binds.count + 1
        binds.append(key, context: .default)
        binds.append(owner, context: .default)
        binds.append(attempt, context: .default)
        return PostgresQuery(
            unsafeSQL: update.sql
                + " WHERE key = $\(first) AND state = 'running' AND lease_owner = $\(first + 1) AND attempt = $\(first + 2) RETURNING id",
            binds: binds)
    }

    // MARK: - Owners

    package func ownerToken() throws(DownloadError) -> Int64 { owner }

    // MARK: - Admission

    /// Claims `job` for this worker, leased: inserts it running, or takes over the row with
    /// its key unless another worker's lease on it lasts. A row the same download completed
    /// (same URL, name, checksum and expected size) hands over its completed file, to be
    /// revalidated, unless `force`.
    package func claim(_ job: JobRecord, force: Bool) async throws(DownloadError) -> JobClaim {
        let request = try queueRequest(for: job)
        let options = try encodedOptions(request)
        let url = request.url.absoluteString, host = PostgresQueue.hostKey(request.url)
        let name = request.name, priority = request.priority, attempts = request.maxAttempts
        let owner = self.owner, lease = leaseSeconds
        let logger = self.logger
        typealias Row = (Int, Int, String, Int64, Int64?, String?, String?, Bool, Bool, String?)
        let claimed: Row?
        var key = request.id
        do {
            (key, claimed) = try await answering(within: deadline) { [client, key] in
                try await client.withTransaction(logger: logger) { connection -> (String, Row?) in
                    var key = key
                    if key == url {
                        // The URL may name its download to another destination (JobIdentity).
                        let taken = try await connection.query(
                            "SELECT destination FROM haul_jobs WHERE key = \(key) FOR UPDATE", logger: logger)
                        for try await destination in taken.decode(String?.self) {
                            key = JobIdentity.id(
                                key, url: url, destination: Self.identityDestination(name),
                                taken: Self.identityDestination(destination))
                        }
                    }
                    try await connection.query(
                        """
                        INSERT INTO haul_jobs (key, url, host, destination, options, priority, max_attempts, state)
                        VALUES (\(key), \(url), \(host), \(name), \(options)::jsonb, \(priority), \(attempts), 'paused')
                        ON CONFLICT (key) DO NOTHING
                        """, logger: logger)
                    let rows = try await connection.query(
                        """
                        WITH previous AS (
                            SELECT id, state, lease_owner, url, destination, options, completed_file,
                                NOT \(force) AND state = 'completed' AND url = \(url)
                                    AND destination IS NOT DISTINCT FROM \(name)
                                    AND options->'checksum' IS NOT DISTINCT FROM \(options)::jsonb->'checksum'
                                    AND options->'expectedSize' IS NOT DISTINCT FROM \(options)::jsonb->'expectedSize'
                                    AS keeps_file
                            FROM haul_jobs WHERE key = \(key) FOR UPDATE
                        )
                        UPDATE haul_jobs j SET
                            state = 'running', phase = NULL, retries = 0,
                            lease_owner = \(owner), attempt = j.attempt + 1,
                            max_attempts = greatest(j.max_attempts, j.attempt + 1),
                            lease_expires_at = now() + make_interval(secs => \(lease)), command = NULL,
                            url = \(url), host = \(host), destination = \(name), options = \(options)::jsonb,
                            priority = \(priority), updated_at = now(), finished_at = NULL,
                            bytes_committed = CASE WHEN p.state IN ('completed', 'cancelled') OR p.url <> \(url) THEN 0
                                ELSE j.bytes_committed END,
                            last_error = NULL, last_error_code = NULL, bytes_transferred = NULL, unchanged = false,
                            completed_file = CASE WHEN p.keeps_file THEN p.completed_file END
                        FROM previous p
                        WHERE j.id = p.id AND NOT (p.state = 'running' AND j.lease_expires_at > now()
                            AND p.lease_owner IS DISTINCT FROM \(owner))
                        RETURNING j.attempt, j.max_attempts, j.url, j.bytes_committed, j.total_bytes, j.validator,
                                  j.boot_id, (p.state = 'running' AND p.lease_owner IS DISTINCT FROM \(owner)),
                                  p.state IN ('completed', 'cancelled') OR p.url <> \(url),
                                  CASE WHEN p.keeps_file THEN p.completed_file::text END
                        """, logger: logger)
                    for try await row in rows.decode(Row.self) { return (key, row) }
                    return (key, nil)
                }
            }
        } catch {
            throw DownloadError.queue("could not claim \(key): \(String(reflecting: error))")
        }
        guard let (attempt, maxAttempts, url2, committed, total, validator, boot, rescued, fresh, completedText) = claimed
        else {
            guard let attachment = try await attachments(for: [key]).first else {
                throw DownloadError.queue("\(key) is held by another worker that could not be found")
            }
            return .heldElsewhere(attachment)
        }
        // A job added paused is leased too: the manager's pause gives it back, fenced.
        state.withLockedValue { $0.leases[key] = Held(attempt: attempt, maxAttempts: maxAttempts, url: url2) }
        if rescued { leaseCounts.rescued(1) }
        var record = job
        record.id = key
        record.owner = owner
        record.bytesCommitted = fresh ? 0 : committed
        record.totalBytes = total ?? record.totalBytes
        record.validator = validator
        record.bootID = boot
        let progress: StoredProgress?
        if let completedText {
            progress = StoredProgress(committed: 0, bootID: nil, completedFile: try Self.completedFile(completedText, of: key))
        } else {
            progress = fresh ? nil : StoredProgress(committed: committed, bootID: boot)
        }
        return .claimed(ClaimedJob(record: record, progress: progress, mayBeWritten: rescued))
    }

    /// The completed file a row keeps (`completed_file`, the JSON of ``CompletedFile``).
    private static func completedFile(_ text: String, of key: String) throws(DownloadError) -> CompletedFile {
        do {
            return try JSONDecoder().decode(CompletedFile.self, from: Data(text.utf8))
        } catch {
            throw .queue("\(key): the completed file the queue keeps is not the JSON this version reads: \(error)")
        }
    }

    /// Adds `jobs` to the queue, available to every worker (those whose key waits or runs
    /// already stay as they are; those that ended are queued again, see
    /// `requeueFinished`), then claims up to `limit` jobs as ``claimQueued(limit:)`` does;
    /// returns those, and the submitted jobs another live worker runs.
    package func submit(_ jobs: [JobRecord], forcing: Set<String>, claimingUpTo limit: Int) async throws(DownloadError)
        -> SubmittedJobs
    {
        var requests = try jobs.map { record throws(DownloadError) in try queueRequest(for: record) }
        let renamed = try await identify(&requests)
        do {
            // A large batch takes longer: a deadline per thousand jobs.
            _ = try await answering(within: deadline * (1 + requests.count / 1000)) { [queue, requests] in
                try await queue.enqueue(requests)
            }
        } catch {
            throw DownloadError.queue("could not queue \(jobs.count) job(s): \(String(reflecting: error))")
        }
        try await requeueFinished(jobs, requests, forcing: forcing)
        let attachments = try await attachments(for: requests.map(\.id))
        // The queue's own order decides what is claimed, per-host caps included.
        let claimed = limit > 0 ? try await claimQueued(limit: limit) : []
        return SubmittedJobs(claimed: claimed, attachments: attachments, renamed: renamed)
    }

    /// Gives each of `requests` the key ``JobIdentity`` keeps it under, given the rows
    /// there and the requests before it; returns those it renamed, by index. (Two workers
    /// submitting the same new URL to two names at once may both take the URL: the later
    /// row then goes to the later name, as before.)
    private func identify(_ requests: inout [QueueRequest]) async throws(DownloadError) -> [(index: Int, id: String)] {
        let defaulted = requests.filter { $0.id == $0.url.absoluteString }.map(\.id)
        guard !defaulted.isEmpty else { return [] }
        var taken: [String: String] = [:]
        do {
            let rows = try await answering(within: deadline * (1 + defaulted.count / 1000)) { [client, logger] in
                var found: [(String, String?)] = []
                for try await row in try await client.query(
                    "SELECT key, destination FROM haul_jobs WHERE key = ANY(\(defaulted)::text[])", logger: logger
                ).decode((String, String?).self) { found.append(row) }
                return found
            }
            for (key, destination) in rows { taken[key] = Self.identityDestination(destination) }
        } catch {
            throw DownloadError.queue("could not look up \(defaulted.count) job(s): \(String(reflecting: error))")
        }
        let renamed = JobIdentity.ids(
            of: requests.map { ($0.id, $0.url.absoluteString, Self.identityDestination($0.name)) }, taken: taken)
        for (index, id) in renamed { requests[index].id = id }
        return renamed
    }

    /// A queued job's destination as ``JobIdentity`` compares them: its name in the
    /// worker's directory, or `./` for the name the server gives.
    private static func identityDestination(_ name: String?) -> String { name ?? "./" }

    /// Submitted again, a download that ended (completed, failed, cancelled) or that a person
    /// paused is queued again with the new request's details, as the journal's submission
    /// does: a completed one keeps its completed file (for a conditional request) while its
    /// URL, name, checksum and expected size are the same, unless `forcing` names it; one
    /// whose URL changed starts from nothing. (Queued and running rows are left as they are:
    /// they run anyway, and a running one's takeover is the claims' to decide.)
    private func requeueFinished(_ jobs: [JobRecord], _ requests: [QueueRequest], forcing: Set<String>)
        async throws(DownloadError)
    {
        var keys: [String] = [], urls: [String] = [], hosts: [String] = [], names: [String] = []
        var options: [String] = [], priorities: [Int] = [], attempts: [Int] = [], forced: [Bool] = []
        var paused: [Bool] = []
        for (record, request) in zip(jobs, requests) {
            keys.append(request.id)
            urls.append(request.url.absoluteString)
            hosts.append(PostgresQueue.hostKey(request.url))
            names.append(request.name ?? "")
            options.append(try encodedOptions(request))
            priorities.append(request.priority)
            attempts.append(request.maxAttempts)
            forced.append(forcing.contains(record.id))
            paused.append(record.state == .paused)
        }
        do {
            _ = try await answering(within: deadline * (1 + requests.count / 1000)) {
                [client, logger, keys, urls, hosts, names, options, priorities, attempts, forced, paused] in
                var requeued = 0
                let rows = try await client.query(
                    """
                    UPDATE haul_jobs j SET state = CASE WHEN t.s THEN 'paused' ELSE 'available' END, phase = NULL,
                        retries = 0, scheduled_at = now(), url = t.u, host = t.h, destination = NULLIF(t.d, ''),
                        options = t.o::jsonb, priority = t.p, max_attempts = j.attempt + t.m, command = NULL,
                        lease_owner = NULL, lease_expires_at = NULL, last_error = NULL, last_error_code = NULL,
                        finished_at = NULL, updated_at = now(), bytes_transferred = NULL, unchanged = false,
                        bytes_committed = CASE WHEN j.state IN ('completed', 'cancelled') OR j.url <> t.u THEN 0
                            ELSE j.bytes_committed END,
                        validator = CASE WHEN j.state IN ('completed', 'cancelled') OR j.url <> t.u THEN NULL
                            ELSE j.validator END,
                        completed_file = CASE WHEN NOT t.f AND j.state = 'completed' AND j.url = t.u
                            AND j.destination IS NOT DISTINCT FROM NULLIF(t.d, '')
                            AND j.options->'checksum' IS NOT DISTINCT FROM t.o::jsonb->'checksum'
                            AND j.options->'expectedSize' IS NOT DISTINCT FROM t.o::jsonb->'expectedSize'
                            THEN j.completed_file END
                    FROM unnest(\(keys)::text[], \(urls)::text[], \(hosts)::text[], \(names)::text[],
                                \(options)::text[], \(priorities)::int8[], \(attempts)::int8[], \(forced)::bool[],
                                \(paused)::bool[]) AS t(k, u, h, d, o, p, m, f, s)
                    WHERE j.key = t.k AND j.state IN ('completed', 'failed', 'cancelled', 'paused')
                    RETURNING j.id
                    """, logger: logger)
                for try await _ in rows.decode(Int64.self) { requeued += 1 }
                if requeued > 0 { try await client.query("SELECT pg_notify(\(PostgresQueue.channel), '')", logger: logger) }
                return requeued
            }
        } catch {
            throw DownloadError.queue("could not queue \(jobs.count) job(s) again: \(String(reflecting: error))")
        }
    }

    /// Makes the jobs a person paused available again (unless `keepingPaused`: the queue
    /// pauses nothing on its own, a worker that stops gives its jobs back); returns how many
    /// jobs any worker may claim now, and those other live workers run.
    package func adoptUnfinished(keepingPaused: Bool) async throws(DownloadError)
        -> (count: Int, attachments: [JobAttachment])
    {
        let (count, held): (Int, [String])
        do {
            (count, held) = try await answering(within: deadline) { [self] in
                if !keepingPaused {
                    try await client.query(
                        """
                        UPDATE haul_jobs SET state = 'available', scheduled_at = now(), command = NULL,
                            max_attempts = greatest(max_attempts, attempt + 1), updated_at = now()
                        WHERE state = 'paused'
                        """, logger: logger)
                }
                var count = 0
                let rows = try await client.query(
                    """
                    SELECT count(*) FROM haul_jobs
                    WHERE state IN ('available', 'retryable') OR (state = 'running' AND lease_expires_at <= now())
                    """, logger: logger)
                for try await n in rows.decode(Int64.self) { count = Int(n) }
                var held: [String] = []
                let running = try await client.query(
                    """
                    SELECT key FROM haul_jobs WHERE state = 'running' AND lease_expires_at > now()
                        AND lease_owner IS DISTINCT FROM \(owner)
                    """, logger: logger)
                for try await key in running.decode(String.self) { held.append(key) }
                try await client.query("SELECT pg_notify(\(PostgresQueue.channel), '')", logger: logger)
                return (count, held)
            }
        } catch {
            throw DownloadError.queue("could not adopt the unfinished jobs: \(String(reflecting: error))")
        }
        return (count, try await attachments(for: held))
    }

    /// The attachments for those of `keys` another live worker runs (its lease lasts).
    private func attachments(for keys: [String]) async throws(DownloadError) -> [JobAttachment] {
        guard !keys.isEmpty else { return [] }
        let watch = try await watch(keys.map { DownloadID($0) })
        return watch.rows.values.compactMap { record in
            guard let holder = record.owner, holder != owner, let live = watch.live[holder]
            else { return nil }
            return JobAttachment(id: DownloadID(record.id), holder: holder, owner: live, record: record)
        }
    }

    /// The queue's request for `record`, saved into the worker's directory under the
    /// record's file name.
    private func queueRequest(for record: JobRecord) throws(DownloadError) -> QueueRequest {
        let request = try record.request()
        let name: String? =
            switch request.destination {
            case .directory(_, let name): name
            case .file(let file): file.lastPathComponent
            case .object(_, let key, _): key.hasSuffix("/") ? nil : key.split(separator: "/").last.map(String.init)
            case .memory: nil
            }
        do {
            var queued = try QueueRequest(
                url: request.url, id: record.id, name: name,
                priority: request.priority.rawValue - DownloadPriority.normal.rawValue,
                expectedSize: request.expectedSize, checksum: record.checksum,
                headers: request.headers, maxBytesPerSecond: request.maxBytesPerSecond,
                connections: request.connections, mirrors: request.mirrors, pieces: request.pieces)
            queued.options.delta = request.delta.map { JobRecord.encode(delta: $0, seeds: false) }
            queued.stream = request.stream
            return queued
        } catch {
            throw DownloadError.queue("\(record.id): \(error.message)")
        }
    }

    private func encodedOptions(_ request: QueueRequest) throws(DownloadError) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        do { return String(decoding: try encoder.encode(request.options), as: UTF8.self) } catch {
            throw DownloadError.queue("could not encode the options of \(request.id): \(error)")
        }
    }

    /// Leases up to `limit` jobs (no more than the worker's slots minus what it holds), by
    /// priority then age, skipping rows other claims have locked. With a per-host cap, the
    /// claims of all workers take one advisory lock in turn, so that the count of running
    /// jobs per host they read cannot be raced past the cap.
    package func claimQueued(limit: Int) async throws(DownloadError) -> [ClaimedJob] {
        let room = min(limit, settings.slots - state.withLockedValue { $0.leases.count + $0.completing.count })
        guard room > 0 else { return [] }
        let cap = settings.perHost ?? Int(Int32.max)
        let scan = max(room * 8, 64)
        let owner = self.owner
        let lease = leaseSeconds
        let perHost = settings.perHost != nil
        let logger = self.logger
        typealias Row = (String, Int, Int, String, String?, String, Int, Int64, Int64?, String?, String?, Bool, String?)
        let rows: [Row]
        do {
            rows = try await answering(within: deadline) { [client] in
                try await client.withTransaction(logger: logger) { connection -> [Row] in
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
                        UPDATE haul_jobs j SET state = 'running', phase = NULL, retries = 0, lease_owner = \(owner),
                            attempt = j.attempt + 1,
                            lease_expires_at = now() + make_interval(secs => \(lease)), command = NULL, updated_at = now()
                        FROM chosen WHERE j.id = chosen.id
                        RETURNING j.key, j.attempt, j.max_attempts, j.url, j.destination, j.options::text, j.priority,
                                  j.bytes_committed, j.total_bytes, j.validator, j.boot_id,
                                  (chosen.previous_state = 'running' AND chosen.previous_owner IS DISTINCT FROM \(owner)),
                                  j.completed_file::text
                        """, logger: logger)
                    var rows: [Row] = []
                    for try await row in result.decode(Row.self) { rows.append(row) }
                    return rows
                }
            }
        } catch {
            throw DownloadError.queue("could not claim jobs: \(String(reflecting: error))")
        }
        var records: [ClaimedJob] = []
        for (key, attempt, maxAttempts, url, name, options, priority, committed, total, validator, boot, rescued, completed)
            in rows
        {
            let held = Held(attempt: attempt, maxAttempts: maxAttempts, url: url)
            let reclaimed = state.withLockedValue { state in
                defer { state.leases[key] = held }
                return state.leases[key] != nil
            }
            if rescued, !reclaimed { leaseCounts.rescued(1) }
            // Its own lease, expired and claimed back before anyone else did: this worker
            // still runs the job, now under the new attempt.
            if reclaimed { continue }
            do throws(DownloadError) {
                var record = try makeRecord(key: key, url: url, name: name, options: options, priority: priority)
                record.bytesCommitted = committed
                record.totalBytes = total ?? record.totalBytes
                record.validator = validator
                record.bootID = boot
                record.owner = owner
                // A completed download queued again is revalidated (see `requeueFinished`).
                let file = try completed.map { text throws(DownloadError) in try Self.completedFile(text, of: key) }
                records.append(
                    ClaimedJob(
                        record: record, progress: StoredProgress(committed: committed, bootID: boot, completedFile: file),
                        mayBeWritten: rescued))
            } catch {
                recordFailed(DownloadID(key), error)
            }
        }
        return records
    }

    /// The library's priority for a queue priority: the queue's 0 (the default) is
    /// `normal`, -2 and below `veryLow`, 2 and above `veryHigh`. (Rows are claimed by the
    /// queue's number; this orders the jobs a worker holds the same way.)
    static func priority(fromQueue priority: Int) -> DownloadPriority {
        DownloadPriority(rawValue: min(max(priority, -2), 2) + DownloadPriority.normal.rawValue) ?? .normal
    }

    /// Where a job named `name` goes: the worker's directory, or its bucket under its prefix.
    private func destination(named name: String?) -> DownloadDestination {
        guard let bucket = settings.bucket else { return .directory(settings.directory, name: name) }
        return .object(bucket: bucket, key: settings.keyPrefix + (name ?? ""), staging: settings.directory)
    }

    /// The record a claimed row stands for, saved into the worker's directory.
    private func makeRecord(key: String, url: String, name: String?, options: String, priority: Int)
        throws(DownloadError) -> JobRecord
    {
        guard let url = URL(string: url) else { throw .queue("\(key): the queued URL '\(url)' is not a URL") }
        let decoded: QueueRequest.Options
        do {
            decoded = try JSONDecoder().decode(QueueRequest.Options.self, from: Data(options.utf8))
        } catch {
            throw .queue("\(key): the queued options are not the JSON this version reads: \(error)")
        }
        var request = DownloadRequest(
            url: url, destination: destination(named: name), id: DownloadID(key),
            priority: Self.priority(fromQueue: priority), expectedSize: decoded.expectedSize,
            checksum: try decoded.checksum.map { text throws(DownloadError) in try Checksum(parsing: text) },
            headers: (decoded.headers ?? []).compactMap { $0.count == 2 ? (name: $0[0], value: $0[1]) : nil })
        request.maxBytesPerSecond = decoded.maxBytesPerSecond
        request.connections = decoded.connections
        request.mirrors = (decoded.mirrors ?? []).compactMap(URL.init(string:))
        request.pieces = decoded.pieces.flatMap(JobRecord.decode(pieces:))
        request.location = decoded.location.flatMap(URL.init(string:))
        request.delta = decoded.delta.flatMap(JobRecord.decode(delta:))
        if let stream = decoded.stream {
            guard let options = HLSStream(encoded: stream) else {
                throw DownloadError.queue("\(key): unreadable stream options '\(stream)'")
            }
            request.stream = options
        }
        return try JobRecord.make(for: request)
    }

    // MARK: - Coordination

    package func commands() async throws(DownloadError) -> [(id: DownloadID, command: JobLifecycle.Command)] {
        do {
            return try await answering(within: deadline) { [self] in
                var commands: [(id: DownloadID, command: JobLifecycle.Command)] = []
                let rows = try await client.query(
                    """
                    SELECT key, command FROM haul_jobs
                    WHERE lease_owner = \(self.owner) AND state = 'running' AND command IS NOT NULL
                    """, logger: logger)
                for try await (key, command) in rows.decode((String, String).self) {
                    if let command = JobLifecycle.Command(rawValue: command) { commands.append((DownloadID(key), command)) }
                }
                return commands
            }
        } catch {
            throw DownloadError.queue("could not read commands: \(String(reflecting: error))")
        }
    }

    /// The rows of `ids` as records (a running row names its worker as owner while its
    /// lease lasts), and the workers whose heartbeat is within a lease, but this one.
    package func watch(_ ids: [DownloadID]) async throws(DownloadError) -> JobWatch {
        let keys = ids.map(\.rawValue)
        let lease = leaseSeconds
        typealias Row = (String, String, String, String?, String, Int, Int64, Int64?, String?, String?, Int64?, Bool,
            String?, String?, String?, String?, String?, Int)
        do {
            return try await answering(within: deadline) { [self] in
                var watch = JobWatch(rows: [:], live: [:])
                let rows = try await client.query(
                    """
                    SELECT key, state, url, destination, options::text, priority, bytes_committed, total_bytes, validator,
                           boot_id, lease_owner, coalesce(lease_expires_at > now(), false), command, final_url,
                           last_error_code, last_error, phase, retries
                    FROM haul_jobs WHERE key = ANY(\(keys)::text[])
                    """, logger: logger)
                for try await row in rows.decode(Row.self) {
                    let (key, state, url, name, options, priority, committed, total, validator, boot, leaseOwner, leased,
                        command, finalURL, errorCode, error, phase, retries) = row
                    var record = try makeRecord(key: key, url: url, name: name, options: options, priority: priority)
                    record.state = Self.jobState(queueState: state, phase: phase)
                    record.owner = state == "running" && leased ? leaseOwner : nil
                    record.attempts = retries
                    record.bytesCommitted = committed
                    record.totalBytes = total ?? record.totalBytes
                    record.validator = validator
                    record.bootID = boot
                    record.command = command
                    record.finalURL = finalURL
                    record.errorCode = errorCode
                    record.lastError = error
                    watch.rows[DownloadID(key)] = record
                }
                let workers = try await client.query(
                    """
                    SELECT id, host, pid FROM haul_workers
                    WHERE id <> \(owner) AND heartbeat_at > now() - make_interval(secs => \(lease))
                    """, logger: logger)
                for try await (id, host, pid) in workers.decode((Int64, String, Int32).self) {
                    watch.live[id] = JournalOwner(pid: pid, host: host)
                }
                return watch
            }
        } catch {
            throw DownloadError.queue("could not read jobs: \(String(reflecting: error))")
        }
    }

    /// The library's state for a queue state: waiting ones are queued.
    /// The library's state for a queue state and, while a worker holds the job, its phase
    /// there (queued behind its slots, waiting for its host).
    static func jobState(queueState: String, phase: String? = nil) -> JobState {
        switch queueState {
        case "running": phase.flatMap(JobState.init(rawValue:)) ?? .running
        case "paused": .paused
        case "completed": .completed
        case "failed": .failed
        case "cancelled": .cancelled
        default: .queued
        }
    }

    /// Pauses, cancels or resumes job `id` through the queue: at once when it waits, else
    /// by a command its worker acts on. Resuming a failed or cancelled job queues it again,
    /// as the journal's does.
    package func leave(_ command: JobLifecycle.Command, for id: DownloadID) async throws(DownloadError) -> Bool {
        do {
            return try await answering(within: deadline) { [self] in
                switch command {
                case .pause: return try await queue.command(.pause, ids: [id.rawValue]).direct > 0
                case .cancel: return try await queue.command(.cancel, ids: [id.rawValue]).direct > 0
                case .resume:
                    // A paused job becomes available; a failed or cancelled one is queued again.
                    if try await queue.resume([id.rawValue]) > 0 { return true }
                    return try await queue.retry([id.rawValue]) > 0
                }
            }
        } catch {
            throw DownloadError.queue("could not \(command.rawValue) \(id): \(String(reflecting: error))")
        }
    }

    // MARK: - Fire-and-forget writes

    /// The transfer of job `id` starts: its lease is extended from now, as a heartbeat would,
    /// and it is transferring (no longer queued behind its worker's slots or waiting for its
    /// host).
    package func recordStarted(_ id: DownloadID) {
        let lease = leaseSeconds
        fenced(
            id, forgetting: false, reportingLoss: true,
            """
            UPDATE haul_jobs SET phase = NULL, lease_expires_at = now() + make_interval(secs => \(lease)),
                updated_at = now()
            """)
    }

    /// Queued and waiting jobs stay leased to this worker (its heartbeat keeps the lease):
    /// their phase says which. A pause for a shutdown and an eviction give the job back to
    /// the queue; a person's pause, a cancellation and a failure end this worker's claim.
    package func recordState(_ id: DownloadID, _ change: StateChange, errorCode: String?, error: String?) {
        let lease = leaseSeconds
        switch change {
        case .queued, .waiting:
            let phase = change.rawValue
            fenced(
                id, forgetting: false, reportingLoss: true,
                """
                UPDATE haul_jobs SET phase = \(phase), lease_expires_at = now() + make_interval(secs => \(lease)),
                    updated_at = now(), last_error_code = \(errorCode), last_error = \(error)
                """)
        case .paused where errorCode == Journal.shutdownCode:
            release(id)
        case .paused:
            fenced(
                id, forgetting: true,
                """
                UPDATE haul_jobs SET state = 'paused', phase = NULL, lease_expires_at = NULL, updated_at = now(),
                    last_error_code = \(errorCode), last_error = \(error)
                """)
        case .cancelled where errorCode == "evicted":
            release(id)
        case .cancelled, .failed:
            let final = change.rawValue
            fenced(
                id, forgetting: true,
                """
                UPDATE haul_jobs SET state = \(final), phase = NULL, lease_expires_at = NULL, updated_at = now(),
                    finished_at = now(), last_error_code = \(errorCode), last_error = \(error)
                """)
        }
    }

    /// Gives job `id` back to the queue, available at once, with its committed bytes.
    private func release(_ id: DownloadID) {
        fenced(
            id, forgetting: true,
            """
            UPDATE haul_jobs SET state = 'available', phase = NULL, scheduled_at = now(), lease_expires_at = NULL,
                updated_at = now()
            """)
        submit { [self] in await write("wake the workers", "SELECT pg_notify(\(PostgresQueue.channel), '')") }
    }

    /// A failed attempt: retried later, after the backoff (or `Retry-After`), by whichever
    /// worker claims it then; or failed for good (see ``LeasedJob/decide(after:attempt:maxAttempts:policy:)``).
    package func recordFailed(_ id: DownloadID, _ error: DownloadError) {
        guard let held = lease(of: id) else { return }
        let code = error.code.description
        let message = error.message
        switch LeasedJob.decide(after: error, attempt: held.attempt, maxAttempts: held.maxAttempts, policy: settings.retry) {
        case .retry(let delay):
            let seconds = delay.timeInterval
            fenced(
                id, forgetting: true,
                """
                UPDATE haul_jobs SET state = 'retryable', phase = NULL,
                    scheduled_at = now() + make_interval(secs => \(seconds)),
                    lease_expires_at = NULL, updated_at = now(), last_error_code = \(code), last_error = \(message)
                """)
        case .fail:
            fenced(
                id, forgetting: true,
                """
                UPDATE haul_jobs SET state = 'failed', phase = NULL, lease_expires_at = NULL, updated_at = now(),
                    finished_at = now(), last_error_code = \(code), last_error = \(message)
                """)
        }
    }

    /// (The queue keeps the name the job was given: `path` adds nothing to it.)
    package func recordCompleted(
        _ id: DownloadID, bytes: Int64, transferred: Int64, unchanged: Bool, finalURL: String, path: String?,
        file: CompletedFile?
    ) {
        let key = id.rawValue
        let owner = self.owner
        var completed: String?
        if let file {
            do {
                completed = String(decoding: try JSONEncoder().encode(file), as: UTF8.self)
            } catch {
                logger.warning("cannot keep the completed file of \(key): \(error)", metadata: ["id": "\(key)"])
            }
        }
        let kept = completed
        guard let held = state.withLockedValue({ $0.completing.removeValue(forKey: key) }) else {
            // Nothing was put into place, so nothing confirmed the completion first (a `304`:
            // the completed file is unchanged): it is recorded here, in full, fenced on the
            // lease as every write is.
            guard let leased = lease(of: id) else { return }
            let redirected: String? = finalURL != leased.url ? finalURL : nil
            fenced(
                id, forgetting: true,
                """
                UPDATE haul_jobs SET state = 'completed', phase = NULL, bytes_committed = \(bytes), total_bytes = \(bytes),
                    lease_expires_at = NULL, last_error = NULL, last_error_code = NULL, updated_at = now(),
                    finished_at = now(), final_url = coalesce(\(redirected), final_url),
                    completed_file = coalesce(\(kept)::jsonb, completed_file), bytes_transferred = \(transferred),
                    unchanged = \(unchanged)
                """)
            return
        }
        onRoom()
        // The completion itself was recorded (fenced) before the rename; a redirect, the
        // completed file (for a conditional request next time) and what the run moved are
        // what is left to add.
        let redirected: String? = finalURL != held.url ? finalURL : nil
        submit { [self] in
            await write(
                "record how \(key) ended",
                """
                UPDATE haul_jobs SET final_url = coalesce(\(redirected), final_url),
                    completed_file = coalesce(\(kept)::jsonb, completed_file), updated_at = now(),
                    bytes_transferred = \(transferred), unchanged = \(unchanged)
                WHERE key = \(key) AND state = 'completed' AND lease_owner = \(owner) AND attempt = \(held.attempt)
                """)
        }
    }

    package func recordCheckpoint(
        _ id: DownloadID, bytes: Int64, total: Int64?, validator: String?, bytesPerSecond: Double, bootID: String?
    ) {
        let lease = leaseSeconds
        // Saving progress extends the lease, as a heartbeat does.
        fenced(
            id, forgetting: false, reportingLoss: true,
            """
            UPDATE haul_jobs SET bytes_committed = \(bytes), total_bytes = coalesce(\(total), total_bytes),
                validator = coalesce(\(validator), validator), boot_id = \(bootID),
                lease_expires_at = now() + make_interval(secs => \(lease)), updated_at = now()
            """)
    }

    /// The retries made within this worker's claim (the queue's own retries are new claims,
    /// counted in `attempt`); a retry extends the lease, as a heartbeat does.
    package func recordAttempt(_ id: DownloadID, _ attempts: Int) {
        let lease = leaseSeconds
        fenced(
            id, forgetting: false, reportingLoss: true,
            """
            UPDATE haul_jobs SET retries = \(attempts), lease_expires_at = now() + make_interval(secs => \(lease)),
                updated_at = now()
            """)
    }

    /// Kept in the job's options, where its URL's other settings are; fenced like any write.
    package func recordSources(_ id: DownloadID, location: URL?, mirrors: [URL]) {
        let location = location?.absoluteString
        let mirrors = JobRecord.encode(urls: mirrors) ?? "[]"
        fenced(
            id, forgetting: false, reportingLoss: true,
            """
            UPDATE haul_jobs SET
                options = options || jsonb_build_object('location', \(location)::text, 'mirrors', \(mirrors)::jsonb),
                updated_at = now()
            """)
    }

    package func clearCommand(_ command: JobLifecycle.Command, for id: DownloadID) {
        let key = id.rawValue
        let command = command.rawValue
        submit { [self] in
            await write(
                "clear the \(command) command of \(key)",
                "UPDATE haul_jobs SET command = NULL WHERE key = \(key) AND command = \(command)")
        }
    }

    package func release() {
        let keys = state.withLockedValue { state in
            defer { state.leases = [:] }
            return state.leases
        }
        guard !keys.isEmpty else { return }
        let names = Array(keys.keys)
        let attempts = names.map { keys[$0]!.attempt }
        let me = self.owner
        submit { [self] in
            await write(
                "give \(names.count) job(s) back to the queue (their leases expire instead)",
                """
                UPDATE haul_jobs j SET state = 'available', scheduled_at = now(), lease_expires_at = NULL, updated_at = now()
                FROM unnest(\(names)::text[], \(attempts)::int8[]) AS held(key, attempt)
                WHERE j.key = held.key AND j.attempt = held.attempt AND j.state = 'running' AND j.lease_owner = \(me)
                """)
            await write("wake the workers", "SELECT pg_notify(\(PostgresQueue.channel), '')")
        }
    }

    // MARK: - Fencing

    /// Confirms that this worker still holds job `id` and marks it completed, fenced on its
    /// lease, before its file is renamed into place: refused at once when the lease is known
    /// to be gone, and otherwise answered by the statement (see ``fencedCompletion(_:bytes:)``),
    /// awaited by the transfer off the I/O pool.
    package func confirmCompletion(_ id: DownloadID, bytes: Int64) -> CompletionConfirmation {
        guard lease(of: id) != nil else { return .refused(completionRefused(id)) }
        return .pending { () throws(DownloadError) in try await self.fencedCompletion(id, bytes: bytes) }
    }

    /// Marks job `id` completed, fenced on its lease.
    ///
    /// Completions are written in batches (group commit, see ``GroupCommit``): one that
    /// arrives while another's statement is in flight waits, and all that waited go in the
    /// next statement together; each caller learns whether its own row matched.
    private func fencedCompletion(_ id: DownloadID, bytes: Int64) async throws(DownloadError) {
        // Everything this worker wrote for the job before comes first.
        await flush()
        let key = id.rawValue
        guard let held = lease(of: id) else { throw completionRefused(id) }
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
            throw completionRefused(id)
        }
    }

    /// Logs that the completion of `id` is refused, its lease lost; the error to give for it.
    private func completionRefused(_ id: DownloadID) -> DownloadError {
        logger.warning(
            "lost the lease of \(id.rawValue) (another worker took the job over): its completion is refused, its file stays where it is",
            metadata: ["id": "\(id.rawValue)"])
        return DownloadError.lostLease(id)
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
        let giveUp = clock.now.advanced(by: max(settings.lease, .seconds(30)))
        var delay = Duration.milliseconds(100)
        while true {
            do {
                return try await answering(within: deadline) { try await self.complete(batch) }
            } catch {
                guard clock.now.advanced(by: delay) < giveUp else { throw error }
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
        signalling.finish()
    }
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

/// The leases a worker lost (another worker took the job over, or renewals failed for too
/// long) and rescued (claimed from a worker whose lease had expired), since it started.
package final class LeaseCounts: Sendable {
    private let counts = NIOLockedValueBox((lost: 0, rescued: 0))

    package init() {}

    func lost(_ count: Int) { counts.withLockedValue { $0.lost += count } }
    func rescued(_ count: Int) { counts.withLockedValue { $0.rescued += count } }

    /// The totals so far.
    package var totals: (lost: Int, rescued: Int) { counts.withLockedValue { $0 } }
}
