public import Foundation
public import Haul
import NIOConcurrencyHelpers
public import Logging
public import NIOCore
public import NIOPosix
import PostgresNIO
public import ServiceLifecycle

/// Runs jobs of a shared ``PostgresQueue`` on this machine: `haul worker`.
///
/// A worker is a `DownloadManager` whose job store is the queue (see
/// `PostgresJobStore`): the manager's admission claims jobs with leases, and its transfer,
/// resume and verification run them as they would any download. The worker registers
/// itself in `haul_workers` (its ID is the owner of its leases), and its store
/// (`PostgresJobStore.coordinate(started:)`):
/// - renews its leases every quarter of the lease (``Settings/lease``), stopping the
///   transfers whose lease another worker took, and stopping all of them, partials kept,
///   when it could not renew for three quarters of the lease (see `LeaseGuard`);
/// - wakes on `NOTIFY haul_jobs` (new or requeued jobs), and polls as a fallback
///   (``Settings/pollInterval``), which also picks up retries when they fall due and
///   leases that expired.
///
/// Run it as a `Service` (SIGTERM stops it in order: its jobs go back to the queue with
/// their partial files) or with ``run()`` in a task that is cancelled to stop it.
public final class QueueWorker: Service, Sendable {
    /// How a worker runs.
    public struct Settings: Sendable {
        /// Jobs run at once (`-j`).
        public var slots: Int = 4
        /// Jobs run at once per host by all the workers of the queue together (`--per-host`);
        /// `nil` for no cap. Give every worker the same value.
        public var perHost: Int?
        /// Where files go (`-d`). Workers sharing this directory (shared storage) resume one
        /// another's partial files. With ``bucket``, where objects' bytes wait until uploaded.
        public var directory: URL
        /// The S3 bucket jobs go into instead of ``directory`` (`-d s3://bucket/prefix/`), as
        /// objects named ``keyPrefix`` and the job's name; needs ``configuration``'s
        /// `objectStorage`. Workers on many machines then share no disk.
        public var bucket: String?
        /// The start of every object's key: empty, or ending with `/`.
        public var keyPrefix = ""
        /// How long a claim or a renewal holds a job.
        public var lease: Duration = .seconds(30)
        /// How often to look for work without a notification.
        public var pollInterval: Duration = .seconds(1)
        /// The backoff between attempts (its `maxRetries` is not used: each job has its own
        /// `max_attempts`).
        public var retry = RetryPolicy()
        /// The manager's configuration (timeouts, TLS, proxies, speed limits, …). Its slots,
        /// per-host cap, retries and segmentation are set from the settings above.
        public var configuration = DownloadManager.Configuration()

        /// The defaults, with files going to `directory`.
        public init(directory: URL) {
            self.directory = directory
        }
    }

    /// The queue it takes jobs from.
    public let queue: PostgresQueue
    /// How it runs.
    public let settings: Settings
    let logger: Logger
    /// The event loops and I/O threads handed in; `nil`: the worker's own.
    let eventLoopGroup: (any EventLoopGroup)?
    let threadPool: NIOThreadPool?
    /// The manager of the run under way, for tests.
    private let current = NIOLockedValueBox<DownloadManager?>(nil)
    private let broadcaster = EventBroadcaster<DownloadManager.Event>()
    /// The store of the run under way, for its leases.
    private let currentStore = NIOLockedValueBox<PostgresJobStore?>(nil)
    /// The leases lost and rescued since the worker was made.
    private let leaseCounts = LeaseCounts()

    /// What the worker holds and has done, for its metrics: the leases held now, lost and
    /// rescued since it started, and its manager's progress and bytes received.
    package struct Statistics: Sendable {
        package var leasesHeld = 0
        package var leasesLost = 0
        package var leasesRescued = 0
        package var progress = AggregateProgress()
        package var receivedBytes: Int64 = 0
    }

    /// The worker's ``Statistics`` now.
    package func statistics() async -> Statistics {
        var statistics = Statistics()
        (statistics.leasesLost, statistics.leasesRescued) = leaseCounts.totals
        statistics.leasesHeld = currentStore.withLockedValue { $0 }?.held.count ?? 0
        if let manager = current.withLockedValue({ $0 }) {
            statistics.progress = await manager.progress
            statistics.receivedBytes = await manager.receivedBytes + finishedBytes.withLockedValue { $0 }
        } else {
            statistics.receivedBytes = finishedBytes.withLockedValue { $0 }
        }
        return statistics
    }
    /// The bytes received by the managers of earlier runs.
    private let finishedBytes = NIOLockedValueBox<Int64>(0)

    /// The events of every download the worker runs, without their progress: a fresh
    /// stream on each access, finished when ``run(started:)`` returns. For a log of the
    /// downloads' ends, or something to do after each.
    public var downloadEvents: AsyncStream<DownloadManager.Event> { broadcaster.makeStream() }

    /// Returns once the manager of the run under way has nothing queued or running.
    func waitUntilIdle() async {
        await current.withLockedValue { $0 }?.waitUntilIdle()
    }

    /// Creates a worker of `queue`.
    ///
    /// - Parameters:
    ///   - queue: The shared queue whose jobs it runs.
    ///   - settings: Its lease, polling, slots and directory.
    ///   - eventLoopGroup: The event loops its downloads run on; `nil` makes its own for each run.
    ///   - threadPool: The started pool for its blocking file work; `nil` makes its own for
    ///     each run. It never shuts down what it is given.
    ///   - logger: Where it logs its claims, leases and errors; `nil` logs nothing.
    public init(
        queue: PostgresQueue, settings: Settings, eventLoopGroup: (any EventLoopGroup)? = nil,
        threadPool: NIOThreadPool? = nil, logger: Logger? = nil
    ) {
        self.queue = queue
        self.settings = settings
        self.eventLoopGroup = eventLoopGroup
        self.threadPool = threadPool
        self.logger = logger ?? Logger(label: "haul.worker", factory: { _ in SwiftLogNoOpLogHandler() })
    }

    /// Runs until cancelled or a graceful shutdown; then stops the transfers (keeping
    /// their partials) and gives their jobs back to the queue. `started` hears the worker's
    /// ID once it is registered and listens for notifications. The queue's connection pool
    /// must be running.
    public func run(started: @escaping @Sendable (Int64) -> Void) async throws {
        defer { broadcaster.finish() }
        try await queue.migrate()
        let owner = try await register()
        let store = PostgresJobStore(
            queue: queue, owner: owner, settings: settings, logger: logger, leaseCounts: leaseCounts)
        currentStore.withLockedValue { $0 = store }
        var configuration = settings.configuration
        configuration.maxConcurrentDownloads = settings.slots
        configuration.maxConnectionsPerHost = settings.perHost.map { min($0, settings.slots) } ?? settings.slots
        // One connection per job, so that the per-host cap counts connections.
        configuration.segmentedConnections = 1
        // Retries are new claims, after a backoff the queue keeps (scheduled_at).
        configuration.retry.maxRetries = 0
        configuration.admissionWindow = settings.slots
        configuration.journalPollInterval = settings.pollInterval
        configuration.followsOtherProcesses = false
        let manager = DownloadManager(
            configuration: configuration, journal: nil, store: store, connectivityMonitor: nil,
            eventLoopGroup: eventLoopGroup, threadPool: threadPool, logger: logger)
        current.withLockedValue { $0 = manager }
        let events = manager.events(includingProgress: false)
        let broadcaster = self.broadcaster
        let forwarding = Task { for await event in events { broadcaster.yield(event) } }
        // Starts the manager listening to the store's signals.
        await manager.wake()
        await cancelWhenGracefulShutdown { await store.coordinate(started: { started(owner) }) }
        await manager.shutdown()
        await forwarding.value
        current.withLockedValue { $0 = nil }
        currentStore.withLockedValue { $0 = nil }
        let received = await manager.receivedBytes
        finishedBytes.withLockedValue { $0 += received }
        // In a task of its own: this one may be cancelled, which would cancel the query. A
        // row left behind (the database gone) shows as a worker whose heartbeat stopped.
        let queue = self.queue
        let logger = self.logger
        await Task {
            do {
                _ = try await queue.client.query("DELETE FROM haul_workers WHERE id = \(owner)", logger: logger)
            } catch {
                logger.warning(
                    "could not remove this worker from haul_workers; it stays listed, its heartbeat stopped",
                    metadata: ["worker": "\(owner)", "error": "\(String(reflecting: error))"])
            }
        }.value
    }

    /// ``run(started:)`` as a `Service`.
    public func run() async throws {
        try await run(started: { _ in })
    }

    /// Inserts this worker's row; returns its ID.
    private func register() async throws -> Int64 {
        let host = ProcessInfo.processInfo.hostName
        let pid = Int32(ProcessInfo.processInfo.processIdentifier)
        let rows = try await queue.client.query(
            "INSERT INTO haul_workers (host, pid) VALUES (\(host), \(pid)) RETURNING id", logger: logger)
        for try await id in rows.decode(Int64.self) { return id }
        throw QueueError("the queue did not register the worker")
    }
}
