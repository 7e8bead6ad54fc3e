public import Foundation
import Logging
import PostgresNIO

/// What a watcher of the whole queue reads and does beyond the CLI's `--queue` commands
/// (`haul serve --queue`): one page of jobs at a time with counts per state, the workers
/// with what they run, a summary to notice changes by, and resuming paused jobs.
///
/// Adding, pausing, cancelling and retrying are ``PostgresQueue/enqueue(_:)``,
/// ``PostgresQueue/pause(_:)``, ``PostgresQueue/cancel(_:)`` and ``PostgresQueue/retry(_:attempts:)``.
extension PostgresQueue {
    // MARK: - Jobs, a page at a time

    /// One page of jobs: those matching `query`, how many match in all, and how many jobs
    /// the whole queue has in each state.
    public func page(_ query: QueueJobQuery) async throws -> QueueJobPage {
        let states = query.states.map { $0.map(\.rawValue).sorted() } ?? []
        let pattern = query.text.map { "%" + Self.likeEscaped($0) + "%" } ?? ""
        let keys = query.keys
        let order = query.sort.orderBy(descending: query.descending)
        var page = QueueJobPage(total: 0, counts: try await stateCounts(), jobs: [])
        // The filter, the same for the count and the page.
        let filter = """
            (cardinality($1::text[]) = 0 OR j.state = ANY($1::text[]))
              AND (cardinality($2::text[]) = 0 OR j.key = ANY($2::text[]))
              AND ($3 = '' OR j.key ILIKE $3 ESCAPE '\\' OR j.url ILIKE $3 ESCAPE '\\'
                   OR coalesce(j.destination, '') ILIKE $3 ESCAPE '\\')
            """
        var binds = PostgresBindings()
        binds.append(states)
        binds.append(keys)
        binds.append(pattern)
        for try await total in try await client.query(
            PostgresQuery(unsafeSQL: "SELECT count(*)::int8 FROM haul_jobs j WHERE \(filter)", binds: binds),
            logger: logger
        ).decode(Int64.self) {
            page.total = Int(total)
        }
        binds.append(Int64(query.offset))
        binds.append(Int64(query.limit))
        let rows = try await client.query(
            PostgresQuery(
                unsafeSQL: """
                    SELECT j.key, j.state, j.url, j.attempt, j.max_attempts, j.bytes_committed, j.total_bytes,
                           j.lease_owner, j.last_error, j.scheduled_at, j.priority,
                           j.destination, j.last_error_code, j.command, w.host,
                           j.created_at, j.updated_at, j.finished_at, j.lease_expires_at
                    FROM haul_jobs j LEFT JOIN haul_workers w ON w.id = j.lease_owner
                    WHERE \(filter)
                    ORDER BY \(order)
                    OFFSET $4 LIMIT $5
                    """, binds: binds),
            logger: logger)
        for try await (
            key, state, url, attempt, maxAttempts, bytes, total, owner, error, scheduled, priority, name, code, command,
            host, created, updated, finished, expires
        ) in rows.decode(
            (
                String, String, String, Int, Int, Int64, Int64?, Int64?, String?, Date, Int, String?, String?, String?,
                String?, Date, Date, Date?, Date?
            ).self)
        {
            page.jobs.append(
                QueueJobDetails(
                    job: QueueJob(
                        id: key, state: state, url: url, attempt: attempt, maxAttempts: maxAttempts,
                        bytesCommitted: bytes, totalBytes: total, leaseOwner: owner, lastError: error,
                        scheduledAt: scheduled, priority: priority),
                    name: name, lastErrorCode: code, command: command, workerHost: host, createdAt: created,
                    updatedAt: updated, finishedAt: finished, leaseExpiresAt: expires))
        }
        return page
    }

    /// One job, or `nil` when the queue has none with that key.
    public func job(_ key: String) async throws -> QueueJobDetails? {
        var query = QueueJobQuery()
        query.keys = [key]
        query.limit = 1
        return try await page(query).jobs.first
    }

    /// How many jobs the queue has in each state (every state, 0 for none).
    public func stateCounts() async throws -> [QueueJobState: Int] {
        var counts = Dictionary(uniqueKeysWithValues: QueueJobState.allCases.map { ($0, 0) })
        for try await (state, count) in try await client.query(
            "SELECT state, count(*)::int8 FROM haul_jobs GROUP BY state", logger: logger
        ).decode((String, Int64).self) {
            if let state = QueueJobState(rawValue: state) { counts[state] = Int(count) }
        }
        return counts
    }

    /// `text` with `LIKE`'s wildcards (and its escape) escaped.
    static func likeEscaped(_ text: String) -> String {
        var escaped = ""
        for character in text {
            if character == "%" || character == "_" || character == "\\" { escaped.append("\\") }
            escaped.append(character)
        }
        return escaped
    }

    // MARK: - Workers

    /// The registered workers (``workers()``) with what each runs now, and the age of
    /// their last heartbeat by the database's clock (so that no machine's clock matters).
    public func workerStatuses() async throws -> [QueueWorkerStatus] {
        let workers = try await self.workers()
        var now = Date()
        var running: [Int64: (jobs: Int, bytes: Int64)] = [:]
        // One row even when nothing runs, for the database's clock.
        for try await (time, owner, jobs, bytes) in try await client.query(
            """
            SELECT now(), j.lease_owner, count(j.id)::int8, coalesce(sum(j.bytes_committed), 0)::int8
            FROM (SELECT 1) AS one LEFT JOIN haul_jobs j ON j.state = 'running'
            GROUP BY j.lease_owner
            """, logger: logger
        ).decode((Date, Int64?, Int64, Int64).self) {
            now = time
            if let owner { running[owner] = (Int(jobs), bytes) }
        }
        return workers.map { worker in
            QueueWorkerStatus(
                worker: worker, heartbeatAge: max(0, now.timeIntervalSince(worker.heartbeatAt)),
                runningJobs: running[worker.id]?.jobs ?? 0, bytesCommitted: running[worker.id]?.bytes ?? 0)
        }
    }

    // MARK: - Noticing changes

    /// The queue in a few numbers, cheap enough to read every second: counts per state,
    /// bytes, and the time of the last change to any job. Two reads that differ mean
    /// something changed (a job's state, its progress, a new job).
    public func summary() async throws -> QueueSummary {
        var summary = QueueSummary()
        for try await (state, count, bytes, total, changed) in try await client.query(
            """
            SELECT state, count(*)::int8, coalesce(sum(bytes_committed), 0)::int8,
                   coalesce(sum(total_bytes), 0)::int8, max(updated_at)
            FROM haul_jobs GROUP BY state
            """, logger: logger
        ).decode((String, Int64, Int64, Int64, Date?).self) {
            guard let state = QueueJobState(rawValue: state) else { continue }
            summary.counts[state] = Int(count)
            summary.bytesCommitted += bytes
            summary.totalBytes += total
            if let changed, changed > (summary.lastChange ?? .distantPast) { summary.lastChange = changed }
        }
        return summary
    }

    // MARK: - Resuming

    /// Resumes jobs a person paused: paused ones become available at once (their committed
    /// bytes kept, their attempts and error left as they were), and a running one whose
    /// pause its worker has not yet acted on keeps running. Returns how many. (``retry(_:attempts:)``
    /// also takes paused jobs back, but grants them new attempts and forgets their error:
    /// right for a failed job, more than a resume should do.)
    @discardableResult
    public func resume(_ ids: [String]) async throws -> Int {
        guard !ids.isEmpty else { return 0 }
        var changed = 0
        try await client.withTransaction(logger: logger) { connection in
            let paused = try await connection.query(
                """
                UPDATE haul_jobs SET state = 'available', scheduled_at = now(), command = NULL,
                    max_attempts = greatest(max_attempts, attempt + 1), updated_at = now()
                WHERE key = ANY(\(ids)::text[]) AND state = 'paused' RETURNING id
                """, logger: logger)
            for try await _ in paused.decode(Int64.self) { changed += 1 }
            let pending = try await connection.query(
                """
                UPDATE haul_jobs SET command = NULL, updated_at = now()
                WHERE key = ANY(\(ids)::text[]) AND state = 'running' AND command = 'pause' RETURNING id
                """, logger: logger)
            for try await _ in pending.decode(Int64.self) { changed += 1 }
            try await connection.query("SELECT pg_notify(\(Self.channel), '')", logger: logger)
        }
        return changed
    }

    // MARK: - Errors

    /// A short reason for a failure of the queue's database, for a person: the server's
    /// message, or what went wrong with the connection. Never the password, nor a query's
    /// parameters.
    public static func reason(_ error: any Error) -> String {
        if let error = error as? QueueError { return error.message }
        guard let error = error as? PSQLError else {
            // The pool's circuit breaker: it could make no connection for a while, and keeps trying.
            if "\(type(of: error))" == "ConnectionPoolError" {
                return "no connection to the database could be made for a while (still trying)"
            }
            return "\(type(of: error))"
        }
        if let message = error.serverInfo?[.message] { return message }
        if let underlying = error.underlying {
            // A connection that could not be made: "connection refused", "no such file", …
            if let io = underlying as? IOError { return "\(error.code): \(io.description)" }
            return "\(error.code): \(String(describing: underlying))"
        }
        return "\(error.code)"
    }
}

/// A state of a job of the shared queue.
public enum QueueJobState: String, Sendable, Hashable, CaseIterable, Codable {
    /// Waiting for a worker.
    case available
    /// Leased by a worker, which runs it.
    case running
    /// Failed an attempt; a worker claims it again once its `scheduled_at` is due.
    case retryable
    /// Paused by a user; no worker claims it until it is resumed.
    case paused
    /// Downloaded and verified: its file is complete in the worker's directory.
    case completed
    /// Failed for good (its attempts used up, or an error not worth retrying).
    case failed
    /// Cancelled by a user; its partial file is deleted.
    case cancelled

    /// Whether the job has yet to end.
    public var isUnfinished: Bool { self == .available || self == .running || self == .retryable || self == .paused }
}

/// Which jobs ``PostgresQueue/page(_:)`` reads, in which order.
public struct QueueJobQuery: Sendable, Hashable {
    /// The orders a page can be read in; every one ends with the job's age, for a stable
    /// order between pages.
    public enum Sort: String, Sendable, CaseIterable {
        /// When it was added.
        case created
        /// When it last changed.
        case updated
        /// Its priority.
        case priority
        /// Its state, by name.
        case state
        /// The share of its bytes committed (unknown sizes last).
        case progress
        /// Its committed bytes.
        case bytes

        func orderBy(descending: Bool) -> String {
            let direction = descending ? "DESC" : "ASC"
            let nulls = descending ? "NULLS LAST" : "NULLS FIRST"
            return switch self {
            case .created: "j.id \(direction)"
            case .updated: "j.updated_at \(direction), j.id \(direction)"
            case .priority: "j.priority \(direction), j.id ASC"
            case .state: "j.state \(direction), j.id ASC"
            case .progress:
                "j.bytes_committed::float8 / NULLIF(j.total_bytes, 0) \(direction) \(nulls), j.id ASC"
            case .bytes: "j.bytes_committed \(direction), j.id ASC"
            }
        }
    }

    /// Only jobs in these states (`nil`: all).
    public var states: Set<QueueJobState>?
    /// Only jobs with these keys (empty: any).
    public var keys: [String] = []
    /// Only jobs whose key, URL or file name contains this, ignoring case.
    public var text: String?
    /// The order: by age unless set.
    public var sort: Sort = .created
    /// Whether the order is reversed (newest, highest or furthest first).
    public var descending = false
    /// How many matching jobs to skip, in that order.
    public var offset = 0
    /// At most how many jobs the page holds.
    public var limit = 100

    /// Every job, oldest first, 100 to a page.
    public init() {}
}

/// One page of ``PostgresQueue/page(_:)``.
public struct QueueJobPage: Sendable, Hashable {
    /// How many jobs match the query, on every page.
    public var total: Int
    /// How many jobs the whole queue has in each state, whatever the query.
    public var counts: [QueueJobState: Int]
    /// The page's jobs, in the query's order.
    public var jobs: [QueueJobDetails]
}

/// A job with everything a watcher of the queue shows.
public struct QueueJobDetails: Sendable, Hashable {
    /// The job as a worker sees it.
    public var job: QueueJob
    /// The file's name (or path) in the worker's directory, when one was given.
    public var name: String?
    /// The last error's code (`httpStatus`, `network`, …), as `DownloadError.Code` names them.
    public var lastErrorCode: String?
    /// `pause` or `cancel` asked of its worker and not yet acted on.
    public var command: String?
    /// The host of the worker that holds (or last held) it, while that worker is registered.
    public var workerHost: String?
    /// When it was added.
    public var createdAt: Date
    /// When it last changed.
    public var updatedAt: Date
    /// When it completed, failed or was cancelled.
    public var finishedAt: Date?
    /// When the running worker's lease ends unless renewed; `nil` when nobody holds it.
    public var leaseExpiresAt: Date?
}

/// A registered worker and what it runs now.
public struct QueueWorkerStatus: Sendable, Hashable {
    /// The worker as it registered.
    public var worker: QueueWorkerInfo
    /// Seconds since its last heartbeat, by the database's clock.
    public var heartbeatAge: Double
    /// Jobs leased to it and running.
    public var runningJobs: Int
    /// The bytes those jobs have committed.
    public var bytesCommitted: Int64
}

/// The queue in a few numbers (see ``PostgresQueue/summary()``).
public struct QueueSummary: Sendable, Hashable {
    /// Jobs per state; every state is present.
    public var counts: [QueueJobState: Int] = Dictionary(uniqueKeysWithValues: QueueJobState.allCases.map { ($0, 0) })
    /// Bytes committed by every job.
    public var bytesCommitted: Int64 = 0
    /// The sizes of the jobs whose size is known.
    public var totalBytes: Int64 = 0
    /// When a job last changed (`nil`: the queue is empty).
    public var lastChange: Date?

    /// An empty queue.
    public init() {}

    /// How many jobs in all.
    public var total: Int { counts.values.reduce(0, +) }
}
