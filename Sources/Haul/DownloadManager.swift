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
/// or destination matches an active download joins it when their destinations agree.
/// With a ``Journal``, every download is recorded durably and can be resumed by a later
/// process. Call ``shutdown()`` when done, or use
/// ``withDownloadManager(configuration:journal:connectivityMonitor:logger:isolation:_:)``,
/// which does; a manager dropped without it closes its HTTP client without waiting.
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
    /// The journal the manager records downloads in, if any.
    public nonisolated let journal: Journal?

    let client: HTTPClient
    let threadPool: NIOThreadPool
    let logger: Logger
    private let managerEvents = EventBroadcaster<Event>()
    private let journalWriter: JournalWriter?
    private let reachability: HostReachability
    private let connectivity: (any ConnectivityMonitor)?
    /// This manager's owner token in the journal (see ``OwnerLocks``); 0 without one.
    private var me: Int64 = 0

    private var jobs: [DownloadID: Job] = [:]
    private var jobsByPath: [String: DownloadID] = [:]
    private var queue = DownloadQueue()
    private var runningCount = 0
    private var hostCounts: [String: Int] = [:]
    private var startCounter: UInt64 = 0
    private var subscriberCounter: UInt64 = 0
    private var finished = AggregateProgress()
    private var isShutDown = false
    private var background: [Task<Void, Never>] = []
    private var admitting = false
    /// Whether the journal may hold queued jobs of this manager not yet in memory.
    private var journalMayHaveWork = false
    private var idleWaiters: [CheckedContinuation<Void, Never>] = []
    /// Credential headers of journaled jobs, which the journal does not store.
    private var vault = CredentialVault()

    /// Creates a manager.
    ///
    /// - Parameters:
    ///   - configuration: Slots, policies, timeouts and retries.
    ///   - journal: Where to record downloads durably; `nil` keeps them in memory only.
    ///   - connectivityMonitor: The platform's view of the network, if it has one.
    ///   - logger: Where the manager logs, at `debug` and below only. Logs nothing by default.
    public init(
        configuration: Configuration = Configuration(),
        journal: Journal? = nil,
        connectivityMonitor: (any ConnectivityMonitor)? = nil,
        logger: Logger? = nil
    ) {
        self.configuration = configuration
        self.journal = journal
        self.connectivity = connectivityMonitor
        let logger = logger ?? Logger(label: "haul", factory: { _ in SwiftLogNoOpLogHandler() })
        self.logger = logger
        self.journalWriter = journal.map { JournalWriter(journal: $0, logger: logger) }
        self.reachability = HostReachability(
            initialDelay: configuration.networkProbeDelay, maxDelay: configuration.maxNetworkProbeDelay,
            timeout: configuration.connectTimeout)
        var client = HTTPClient.Configuration()
        client.redirectConfiguration = .disallow
        client.timeout = HTTPClient.Configuration.Timeout(
            connect: .nanoseconds(Self.nanoseconds(configuration.connectTimeout)),
            read: .nanoseconds(Self.nanoseconds(configuration.idleTimeout)))
        client.connectionPool = HTTPClient.Configuration.ConnectionPool(
            idleTimeout: .seconds(60),
            concurrentHTTP1ConnectionsPerHostSoftLimit: max(1, configuration.maxConnectionsPerHost))
        // Haul retries with its own policy; a refused connection should fail the attempt at
        // once rather than be retried inside the pool until the connect timeout.
        client.connectionPool.retryConnectionEstablishment = false
        client.decompression = .disabled
        self.client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: client)
        self.threadPool = Self.fileIOPool
    }

    /// The threads that run blocking file work (writes, fsyncs, renames) for every manager.
    ///
    /// Eight, whatever the core count: an fsync waits for the disk, not the CPU, and on a
    /// journaling file system several fsyncs in flight are committed together, so
    /// downloads finishing at once do not queue behind each other's. (NIO's shared pool
    /// has one thread per core.)
    static let fileIOPool: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: 8)
        pool.start()
        return pool
    }()

    // MARK: - Adding downloads

    /// Adds a download, or joins the active one with the same ID or destination.
    ///
    /// Joining needs the destinations to agree: the same file (or directory and name), or
    /// memory and memory. A memory request may also join a file download of the same ID:
    /// its result's `data` holds the bytes, read from the verified file once it completes,
    /// and the request's memory limit still applies.
    ///
    /// With a journal, a request whose ID has an unfinished journal entry continues from
    /// its partial file; one whose completed file is still at its destination, unchanged,
    /// is revalidated with a conditional request (see ``DownloadRequest/forceDownload``);
    /// and one that another live process runs is followed from the journal (see
    /// ``DownloadEvent/attached(_:)``) rather than downloaded twice.
    ///
    /// - Returns: A handle to await the result, watch events and control the download.
    /// - Throws: ``DownloadError/Code/invalidRequest`` for a bad URL or destination;
    ///   ``DownloadError/Code/duplicate`` when joining is turned off, or when the active
    ///   download with this ID saves somewhere else (give the request a distinct ID).
    public func download(_ request: DownloadRequest) async throws(DownloadError) -> DownloadHandle {
        guard !isShutDown else {
            throw DownloadError(.cancelled, "the download manager is shut down", cancellationReason: .shutdown)
        }
        let (paths, endpoint) = try Self.validate(request)
        if let handle = try join(request, paths: paths) { return handle }
        guard let journalWriter, var record = JobRecord(request: request, paths: paths) else {
            startBackgroundWork()
            let job = add(request, paths: paths, endpoint: endpoint)
            let handle = makeHandle(for: job)
            enqueue(job)
            schedule()
            return handle
        }
        let me = try ownerToken()
        startBackgroundWork()
        vault.deposit(request, into: &record)
        let claim = try await claim(record, owner: me, force: request.forceDownload, writer: journalWriter)
        guard !isShutDown else {
            throw DownloadError(.cancelled, "the download manager is shut down", cancellationReason: .shutdown)
        }
        // The same download may have been added while the claim was written: join it.
        if let handle = try join(request, paths: paths) { return handle }
        let job = add(request, paths: paths, endpoint: endpoint)
        let handle = makeHandle(for: job)
        switch claim {
        case .claimed(let journaled):
            job.journaled = journaled
            enqueue(job)
            schedule()
        case .heldElsewhere(let attachment):
            follow(job, attachment)
        }
        return handle
    }

    /// A handle on the active download `request` duplicates, by ID or destination, if any.
    private func join(_ request: DownloadRequest, paths: PartialPaths?) throws(DownloadError) -> DownloadHandle? {
        guard let existing = jobs[request.id] ?? paths.flatMap({ jobsByPath[$0.partial] }).flatMap({ jobs[$0] })
        else { return nil }
        guard configuration.duplicatePolicy == .join else {
            throw DownloadError(
                .duplicate, "\(request.id) is already downloading (same ID or destination as \(existing.id))")
        }
        let delivery = try JoinRule.delivery(
            joining: request, paths: paths, existing: existing.request, existingPaths: existing.paths)
        if request.priority > existing.request.priority { setPriority(request.priority, of: existing) }
        // The partial is deleted when abandoned only if every caller asked for that.
        if request.whenAbandoned == .keepPartial { existing.request.whenAbandoned = .keepPartial }
        if existing.lifecycle.phase == .paused { resume(existing) }
        return makeHandle(for: existing, delivery: delivery, url: request.url)
    }

    /// This manager's owner token, taken on first use.
    private func ownerToken() throws(DownloadError) -> Int64 {
        guard let journal else { return 0 }
        if me == 0 { me = try journal.ownerToken() }
        return me
    }

    /// Claims `record`'s job in the journal, through the writer so that it is ordered
    /// after this manager's earlier writes.
    private func claim(_ record: JobRecord, owner: Int64, force: Bool, writer: JournalWriter) async throws(DownloadError)
        -> JournalWriter.Claim
    {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<JournalWriter.Claim, DownloadError>, Never>) in
            writer.submit(.claim(record, owner: owner, force: force) { continuation.resume(returning: $0) })
        }
        return try result.get()
    }

    /// Queues many downloads without handles, for long lists: they are written to the
    /// journal and admitted a window at a time, so memory stays flat however many there
    /// are. Follow them through ``events`` and wait with ``waitUntilIdle()``.
    ///
    /// Without a journal this falls back to ``download(_:)`` for each request.
    ///
    /// - Throws: ``DownloadError/Code/invalidRequest`` naming the first bad request;
    ///   nothing is queued then.
    public func enqueue(_ requests: [DownloadRequest]) async throws(DownloadError) {
        guard let journal else {
            for request in requests { _ = try await download(request) }
            return
        }
        var records: [JobRecord] = []
        records.reserveCapacity(requests.count)
        var forced: Set<String> = []
        var checkedDirectories: Set<String> = []
        for request in requests {
            let (paths, _) = try Self.validate(request, skippingDirectoryCheckFor: checkedDirectories)
            if let paths { checkedDirectories.insert(paths.directory.path) }
            guard var record = JobRecord(request: request, paths: paths) else {
                _ = try await download(request)
                continue
            }
            record.session = me
            vault.deposit(request, into: &record)
            records.append(record)
            if request.forceDownload { forced.insert(record.id) }
        }
        let me = try ownerToken()
        startBackgroundWork()
        let attachments = try await journal.insert(records, session: me, forcing: forced)
        if !attachments.isEmpty {
            let byID = Dictionary(requests.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
            for attachment in attachments {
                guard let request = byID[attachment.id] else { continue }
                follow(request: request, attachment)
            }
        }
        journalMayHaveWork = true
        await admit()
    }

    /// Takes over every unfinished job in the journal that no other live process holds,
    /// and queues it here; follows the others from the journal (see
    /// ``DownloadEvent/attached(_:)``), asking their process to resume those it has
    /// paused. Returns how many jobs it took over or follows. `haul resume` is built on this.
    @discardableResult
    public func resumeUnfinished() async throws(DownloadError) -> Int {
        guard let journal else { return 0 }
        let me = try ownerToken()
        startBackgroundWork()
        await journalWriter?.flush()
        let (count, attachments) = try journal.adoptUnfinished(session: me)
        var followed = 0
        for attachment in attachments where jobs[attachment.id] == nil {
            guard var request = try? attachment.record.request() else { continue }
            var missing: DownloadError?
            do throws(DownloadError) { try vault.restore(&request, from: attachment.record) } catch { missing = error }
            guard follow(request: request, attachment) else { continue }
            followed += 1
            jobs[request.id]?.credentialsError = missing
        }
        journalMayHaveWork = true
        await admit()
        return count + followed
    }

    private func add(_ request: DownloadRequest, paths: PartialPaths?, endpoint: HostReachability.Endpoint) -> Job {
        let job = Job(
            core: JobCore(id: request.id, managerEvents: managerEvents), request: request, paths: paths,
            endpoint: endpoint)
        job.core.meter.reset(completed: 0, total: request.expectedSize)
        jobs[request.id] = job
        if let paths { jobsByPath[paths.partial] = request.id }
        return job
    }

    private static func validate(_ request: DownloadRequest, skippingDirectoryCheckFor checked: Set<String> = [])
        throws(DownloadError) -> (PartialPaths?, HostReachability.Endpoint)
    {
        guard let scheme = request.url.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = request.url.host, !host.isEmpty
        else {
            throw .invalid("'\(request.url.absoluteString)' is not an http or https URL")
        }
        let paths = try PartialPaths(destination: request.destination, url: request.url, checkedDirectories: checked)
        let port = request.url.port ?? (scheme == "https" ? 443 : 80)
        return (paths, HostReachability.Endpoint(host: host, port: port))
    }

    private func makeHandle(for job: Job, delivery: JoinRule.Delivery = .shared, url: URL? = nil) -> DownloadHandle {
        subscriberCounter += 1
        job.subscribers.insert(subscriberCounter)
        var copy: MemoryCopy?
        if case .memory(let limit) = delivery {
            copy = MemoryCopy(of: job.core.result, url: url ?? job.request.url, limit: limit, threadPool: threadPool)
        }
        return DownloadHandle(id: job.id, core: job.core, manager: self, subscriber: subscriberCounter, copy: copy)
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
    /// running any more and the journal records them as paused.
    public func pauseAll() async {
        var stopping: [Task<Void, Never>] = []
        // Downloads another process runs are its to pause.
        for job in Array(jobs.values) where job.following == nil {
            if job.isRunning, let task = job.task { stopping.append(task) }
            stop(job, intent: .pause)
        }
        for task in stopping { await task.value }
        await journalWriter?.flush()
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
    ///
    /// Unlike ``DownloadHandle/events``, this stream does not start with each download's
    /// current state: make it before adding the downloads it should follow. It finishes
    /// when the manager shuts down or is released.
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
            switch job.lifecycle.phase {
            case .queued: total.queued += 1
            case .running: total.running += 1
            case .paused: total.paused += 1
            case .waiting: total.waiting += 1
            case .elsewhere(let following):
                if following.isPaused { total.paused += 1 } else { total.running += 1 }
            case .finished: break
            }
        }
        total.totalBytes = knownTotal
        return total
    }

    /// IDs of the downloads that are queued, running, waiting or paused in this manager.
    public var activeIDs: [DownloadID] { jobs.keys.sorted() }

    /// Returns once nothing is queued, running or waiting for the network, here or in the
    /// journal for this manager. Paused downloads do not count.
    public func waitUntilIdle() async {
        await admit()
        guard !isIdle else { return }
        await withCheckedContinuation { idleWaiters.append($0) }
    }

    /// Stops everything: running downloads are interrupted with their partial files kept
    /// (the journal records them as paused), waiting callers get
    /// ``DownloadError/CancellationReason/shutdown``, and the HTTP client is closed. Call
    /// it once, when done with the manager.
    ///
    /// A manager released without it closes its HTTP client and releases its journal
    /// entries without waiting; ``withDownloadManager(configuration:journal:connectivityMonitor:logger:isolation:_:)``
    /// calls it for you.
    public func shutdown() async {
        guard !isShutDown else { return }
        isShutDown = true
        var tasks: [Task<Void, Never>] = []
        for job in Array(jobs.values) {
            if job.isRunning, let task = job.task { tasks.append(task) }
            stop(job, intent: .cancel(.shutdown))
        }
        for task in tasks { await task.value }
        for task in background { task.cancel() }
        await reachability.shutdown()
        if let journalWriter {
            journalWriter.submit(.release(owner: me))
            await journalWriter.close()
        }
        try? await client.shutdown()
        managerEvents.finish()
        let waiters = idleWaiters
        idleWaiters = []
        for waiter in waiters { waiter.resume() }
    }

    // MARK: - Interest

    /// A handle's awaiting task was cancelled: drop its interest, and stop the download
    /// once nobody wants it. Its partial file is kept unless every caller asked for
    /// ``DownloadRequest/AbandonAction/deletePartial``.
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

    /// Puts a new job in the queue.
    private func enqueue(_ job: Job) {
        perform([.enqueue(record: false)], for: job)
    }

    private func schedule() {
        guard !isShutDown else { return }
        while runningCount < configuration.maxConcurrentDownloads {
            guard let id = queue.dequeue(where: { hasHostCapacity(for: $0) }), let job = jobs[id] else { break }
            perform(job.lifecycle.start(), for: job)
        }
        if journalMayHaveWork, queue.count < configuration.admissionWindow / 2 {
            Task { await self.admit() }
        }
        checkIdle()
        guard configuration.overflowPolicy == .replaceOldest, runningCount >= configuration.maxConcurrentDownloads
        else { return }
        // Make room for every queued download that has no slot being freed for it yet.
        let stopping = jobs.values.filter { $0.isRunning && $0.lifecycle.stopIntent != nil }.count
        var deficit = queue.count - stopping
        let candidates = jobs.values.filter { $0.isRunning && $0.lifecycle.stopIntent == nil }.sorted {
            $0.startOrder < $1.startOrder
        }
        for job in candidates where deficit > 0 {
            stop(job, intent: .cancel(.evicted))
            deficit -= 1
        }
    }

    private func hasHostCapacity(for id: DownloadID) -> Bool {
        guard let job = jobs[id] else { return true }
        return hostCounts[job.endpoint.key, default: 0] < configuration.maxConnectionsPerHost
    }

    /// Carries out what the job's lifecycle asked for; `outcome` is the transfer's, when
    /// it has just ended.
    private func perform(_ actions: [JobLifecycle.Action], for job: Job, outcome: TransferOutcome? = nil) {
        for action in actions {
            switch action {
            case .startTransfer:
                startTransfer(job)
            case .cancelTransfer:
                job.task?.cancel()
            case .dequeue:
                queue.remove(job.id)
            case .enqueue(let journaled):
                queue.enqueue(job.id, priority: job.request.priority)
                job.core.emit(.queued)
                if journaled { record(job, .queued) }
            case .markPaused:
                job.core.emit(.paused)
                record(job, .paused)
            case .announceRestored:
                job.core.emit(.networkRestored(host: job.endpoint.host))
            case .wait(let hostDown):
                job.core.emit(.networkLost(host: job.endpoint.host))
                record(job, .waiting)
                if hostDown {
                    for other in jobs.values where other.endpoint.key == job.endpoint.key {
                        perform(other.lifecycle.hostDown(), for: other)
                    }
                    Task { await self.reachability.markDown(job.endpoint) }
                }
            case .finishCancelled(let reason):
                finishCancelled(job, reason: reason)
            case .finishWithOutcome:
                switch outcome {
                case .completed(let result, let file): finish(job, .success(result), file: file)
                case .failed(let error): finish(job, .failure(error))
                case .interrupted, .waitingForNetwork, nil: break
                }
            case .forward(let command):
                forward(job.id, command)
            case .detach(let reason):
                // The other process goes on; its partial file is its business.
                finish(job, .failure(.cancelled(reason, id: job.id)), journaled: true)
            }
        }
    }

    private func startTransfer(_ job: Job) {
        job.generation += 1
        startCounter += 1
        job.startOrder = startCounter
        runningCount += 1
        hostCounts[job.endpoint.key, default: 0] += 1
        let generation = job.generation
        let checkpointer = journalWriter.flatMap { writer in
            job.paths.map { _ in Checkpointer(id: job.id.rawValue, writer: writer, meter: job.core.meter) }
        }
        journalWriter?.submit(.started(id: job.id.rawValue, owner: me))
        let operation = TransferOperation(
            request: job.request, paths: job.paths, client: client, threadPool: threadPool,
            configuration: configuration, core: job.core, logger: logger, checkpointer: checkpointer,
            journaled: job.journaled, reachability: reachability, endpoint: job.endpoint)
        job.journaled = nil
        job.core.emit(.started)
        let id = job.id
        job.task = Task {
            let outcome = await operation.run()
            self.transferEnded(id: id, generation: generation, outcome: outcome)
        }
    }

    private func transferEnded(id: DownloadID, generation: Int, outcome: TransferOutcome) {
        guard let job = jobs[id], job.generation == generation, job.isRunning else { return }
        runningCount -= 1
        hostCounts[job.endpoint.key, default: 1] -= 1
        if hostCounts[job.endpoint.key] == 0 { hostCounts[job.endpoint.key] = nil }
        job.task = nil
        let ending: JobLifecycle.Ending =
            switch outcome {
            case .completed: .completed
            case .failed: .failed
            case .interrupted: .interrupted
            case .waitingForNetwork: .waitingForNetwork
            }
        perform(job.lifecycle.transferEnded(ending), for: job, outcome: outcome)
        schedule()
    }

    private func stop(_ job: Job, intent: JobLifecycle.StopIntent) {
        perform(job.lifecycle.stop(intent), for: job)
        checkIdle()
    }

    private func resume(_ job: Job) {
        let actions = job.lifecycle.resume()
        perform(actions, for: job)
        if actions.contains(where: { if case .enqueue = $0 { true } else { false } }) { schedule() }
    }

    private func setPriority(_ priority: DownloadPriority, of job: Job) {
        guard job.request.priority != priority else { return }
        job.request.priority = priority
        if job.lifecycle.phase == .queued {
            queue.reprioritize(job.id, to: priority)
            schedule()
        }
    }

    // MARK: - Network loss

    private func hostRestored(_ key: String) {
        for job in jobs.values where job.endpoint.key == key {
            perform(job.lifecycle.hostRestored(), for: job)
        }
        schedule()
    }

    // MARK: - Finishing

    private func finishCancelled(_ job: Job, reason: DownloadError.CancellationReason) {
        // Eviction, shutdown and (unless the request says otherwise) abandonment keep the
        // partial so the download can resume later.
        let keepsPartial =
            reason == .evicted || reason == .shutdown
            || (reason == .noLongerWanted && job.request.whenAbandoned == .keepPartial)
        if !keepsPartial, let paths = job.paths { PartialFile.remove(paths) }
        if reason == .shutdown || (reason == .noLongerWanted && keepsPartial) {
            record(job, .paused)
        } else {
            record(job, .cancelled, errorCode: reason == .evicted ? "evicted" : "cancelled", error: reason.rawValue)
        }
        finish(job, .failure(.cancelled(reason, id: job.id)), journaled: true)
    }

    /// Ends `job` with `outcome`, recording it in the journal unless `journaled` says it
    /// already is (or, for a download another process ran, is that process's to record).
    private func finish(
        _ job: Job, _ outcome: Result<DownloadResult, DownloadError>, journaled: Bool = false, file: CompletedFile? = nil
    ) {
        job.lifecycle.finish()
        jobs[job.id] = nil
        if let paths = job.paths, jobsByPath[paths.partial] == job.id { jobsByPath[paths.partial] = nil }
        queue.remove(job.id)
        switch outcome {
        case .success(let result):
            finished.completed += 1
            finished.completedBytes += result.byteCount
            finished.totalBytes = (finished.totalBytes ?? 0) + result.byteCount
            if !journaled {
                journalWriter?.submit(
                    .completed(
                        id: job.id.rawValue, bytes: result.byteCount, finalURL: result.finalURL.absoluteString,
                        file: file))
            }
        case .failure(let error):
            finished.failed += 1
            if !journaled {
                // A full disk pauses the job in the journal: `haul resume` continues it.
                record(job, error.code == .diskFull ? .paused : .failed, errorCode: error.code.description, error: error.message)
            }
        }
        job.core.finish(outcome)
        checkIdle()
    }

    private func record(_ job: Job, _ state: JobState, errorCode: String? = nil, error: String? = nil) {
        guard job.paths != nil else { return }
        journalWriter?.submit(.state(id: job.id.rawValue, state, errorCode: errorCode, error: error))
    }

    // MARK: - Downloads other processes run

    /// Follows `job`, which another live process holds, from the journal; or, when the
    /// configuration says not to follow, fails it at once naming that process.
    private func follow(_ job: Job, _ attachment: Journal.Attachment) {
        guard configuration.followsOtherProcesses else {
            let error = DownloadError(
                .runningElsewhere,
                "\(job.id) is being downloaded by \(attachment.owner); wait for it, or run without --no-wait to follow it")
            finish(job, .failure(error), journaled: true)
            return
        }
        var following = Following(holder: attachment.holder, owner: attachment.owner)
        let record = attachment.record
        job.core.meter.reset(completed: record.bytesCommitted, total: record.totalBytes)
        following.reportedBytes = record.bytesCommitted
        job.lifecycle.follow(following)
        job.core.emit(.attached(attachment.owner))
        if record.state == .paused, record.command == nil {
            following.isPaused = true
            job.lifecycle.updateFollowing(following)
            job.core.emit(.paused)
        }
    }

    /// Follows the download of `request` that another live process holds, unless one
    /// with its ID is active here already; returns whether it does.
    @discardableResult
    private func follow(request: DownloadRequest, _ attachment: Journal.Attachment) -> Bool {
        guard jobs[request.id] == nil, let (paths, endpoint) = try? Self.validate(request) else { return false }
        follow(add(request, paths: paths, endpoint: endpoint), attachment)
        return true
    }

    /// Brings every followed download up to date with the journal.
    private func pollFollowed() async {
        guard let journal else { return }
        let followed = jobs.values.compactMap { $0.following == nil ? nil : $0.id }
        guard !followed.isEmpty, let (rows, live) = try? await journal.watch(followed) else { return }
        for id in followed {
            guard let job = jobs[id], var following = job.following else { continue }
            let action = following.evaluate(row: rows[id], live: live, me: me)
            job.lifecycle.updateFollowing(following)
            switch action {
            case .none:
                break
            case .progress(let progress):
                job.core.meter.reset(completed: progress.completedBytes, total: progress.totalBytes)
                job.core.emit(.progress(progress))
            case .paused:
                job.core.emit(.paused)
                checkIdle()
            case .resumed:
                job.core.emit(.started)
            case .completed(let path, let size, let finalURL):
                guard CompletedFile.attributes(path: path)?.size == size else {
                    await takeOver(job)
                    continue
                }
                job.core.meter.reset(completed: size, total: size)
                let result = DownloadResult(
                    id: id, fileURL: URL(fileURLWithPath: path), data: nil,
                    finalURL: URL(string: finalURL) ?? job.request.url, byteCount: size, bytesTransferred: 0)
                finish(job, .success(result), journaled: true)
            case .failed(let code, let message):
                let error = DownloadError(DownloadError.Code(named: code) ?? .network, message)
                finish(job, .failure(error), journaled: true)
            case .cancelled:
                finish(job, .failure(.cancelled(.userRequested, id: id)), journaled: true)
            case .takeOver:
                await takeOver(job)
            }
        }
    }

    /// Claims a followed download whose holder died (or whose row is gone) and runs it
    /// here, from its partial file.
    private func takeOver(_ job: Job) async {
        guard let journalWriter, var record = JobRecord(request: job.request, paths: job.paths) else { return }
        if let missing = job.credentialsError {
            // Never run without its credentials; the journal keeps the job for whoever has them.
            finish(job, .failure(missing), journaled: true)
            return
        }
        vault.deposit(job.request, into: &record)
        guard let claim = try? await claim(record, owner: me, force: false, writer: journalWriter),
            jobs[job.id] === job, job.following != nil
        else { return }
        switch claim {
        case .claimed(let journaled):
            logger.debug("took over a download whose process died", metadata: ["id": "\(job.id)"])
            job.journaled = journaled
            perform(job.lifecycle.takeOver(), for: job)
            schedule()
        case .heldElsewhere(let attachment):
            // Somebody else was quicker: follow them.
            job.lifecycle.follow(Following(holder: attachment.holder, owner: attachment.owner))
            job.core.emit(.attached(attachment.owner))
        }
    }

    /// Leaves a command for the process that runs a followed download (pause, cancel,
    /// resume), off the actor.
    private func forward(_ id: DownloadID, _ command: JobLifecycle.Command) {
        guard let journal else { return }
        threadPool.submit { _ in
            switch command {
            case .pause: _ = try? journal.pause(id)
            case .cancel: _ = try? journal.cancel(id)
            case .resume: _ = try? journal.retry(id)
            }
        }
    }

    // MARK: - Journal admission and remote control

    /// Starts the journal poll and the network watchers, once.
    private func startBackgroundWork() {
        guard background.isEmpty, !isShutDown else { return }
        let restored = reachability.restored
        background.append(
            Task { [weak self] in
                for await key in restored { await self?.hostRestored(key) }
            })
        if let connectivity {
            let reachability = self.reachability
            background.append(
                Task {
                    for await status in connectivity.statusUpdates() where status == .satisfied {
                        await reachability.probeAllNow()
                    }
                })
        }
        if journal != nil {
            let interval = configuration.journalPollInterval
            background.append(
                Task { [weak self] in
                    while !Task.isCancelled {
                        do { try await Task.sleep(for: interval) } catch { return }
                        await self?.pollJournal()
                    }
                })
        }
    }

    /// Applies commands other processes left for this manager's jobs, and admits jobs
    /// queued for it.
    private func pollJournal() async {
        guard let journal, let journalWriter, !isShutDown else { return }
        if let commands = try? await journal.commands(for: me) {
            for (id, command) in commands {
                journalWriter.submit(.clearCommand(id: id.rawValue, command: command))
                guard let job = jobs[id] else { continue }
                switch command {
                case "pause": stop(job, intent: .pause)
                case "cancel": stop(job, intent: .cancel(.userRequested))
                case "resume": resume(job)
                default: logger.debug("unknown journal command", metadata: ["id": "\(id)", "command": "\(command)"])
                }
            }
        }
        await pollFollowed()
        journalMayHaveWork = true
        await admit()
    }

    /// Moves queued journal jobs of this manager into memory, up to the admission window.
    private func admit() async {
        guard let journal, !admitting, !isShutDown, journalMayHaveWork else {
            checkIdle()
            return
        }
        admitting = true
        defer {
            admitting = false
            checkIdle()
        }
        await journalWriter?.flush()
        while !isShutDown, queue.count < configuration.admissionWindow {
            let wanted = configuration.admissionWindow - queue.count
            guard let records = try? await journal.claim(limit: wanted, session: me) else { break }
            // A window's jobs mostly share a directory: check each directory once per window.
            var checkedDirectories: Set<String> = []
            for record in records where jobs[DownloadID(record.id)] == nil {
                guard var request = try? record.request(),
                    let (paths, endpoint) = try? Self.validate(request, skippingDirectoryCheckFor: checkedDirectories)
                else {
                    journalWriter?.submit(
                        .state(id: record.id, .failed, errorCode: "invalidRequest", error: "the journal entry is invalid"))
                    continue
                }
                if let paths, let other = jobsByPath[paths.partial] {
                    // Two queued URLs would write the same file: the second one fails.
                    journalWriter?.submit(
                        .state(
                            id: record.id, .failed, errorCode: "duplicate",
                            error: "\(record.id) would be saved to the same file as \(other)"))
                    continue
                }
                do throws(DownloadError) {
                    try vault.restore(&request, from: record)
                } catch {
                    // Never run without the credentials: leave it paused, and say why.
                    journalWriter?.submit(
                        .state(id: record.id, .paused, errorCode: error.code.description, error: error.message))
                    managerEvents.yield(Event(id: request.id, event: .failed(error)))
                    continue
                }
                if let paths { checkedDirectories.insert(paths.directory.path) }
                let job = add(request, paths: paths, endpoint: endpoint)
                job.journaled = .init(
                    committed: record.bytesCommitted, bootID: record.bootID, completedFile: record.completedFile())
                enqueue(job)
            }
            schedule()
            if records.count < wanted {
                journalMayHaveWork = false
                break
            }
        }
    }

    private var isIdle: Bool {
        guard !admitting, !journalMayHaveWork || isShutDown else { return false }
        return jobs.values.allSatisfy { job in
            switch job.lifecycle.phase {
            case .paused: true
            case .elsewhere(let following): following.isPaused
            default: false
            }
        }
    }

    private func checkIdle() {
        guard !idleWaiters.isEmpty, isIdle else { return }
        let waiters = idleWaiters
        idleWaiters = []
        for waiter in waiters { waiter.resume() }
    }

    /// A manager released without ``shutdown()`` (nothing can be running then: a transfer
    /// keeps its manager alive) closes its HTTP client without waiting, which keeps a debug
    /// build from trapping in the client's deinit, and gives its journal entries up.
    deinit {
        guard !isShutDown else { return }
        for task in background { task.cancel() }
        let reachability = self.reachability
        Task { await reachability.shutdown() }
        journalWriter?.submit(.release(owner: me))
        managerEvents.finish()
        let client = self.client
        // The callback holds the client until its shutdown is complete.
        client.shutdown(queue: .global()) { _ in withExtendedLifetime(client) {} }
    }

    static func nanoseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
    }
}
