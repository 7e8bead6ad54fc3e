import Foundation
package import Haul
package import HaulPostgres
import NIOConcurrencyHelpers
package import NIOPosix

/// What every part of the running service shares: the manager that owns the journal's
/// jobs, the journal, the live events, the dashboard's sessions, the settings that
/// can change while it runs, and the shared queue it shows, if any (`--queue`).
package final class ServiceCore: Sendable {
    package let manager: DownloadManager
    package let journal: Journal
    package let hub: EventHub
    package let sessions: Sessions
    /// The service's metrics (`GET /metrics`).
    package let metrics = ServiceMetrics()
    /// The shared queue on PostgreSQL whose jobs and workers the service shows and
    /// controls (`haul serve --queue`); `nil` without one.
    package let cluster: ClusterCore?
    private let batchBox: NIOLockedValueBox<DownloadBatch>
    /// Work started by requests that outlives them (syncs), cancelled when the service stops.
    private let background = NIOLockedValueBox<[Task<Void, Never>]>([])

    /// - Parameter queue: The shared queue to show, whose connection pool the caller runs.
    package init(manager: DownloadManager, journal: Journal, batch: DownloadBatch, queue: PostgresQueue? = nil) {
        self.manager = manager
        self.journal = journal
        let hub = EventHub(manager: manager, journal: journal)
        self.hub = hub
        self.cluster = queue.map { ClusterCore(queue: $0, hub: hub) }
        self.sessions = Sessions()
        self.batchBox = NIOLockedValueBox(batch)
    }

    /// The rules downloads are added with (roots and default directory).
    package var batch: DownloadBatch { batchBox.withLockedValue { $0 } }

    /// Makes `directory` the default directory; it must lie inside a root.
    package func setDefaultDirectory(_ directory: String) throws(FieldError) {
        let current = batch
        let batch = try DownloadBatch(
            roots: current.roots, defaultDirectory: directory, objectRoots: current.objectRoots, staging: current.staging)
        batchBox.withLockedValue { $0 = batch }
    }

    /// Keeps `task` to cancel it when the service stops.
    package func track(_ task: Task<Void, Never>) {
        background.withLockedValue { $0.append(task) }
    }

    /// Cancels the tracked work and waits for it.
    package func cancelBackground() async {
        let tasks = background.withLockedValue { tasks in
            defer { tasks = [] }
            return tasks
        }
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
    }

    /// The views of `ids` (those that exist), from the journal after a flush, with what the
    /// manager knows now.
    package func views(_ ids: [DownloadID]) async throws -> [DownloadView] {
        await manager.flushJournal()
        let journal = self.journal
        let snapshots = try await Self.io(on: manager.threadPool) { () throws(DownloadError) in try journal.jobs(ids) }
        let live = await manager.liveStatus(of: snapshots.map(\.id))
        return snapshots.map { DownloadView($0, live: live[$0.id]) }
    }

    /// Makes a change through the manager and announces it: `change` returns the
    /// downloads it changed and, when it put them all in one, the state it left them in.
    /// Their views go to the event clients before anything the manager did with them
    /// meanwhile (see ``EventHub/hold()``), so that a client sees a download queued before
    /// it runs. Returns the downloads changed and their views.
    @discardableResult
    package func announce(
        _ change: @Sendable () async throws -> (ids: [DownloadID], state: JobState?)
    ) async throws -> (changed: [DownloadID], views: [DownloadView]) {
        try await holdingEvents {
            let (changed, state) = try await change()
            var views = try await self.views(changed)
            if let state { views = views.map { $0.announced(as: state) } }
            return (views, (changed, views))
        }
    }

    /// Adds downloads and announces them, queued or `paused`, as ``announce(_:)`` does. New
    /// ones are announced as they were written, without reading them back; those whose ID
    /// was already in the journal, from their merged rows.
    ///
    /// Returns the downloads' IDs, in order, as the journal keeps them: a URL that names
    /// a download to another destination gives `URL -> PATH` (see ``JobIdentity``).
    @discardableResult
    package func add(_ requests: [DownloadRequest], paused: Bool) async throws -> [DownloadID] {
        try await holdingEvents {
            // The IDs the journal may give them: their own, and for a URL, the one it
            // gives a download of that URL to another destination.
            var candidates = requests.map(\.id)
            for request in requests where request.id.rawValue == request.url.absoluteString {
                guard let destination = request.destination.identityDestination else { continue }
                candidates.append(
                    DownloadID(JobIdentity.qualified(url: request.url.absoluteString, destination: destination)))
            }
            let journal = self.journal
            let existing = try await Self.io(on: manager.threadPool) { [candidates] () throws(DownloadError) in
                try journal.existing(candidates)
            }
            let written = try await manager.enqueue(requests, paused: paused)
            let ids = written.map(\.id)
            var byID: [DownloadID: DownloadView] = [:]
            for snapshot in written where !existing.contains(snapshot.id) { byID[snapshot.id] = DownloadView(snapshot) }
            if !existing.isEmpty {
                for view in try await self.views(ids.filter(existing.contains)) { byID[DownloadID(view.id)] = view }
            }
            return (ids.compactMap { byID[$0]?.announced(as: paused ? .paused : .queued) }, ids)
        }
    }

    /// Holds the manager's events while `body` runs, then publishes the views it returns
    /// ahead of them; on an error, releases the hold with nothing to publish.
    private func holdingEvents<T>(
        _ body: () async throws -> (views: [DownloadView], result: T)
    ) async throws -> T {
        await hub.hold()
        let outcome: (views: [DownloadView], result: T)
        do {
            outcome = try await body()
        } catch {
            await hub.release(publishing: [])
            throw error
        }
        await hub.release(publishing: outcome.views)
        return outcome.result
    }

    /// Runs a blocking journal call on `threadPool` (the manager's), never on an event loop
    /// or the concurrency pool.
    package static func io<T: Sendable>(
        on threadPool: NIOThreadPool, _ body: @escaping @Sendable () throws(DownloadError) -> T
    ) async throws -> T {
        try await threadPool.runIfActive { () throws -> T in try body() }
    }
}

/// The dashboard's sessions: random identifiers handed out as an `HttpOnly` cookie in
/// exchange for the token, held in memory only (a restart signs everybody out).
package final class Sessions: Sendable {
    /// The cookie's name.
    package static let cookie = "haul_session"
    /// Sessions kept; the oldest is forgotten beyond this.
    static let limit = 256
    private let state = NIOLockedValueBox<[String]>([])

    package init() {}

    /// A new session's identifier: 256 random bits.
    package func create() -> String {
        var generator = SystemRandomNumberGenerator()
        let id = (0..<4).map { _ in String(format: "%016llx", generator.next() as UInt64) }.joined()
        state.withLockedValue { sessions in
            sessions.append(id)
            if sessions.count > Self.limit { sessions.removeFirst(sessions.count - Self.limit) }
        }
        return id
    }

    package func isValid(_ id: String?) -> Bool {
        guard let id else { return false }
        return state.withLockedValue { sessions in
            sessions.contains { AccessRules.constantTimeEquals($0, id) }
        }
    }

    package func remove(_ id: String?) {
        guard let id else { return }
        state.withLockedValue { $0.removeAll { $0 == id } }
    }
}

extension ServiceAction {
    /// The state a download this action changed is announced in (see
    /// ``ServiceCore/announce(_:)``); `nil` for an action that leaves states alone.
    package var announcedState: JobState? {
        switch self {
        case .pause: .paused
        case .resume, .retry: .queued
        case .cancel: .cancelled
        case .priority, .rateLimit, .sources: nil
        }
    }
}

extension ServiceCore {
    /// The metrics in Prometheus' text format, with the values read now.
    package func renderMetrics() async -> [UInt8] {
        var snapshot = ServiceMetrics.Snapshot()
        snapshot.progress = await manager.progress
        snapshot.receivedBytes = await manager.receivedBytes
        snapshot.streamClients = await hub.clientCount
        return metrics.render(snapshot)
    }
}
