import Foundation
package import HaulPostgres

/// The shared queue a service shows beside its own downloads (`haul serve --queue`): the
/// queue, whose connection pool runs as long as the service, and the monitor that turns
/// its changes into `cluster` events.
package final class ClusterCore: Sendable {
    package let queue: PostgresQueue
    package let monitor: ClusterMonitor

    /// - Parameter interval: How often the monitor looks for changes while a client
    ///   follows the events, and so the most `cluster` events sent (one each).
    package init(queue: PostgresQueue, hub: EventHub, interval: Duration = ClusterMonitor.interval) {
        self.queue = queue
        monitor = ClusterMonitor(queue: queue, hub: hub, interval: interval)
    }

    /// How long a request waits for the database: while it is down, postgres-nio's pool
    /// would hold a request for about a minute before failing it.
    package static let requestTimeout: Duration = .seconds(10)

    /// Runs `body`, or cancels it and throws once `limit` has passed, without waiting for
    /// it to end: a query PostgresNIO lost while the database closed its connections never
    /// ends, and a monitor or a request waiting for it would wait forever.
    static func within<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        do {
            return try await answering(within: limit, body)
        } catch is NoAnswer {
            throw QueueError("the database did not answer within \(limit.components.seconds) seconds")
        }
    }

    /// The queue's numbers now; throws when its database cannot be read.
    static func summary(of queue: PostgresQueue) async throws -> ClusterSummaryView {
        let summary = try await queue.summary()
        let workers = try await queue.workerStatuses()
        return ClusterSummaryView(queue: queue.address.description, summary: summary, workers: workers)
    }
}

/// Publishes a `cluster` event (a ``ClusterSummaryView``) on the service's event stream
/// when the shared queue changes: a job added, changed, progressing or gone, a worker
/// come, gone or gone stale, the database lost or back.
///
/// It looks once per ``interval`` (a second), with one cheap aggregate read of the jobs
/// and one of the workers, and only while a client follows the events: with nobody
/// watching the database is not read at all. At most one event per look, so bursts (a
/// thousand jobs completing) are coalesced into one. Workers announce new work with
/// `NOTIFY`, but not progress nor most state changes, so reading is what notices those;
/// `LISTEN` would only bring new jobs forward by under a second, for a connection held
/// for good. Reads go through the queue's connection pool, which connects again once the
/// database is back after a restart; meanwhile the event carries ``ClusterSummaryView/error``.
///
/// Events say what changed; a client reads the state it starts from with `GET /cluster`
/// (a client joining others is not sent the unchanged numbers again).
package actor ClusterMonitor {
    /// How often it looks by default.
    package static let interval: Duration = .seconds(1)

    let queue: PostgresQueue
    let hub: EventHub
    let interval: Duration
    private var task: Task<Void, Never>?
    /// What the last event said, and which workers were alive then.
    private var published: Fingerprint?

    private struct Fingerprint: Equatable {
        var summary: ClusterSummaryView
        var aliveWorkers: Set<Int64>
        var staleWorkers: Set<Int64>
    }

    init(queue: PostgresQueue, hub: EventHub, interval: Duration) {
        self.queue = queue
        self.hub = hub
        self.interval = interval
    }

    /// Starts looking, until ``finish()``.
    package func start() {
        guard task == nil else { return }
        let interval = self.interval
        task = Task { [weak self] in
            while !Task.isCancelled {
                guard let self else { return }
                await self.look()
                try? await Task.sleep(for: interval)
            }
        }
    }

    package func finish() {
        task?.cancel()
        task = nil
    }

    /// One look: an event when anything differs from the last one sent.
    private func look() async {
        guard await hub.clientCount > 0 else {
            // A client that comes is sent the state as it is then.
            published = nil
            return
        }
        let fingerprint: Fingerprint
        do {
            let queue = self.queue
            let (summary, workers) = try await ClusterCore.within(ClusterCore.requestTimeout) {
                (try await queue.summary(), try await queue.workerStatuses())
            }
            let alive = workers.filter { WorkerLiveness.isAlive(heartbeatAge: $0.heartbeatAge) }
            fingerprint = Fingerprint(
                summary: ClusterSummaryView(queue: queue.address.description, summary: summary, workers: workers),
                aliveWorkers: Set(alive.map(\.worker.id)),
                staleWorkers: Set(workers.map(\.worker.id)).subtracting(alive.map(\.worker.id)))
        } catch {
            let view = ClusterSummaryView(
                queue: queue.address.description,
                error: "the shared queue cannot be read: \(PostgresQueue.reason(error))")
            fingerprint = Fingerprint(summary: view, aliveWorkers: [], staleWorkers: [])
        }
        guard fingerprint != published, !Task.isCancelled else { return }
        published = fingerprint
        await hub.publishCluster(fingerprint.summary)
    }
}
