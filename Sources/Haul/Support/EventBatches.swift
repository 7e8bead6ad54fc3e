import NIOConcurrencyHelpers

/// A subscription to an ``EventBroadcaster`` whose consumer takes the events in batches:
/// every event that arrived since it last asked, in order.
///
/// The service's event hub takes the manager's events this way: it keeps them in order in
/// its own queue, so that it can hold them while the API makes a change and announce the
/// change first (see `EventHub.hold()`), and it takes a whole burst in one call, without
/// a suspension per event.
package final class EventBatches<Element: Sendable>: Sendable {
    private struct State {
        var pending: [Element] = []
        var waiter: CheckedContinuation<[Element]?, Never>?
        var isFinished = false
        var onCancel: (@Sendable () -> Void)?
    }

    private let state = NIOLockedValueBox(State())

    init() {}

    /// Runs `body` when the consumer is cancelled (the broadcaster forgets it).
    func onCancel(_ body: @escaping @Sendable () -> Void) {
        state.withLockedValue { $0.onCancel = body }
    }

    /// Adds an event; wakes the consumer if it waits.
    func append(_ element: Element) {
        let waiter = state.withLockedValue { state -> CheckedContinuation<[Element]?, Never>? in
            guard !state.isFinished else { return nil }
            guard let waiter = state.waiter else {
                state.pending.append(element)
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume(returning: [element])
    }

    /// Ends the subscription: the consumer gets what is pending, then `nil`.
    func finish() {
        let waiter = state.withLockedValue { state in
            state.isFinished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// Every event that arrived since the last call, waiting for one if there is none;
    /// `nil` once the subscription has ended and nothing is pending. Cancelling the caller
    /// ends the subscription.
    package func next() async -> [Element]? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<[Element]?, Never>) in
                let ready: [Element]?? = state.withLockedValue { state in
                    if !state.pending.isEmpty {
                        defer { state.pending = [] }
                        return .some(state.pending)
                    }
                    if state.isFinished { return .some(nil) }
                    state.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            finish()
            state.withLockedValue { state in
                defer { state.onCancel = nil }
                return state.onCancel
            }?()
        }
    }
}
