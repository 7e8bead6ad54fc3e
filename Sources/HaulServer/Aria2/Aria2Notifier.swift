import Foundation
package import Haul
import NIOConcurrencyHelpers

/// Hands aria2's notifications to every WebSocket client: the manager's events for the
/// downloads it runs (started, paused, completed, failed, removed), and those the RPC
/// methods post for downloads that changed only in the journal (a queued download paused
/// before it was admitted).
package final class Aria2Notifier: Sendable {
    private struct State {
        var clients: [UInt64: AsyncStream<Aria2Notification>.Continuation] = [:]
        var next: UInt64 = 0
        var finished = false
    }

    private let state = NIOLockedValueBox(State())
    private let follower = NIOLockedValueBox<Task<Void, Never>?>(nil)

    package init() {}

    /// Follows `manager`'s events until ``finish()``.
    package func start(following manager: DownloadManager) {
        let events = manager.events(includingProgress: false)
        let task = Task { [weak self] in
            for await event in events {
                guard let self, let kind = Self.kind(of: event.event) else { continue }
                self.post(Aria2Notification(kind, Aria2GID(event.id)))
            }
        }
        follower.withLockedValue { $0 = task }
    }

    /// The notification a manager event makes, if any.
    package static func kind(of event: DownloadEvent) -> Aria2Notification.Kind? {
        switch event {
        case .started: .start
        case .paused: .pause
        case .completed: .complete
        case .failed: .error
        case .cancelled(let reason):
            // A shutdown or a withdrawn waiter leaves the download paused in the journal; aria2
            // says nothing when it stops either.
            reason == .shutdown || reason == .noLongerWanted ? nil : .stop
        default: nil
        }
    }

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

    package func post(_ notification: Aria2Notification) {
        let clients = state.withLockedValue { Array($0.clients.values) }
        for client in clients { client.yield(notification) }
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
