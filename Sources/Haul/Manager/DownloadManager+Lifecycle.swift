import Dispatch
package import NIOCore
package import NIOPosix
public import ServiceLifecycle

/// The event loops and I/O threads a manager runs on: the ones the app handed in, or the
/// manager's own, which it shuts down with itself.
///
/// Everything below the manager takes them from here (HTTP clients, progress and rate
/// timers, reachability and certificate probes, file work, sync's hashing), so no part of
/// the library reaches a process-wide group or pool.
package final class ManagerResources: Sendable {
    /// The event loops every connection, probe and timer of the manager runs on.
    package let eventLoopGroup: any EventLoopGroup
    /// The threads that run the manager's blocking file work.
    package let threadPool: NIOThreadPool
    /// The group and pool the manager made, `nil` for those it was given.
    private let ownGroup: MultiThreadedEventLoopGroup?
    private let ownPool: NIOThreadPool?
    /// Completed once what the manager made is shut down.
    private let stopped = ResultBox<Void>()

    /// Takes `eventLoopGroup` and `threadPool` as given, and makes what is `nil`: a loop per
    /// core, and the file I/O pool (``DownloadManager/makeFileIOPool()``).
    init(eventLoopGroup: (any EventLoopGroup)?, threadPool: NIOThreadPool?) {
        if let eventLoopGroup {
            self.eventLoopGroup = eventLoopGroup
            self.ownGroup = nil
        } else {
            let group = MultiThreadedEventLoopGroup(numberOfThreads: System.coreCount)
            self.eventLoopGroup = group
            self.ownGroup = group
        }
        if let threadPool {
            self.threadPool = threadPool
            self.ownPool = nil
        } else {
            let pool = DownloadManager.makeFileIOPool()
            self.threadPool = pool
            self.ownPool = pool
        }
    }

    /// Whether the manager made its event loops and its I/O threads.
    package var ownsEventLoopGroup: Bool { ownGroup != nil }
    package var ownsThreadPool: Bool { ownPool != nil }

    /// Shuts down the group and pool the manager made, waiting for their threads to end;
    /// those it was given are left running.
    func shutdown() async {
        if let ownGroup { try? await ownGroup.shutdownGracefully() }
        if let ownPool { try? await ownPool.shutdownGracefully() }
        stopped.complete(.success(()))
    }

    /// Starts shutting down the group and pool the manager made, without waiting: for a
    /// manager released without ``DownloadManager/shutdown()``.
    func shutdownWithoutWaiting() {
        let pending = DispatchGroup()
        if let ownGroup {
            pending.enter()
            ownGroup.shutdownGracefully(queue: .global()) { _ in pending.leave() }
        }
        if let ownPool {
            pending.enter()
            ownPool.shutdownGracefully(queue: .global()) { _ in pending.leave() }
        }
        let stopped = self.stopped
        pending.notify(queue: .global()) { stopped.complete(.success(())) }
    }

    /// Returns once the manager's own group and pool have shut down (when it made none,
    /// once it has shut down): by ``DownloadManager/shutdown()``, or after the manager was
    /// released without one.
    package func waitUntilShutDown() async {
        _ = await stopped.wait(onWithdraw: {})
    }
}

extension DownloadManager: Service {
    /// Runs the manager as a service until the task is cancelled or a graceful shutdown is
    /// triggered, then shuts it down as ``shutdown()`` does (every partial file is
    /// checkpointed and recorded paused) and returns once that is done.
    ///
    /// The manager's background work (watching for hosts and the network coming back,
    /// polling the journal for commands) runs inside it, rather than in tasks of its own.
    /// Calling ``shutdown()`` ends it too. A manager works without it: it then starts that
    /// work itself when first used, and ``shutdown()`` stops it.
    ///
    /// A `ServiceGroup` stops its services in the reverse of their order: put the manager
    /// before the server that feeds it, so the server stops taking requests first.
    ///
    /// ```swift
    /// let manager = DownloadManager(journal: journal, eventLoopGroup: app.eventLoopGroup)
    /// let group = ServiceGroup(
    ///     services: [manager, app], gracefulShutdownSignals: [.sigterm], logger: logger)
    /// try await group.run()
    /// ```
    public nonisolated func run() async {
        let (stopped, stop) = AsyncStream.makeStream(of: Never.self)
        await withTaskCancellationOrGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { group in
                for work in await self.adoptBackgroundWork(stoppingWith: stop) {
                    group.addTask(operation: work)
                }
                for await _ in stopped {}
                group.cancelAll()
            }
        } onCancelOrGracefulShutdown: {
            stop.finish()
        }
        await shutdown()
    }

    /// Whether a ``run()`` holds the background work (rather than tasks of the manager's own).
    package var runHoldsBackgroundWork: Bool { backgroundStarted && background.isEmpty && !runStops.isEmpty }

    /// Starts the background work in tasks of its own, once, unless a ``run()`` holds it.
    func startBackgroundWork() {
        guard !backgroundStarted, !isShutDown else { return }
        backgroundStarted = true
        for work in backgroundWork() { background.append(Task(operation: work)) }
    }

    /// For a ``run()``: keeps `stop` to finish when the manager shuts down (at once if it
    /// has), and returns the background work for the run to hold, unless it has started.
    private func adoptBackgroundWork(stoppingWith stop: AsyncStream<Never>.Continuation) -> [@Sendable () async -> Void]
    {
        guard !isShutDown else {
            stop.finish()
            return []
        }
        runStops.append(stop)
        guard !backgroundStarted else { return [] }
        backgroundStarted = true
        return backgroundWork()
    }

    /// The loops the manager keeps running while it is used: restored hosts wake their waiting
    /// downloads, hosts that chose HTTP/2 get its allowance, the platform's "network is back"
    /// probes every host that was down, and the store's signals say when to look again
    /// (commands other processes leave, work) and which jobs were lost. Each ends when
    /// cancelled, and none keeps the manager alive.
    private func backgroundWork() -> [@Sendable () async -> Void] {
        var work: [@Sendable () async -> Void] = []
        let restored = reachability.restored
        work.append { [weak self] in
            for await key in restored { await self?.hostRestored(key) }
        }
        // A host whose connection chose HTTP/2 may take as many downloads as that allows
        // at once, rather than after its first download ends (a round trip later).
        let http2Hosts = self.http2Hosts
        work.append { [weak self] in
            for await key in http2Hosts { await self?.schedule(.answered(host: key, .choseHTTP2)) }
        }
        if let connectivity {
            let reachability = self.reachability
            work.append {
                for await status in connectivity.statusUpdates() where status == .satisfied {
                    await reachability.probeAllNow()
                }
            }
        }
        if let store {
            work.append(listening(to: store))
            work.append(admitting())
        }
        // The cache's disk tier is swept now and then: within its size limit, and rid of
        // what crashed writers left.
        if let cache, cache.disk != nil {
            let interval = cache.configuration.sweepInterval
            work.append {
                while (try? await Task.sleep(for: interval)) != nil { await cache.sweep() }
            }
        }
        return work
    }
}
