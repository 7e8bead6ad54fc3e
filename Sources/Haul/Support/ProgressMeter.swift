import NIOConcurrencyHelpers

/// Counts one download's bytes and rate, and says when a progress event is due.
///
/// Called once per body chunk from the event loop or the I/O pool: one uncontended lock
/// and one clock read, no allocation and no actor hop.
///
/// Events are at least ``eventInterval`` apart. Bytes that arrive too soon after an event
/// are not lost to the stream: the first such chunk asks for a trailing event
/// (``Report/later(_:)``), which the caller delivers with ``flush(at:)`` once the interval
/// is over, so a download that stalls right after a burst still reports every byte it has.
final class ProgressMeter: Sendable {
    /// What counting a chunk calls for.
    enum Report: Equatable, Sendable {
        /// Nothing now: an event is already due later, or the bytes were already reported.
        case none
        /// Emit this progress now.
        case now(DownloadProgress)
        /// Call ``flush(at:)`` after this long: the bytes came too soon after the last event.
        case later(Duration)
    }

    /// Smallest gap between two progress events of one download.
    static let eventInterval: Duration = .milliseconds(100)

    private struct State {
        var completed: Int64 = 0
        /// The most bytes ever held complete: what only new bytes raise.
        var furthest: Int64 = 0
        var total: Int64?
        var transferred: Int64 = 0
        var rate: Double = 0
        var sampleBytes: Int64 = 0
        var sampleStart: ContinuousClock.Instant
        var lastByte: ContinuousClock.Instant
        /// Whether this attempt has reported progress yet; the first chunk does, so a
        /// display shows movement at once, unless it completes the content.
        var reported = false
        /// Whether a trailing event has been asked for and not yet flushed.
        var trailing = false
        /// Set when the download has ended: no more trailing events.
        var stopped = false
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
            state.furthest = max(state.furthest, completed)
            state.total = total
            state.sampleBytes = 0
            state.sampleStart = now
            state.lastByte = now
            state.reported = false
            state.trailing = false
        }
    }

    /// Records the content's total size once the response says it.
    func setTotal(_ total: Int64?) {
        state.withLockedValue { $0.total = total }
    }

    /// Adds `count` bytes that arrived at `now`, and says whether a progress event is due.
    /// The caller reads the clock once per chunk and shares it with the checkpointer.
    func add(_ count: Int, at now: ContinuousClock.Instant) -> Report {
        state.withLockedValue { state in
            state.completed += Int64(count)
            state.furthest = max(state.furthest, state.completed)
            state.transferred += Int64(count)
            state.sampleBytes += Int64(count)
            state.lastByte = now
            guard state.reported else {
                state.reported = true
                // A body whole in its first chunk (a small file) is reported by the
                // download's end, which follows at once: an event now would say the same.
                if let total = state.total, state.completed >= total { return .none }
                return .now(
                    DownloadProgress(completedBytes: state.completed, totalBytes: state.total, bytesPerSecond: state.rate))
            }
            let elapsed = now - state.sampleStart
            guard elapsed >= Self.eventInterval else {
                if state.trailing || state.stopped { return .none }
                state.trailing = true
                return .later(Self.eventInterval - elapsed)
            }
            return .now(Self.report(&state, at: now))
        }
    }

    /// The trailing event asked for by ``Report/later(_:)``: the progress, if bytes came
    /// since the last event and the download has not ended.
    func flush(at now: ContinuousClock.Instant) -> DownloadProgress? {
        state.withLockedValue { state in
            guard state.trailing else { return nil }
            state.trailing = false
            guard !state.stopped, state.sampleBytes > 0 else { return nil }
            return Self.report(&state, at: now)
        }
    }

    /// The download has ended: trailing events are dropped (its last progress goes out
    /// with its end).
    func stop() {
        state.withLockedValue { $0.stopped = true }
    }

    /// Updates the rate from the bytes since the last event and starts a new sample.
    private static func report(_ state: inout State, at now: ContinuousClock.Instant) -> DownloadProgress {
        let elapsed = now - state.sampleStart
        let seconds = elapsed.inSeconds
        if seconds > 0 {
            let instant = Double(state.sampleBytes) / seconds
            state.rate = state.rate == 0 ? instant : state.rate * 0.7 + instant * 0.3
        }
        state.sampleBytes = 0
        state.sampleStart = now
        return DownloadProgress(
            completedBytes: state.completed, totalBytes: state.total, bytesPerSecond: state.rate,
            transferredBytes: state.transferred)
    }

    /// The current progress. The rate reads zero once no byte has come for two seconds.
    func snapshot() -> DownloadProgress {
        let now = ContinuousClock.now
        return state.withLockedValue { state in
            let rate = now - state.lastByte > .seconds(2) ? 0 : state.rate
            return DownloadProgress(
                completedBytes: state.completed, totalBytes: state.total, bytesPerSecond: rate,
                transferredBytes: state.transferred)
        }
    }

    /// Bytes received over the network since the meter was made.
    var bytesTransferred: Int64 { state.withLockedValue { $0.transferred } }

    /// The most bytes of the content the download has ever held complete: it grows only
    /// with bytes never had before, not with bytes fetched again after a restart from
    /// zero. An attempt that raised it made progress (see ``RetrySchedule``).
    var furthestCompleted: Int64 { state.withLockedValue { $0.furthest } }
}
