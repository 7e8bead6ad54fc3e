import NIOConcurrencyHelpers

/// A one-shot result that many callers can await, each able to withdraw on its own.
final class ResultBox<Success: Sendable>: Sendable {
    typealias Outcome = Result<Success, DownloadError>

    private struct State {
        var outcome: Outcome?
        var waiters: [UInt64: CheckedContinuation<Outcome?, Never>] = [:]
        var withdrawn: Set<UInt64> = []
        var nextWaiter: UInt64 = 0
        var observers: [@Sendable (Outcome) -> Void] = []
    }

    private let state = NIOLockedValueBox(State())

    init() {}

    /// The result once known, if it is.
    var outcome: Outcome? { state.withLockedValue { $0.outcome } }

    /// Waits for the result. Returns `nil` when the calling task is cancelled first,
    /// after calling `onWithdraw`.
    func wait(onWithdraw: @escaping @Sendable () -> Void) async -> Outcome? {
        let waiter = state.withLockedValue { state -> UInt64 in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Outcome?, Never>) in
                let immediate: Outcome?? = state.withLockedValue { state in
                    if let outcome = state.outcome { return .some(outcome) }
                    if state.withdrawn.contains(waiter) { return .some(nil) }
                    state.waiters[waiter] = continuation
                    return .none
                }
                if let immediate { continuation.resume(returning: immediate) }
            }
        } onCancel: {
            let (continuation, withdrew) = state.withLockedValue {
                state -> (CheckedContinuation<Outcome?, Never>?, Bool) in
                guard state.outcome == nil else { return (nil, false) }
                state.withdrawn.insert(waiter)
                return (state.waiters.removeValue(forKey: waiter), true)
            }
            guard withdrew else { return }
            continuation?.resume(returning: nil)
            onWithdraw()
        }
    }

    /// Calls `body` with the result once it is known: at once if it already is, otherwise
    /// on the thread that completes the box. `body` must not block.
    func whenComplete(_ body: @escaping @Sendable (Outcome) -> Void) {
        let known = state.withLockedValue { state -> Outcome? in
            if let outcome = state.outcome { return outcome }
            state.observers.append(body)
            return nil
        }
        if let known { body(known) }
    }

    /// Sets the result and wakes every waiter. Later calls are ignored.
    func complete(_ outcome: Outcome) {
        let (waiters, observers) = state.withLockedValue {
            state -> ([CheckedContinuation<Outcome?, Never>], [@Sendable (Outcome) -> Void]) in
            guard state.outcome == nil else { return ([], []) }
            state.outcome = outcome
            defer {
                state.waiters = [:]
                state.observers = []
            }
            return (Array(state.waiters.values), state.observers)
        }
        for observer in observers { observer(outcome) }
        for waiter in waiters { waiter.resume(returning: outcome) }
    }
}
