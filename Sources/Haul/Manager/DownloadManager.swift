import AsyncHTTPClient
public import Foundation
public import Logging
public import NIOCore
public import NIOPosix

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
/// ``withDownloadManager(configuration:journal:connectivityMonitor:eventLoopGroup:threadPool:logger:isolation:_:)``,
/// which does; a manager dropped without it closes its HTTP client without waiting.
///
/// The manager runs on the event loops and I/O threads it is given (``eventLoopGroup``,
/// ``threadPool``), or on its own, and is a swift-service-lifecycle `Service`: in a
/// `ServiceGroup`, ``run()`` holds its background work and a graceful shutdown stops it as
/// ``shutdown()`` does.
public actor DownloadManager {
    /// An event of one of the manager's downloads.
    public struct Event: Sendable {
        /// The download's ID.
        public let id: DownloadID
        /// The download's URL, as its request gives it.
        public let url: URL
        /// What happened.
        public let event: DownloadEvent
    }

    /// The configuration the manager was made with.
    public nonisolated let configuration: Configuration
    /// The journal the manager records downloads in, if any.
    public nonisolated let journal: Journal?

    /// The HTTP clients, one per route (direct, or through a proxy): every request asks
    /// them for its client.
    let clients: HTTPClients
    /// The object store of ``Configuration/objectStorage``, on the same clients.
    nonisolated let objectStore: S3Client?
    /// Aborts of cancelled objects' uploads under way: shutting down waits for them, so a
    /// cancelled upload's parts never outlive the process.
    var uploadAborts: [DownloadID: Task<Void, Never>] = [:]
    /// The speed limits, shared by every transfer of this manager.
    nonisolated let rateLimiter: RateLimiter
    /// Why the configuration's trust roots or client certificate could not be loaded, if
    /// they could not: every download, enqueue and sync fails with it (see
    /// ``checkTLSSetup()``).
    nonisolated let tlsSetupError: DownloadError?
    /// The cache of ``Configuration/cache``, if one is configured and its directory could be
    /// used.
    public nonisolated let cache: ResponseCache?
    /// Why the cache's directory could not be used, if it could not: every download then
    /// fails with it.
    nonisolated let cacheSetupError: DownloadError?
    /// The event loops and I/O threads the manager runs on, handed in or its own.
    package nonisolated let resources: ManagerResources
    /// Makes the renames of finished downloads durable, a directory sync for many renames.
    nonisolated let directorySync = DirectorySync()
    let logger: Logger
    let managerEvents = EventBroadcaster<Event>()
    /// The bytes received by the downloads that have left this manager (see ``receivedBytes``).
    var receivedByEnded: Int64 = 0
    /// Where the manager keeps its jobs: the journal's store, or `nil` without a journal.
    let store: (any JobStore)?
    let reachability: HostReachability
    let connectivity: (any ConnectivityMonitor)?
    /// This manager's owner token in the journal (see ``OwnerLocks``); 0 without one.
    var me: Int64 = 0

    var jobs: [DownloadID: Job] = [:]
    var jobsByPath: [String: DownloadID] = [:]
    /// Slots, per-host caps, the queue's order, replace-oldest and admission from the store
    /// (see ``SchedulerMachine``): the actor carries out what it decides.
    var scheduler: SchedulerMachine
    /// The admissions the scheduler asks for (their `limit`s), carried out one after
    /// another by the admission loop, a part of the background work (see ``admitting()``).
    let admissionRequests: AsyncStream<Int>.Continuation
    let admissionStream: AsyncStream<Int>
    /// The hosts whose connections chose HTTP/2, as each first does (see
    /// ``HTTPClients/init(base:proxies:family:eventLoopGroup:threadPool:http2:onSpeaksHTTP2:)``).
    let http2Hosts: AsyncStream<String>
    /// Admissions asked for and ended, counted, and the callers of ``admissionFinished()``
    /// waiting for the ones asked for before they called.
    var admissionsAsked = 0
    var admissionsEnded = 0
    /// Whether the admission loop has ended (the background work was cancelled, or the
    /// manager shut down): an admission asked for after that is never carried out.
    var admissionLoopEnded = false
    var admissionWaiters: [(after: Int, continuation: CheckedContinuation<Void, Never>)] = []
    var subscriberCounter: UInt64 = 0
    var finished = AggregateProgress()
    var isShutDown = false
    /// The end of ``shutdown()`` under way, which later callers wait for.
    var stopping: Task<Void, Never>?
    /// Whether the background work (see ``startBackgroundWork()``) has started, in
    /// ``background`` or in a ``run()``.
    var backgroundStarted = false
    var background: [Task<Void, Never>] = []
    /// What wakes each ``run()`` under way when the manager shuts down.
    var runStops: [AsyncStream<Never>.Continuation] = []
    /// Callers of ``waitUntilIdle()``, by a number of their own (so that a cancelled one
    /// can be woken alone).
    var idleWaiters: [Int: CheckedContinuation<Void, Never>] = [:]
    var nextIdleWaiter = 0
    /// Credential headers of journaled jobs, which the journal does not store.
    var vault = CredentialVault()

    /// Creates a manager.
    ///
    /// Give it the event loops and I/O threads of your app (a Hummingbird or Vapor
    /// server's, say) to share them; it never shuts down what it is given. What it is not
    /// given it makes: an event loop group with a loop per core, and a pool of eight threads
    /// for blocking file work; it shuts those down in ``shutdown()``, or without waiting
    /// when it is released without one.
    ///
    /// ```swift
    /// let manager = DownloadManager(eventLoopGroup: app.eventLoopGroup, threadPool: threadPool)
    /// ```
    ///
    /// - Parameters:
    ///   - configuration: Slots, policies, timeouts and retries.
    ///   - journal: Where to record downloads durably; `nil` keeps them in memory only.
    ///   - connectivityMonitor: The platform's view of the network, if it has one.
    ///   - eventLoopGroup: The event loops every connection, probe and timer runs on;
    ///     `nil` makes the manager's own.
    ///   - threadPool: The started pool that runs blocking file work (writes, fsyncs,
    ///     renames, hashing); `nil` makes the manager's own, of eight threads (an fsync
    ///     waits for the disk, not the CPU: more threads than cores keep finishing downloads
    ///     from queuing behind each other's fsyncs).
    ///   - logger: Where the manager logs, at `debug` and below only. Logs nothing by default.
    public init(
        configuration: Configuration = Configuration(),
        journal: Journal? = nil,
        connectivityMonitor: (any ConnectivityMonitor)? = nil,
        eventLoopGroup: (any EventLoopGroup)? = nil,
        threadPool: NIOThreadPool? = nil,
        logger: Logger? = nil
    ) {
        let logger = logger ?? Logger(label: "haul", factory: { _ in SwiftLogNoOpLogHandler() })
        self.init(
            configuration: configuration, journal: journal,
            store: journal.map {
                JournalStore(journal: $0, logger: logger, pollInterval: configuration.journalPollInterval)
            }, connectivityMonitor: connectivityMonitor,
            eventLoopGroup: eventLoopGroup, threadPool: threadPool, logger: logger)
    }

    /// Creates a manager that keeps its jobs in `store` (see ``JobStore``); `journal`, if
    /// any, also keeps content sync's manifests and digests. `eventLoopGroup` and
    /// `threadPool` as for ``init(configuration:journal:connectivityMonitor:eventLoopGroup:threadPool:logger:)``.
    package init(
        configuration: Configuration, journal: Journal?, store: (any JobStore)?,
        connectivityMonitor: (any ConnectivityMonitor)?, eventLoopGroup: (any EventLoopGroup)? = nil,
        threadPool: NIOThreadPool? = nil, logger: Logger
    ) {
        let resources = ManagerResources(eventLoopGroup: eventLoopGroup, threadPool: threadPool)
        self.resources = resources
        self.configuration = configuration
        self.scheduler = SchedulerMachine(
            limits: .init(
                slots: configuration.maxConcurrentDownloads, perHost: configuration.maxConnectionsPerHost,
                connectionsPerDownload: configuration.segmentedConnections,
                admissionWindow: configuration.admissionWindow,
                perHostCapsConnections: configuration.perHostCap != nil, slotsWereSet: configuration.slotCap != nil),
            overflow: configuration.overflowPolicy == .replaceOldest ? .replaceOldest : .queue)
        self.journal = journal
        self.store = store
        self.connectivity = connectivityMonitor
        self.logger = logger
        (admissionStream, admissionRequests) = AsyncStream.makeStream(of: Int.self)
        self.reachability = HostReachability(
            initialDelay: configuration.networkProbeDelay, maxDelay: configuration.maxNetworkProbeDelay,
            timeout: configuration.connectTimeout, eventLoopGroup: resources.eventLoopGroup)
        var client = HTTPClient.Configuration()
        client.redirectConfiguration = .disallow
        client.timeout = HTTPClient.Configuration.Timeout(
            connect: .nanoseconds(Self.nanoseconds(configuration.connectTimeout)),
            read: .nanoseconds(Self.nanoseconds(configuration.idleTimeout)))
        client.connectionPool = HTTPClient.Configuration.ConnectionPool(
            idleTimeout: .seconds(60),
            concurrentHTTP1ConnectionsPerHostSoftLimit: max(1, Self.poolLimit(configuration)))
        // Haul retries with its own policy; a refused connection should fail the attempt at
        // once rather than be retried inside the pool until the connect timeout.
        client.connectionPool.retryConnectionEstablishment = false
        client.decompression = .disabled
        // Haul records no request spans: without a tracer the client builds none (a span
        // per request cost a few percent of the CPU of a small file).
        client.tracing.tracer = nil
        do throws(DownloadError) {
            client.tlsConfiguration = try Self.tlsConfiguration(configuration.tls)
            self.tlsSetupError = nil
        } catch {
            self.tlsSetupError = error
        }
        let (http2Hosts, http2HostsContinuation) = AsyncStream.makeStream(of: String.self)
        self.http2Hosts = http2Hosts
        let clients = HTTPClients(
            base: client, proxies: configuration.proxy, family: configuration.addressFamily,
            eventLoopGroup: resources.eventLoopGroup, threadPool: resources.threadPool,
            http2: configuration.tls.allowsHTTP2, onSpeaksHTTP2: { host, port in
                http2HostsContinuation.yield(HostReachability.Endpoint(host: host, port: port).key)
            })
        self.clients = clients
        self.objectStore = configuration.objectStorage.map {
            S3Client(configuration: $0.aws, clients: clients, logger: logger)
        }
        do throws(DownloadError) {
            self.cache = try configuration.cache.map { configuration throws(DownloadError) in
                try ResponseCache(configuration: configuration, threadPool: resources.threadPool)
            }
            self.cacheSetupError = nil
        } catch {
            self.cache = nil
            self.cacheSetupError = error
        }
        self.rateLimiter = RateLimiter(
            overall: configuration.maxBytesPerSecond, perHost: configuration.maxBytesPerSecondPerHost,
            timerLoop: resources.eventLoopGroup.next())
    }

    /// The event loops the manager's connections, probes and timers run on: the group it
    /// was given, or its own (shut down with the manager).
    public nonisolated var eventLoopGroup: any EventLoopGroup { resources.eventLoopGroup }

    /// The threads that run the manager's blocking file work (writes, fsyncs, renames,
    /// hashing): the pool it was given, or its own (shut down with the manager).
    public nonisolated var threadPool: NIOThreadPool { resources.threadPool }

    /// Makes and starts a pool of the threads that run blocking file work (writes, fsyncs,
    /// renames): what a manager makes when it is given none, and what a process that
    /// makes several managers can give them all. Shut it down when done with it.
    ///
    /// Eight threads, whatever the core count: an fsync waits for the disk, not the CPU,
    /// and on a journaling file system several fsyncs in flight are committed together, so
    /// downloads finishing at once do not queue behind each other's. (NIO's shared pool
    /// has one thread per core.)
    package static func makeFileIOPool() -> NIOThreadPool {
        let pool = NIOThreadPool(numberOfThreads: 8)
        pool.start()
        return pool
    }

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
    ///   download with this ID saves somewhere else (give the request a distinct ID);
    ///   ``DownloadError/Code/tls`` when a file of ``Configuration/tls`` could not be loaded.
    public func download(_ request: DownloadRequest) async throws(DownloadError) -> DownloadHandle {
        try await download(request, paused: false)
    }

    /// ``download(_:)``, the new download left paused when `paused` (it starts once resumed).
    func download(_ request: DownloadRequest, paused: Bool) async throws(DownloadError) -> DownloadHandle {
        guard !isShutDown else {
            throw DownloadError(.cancelled, "the download manager is shut down", cancellationReason: .shutdown)
        }
        try checkTLSSetup()
        var validated = try ValidatedRequest(request)
        try checkObjectStorage(validated)
        // A download into memory asks the cache here: an answer needs no job. A file's
        // transfer asks it as it starts (see `TransferOperation`).
        if validated.request.cacheUse == nil, validated.request.destination.isMemory,
            cache != nil || cacheSetupError != nil || request.cachePolicy == .returnCacheDataDontLoad,
            let handle = try await consultCache(&validated.request)
        {
            return handle
        }
        if cache == nil, request.cachePolicy == .returnCacheDataDontLoad {
            throw DownloadError.notCached(request.url, configured: false)
        }
        if let cacheSetupError { throw cacheSetupError }
        clients.prepare(for: request.url, connecting: claimRoom(paused: paused) > 0)
        let paths = validated.paths
        identify(&validated.request)
        var request = validated.request
        if let handle = try join(request, paths: paths) { return handle }
        guard let store, request.isJournaled, var record = JobRecord(request: request, paths: paths) else {
            startBackgroundWork()
            let job = add(validated)
            let handle = makeHandle(for: job)
            queueOrPause(job, paused: paused)
            return handle
        }
        _ = try ownerToken()
        startBackgroundWork()
        vault.deposit(request, into: &record)
        if paused { record.state = .paused }
        let claim = try await store.claim(record, force: request.forceDownload)
        var journaled: TransferOperation.JournaledProgress?
        if case .claimed(let claimed) = claim { journaled = try await takeUp(claimed, paths: paths) }
        guard !isShutDown else {
            throw DownloadError(.cancelled, "the download manager is shut down", cancellationReason: .shutdown)
        }
        // The store keeps the download under the ID the journal's rows give it.
        if claim.id != request.id {
            request.id = claim.id
            validated.request.id = claim.id
        }
        // The same download may have been added while the claim was written: join it.
        if let handle = try join(request, paths: paths) { return handle }
        let job = add(validated)
        let handle = makeHandle(for: job)
        switch claim {
        case .claimed:
            job.journaled = journaled
            queueOrPause(job, paused: paused)
        case .heldElsewhere(let attachment):
            follow(job, attachment)
        }
        return handle
    }

    /// Queues a new job for a slot, or leaves it paused.
    private func queueOrPause(_ job: Job, paused: Bool) {
        if paused {
            perform(job.lifecycle.stop(.pause), for: job)
        } else {
            enqueue(job)
        }
    }

    /// Gives `request` the ID ``JobIdentity`` keeps it under against this manager's
    /// active downloads: its URL names one to another destination, it is `URL -> PATH`.
    func identify(_ request: inout DownloadRequest) {
        guard let existing = jobs[request.id], let destination = request.destination.identityDestination,
            let taken = existing.request.destination.identityDestination
        else { return }
        request.id = DownloadID(
            JobIdentity.id(request.id.rawValue, url: request.url.absoluteString, destination: destination, taken: taken))
    }

    /// A handle on the active download `request` duplicates, by ID or destination, if any.
    func join(_ request: DownloadRequest, paths: PartialPaths?) throws(DownloadError) -> DownloadHandle? {
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

    /// Queues many downloads without handles, for long lists: they are written to the
    /// journal and admitted a window at a time, so memory stays flat however many there
    /// are. Follow them through ``events`` and wait with ``waitUntilIdle()``.
    ///
    /// Without a journal this falls back to ``download(_:)`` for each request.
    ///
    /// - Throws: ``DownloadError/Code/invalidRequest`` naming the first bad request;
    ///   nothing is queued then. ``DownloadError/Code/tls`` as for ``download(_:)``.
    public func enqueue(_ requests: [DownloadRequest]) async throws(DownloadError) {
        _ = try await submit(requests, paused: false)
    }

    /// ``enqueue(_:)``; with `paused`, the downloads are added paused: they wait, in the
    /// journal, until resumed (aria2's `addUri` with `pause: true`).
    ///
    /// Returns the jobs as this call wrote them to the journal, before the journal merged
    /// them with any row of the same ID (a service announces new downloads from them).
    @discardableResult
    package func enqueue(_ requests: [DownloadRequest], paused: Bool) async throws(DownloadError) -> [JobSnapshot] {
        try await submit(requests, paused: paused).map(JobSnapshot.init)
    }

    /// Queues `requests` (see ``enqueue(_:paused:)``); returns their journal rows as written.
    private func submit(_ requests: [DownloadRequest], paused: Bool) async throws(DownloadError) -> [JobRecord] {
        try checkTLSSetup()
        if let cacheSetupError { throw cacheSetupError }
        guard let store else {
            for request in requests { _ = try await download(request, paused: paused) }
            return []
        }
        var records: [JobRecord] = []
        records.reserveCapacity(requests.count)
        // The request of each record.
        var recorded: [DownloadRequest] = []
        var forced: Set<String> = []
        var checkedDirectories: Set<String> = []
        // The requests as made and validated here, to run from memory those claimed at once:
        // no more than a claim can take (the first ones, which it takes unless priorities
        // say otherwise; one it takes that is not here is validated again from its row).
        let room = claimRoom(paused: paused)
        var made: [Int: ValidatedRequest] = [:]
        for request in requests {
            var validated = try ValidatedRequest(request, checkedDirectories: checkedDirectories)
            try checkObjectStorage(validated)
            // The ones claimed at once start at once: their connection is opened meanwhile.
            clients.prepare(for: request.url, connecting: made.count < room)
            identify(&validated.request)
            let request = validated.request
            let paths = validated.paths
            if let paths { checkedDirectories.insert(paths.directoryPath) }
            guard var record = JobRecord(request: request, paths: paths) else {
                _ = try await download(request, paused: paused)
                continue
            }
            if paused { record.state = .paused }
            vault.deposit(request, into: &record)
            if made.count < room { made[records.count] = validated }
            records.append(record)
            recorded.append(request)
            if request.forceDownload { forced.insert(record.id) }
        }
        _ = try ownerToken()
        startBackgroundWork()
        let submitted = try await store.submit(records, forcing: forced, claimingUpTo: claimRoom(paused: paused))
        for (index, id) in submitted.renamed {
            records[index].id = id
            recorded[index].id = DownloadID(id)
            made[index]?.request.id = DownloadID(id)
        }
        if !submitted.attachments.isEmpty {
            let byID = Dictionary(zip(records.map(\.id), recorded), uniquingKeysWith: { first, _ in first })
            for attachment in submitted.attachments {
                guard let request = byID[attachment.id.rawValue] else { continue }
                follow(request: request, attachment)
            }
        }
        var checked: Set<String> = []
        if !submitted.claimed.isEmpty {
            let byID = Dictionary(made.map { (records[$0.key].id, $0.value) }, uniquingKeysWith: { _, last in last })
            for claimed in submitted.claimed {
                await take(claimed, as: byID[claimed.record.id], checkedDirectories: &checked)
            }
        }
        guard !paused, !Self.accountsForAll(records, submitted) else { return records }
        await admitFromStore()
        return records
    }

    /// How many submitted jobs to claim in the same call: as many as an admission would
    /// bring in now; none while the store holds earlier work for this manager, which goes
    /// first, or for jobs added paused.
    private func claimRoom(paused: Bool) -> Int {
        paused || scheduler.storeMayHaveWork || scheduler.isAdmitting ? 0 : scheduler.admissionRoom
    }

    /// Whether every one of `records` was claimed here or left to its holder by `submitted`
    /// (a shared store may claim other submitters' jobs instead): then nothing of them waits
    /// in the store for an admission.
    private static func accountsForAll(_ records: [JobRecord], _ submitted: SubmittedJobs) -> Bool {
        guard submitted.claimed.count + submitted.attachments.count >= records.count else { return false }
        let settled = Set(submitted.claimed.map(\.record.id)).union(submitted.attachments.map(\.id.rawValue))
        return records.allSatisfy { settled.contains($0.id) }
    }

    /// Takes over every unfinished job in the journal that no other live process holds,
    /// and queues it here; follows the others from the journal (see
    /// ``DownloadEvent/attached(_:)``), asking their process to resume those it has
    /// paused. Returns how many jobs it took over or follows. `haul resume` is built on this.
    @discardableResult
    public func resumeUnfinished() async throws(DownloadError) -> Int {
        try await resumeUnfinished(keepingPaused: false)
    }

    /// ``resumeUnfinished()``, leaving the jobs a person paused paused when `keepingPaused`:
    /// what a long-running service does at start.
    @discardableResult
    package func resumeUnfinished(keepingPaused: Bool) async throws(DownloadError) -> Int {
        try checkTLSSetup()
        guard let store else { return 0 }
        _ = try ownerToken()
        startBackgroundWork()
        await store.flush()
        let (count, attachments) = try await store.adoptUnfinished(keepingPaused: keepingPaused)
        var followed = 0
        for attachment in attachments where jobs[attachment.id] == nil {
            guard var request = try? attachment.record.request() else { continue }
            var missing: DownloadError?
            do throws(DownloadError) { try vault.restore(&request, from: attachment.record) } catch { missing = error }
            guard follow(request: request, attachment) else { continue }
            followed += 1
            jobs[request.id]?.credentialsError = missing
        }
        await admitFromStore()
        return count + followed
    }

    func add(_ validated: ValidatedRequest) -> Job {
        let request = validated.request
        let paths = validated.paths
        let endpoint = validated.endpoint(through: clients)
        let job = Job(
            core: JobCore(
                id: request.id, url: request.url, managerEvents: managerEvents, eventLoopGroup: resources.eventLoopGroup,
                rateLimiter: rateLimiter, host: endpoint.key),
            request: request, paths: paths, endpoint: endpoint)
        job.core.meter.reset(completed: 0, total: request.expectedSize)
        jobs[request.id] = job
        if let paths { jobsByPath[paths.partial] = request.id }
        return job
    }

    func makeHandle(for job: Job, delivery: JoinRule.Delivery = .shared, url: URL? = nil) -> DownloadHandle {
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
        await store?.flush()
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

    /// Every download's events from now on, like ``events``, but without
    /// ``DownloadEvent/progress(_:)`` when `includingProgress` is false: for a consumer that
    /// follows states and outcomes only (and reads ``progress`` when it wants the numbers),
    /// progress events then cost nothing to deliver.
    public nonisolated func events(includingProgress: Bool) -> AsyncStream<Event> {
        guard !includingProgress else { return managerEvents.makeStream() }
        return managerEvents.makeStream { event in
            if case .progress = event.event { return false }
            return true
        }
    }

    /// Every download's events from now on, like ``events(includingProgress:)``, taken in
    /// batches (see ``EventBatches``).
    package nonisolated func eventBatches(includingProgress: Bool) -> EventBatches<Event> {
        guard !includingProgress else { return managerEvents.makeBatches() }
        return managerEvents.makeBatches { event in
            if case .progress = event.event { return false }
            return true
        }
    }

    /// The whole manager's progress: bytes, rate, ETA and counts.
    public var progress: AggregateProgress {
        var total = finished
        var knownTotal: Int64? = finished.totalBytes ?? 0
        for job in jobs.values {
            let progress = job.core.meter.snapshot()
            // Sizes are what requests and servers claim, up to Int64.max each: sums saturate.
            total.completedBytes = Self.saturatingSum(total.completedBytes, progress.completedBytes)
            total.bytesPerSecond += progress.bytesPerSecond
            if let size = progress.totalBytes, let sum = knownTotal {
                knownTotal = Self.saturatingSum(sum, size)
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
        total.transferredBytes = receivedBytes
        return total
    }

    /// `a + b`, or `Int64.max` where that overflows.
    static func saturatingSum(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? .max : sum
    }

    /// The bytes this manager's downloads have received from servers (for a service's
    /// metrics): those that ended, and what each download here now has received so far
    /// (a meter's count only grows).
    package var receivedBytes: Int64 {
        jobs.values.reduce(receivedByEnded) { Self.saturatingSum($0, $1.core.meter.bytesTransferred) }
    }

    /// IDs of the downloads that are queued, running, waiting or paused in this manager.
    public var activeIDs: [DownloadID] { jobs.keys.sorted() }

    /// Returns once every change this manager has made is in its journal (they are written
    /// in batches): what a reader of the journal, such as the service's API, needs before it
    /// reads.
    package func flushJournal() async {
        await store?.flush()
    }

    /// Returns once nothing is queued, running or waiting for the network, here or in the
    /// journal for this manager. Paused downloads do not count.
    ///
    /// It also returns when the calling task is cancelled (a service stopping while it
    /// waits), with downloads still running: check `Task.isCancelled` to tell.
    public func waitUntilIdle() async {
        await admissionFinished()
        guard !isIdle, !Task.isCancelled else { return }
        let key = nextIdleWaiter
        nextIdleWaiter += 1
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                // Cancelled before this ran: the handler below found nothing to wake.
                if Task.isCancelled { return continuation.resume() }
                idleWaiters[key] = continuation
            }
        } onCancel: {
            Task { await self.wakeIdleWaiter(key) }
        }
    }

    private func wakeIdleWaiter(_ key: Int) {
        idleWaiters.removeValue(forKey: key)?.resume()
    }

    /// Stops everything: running downloads are interrupted with their partial files kept
    /// (the journal records them as paused), waiting callers get
    /// ``DownloadError/CancellationReason/shutdown``, the HTTP client is closed, and the
    /// event loops and I/O threads the manager made (none it was given) are shut down.
    /// Call it once, when done with the manager; a later or concurrent call waits for the
    /// first to finish. A ``run()`` under way returns once it is done.
    ///
    /// It finishes even if the calling task is cancelled, so every partial is checkpointed.
    ///
    /// A manager released without it closes its HTTP client, its own event loops and I/O
    /// threads and releases its journal entries without waiting;
    /// ``withDownloadManager(configuration:journal:connectivityMonitor:eventLoopGroup:threadPool:logger:isolation:_:)``
    /// calls it for you.
    public func shutdown() async {
        if let stopping {
            await stopping.value
            return
        }
        isShutDown = true
        schedule(.shutDown)
        var transfers: [Task<Void, Never>] = []
        for job in Array(jobs.values) {
            if job.isRunning, let task = job.task { transfers.append(task) }
            stop(job, intent: .cancel(.shutdown))
        }
        // Parts held back by a speed limit go, so that no transfer waits out its budget.
        rateLimiter.releaseAll()
        // The rest in a task of its own, which a cancelled caller (a service group cancelling
        // ``run()``) does not cancel: the checkpoints and the journal's last writes happen.
        let stopping = Task { await self.finishShutdown(after: transfers) }
        self.stopping = stopping
        await stopping.value
    }

    /// The waiting half of ``shutdown()``: once the interrupted `transfers` have ended,
    /// stops the background work, the probes, the store, the HTTP clients and the
    /// manager's own event loops and I/O threads, in that order.
    private func finishShutdown(after transfers: [Task<Void, Never>]) async {
        for task in transfers { await task.value }
        // An admission under way brings nothing in any more (it checks for the shutdown);
        // it is not waited for, since its store may be stopping under it (a worker's
        // PostgreSQL client stops with the service group): the loop that carries it out is
        // cancelled with the rest of the background work, and its waiters let go.
        admissionRequests.finish()
        for task in background { task.cancel() }
        for stop in runStops { stop.finish() }
        runStops = []
        admissionLoopStopped()
        for abort in uploadAborts.values { await abort.value }
        await reachability.shutdown()
        if let store {
            store.release()
            await store.close()
        }
        await clients.shutdown()
        await resources.shutdown()
        managerEvents.finish()
        let waiters = idleWaiters
        idleWaiters = [:]
        for waiter in waiters.values { waiter.resume() }
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

    func job(for core: JobCore) -> Job? {
        guard let job = jobs[core.id], job.core === core else { return nil }
        return job
    }

    var isIdle: Bool { scheduler.isIdle(holding: jobs.values.lazy.map(\.lifecycle.phase)) }

    func checkIdle() {
        guard !idleWaiters.isEmpty, isIdle else { return }
        let waiters = idleWaiters
        idleWaiters = [:]
        for waiter in waiters.values { waiter.resume() }
    }

    /// A manager released without ``shutdown()`` (nothing can be running then: a transfer
    /// keeps its manager alive) closes its HTTP client without waiting, which keeps a debug
    /// build from trapping in the client's deinit, then its own event loops and I/O threads,
    /// and gives its journal entries up.
    deinit {
        guard !isShutDown else { return }
        for task in background { task.cancel() }
        let reachability = self.reachability
        Task { await reachability.shutdown() }
        store?.release()
        managerEvents.finish()
        // The clients' connections live on the event loops: those go once the clients are closed.
        let resources = self.resources
        clients.shutdownWithoutWaiting { resources.shutdownWithoutWaiting() }
    }

    /// Connections the HTTP client may keep open to one host: the per-host cap when one was
    /// set; else enough for the default cap's downloads and for one download's connections.
    static func poolLimit(_ configuration: Configuration) -> Int {
        if let limit = configuration.connectionPoolLimit { return limit }
        if let cap = configuration.perHostCap { return cap }
        return max(configuration.maxConnectionsPerHost, configuration.segmentedConnections)
    }

    static func nanoseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
    }
}
