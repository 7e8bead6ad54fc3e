import NIOConcurrencyHelpers

/// Counts one download's bytes and rate, and says when a progress event is due.
///
/// Called once per body chunk from the event loop or the I/O pool: one uncontended lock
/// and one clock read, no allocation and no actor hop.
final class ProgressMeter: Sendable {
    /// Smallest gap between two progress events of one download.
    static let eventInterval: Duration = .milliseconds(100)

    private struct State {
        var completed: Int64 = 0
        var total: Int64?
        var transferred: Int64 = 0
        var rate: Double = 0
        var sampleBytes: Int64 = 0
        var sampleStart: ContinuousClock.Instant
        var lastByte: ContinuousClock.Instant
        /// Whether this attempt has reported progress yet; the first chunk always does,
        /// so a display shows movement at once.
        var reported = false
    }

    private let state: NIOLockedValueBox<State>

    init() {
        let now = ContinuousClock.now
        state = NIOLockedValueBox(State(sampleStart: now, lastByte: now))
    }

    /// Starts a new attempt at `completed` bytes of `total`.
    func reset(completed: Int64, total: Int64?) {
        let now = ContinuousClock.now
        state.withLockedValue { state in
            state.completed = completed
            state.total = total
            state.sampleBytes = 0
            state.sampleStart = now
            state.lastByte = now
            state.reported = false
        }
    }

    /// Records the content's total size once the response says it.
    func setTotal(_ total: Int64?) {
        state.withLockedValue { $0.total = total }
    }

    /// Adds `count` bytes that arrived at `now`; returns a snapshot when a progress event
    /// is due. The caller reads the clock once per chunk and shares it with the checkpointer.
    func add(_ count: Int, at now: ContinuousClock.Instant) -> DownloadProgress? {
        state.withLockedValue { state in
            state.completed += Int64(count)
            state.transferred += Int64(count)
            state.sampleBytes += Int64(count)
            state.lastByte = now
            let elapsed = now - state.sampleStart
            guard state.reported else {
                state.reported = true
                return DownloadProgress(
                    completedBytes: state.completed, totalBytes: state.total, bytesPerSecond: state.rate)
            }
            guard elapsed >= Self.eventInterval else { return nil }
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let instant = Double(state.sampleBytes) / seconds
            state.rate = state.rate == 0 ? instant : state.rate * 0.7 + instant * 0.3
            state.sampleBytes = 0
            state.sampleStart = now
            return DownloadProgress(completedBytes: state.completed, totalBytes: state.total, bytesPerSecond: state.rate)
        }
    }

    /// The current progress. The rate reads zero once no byte has come for two seconds.
    func snapshot() -> DownloadProgress {
        let now = ContinuousClock.now
        return state.withLockedValue { state in
            let rate = now - state.lastByte > .seconds(2) ? 0 : state.rate
            return DownloadProgress(completedBytes: state.completed, totalBytes: state.total, bytesPerSecond: rate)
        }
    }

    /// Bytes received over the network since the meter was made.
    var bytesTransferred: Int64 { state.withLockedValue { $0.transferred } }
}
