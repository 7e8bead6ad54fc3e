public import Foundation
public import Haul
public import Logging
import NIOCore
package import PostgresNIO
public import ServiceLifecycle

/// A download queue shared by many machines, in PostgreSQL: what `haul get --queue`
/// adds to, `haul list/pause/cancel/retry --queue` look at and change, and `haul worker`
/// (a ``QueueWorker``) takes jobs from.
///
/// The queue owns a pooled `PostgresClient`, which only works while ``run()`` runs (it is
/// a `Service`); ``withRunning(_:)`` runs it around a piece of work.
///
/// ```swift
/// let queue = PostgresQueue(address: try QueueAddress(parsing: url, fromCommandLine: false))
/// try await queue.withRunning {
///     try await queue.migrate()
///     _ = try await queue.enqueue([QueueRequest(url: fileURL)])
/// }
/// ```
public final class PostgresQueue: Service, Sendable {
    /// Where the database is.
    public let address: QueueAddress
    /// The connection pool (for this package's tests and benchmarks: no dependency's type in the public API).
    package let client: PostgresClient
    let logger: Logger

    /// The channel `NOTIFY` wakes workers on.
    static let channel = "haul_jobs"

    /// Attempts a job gets by default (the first and its retries), as a single process's
    /// default retry policy gives.
    public static let defaultMaxAttempts = 6

    /// A queue in the database at `address`. It connects when it runs (``run()``, in a
    /// `ServiceGroup` or a task of its own); call ``migrate()`` once before use.
    ///
    /// - Parameters:
    ///   - address: Where the database is, with its password.
    ///   - logger: Where its connection pool logs; `nil` logs nothing.
    public init(address: QueueAddress, logger: Logger? = nil) {
        self.address = address
        let logger = logger ?? Logger(label: "haul.queue", factory: { _ in SwiftLogNoOpLogHandler() })
        self.logger = logger
        var configuration: PostgresClient.Configuration
        if let socket = address.socketPath {
            configuration = .init(
                unixSocketPath: socket, username: address.user, password: address.password, database: address.database)
        } else {
            let tls: PostgresClient.Configuration.TLS =
                switch address.tls {
                case .disable: .disable
                case .prefer: .prefer(.makeClientConfiguration())
                case .require: .require(.makeClientConfiguration())
                }
            configuration = .init(
                host: address.host ?? "localhost", port: address.port, username: address.user,
                password: address.password, database: address.database, tls: tls)
        }
        configuration.options.connectTimeout = .seconds(5)
        configuration.options.maximumConnections = 8
        client = PostgresClient(configuration: configuration, backgroundLogger: logger)
    }

    /// Runs the connection pool until cancelled (or a graceful shutdown).
    public func run() async throws {
        await cancelWhenGracefulShutdown { await self.client.run() }
    }

    /// Runs `body` with the connection pool running, then stops it.
    public func withRunning<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: Void.self, returning: T.self) { group in
            group.addTask { await self.client.run() }
            defer { group.cancelAll() }
            return try await body()
        }
    }

    // MARK: - Adding jobs

    /// Adds `requests` to the queue, skipping those whose ID (the deduplication key) is
    /// queued already, and wakes the workers. Returns how many were added.
    @discardableResult
    public func enqueue(_ requests: [QueueRequest]) async throws -> Int {
        guard !requests.isEmpty else { return 0 }
        var keys: [String] = [], urls: [String] = [], hosts: [String] = [], names: [String] = []
        var options: [String] = [], priorities: [Int] = [], attempts: [Int] = []
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        for request in requests {
            keys.append(request.id)
            urls.append(request.url.absoluteString)
            hosts.append(Self.hostKey(request.url))
            names.append(request.name ?? "")
            options.append(String(decoding: try encoder.encode(request.options), as: UTF8.self))
            priorities.append(request.priority)
            attempts.append(request.maxAttempts)
        }
        var added = 0
        try await client.withTransaction(logger: logger) { connection in
            let rows = try await connection.query(
                """
                INSERT INTO haul_jobs (key, url, host, destination, options, priority, max_attempts)
                SELECT k, u, h, NULLIF(d, ''), o::jsonb, p, m
                FROM unnest(\(keys)::text[], \(urls)::text[], \(hosts)::text[], \(names)::text[], \(options)::text[],
                            \(priorities)::int8[], \(attempts)::int8[]) AS t(k, u, h, d, o, p, m)
                ON CONFLICT (key) DO NOTHING
                RETURNING id
                """, logger: logger)
            for try await _ in rows.decode(Int64.self) { added += 1 }
            try await connection.query("SELECT pg_notify(\(Self.channel), '')", logger: logger)
        }
        return added
    }

    /// The key jobs are capped by: the URL's host and port.
    static func hostKey(_ url: URL) -> String {
        let scheme = url.scheme?.lowercased() ?? "http"
        return "\(url.host?.lowercased() ?? ""):\(url.port ?? (scheme == "https" ? 443 : 80))"
    }

    // MARK: - Looking and changing

    /// The jobs in the queue, oldest first (`ids` empty: all of them).
    public func jobs(_ ids: [String] = []) async throws -> [QueueJob] {
        let rows = try await client.query(
            """
            SELECT key, state, url, attempt, max_attempts, bytes_committed, total_bytes, lease_owner,
                   last_error, scheduled_at, priority
            FROM haul_jobs WHERE cardinality(\(ids)::text[]) = 0 OR key = ANY(\(ids)::text[])
            ORDER BY id
            """, logger: logger)
        var jobs: [QueueJob] = []
        for try await (key, state, url, attempt, maxAttempts, bytes, total, owner, error, scheduled, priority) in rows
            .decode((String, String, String, Int, Int, Int64, Int64?, Int64?, String?, Date, Int).self)
        {
            jobs.append(
                QueueJob(
                    id: key, state: state, url: url, attempt: attempt, maxAttempts: maxAttempts, bytesCommitted: bytes,
                    totalBytes: total, leaseOwner: owner, lastError: error, scheduledAt: scheduled, priority: priority))
        }
        return jobs
    }

    /// The workers that have registered and not stopped, with their last heartbeat.
    public func workers() async throws -> [QueueWorkerInfo] {
        let rows = try await client.query(
            "SELECT id, host, pid, started_at, heartbeat_at FROM haul_workers ORDER BY id", logger: logger)
        var workers: [QueueWorkerInfo] = []
        for try await (id, host, pid, started, heartbeat) in rows.decode((Int64, String, Int32, Date, Date).self) {
            workers.append(QueueWorkerInfo(id: id, host: host, pid: pid, startedAt: started, heartbeatAt: heartbeat))
        }
        return workers
    }

    /// Pauses jobs: those that wait are paused at once; a running one's worker is asked to
    /// stop it (it keeps the partial). Returns how many jobs were found unfinished.
    @discardableResult
    public func pause(_ ids: [String]) async throws -> Int {
        let changed = try await command(.pause, ids: ids)
        return changed.direct + changed.requested
    }

    /// Cancels jobs: waiting or paused ones at once; a running one's worker is asked to.
    @discardableResult
    public func cancel(_ ids: [String]) async throws -> Int {
        let changed = try await command(.cancel, ids: ids)
        return changed.direct + changed.requested
    }

    /// A command for jobs: carried out at once on those that wait, asked of the workers of
    /// running ones.
    package enum Command: String, Sendable {
        case pause, cancel

        /// The state a waiting job takes at once.
        var waitingState: String { self == .pause ? "paused" : "cancelled" }
        /// The states in which a job takes it at once.
        var fromStates: [String] { self == .pause ? ["available", "retryable"] : ["available", "retryable", "paused"] }
    }

    /// Carries out `command` for `ids`; returns how many took it at once (`direct`: a
    /// cancelled one's partial file is the caller's to delete) and how many workers were
    /// asked (`requested`).
    package func command(_ command: Command, ids: [String]) async throws -> (direct: Int, requested: Int) {
        var direct = 0
        var requested = 0
        let waiting = command.waitingState
        let states = command.fromStates
        let name = command.rawValue
        try await client.withTransaction(logger: logger) { connection in
            let rows = try await connection.query(
                """
                UPDATE haul_jobs SET state = \(waiting), updated_at = now(),
                    finished_at = CASE WHEN \(waiting) = 'cancelled' THEN now() ELSE finished_at END
                WHERE key = ANY(\(ids)::text[]) AND state = ANY(\(states)::text[]) RETURNING id
                """, logger: logger)
            for try await _ in rows.decode(Int64.self) { direct += 1 }
            let running = try await connection.query(
                """
                UPDATE haul_jobs SET command = \(name), updated_at = now()
                WHERE key = ANY(\(ids)::text[]) AND state = 'running' RETURNING id
                """, logger: logger)
            for try await _ in running.decode(Int64.self) { requested += 1 }
        }
        return (direct, requested)
    }

    /// Queues failed, cancelled or paused jobs again (all of them when `ids` is empty),
    /// with `attempts` more attempts each; the attempt count itself never goes back (it
    /// fences, see ``QueueWorker``). Returns how many.
    @discardableResult
    public func retry(_ ids: [String], attempts: Int = PostgresQueue.defaultMaxAttempts) async throws -> Int {
        var changed = 0
        try await client.withTransaction(logger: logger) { connection in
            let rows = try await connection.query(
                """
                UPDATE haul_jobs SET state = 'available', scheduled_at = now(), max_attempts = attempt + \(attempts),
                    last_error = NULL, last_error_code = NULL, finished_at = NULL, command = NULL, updated_at = now()
                WHERE (cardinality(\(ids)::text[]) = 0 OR key = ANY(\(ids)::text[]))
                  AND state IN ('failed', 'cancelled', 'paused')
                RETURNING id
                """, logger: logger)
            for try await _ in rows.decode(Int64.self) { changed += 1 }
            try await connection.query("SELECT pg_notify(\(Self.channel), '')", logger: logger)
        }
        return changed
    }
}

/// A download to add to the shared queue. Its file goes into the worker's download
/// directory (`haul worker -d DIR`), under `name` or the name the URL and the response
/// give it.
public struct QueueRequest: Sendable, Hashable {
    /// What the job stores besides its URL: the same checks a single process makes.
    struct Options: Codable, Hashable, Sendable {
        var expectedSize: Int64?
        /// `ALGORITHM=HEX`.
        var checksum: String?
        /// Header pairs (no credentials: the queue refuses them).
        var headers: [[String]]?
        var maxBytesPerSecond: Int?
        var connections: Int?
        /// Other addresses of the same content.
        var mirrors: [String]?
        /// The piece checksums, as the journal keeps them (`JobRecord.encode(pieces:)`).
        var pieces: String?
        /// Where the URL's content is fetched from now (a refreshed signed URL).
        var location: String?
        /// A zsync delta download's control file, as the journal keeps it
        /// (`JobRecord.encode(delta:seeds:)`), without seeds: a worker builds on the file
        /// at its own destination, never on files the submitter named.
        var delta: String?
        /// An HLS stream download's options (`HLSStream.encoded`).
        var stream: String?
    }

    /// What to download (`http` or `https`).
    public var url: URL
    /// The deduplication key: a job with the same ID is never queued twice.
    public var id: String
    /// The file's name (or path) inside the worker's directory; `nil` names it from the URL.
    public var name: String?
    /// Higher runs first; equal priorities run in the order they were queued.
    public var priority: Int
    /// Attempts the job gets, the first and its retries; at least 1.
    public var maxAttempts: Int
    var options: Options

    /// Makes the job the download of an HLS stream (see `DownloadRequest.stream`): `url`
    /// is its playlist; `nil` (the default) for an ordinary download.
    public var stream: HLSStream? {
        get { options.stream.flatMap(HLSStream.init(encoded:)) }
        set { options.stream = newValue?.encoded }
    }

    /// A request for `url`. `checksum` is `ALGORITHM=HEX`; neither `url` (a user and
    /// password) nor `headers` (`Authorization`, `Cookie`) may hold credentials: the queue
    /// stores them in the clear, so it refuses them.
    public init(
        url: URL, id: String? = nil, name: String? = nil, priority: Int = 0, expectedSize: Int64? = nil,
        checksum: String? = nil, headers: [(name: String, value: String)] = [], maxBytesPerSecond: Int? = nil,
        connections: Int? = nil, mirrors: [URL] = [], pieces: PieceChecksums? = nil,
        maxAttempts: Int = PostgresQueue.defaultMaxAttempts
    ) throws(QueueError) {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            throw QueueError("'\(url.absoluteString)' is not an http or https URL")
        }
        guard url.user == nil, url.password == nil else {
            throw QueueError(
                "\(scheme)://\(url.host ?? "")/…: a user and password in the URL: the shared queue stores URLs in the clear, so it does not take credentials (give the workers a netrc file)"
            )
        }
        // PostgreSQL's text holds no NUL.
        for text in [url.absoluteString, id ?? "", name ?? ""] where text.contains("\u{0}") {
            throw QueueError("a job's URL, ID and name must not hold a NUL character")
        }
        for mirror in mirrors {
            guard let scheme = mirror.scheme?.lowercased(), scheme == "http" || scheme == "https", mirror.host != nil,
                mirror.user == nil, mirror.password == nil
            else {
                throw QueueError("mirror '\(mirror.absoluteString)' is not an http or https URL without user info")
            }
        }
        if let name, name.split(separator: "/").contains("..") || name.hasPrefix("/") {
            throw QueueError("'\(name)': a queued file's name must stay inside the worker's directory")
        }
        let secret = ["authorization", "proxy-authorization", "cookie"]
        if let header = headers.first(where: { secret.contains($0.name.lowercased()) }) {
            throw QueueError(
                "\(header.name): the shared queue stores headers in the clear, so it does not take credentials")
        }
        self.url = url
        self.id = id ?? (name.map { url.absoluteString + " -> " + $0 } ?? url.absoluteString)
        self.name = name
        self.priority = priority
        self.maxAttempts = max(1, maxAttempts)
        options = Options(
            expectedSize: expectedSize, checksum: checksum,
            headers: headers.isEmpty ? nil : headers.map { [$0.name, $0.value] }, maxBytesPerSecond: maxBytesPerSecond,
            connections: connections, mirrors: mirrors.isEmpty ? nil : mirrors.map(\.absoluteString),
            pieces: pieces.map(JobRecord.encode(pieces:)))
    }
}

/// A job of the shared queue, as `haul list --queue` shows it.
public struct QueueJob: Sendable, Hashable {
    /// Its deduplication key (``QueueRequest/id``).
    public var id: String
    /// `available`, `running`, `retryable`, `paused`, `completed`, `failed` or `cancelled`.
    public var state: String
    /// What it downloads.
    public var url: String
    /// Attempts made so far, counting the one running.
    public var attempt: Int
    /// Attempts it gets in all.
    public var maxAttempts: Int
    /// Bytes its partial file holds, as of the running worker's last checkpoint.
    public var bytesCommitted: Int64
    /// The file's size, once a response has told it.
    public var totalBytes: Int64?
    /// The worker that holds (or last held) it.
    public var leaseOwner: Int64?
    /// What its last failed attempt said.
    public var lastError: String?
    /// When it may next be claimed (a retry's backoff ends then).
    public var scheduledAt: Date
    /// Higher runs first.
    public var priority: Int
}

/// A registered worker.
public struct QueueWorkerInfo: Sendable, Hashable {
    /// Its registration's number, unique in the queue (the owner of its leases).
    public var id: Int64
    /// The host name of its machine.
    public var host: String
    /// Its process ID on that machine.
    public var pid: Int32
    /// When it registered.
    public var startedAt: Date
    /// Its last heartbeat (each lease renewal is one).
    public var heartbeatAt: Date
}
