import Foundation
package import Haul
package import NIOCore

/// The service's live events: turns the manager's events into the API's, numbers them,
/// keeps the recent ones for clients that reconnect, and hands each to every connected
/// event-stream client.
///
/// - A state change (`queued`, `started`, `paused`, `waiting`, a retry, the end) becomes a
///   `download` event carrying the download's full ``DownloadView``.
/// - Progress is coalesced per download by ``ProgressThrottle``: at most one `progress`
///   event per ``progressInterval``, and the latest one always follows a burst.
/// - `stats` is sent once a second; `removed` when a download is deleted.
/// - `cluster`, with `haul serve --queue`: the shared queue's numbers when they change, at
///   most once a second (see ``ClusterMonitor``).
///
/// Each event is encoded once, as the bytes of a Server-Sent Events frame, whatever the
/// number of clients, and each client's frames wait in its ``EventMailbox``, which its
/// response empties one write at a time. A client more than ``bufferLimit`` bytes behind
/// is cut off: its browser reconnects with `Last-Event-ID` and is replayed what it
/// missed, or told to resync.
package actor EventHub {
    /// One event.
    package struct Frame: Sendable {
        package let id: UInt64
        package let kind: String
        /// The download's state, for a `download` event (clients filter by it).
        package let state: JobState?
        /// Its JSON, or the download it is about when no client wanted it as it happened:
        /// then it is encoded only if a reconnecting client is replayed it.
        let payload: Payload

        enum Payload: Sendable {
            case encoded(ByteBuffer)
            case download(DownloadView)
        }

        /// The whole frame: `id:`, `event:` and `data:` lines and the blank line.
        package var bytes: ByteBuffer {
            switch payload {
            case .encoded(let bytes): bytes
            case .download(let view): EventHub.frame(id: id, kind: kind, json: EventJSON.download(view)).bytes
            }
        }
    }

    /// The most progress events per download: 2 a second.
    package static let progressInterval: Duration = .milliseconds(500)
    /// Bytes a client may fall behind by before it is cut off: about 25,000 state changes.
    package static let bufferLimit = 16 << 20

    private let manager: DownloadManager
    private let journal: Journal
    private var log: EventLog<Frame>
    private var throttle = ProgressThrottle<DownloadID, DownloadProgress>(interval: EventHub.progressInterval)
    private var clients: [UInt64: (mailbox: EventMailbox, filter: EventFilter)] = [:]
    private var nextClient: UInt64 = 0
    /// The views of downloads the manager runs or the API added, by ID, so that a state
    /// change does not read the journal each time; at most ``viewCacheLimit`` of them.
    private var views: [DownloadID: DownloadView] = [:]
    /// The connections of running downloads, as the manager said at the last stats tick:
    /// progress events carry them without asking the manager each time.
    private var connections: [DownloadID: Int] = [:]
    /// The most views kept (about 1 KiB each).
    static let viewCacheLimit = 20_000
    private var tasks: [Task<Void, Never>] = []
    private var isFinished = false
    /// The manager's events not handled yet, from `handled` on.
    private var pending: [DownloadManager.Event] = []
    private var handled = 0
    private var isDraining = false
    /// Changes the API is making (see ``hold()``).
    private var holds = 0

    /// - Parameter replayCapacity: Events kept for reconnecting clients.
    package init(manager: DownloadManager, journal: Journal, replayCapacity: Int = 10_000) {
        self.manager = manager
        self.journal = journal
        // Numbers above any an earlier run can have issued: microseconds since 1970.
        log = EventLog(capacity: replayCapacity, firstID: UInt64(Date().timeIntervalSince1970 * 1_000_000))
    }

    /// Starts following the manager, the progress sweep (4 a second) and the stats tick
    /// (every fourth sweep).
    package func start() {
        let events = manager.eventBatches(includingProgress: true)
        tasks.append(Task { await self.follow(events) })
        tasks.append(
            Task { [weak self] in
                var sweeps = 0
                while !Task.isCancelled {
                    try? await Task.sleep(for: EventHub.progressInterval / 2)
                    guard let self, !Task.isCancelled else { return }
                    await self.sweep()
                    sweeps += 1
                    if sweeps % 4 == 0 { await self.tick() }
                }
            })
    }

    /// Ends every client's stream and stops following the manager.
    package func finish() {
        isFinished = true
        for task in tasks { task.cancel() }
        tasks = []
        pending = []
        handled = 0
        for client in clients.values { client.mailbox.finish() }
        clients = [:]
    }

    // MARK: - Clients

    /// A new client: what it missed since `lastEventID` (or a `resync` frame when that is
    /// too old or unknown), then the live frames; of both, those `filter` admits.
    package func subscribe(after lastEventID: UInt64?, filter: EventFilter = .all)
        -> (replay: [Frame], live: EventMailbox, client: UInt64)
    {
        let mailbox = EventMailbox(byteLimit: Self.bufferLimit)
        nextClient += 1
        if isFinished {
            mailbox.finish()
        } else {
            clients[nextClient] = (mailbox, filter)
        }
        var replay: [Frame] = []
        if let lastEventID {
            switch log.replay(after: lastEventID) {
            case .events(let entries):
                replay = entries.map(\.event).filter { filter.admits(kind: $0.kind, state: $0.state) }
            case .resync(let latest): replay = [Self.frame(id: latest, kind: "resync", json: "{}")]
            }
        }
        return (replay, mailbox, nextClient)
    }

    package func unsubscribe(_ client: UInt64) {
        clients.removeValue(forKey: client)?.mailbox.finish()
    }

    /// How many clients are connected.
    package var clientCount: Int { clients.count }

    /// The number of the last event sent.
    package var latestEventID: UInt64 { log.latestID }

    // MARK: - Publishing

    /// Sends `download` events for downloads the API changed or added (their journal rows,
    /// with what the manager knows now).
    package func publish(_ downloads: [DownloadView]) {
        // Grown once for a large batch, not doubling (and copying every view) on the way.
        views.reserveCapacity(min(Self.viewCacheLimit, views.count + downloads.count))
        for view in downloads {
            let id = DownloadID(view.id)
            if views[id] != nil || (views.count < Self.viewCacheLimit && view.state.isUnfinished) { views[id] = view }
            throttle.stateChanged(id)
            send("download", view)
        }
    }

    /// Sends `removed` for downloads the API deleted.
    package func publishRemoved(_ ids: [DownloadID]) {
        for id in ids {
            views[id] = nil
            throttle.stateChanged(id)
            send("removed", ["id": id.rawValue])
        }
    }

    /// Sends a `sync` event.
    package func publishSync(_ event: some Encodable & Sendable) {
        send("sync", event)
    }

    /// Sends a `cluster` event: the shared queue changed (see ``ClusterMonitor``).
    package func publishCluster(_ summary: ClusterSummaryView) {
        send("cluster", summary)
    }

    // MARK: - The manager's events

    /// Takes the manager's events in batches, in order, and handles them unless the API is
    /// making a change (see ``hold()``).
    private func follow(_ events: EventBatches<DownloadManager.Event>) async {
        while let batch = await events.next() {
            pending.append(contentsOf: batch)
            await drain()
        }
    }

    /// Handles the pending events in order, until none is left or the API holds them. One
    /// drain runs at a time: one that starts while another waits (for the journal) leaves
    /// the events to it.
    private func drain() async {
        guard !isDraining else { return }
        isDraining = true
        while holds == 0, handled < pending.count {
            let event = pending[handled]
            handled += 1
            await handle(event)
        }
        if handled == pending.count {
            pending.removeAll(keepingCapacity: true)
            handled = 0
        }
        isDraining = false
    }

    /// Holds the manager's events while the API makes a change, so that the change is
    /// announced before anything that followed it: a download added is seen queued
    /// before it is seen running, and a retried one queued before it fails again. Every
    /// hold is ended by ``release(publishing:)``.
    package func hold() {
        holds += 1
    }

    /// Ends a ``hold()``: sends `download` events for `views` (what the change made of
    /// them), then handles the events held meanwhile.
    package func release(publishing views: [DownloadView]) {
        holds -= 1
        publish(views)
        if holds == 0, handled < pending.count { Task { await self.drain() } }
    }

    private func handle(_ event: DownloadManager.Event) async {
        let id = event.id
        switch event.event {
        case .progress(let progress):
            if let progress = throttle.offer(progress, for: id, at: .now) { sendProgress(id, progress) }
        case .queued, .networkRestored:
            await sendState(id, .queued)
        case .started, .attached, .deltaPrepared:
            await sendState(id, .running)
        case .paused:
            await sendState(id, .paused)
        case .networkLost:
            await sendState(id, .waiting)
        case .retrying(_, let reason, _), .sourceDropped(_, let reason):
            await sendState(id, .running, error: reason)
        case .completed(let result):
            await sendState(
                id, .completed, ended: true, bytes: result.byteCount, destination: result.savedAt,
                moved: (result.bytesTransferred, result.isUnchanged))
        case .failed(let error):
            await sendState(id, .failed, ended: true, error: error)
        case .cancelled(let reason):
            // A shutdown pauses (the journal says so); anything else cancels.
            await sendState(id, reason == .shutdown || reason == .noLongerWanted ? .paused : .cancelled, ended: true)
        }
    }

    /// Sends the progress held past its interval.
    private func sweep() {
        for (id, progress) in throttle.due(at: .now) { sendProgress(id, progress) }
    }

    private func sendProgress(_ id: DownloadID, _ progress: DownloadProgress) {
        let connections = self.connections[id] ?? 1
        if var view = views[id] {
            view.bytes = progress.completedBytes
            view.totalBytes = progress.totalBytes ?? view.totalBytes
            view.bytesPerSecond = progress.bytesPerSecond
            view.connections = connections
            views[id] = view
        }
        send(
            "progress",
            ProgressView(
                id: id.rawValue, bytes: progress.completedBytes, totalBytes: progress.totalBytes,
                bytesPerSecond: progress.bytesPerSecond, connections: connections, limit: progress.limit))
    }

    /// Sends the `download` event of a change to `state` (the event's, not whatever the
    /// manager's state is by the time this runs, so that clients see every step in order).
    private func sendState(
        _ id: DownloadID, _ state: JobState, ended: Bool = false, bytes: Int64? = nil, destination: String? = nil,
        moved: (transferred: Int64, unchanged: Bool)? = nil, error: DownloadError? = nil
    ) async {
        throttle.stateChanged(id)
        var view: DownloadView
        if let known = views[id] {
            // The same state again, with nothing new to say (the manager queuing what the
            // API has just announced as queued): not a change.
            if known.state == state, !ended, error == nil, known.error == nil { return }
            view = known
        } else {
            let journal = self.journal
            guard
                let snapshot = try? await ServiceCore.io(
                    on: manager.threadPool, { () throws(DownloadError) in try journal.job(id) })
            else { return }
            view = DownloadView(snapshot)
        }
        view.updatedAt = Date()
        if ended {
            view.bytesPerSecond = 0
            view.connections = 0
            if let bytes {
                view.bytes = bytes
                view.totalBytes = bytes
            }
            if let destination {
                view.destination = destination
                view.name = PathText.lastComponent(destination)
            }
            if state != .paused { view.finishedAt = Date() }
            view.bytesTransferred = moved?.transferred
            view.unchanged = moved?.unchanged ?? false
        }
        view.state = state
        if state != .running {
            view.connections = 0
            view.bytesPerSecond = 0
        }
        if let error {
            view.errorCode = error.code.description
            view.error = error.message
        } else if !ended || state == .completed {
            view.errorCode = nil
            view.error = nil
        }
        // Kept as sent, so that the next change compares with what clients last saw.
        if ended {
            views[id] = nil
            connections[id] = nil
        } else if views[id] != nil || views.count < Self.viewCacheLimit {
            views[id] = view
        }
        send("download", view)
    }

    private func tick() async {
        let running = views.compactMap { $0.value.state == .running ? $0.key : nil }
        let live = await manager.liveStatus(of: running)
        connections = live.mapValues(\.connections)
        guard let stats = try? await Self.stats(manager: manager, journal: journal) else { return }
        send("stats", stats)
    }

    /// The service's numbers now: the manager's speed and bytes, the journal's counts.
    package static func stats(manager: DownloadManager, journal: Journal) async throws -> StatsView {
        let progress = await manager.progress
        let (counts, unchanged) = try await ServiceCore.io(on: manager.threadPool) { () throws(DownloadError) in
            try journal.stateCounts()
        }
        var all: [String: Int] = [:]
        for state in JobState.allCases { all[state.rawValue] = counts[state] ?? 0 }
        return StatsView(
            bytesPerSecond: progress.bytesPerSecond, completedBytes: progress.completedBytes,
            totalBytes: progress.totalBytes, counts: all, unchanged: unchanged,
            transferredBytes: progress.transferredBytes)
    }

    // MARK: - Frames

    private func send(_ kind: String, _ value: some Encodable) {
        guard !isFinished, let data = try? ServiceJSON.encoder.encode(value) else { return }
        send(kind, json: String(decoding: data, as: UTF8.self))
    }

    private func send(_ kind: String, _ view: DownloadView) {
        guard !isFinished else { return }
        guard clients.values.contains(where: { $0.filter.admits(kind: kind, state: view.state) }) else {
            // Nobody wants it now: kept for replays, encoded if one asks for it.
            log.append(Frame(id: log.nextID, kind: kind, state: view.state, payload: .download(view)))
            return
        }
        send(kind, json: EventJSON.download(view), state: view.state)
    }

    private func send(_ kind: String, _ progress: ProgressView) {
        guard !isFinished else { return }
        send(kind, json: EventJSON.progress(progress))
    }

    private func send(_ kind: String, json: String, state: JobState? = nil) {
        guard !isFinished else { return }
        let id = log.nextID
        let frame = Self.frame(id: id, kind: kind, json: json, state: state)
        log.append(frame)
        for (client, subscriber) in clients where subscriber.filter.admits(kind: kind, state: state) {
            guard !subscriber.mailbox.post(frame.bytes) else { continue }
            // Too far behind: cut off; it reconnects and is replayed or resynced.
            clients[client] = nil
        }
    }

    static func frame(id: UInt64, kind: String, json: String, state: JobState? = nil) -> Frame {
        // JSON from JSONEncoder has no line breaks, so one `data:` line carries it.
        var bytes = ByteBuffer()
        bytes.reserveCapacity(json.utf8.count + kind.utf8.count + 40)
        bytes.writeStaticString("id: ")
        bytes.writeString(id.description)
        bytes.writeStaticString("\nevent: ")
        bytes.writeString(kind)
        bytes.writeStaticString("\ndata: ")
        bytes.writeString(json)
        bytes.writeStaticString("\n\n")
        return Frame(id: id, kind: kind, state: state, payload: .encoded(bytes))
    }
}
