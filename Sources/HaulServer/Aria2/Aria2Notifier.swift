import Foundation
package import Haul
import NIOConcurrencyHelpers

/// Hands aria2's notifications to every WebSocket client, made from the manager's events
/// by ``Tracker``.
package final class Aria2Notifier: Sendable {
    private struct State {
        var clients: [UInt64: AsyncStream<Aria2Notification>.Continuation] = [:]
        var next: UInt64 = 0
        var finished = false
    }

    /// Which manager events aria2 would notify, as aria2 does: a download that is active
    /// (its transfer started) is notified when it pauses or stops; one that only waits,
    /// queued or paused, is not (aria2 pauses and removes a waiting download silently).
    /// Starts, completions and errors are always notified.
    package struct Tracker: Sendable {
        private var active: Set<DownloadID> = []

        package init() {}

        /// The notification `event` of download `id` makes, if any.
        package mutating func notification(for event: DownloadEvent, of id: DownloadID) -> Aria2Notification.Kind? {
            switch event {
            case .started:
                active.insert(id)
                return .start
            case .paused:
                return active.remove(id) != nil ? .pause : nil
            case .completed:
                active.remove(id)
                return .complete
            case .failed:
                active.remove(id)
                return .error
            case .cancelled(let reason):
                // A shutdown or a withdrawn waiter leaves the download paused in the
                // journal; aria2 says nothing when it stops either.
                let wasActive = active.remove(id) != nil
                return wasActive && reason != .shutdown && reason != .noLongerWanted ? .stop : nil
            default:
                return nil
            }
        }
    }

    private let state = NIOLockedValueBox(State())
    private let follower = NIOLockedValueBox<Task<Void, Never>?>(nil)

    package init() {}

    /// Follows `manager`'s events until ``finish()``. They are taken in batches (one
    /// wake-up for a burst), and turned into notifications only while a client listens:
    /// the tracker follows every start and end regardless.
    package func start(following manager: DownloadManager) {
        let events = manager.eventBatches(includingProgress: false)
        let task = Task { [weak self] in
            var tracker = Tracker()
            while let batch = await events.next() {
                guard let self else { return }
                var notifications: [Aria2Notification] = []
                let listening = self.isListening
                for event in batch {
                    guard let kind = tracker.notification(for: event.event, of: event.id), listening else { continue }
                    notifications.append(Aria2Notification(kind, Aria2GID(event.id)))
                }
                if !notifications.isEmpty { self.post(notifications) }
            }
        }
        follower.withLockedValue { $0 = task }
    }

    /// Whether any client listens.
    private var isListening: Bool { state.withLockedValue { !$0.clients.isEmpty } }

    /// A stream of every notification from now on, and its client number for ``unsubscribe(_:)``.
    package func subscribe() -> (stream: AsyncStream<Aria2Notification>, client: UInt64) {
        let (stream, continuation) = AsyncStream.makeStream(
            of: Aria2Notification.self, bufferingPolicy: .bufferingNewest(10_000))
        let client = state.withLockedValue { state -> UInt64? in
            guard !state.finished else { return nil }
            state.next += 1
            state.clients[state.next] = continuation
            return state.next
        }
        if client == nil { continuation.finish() }
        return (stream, client ?? 0)
    }

    package func unsubscribe(_ client: UInt64) {
        state.withLockedValue { $0.clients.removeValue(forKey: client) }?.finish()
    }

    /// Hands `notifications`, in order, to every client.
    private func post(_ notifications: [Aria2Notification]) {
        let clients = state.withLockedValue { Array($0.clients.values) }
        for client in clients {
            for notification in notifications { client.yield(notification) }
        }
    }

    /// Ends every client's stream and stops following the manager.
    package func finish() {
        follower.withLockedValue { $0 }?.cancel()
        let clients = state.withLockedValue { state in
            state.finished = true
            defer { state.clients = [:] }
            return Array(state.clients.values)
        }
        for client in clients { client.finish() }
    }
}
