import AsyncHTTPClient
import Foundation
public import Logging
import NIOCore
import NIOPosix

/// Runs downloads in a bounded number of slots, in priority order, with resume, retries
/// and verification.
///
/// ```swift
/// let manager = DownloadManager()
/// let handle = try await manager.download(
///     DownloadRequest(url: url, destination: .directory(downloads)))
/// let result = try await handle.result
/// print("saved", result.fileURL!.path)
/// await manager.shutdown()
/// ```
///
/// At most ``Configuration/maxConcurrentDownloads`` downloads hold a slot, and at most
/// ``Configuration/maxConnectionsPerHost`` of them talk to one host. A request whose ID
/// or destination matches an active download joins it. Call ``shutdown()`` when done.
public actor DownloadManager {
    /// An event of one of the manager's downloads.
    public struct Event: Sendable {
        /// The download's ID.
        public let id: DownloadID
        /// What happened.
        public let event: DownloadEvent
    }

    /// The configuration the manager was made with.
    public nonisolated let configuration: Configuration

    let client: HTTPClient
    let threadPool: NIOThreadPool
    let logger: Logger
    private let managerEvents = EventBroadcaster<Event>()

    private var jobs: [DownloadID: Job] = [:]
    private var jobsByPath: [String: DownloadID] = [:]
    private var queue = DownloadQueue()
    private var runningCount = 0
    private var hostCounts: [String: Int] = [:]
    private var startCounter: UInt64 = 0
    private var subscriberCounter: UInt64 = 0
    private var finished = AggregateProgress()
    private var isShutDown = false

    /// Creates a manager.
    ///
    /// - Parameters:
    ///   - configuration: Slots, policies, timeouts and retries.
    ///   - logger: Where the manager logs, at `debug` and below only. Logs nothing by default.
    public init(configuration: Configuration = Configuration(), logger: Logger? = nil) {
        self.configuration = configuration
        self.logger = logger ?? Logger(label: "haul", factory: { _ in SwiftLogNoOpLogHandler() })
        var client = HTTPClient.Configuration()
        client.redirectConfiguration = .disallow
        client.timeout = HTTPClient.Configuration.Timeout(
            connect: .nanoseconds(Int64(Self.nanoseconds(configuration.connectTimeout))),
            read: .nanoseconds(Int64(Self.nanoseconds(configuration.idleTimeout))))
        client.connectionPool = HTTPClient.Configuration.ConnectionPool(
            idleTimeout: .seconds(60),
            concurrentHTTP1ConnectionsPerHostSoftLimit: max(1, configuration.maxConnectionsPerHost))
        // Haul retries with its own policy; a refused connection should fail the attempt at
        // once rather than be retried inside the pool until the connect timeout.
        client.connectionPool.retryConnectionEstablishment = false
        client.decompression = .disabled
        self.client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: client)
        self.threadPool = NIOThreadPool.singleton
    }

    // MARK: - Adding downloads

    /// Adds a download, or joins the active one with the same ID or destination.
    ///
    /// - Returns: A handle to await the result, watch events and control the download.
    /// - Throws: ``DownloadError/Code/invalidRequest`` for a bad URL or destination;
    ///   ``DownloadError/Code/duplicate`` when joining is turned off.
    public func download(_ request: DownloadRequest) throws(DownloadError) -> DownloadHandle {
        guard !isShutDown else { throw DownloadError(.cancelled, "the download manager is shut down", cancellationReason: .shutdown) }
        guard let scheme = request.url.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = request.url.host, !host.isEmpty
        else {
            throw .invalid("'\(request.url.absoluteString)' is not an http or https URL")
        }
        let paths = try PartialPaths(destination: request.destination, url: request.url)
        if let existing = jobs[request.id] ?? paths.flatMap({ jobsByPath[$0.partial] }).flatMap({ jobs[$0] }) {
            guard configuration.duplicatePolicy == .join else {
                throw DownloadError(
                    .duplicate, "\(request.id) is already downloading (same ID or destination as \(existing.id))")
            }
            if request.priority > existing.request.priority { setPriority(request.priority, of: existing) }
            if case .paused = existing.phase { resume(existing) }
            return makeHandle(for: existing)
        }
        let port = request.url.port ?? (scheme == "https" ? 443 : 80)
        let job = Job(
            core: JobCore(id: request.id, managerEvents: managerEvents), request: request, paths: paths,
            hostKey: "\(host.lowercased()):\(port)")
        job.core.meter.reset(completed: 0, total: request.expectedSize)
        jobs[request.id] = job
        if let paths { jobsByPath[paths.partial] = request.id }
        let handle = makeHandle(for: job)
        enqueue(job)
        schedule()
        return handle
    }

    private func makeHandle(for job: Job) -> DownloadHandle {
        subscriberCounter += 1
        job.subscribers.insert(subscriberCounter)
        return DownloadHandle(id: job.id, core: job.core, manager: self, subscriber: subscriberCounter)
    }

    // MARK: - Control

    /// Cancels a download: its partial file is deleted and its result throws
    /// ``DownloadError/Code/cancelled``.
    public func cancel(id: DownloadID) {
        guard let job = jobs[id] else { return }
        stop(job, intent: .cancel(.userRequested))
    }

    /// Cancels every download.
    public func cancelAll() {
        for job in Array(jobs.values) { stop(job, intent: .cancel(.userRequested)) }
    }

    /// Pauses a download, keeping its partial file and its slot free.
    public func pause(id: DownloadID) {
        guard let job = jobs[id] else { return }
        stop(job, intent: .pause)
    }

    /// Pauses every download, keeping their partial files, and returns once none is
    /// running any more.
    public func pauseAll() async {
        var stopping: [Task<Void, Never>] = []
        for job in Array(jobs.values) {
            if case .running(let task) = job.phase { stopping.append(task) }
            stop(job, intent: .pause)
        }
        for task in stopping { await task.value }
    }

    /// Resumes a paused download: it queues for a slot and continues from its partial file.
    public func resume(id: DownloadID) {
        guard let job = jobs[id] else { return }
        resume(job)
    }

    /// Changes the priority of a queued or running download.
    public func setPriority(_ priority: DownloadPriority, for id: DownloadID) {
        guard let job = jobs[id] else { return }
        setPriority(priority, of: job)
    }

    /// Every download's events, from now on.
    public nonisolated var events: AsyncStream<Event> { managerEvents.makeStream() }

    /// The whole manager's progress: bytes, rate, ETA and counts.
    public var progress: AggregateProgress {
        var total = finished
        var knownTotal: Int64? = finished.totalBytes ?? 0
        for job in jobs.values {
            let progress = job.core.meter.snapshot()
            total.completedBytes += progress.completedBytes
            total.bytesPerSecond += progress.bytesPerSecond
            if let size = progress.totalBytes, let sum = knownTotal {
                knownTotal = sum + size
            } else {
                knownTotal = nil
            }
            switch job.phase {
            case .queued: total.queued += 1
            case .running: total.running += 1
            case .paused: total.paused += 1
            }
        }
        total.totalBytes = knownTotal
        return total
    }

    /// IDs of the downloads that are queued, running or paused.
    public var activeIDs: [DownloadID] { jobs.keys.sorted() }

    /// Stops everything: running downloads are interrupted with their partial files kept,
    /// waiting callers get ``DownloadError/CancellationReason/shutdown``, and the HTTP
    /// client is closed. Call it once, when done with the manager.
    public func shutdown() async {
        guard !isShutDown else { return }
        isShutDown = true
        var tasks: [Task<Void, Never>] = []
        for job in Array(jobs.values) {
            if case .running(let task) = job.phase { tasks.append(task) }
            stop(job, intent: .cancel(.shutdown))
        }
        for task in tasks { await task.value }
        try? await client.shutdown()
        managerEvents.finish()
    }

    // MARK: - Interest

    /// A handle's awaiting task was cancelled: drop its interest, and stop the download
    /// once nobody wants it.
    func withdraw(subscriber: UInt64, core: JobCore) {
        guard let job = jobs[core.id], job.core === core else { return }
        job.subscribers.remove(subscriber)
        if job.subscribers.isEmpty { stop(job, intent: .cancel(.noLongerWanted)) }
    }

    func pause(core: JobCore) { if let job = job(for: core) { stop(job, intent: .pause) } }
    func resume(core: JobCore) { if let job = job(for: core) { resume(job) } }
    func cancel(core: JobCore) { if let job = job(for: core) { stop(job, intent: .cancel(.userRequested)) } }
    func setPriority(_ priority: DownloadPriority, core: JobCore) {
        if let job = job(for: core) { setPriority(priority, of: job) }
    }

    private func job(for core: JobCore) -> Job? {
        guard let job = jobs[core.id], job.core === core else { return nil }
        return job
    }

    // MARK: - Scheduling

    private func enqueue(_ job: Job) {
        job.phase = .queued
        queue.enqueue(job.id, priority: job.request.priority)
        job.core.emit(.queued)
    }

    private func schedule() {
        guard !isShutDown else { return }
        while runningCount < configuration.maxConcurrentDownloads {
            guard let id = queue.dequeue(where: { hasHostCapacity(for: $0) }), let job = jobs[id] else { break }
            start(job)
        }
        guard configuration.overflowPolicy == .replaceOldest, runningCount >= configuration.maxConcurrentDownloads
        else { return }
        // Make room for every queued download that has no slot being freed for it yet.
        let stopping = jobs.values.filter { $0.isRunning && $0.stopIntent != nil }.count
        var deficit = queue.count - stopping
        let candidates = jobs.values.filter { $0.isRunning && $0.stopIntent == nil }.sorted {
            $0.startOrder < $1.startOrder
        }
        for job in candidates where deficit > 0 {
            stop(job, intent: .cancel(.evicted))
            deficit -= 1
        }
    }

    private func hasHostCapacity(for id: DownloadID) -> Bool {
        guard let job = jobs[id] else { return true }
        return hostCounts[job.hostKey, default: 0] < configuration.maxConnectionsPerHost
    }

    private func start(_ job: Job) {
        job.generation += 1
        startCounter += 1
        job.startOrder = startCounter
        runningCount += 1
        hostCounts[job.hostKey, default: 0] += 1
        let generation = job.generation
        let operation = TransferOperation(
            request: job.request, paths: job.paths, client: client, threadPool: threadPool,
            configuration: configuration, core: job.core, logger: logger)
        job.core.emit(.started)
        let id = job.id
        job.phase = .running(
            Task {
                let outcome = await operation.run()
                self.transferEnded(id: id, generation: generation, outcome: outcome)
            })
    }

    private func transferEnded(id: DownloadID, generation: Int, outcome: TransferOutcome) {
        guard let job = jobs[id], job.generation == generation, job.isRunning else { return }
        runningCount -= 1
        hostCounts[job.hostKey, default: 1] -= 1
        if hostCounts[job.hostKey] == 0 { hostCounts[job.hostKey] = nil }
        let intent = job.stopIntent
        job.stopIntent = nil
        switch (outcome, intent) {
        case (.completed(let result), _):
            finish(job, .success(result))
        case (_, .cancel(let reason)):
            finishCancelled(job, reason: reason)
        case (.failed(let error), _):
            finish(job, .failure(error))
        case (.interrupted, .pause):
            job.phase = .paused
            job.core.emit(.paused)
        case (.interrupted, .requeue), (.interrupted, nil):
            enqueue(job)
        }
        schedule()
    }

    private func stop(_ job: Job, intent: Job.StopIntent) {
        switch job.phase {
        case .running(let task):
            // A cancel outranks a pause; the first cancel reason wins.
            if case .cancel = job.stopIntent { return }
            job.stopIntent = intent
            task.cancel()
        case .queued, .paused:
            switch intent {
            case .pause:
                guard case .queued = job.phase else { return }
                queue.remove(job.id)
                job.phase = .paused
                job.core.emit(.paused)
            case .requeue:
                return
            case .cancel(let reason):
                queue.remove(job.id)
                finishCancelled(job, reason: reason)
            }
        }
    }

    private func resume(_ job: Job) {
        switch job.phase {
        case .paused:
            enqueue(job)
            schedule()
        case .running:
            if job.stopIntent == .pause { job.stopIntent = .requeue }
        case .queued:
            break
        }
    }

    private func setPriority(_ priority: DownloadPriority, of job: Job) {
        guard job.request.priority != priority else { return }
        job.request.priority = priority
        if case .queued = job.phase {
            queue.reprioritize(job.id, to: priority)
            schedule()
        }
    }

    private func finishCancelled(_ job: Job, reason: DownloadError.CancellationReason) {
        // Eviction and shutdown keep the partial so the download can resume later.
        if reason != .evicted && reason != .shutdown, let paths = job.paths { PartialFile.remove(paths) }
        finish(job, .failure(.cancelled(reason, id: job.id)))
    }

    private func finish(_ job: Job, _ outcome: Result<DownloadResult, DownloadError>) {
        jobs[job.id] = nil
        if let paths = job.paths, jobsByPath[paths.partial] == job.id { jobsByPath[paths.partial] = nil }
        queue.remove(job.id)
        let progress = job.core.meter.snapshot()
        switch outcome {
        case .success(let result):
            finished.completed += 1
            finished.completedBytes += result.byteCount
            finished.totalBytes = (finished.totalBytes ?? 0) + result.byteCount
        case .failure:
            finished.failed += 1
            _ = progress
        }
        job.core.finish(outcome)
    }

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
    }
}
