import NIOConcurrencyHelpers

/// A one-shot result that many callers can await, each able to withdraw on its own.
final class ResultBox<Success: Sendable>: Sendable {
    typealias Outcome = Result<Success, DownloadError>

    private struct State {
        var outcome: Outcome?
        var waiters: [UInt64: CheckedContinuation<Outcome?, Never>] = [:]
        var withdrawn: Set<UInt64> = []
        var nextWaiter: UInt64 = 0
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

    /// Sets the result and wakes every waiter. Later calls are ignored.
    func complete(_ outcome: Outcome) {
        let waiters = state.withLockedValue { state -> [CheckedContinuation<Outcome?, Never>] in
            guard state.outcome == nil else { return [] }
            state.outcome = outcome
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume(returning: outcome) }
    }
}
