import NIOConcurrencyHelpers

/// What one consumer takes all at once: producers add to a pending value under a lock, and
/// ``take()`` hands over everything gathered since the consumer last asked, waiting when
/// nothing has. A burst is one hand-over, however many items it holds.
///
/// The mechanism behind the manager's event batches (``EventBatches``) and each event
/// client's frames in the service (`EventMailbox`).
package final class TakeAllInbox<Pending: Sendable>: Sendable {
    private struct State {
        var pending: Pending
        var waiter: CheckedContinuation<Pending?, Never>?
        var isFinished = false
        var onCancel: (@Sendable () -> Void)?
    }

    private let state: NIOLockedValueBox<State>
    private let empty: Pending
    private let isEmpty: @Sendable (Pending) -> Bool

    /// - Parameters:
    ///   - empty: Nothing pending.
    ///   - isEmpty: Whether a pending value holds nothing.
    package init(empty: Pending, isEmpty: @escaping @Sendable (Pending) -> Bool) {
        self.empty = empty
        self.isEmpty = isEmpty
        state = NIOLockedValueBox(State(pending: empty))
    }

    /// Runs `body` when the consumer's ``take()`` is cancelled.
    package func onCancel(_ body: @escaping @Sendable () -> Void) {
        state.withLockedValue { $0.onCancel = body }
    }

    /// Adds to what is pending: `add` changes it (told whether the consumer waits, so that
    /// nothing is pending) and answers whether the inbox goes on. When it answers `false`,
    /// the inbox is finished and what was pending is dropped. A waiting consumer is handed
    /// everything pending.
    ///
    /// - Returns: Whether the addition was taken: `false` when the inbox was finished, or
    ///   `add` finished it.
    @discardableResult
    package func add(_ add: (inout Pending, _ consumerWaits: Bool) -> Bool) -> Bool {
        let (taken, waiter, handed) = state.withLockedValue {
            state -> (Bool, CheckedContinuation<Pending?, Never>?, Pending?) in
            guard !state.isFinished else { return (false, nil, nil) }
            guard add(&state.pending, state.waiter != nil) else {
                state.isFinished = true
                state.pending = empty
                defer { state.waiter = nil }
                return (false, state.waiter, nil)
            }
            guard let waiter = state.waiter, !isEmpty(state.pending) else { return (true, nil, nil) }
            state.waiter = nil
            defer { state.pending = empty }
            return (true, waiter, state.pending)
        }
        waiter?.resume(returning: handed)
        return taken
    }

    /// Ends the inbox: ``take()`` answers what is still pending, then `nil`.
    package func finish() {
        let waiter = state.withLockedValue { state in
            state.isFinished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// Everything pending, waiting for something when nothing is; `nil` once the inbox is
    /// finished and empty. Cancelling the caller finishes the inbox (and runs the
    /// ``onCancel(_:)`` body).
    package func take() async -> Pending? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Pending?, Never>) in
                let ready: Pending?? = state.withLockedValue { state in
                    if !isEmpty(state.pending) {
                        defer { state.pending = empty }
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
