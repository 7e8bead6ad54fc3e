import NIOConcurrencyHelpers

/// Ends live recordings early: once ``finish()`` is called, ``HLSDownloader`` stops
/// refreshing the playlists it records, fetches the segments it already planned, and writes
/// each file as if its playlist had ended there (`haul get` calls it on the first Ctrl-C).
///
/// ```swift
/// let stop = HLSRecordingStop()
/// async let summary = HLSDownloader(manager: manager).download(from: live, to: file, until: stop)
/// // … later, when the user presses Stop:
/// stop.finish()
/// print(try await summary.main.duration, "s recorded")
/// ```
///
/// It changes nothing for a playlist that is not live. Cancelling the task instead stops at
/// once and writes no file (the staged segments are kept for the next run).
public final class HLSRecordingStop: Sendable {
    private struct State {
        var isFinished = false
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextWaiter = 0
    }

    private let state = NIOLockedValueBox(State())

    /// Creates a stop that has not been called for.
    public init() {}

    /// Asks every recording given this stop to end after the segments already planned.
    public func finish() {
        let waiters = state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
            guard !state.isFinished else { return [] }
            state.isFinished = true
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Whether ``finish()`` was called.
    public var isFinished: Bool { state.withLockedValue(\.isFinished) }

    /// Returns once ``finish()`` is called, or the task is cancelled.
    func wait() async {
        let id = state.withLockedValue { state -> Int in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLockedValue { state -> Bool in
                    if state.isFinished || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            state.withLockedValue { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }

    /// Sleeps for `duration`; returns `true` at once if the stop is (or gets) finished first.
    func sleep(for duration: Duration) async -> Bool {
        if isFinished { return true }
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                try? await Task.sleep(for: duration)
                return false
            }
            group.addTask {
                await self.wait()
                return true
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first && isFinished
        }
    }
}
