import NIOConcurrencyHelpers
import NIOCore

/// Carries out a manager's ``RateSchedule``: transfers ask it before releasing each body
/// part, and get a future that succeeds when the part may go. One timer, on one event
/// loop of the manager's, wakes it when the earliest waiting part can go; nothing polls.
///
/// Safe from any thread: the schedule is behind a lock, and promises are completed
/// outside it.
final class RateLimiter: Sendable {
    private struct State {
        var schedule = RateSchedule()
        var promises: [UInt64: EventLoopPromise<Void>] = [:]
        var nextPart: UInt64 = 0
        var timer: Scheduled<Void>?
        var timerDue: NIODeadline?
        /// Whether any limit is set: when none is, parts do not even take the lock twice.
        var isLimited = false
    }

    private let state = NIOLockedValueBox(State())
    private let timerLoop: any EventLoop

    /// Starts with the limits `overall` and `perHost` (`nil`: none); its timer runs on `timerLoop`.
    init(overall: Int?, perHost: Int?, timerLoop: any EventLoop) {
        self.timerLoop = timerLoop
        let now = ContinuousClock.now
        state.withLockedValue { state in
            state.schedule.setOverall(overall, at: now)
            state.schedule.setPerHost(perHost, at: now)
            state.isLimited = overall != nil || perHost != nil
        }
    }

    deinit {
        // A promise is always kept: parts still waiting when the manager goes are let go.
        let (promises, timer) = state.withLockedValue { state in
            (Array(state.promises.values), state.timer)
        }
        timer?.cancel()
        for promise in promises { promise.succeed() }
    }

    /// Lets every waiting part go and drops the timer: the manager is shutting down.
    func releaseAll() {
        let promises = state.withLockedValue { state in
            defer {
                state.promises = [:]
                state.timer?.cancel()
                state.timer = nil
                state.timerDue = nil
            }
            return Array(state.promises.values)
        }
        for promise in promises { promise.succeed() }
    }

    /// The limits in force across every download and per host.
    var limits: (overall: Int?, perHost: Int?) {
        state.withLockedValue { state in
            (state.schedule.overall.map { Int($0.rate) }, state.schedule.perHostRate)
        }
    }

    /// A body part of `bytes` of `download` from `host` asks to go: `nil` when it may go
    /// now, else a future on `loop` that succeeds when it may.
    func admit(_ bytes: Int, download: DownloadID, host: String, on loop: any EventLoop) -> EventLoopFuture<Void>? {
        let now = ContinuousClock.now
        let future: EventLoopFuture<Void>? = state.withLockedValue { state in
            guard state.isLimited, state.schedule.applies(to: download, host: host) else { return nil }
            state.nextPart += 1
            let part = RateSchedule.Part(id: state.nextPart, download: download, host: host, bytes: bytes)
            if state.schedule.request(part, at: now) { return nil }
            let promise = loop.makePromise(of: Void.self)
            state.promises[part.id] = promise
            return promise.futureResult
        }
        if future != nil { wake() }
        return future
    }

    /// Sets the limits across every download and per host (`nil`: none); waiting parts
    /// are reconsidered at once.
    func setLimits(overall: Int?, perHost: Int?) {
        let now = ContinuousClock.now
        state.withLockedValue { state in
            state.schedule.setOverall(overall, at: now)
            state.schedule.setPerHost(perHost, at: now)
        }
        refreshLimited()
        wake()
    }

    /// Sets one download's limit (`nil`: none); its waiting parts are reconsidered at once.
    func setLimit(_ bytesPerSecond: Int?, for download: DownloadID) {
        let now = ContinuousClock.now
        state.withLockedValue { $0.schedule.setLimit(bytesPerSecond, for: download, at: now) }
        refreshLimited()
        wake()
    }

    /// Whether any limit is set: when none is, ``admit(_:download:host:on:)`` lets
    /// everything go, and a caller need not measure what it would ask for.
    var isLimited: Bool {
        state.withLockedValue { $0.isLimited }
    }

    /// The lowest limit that applies to a download from `host`, if any.
    func effectiveLimit(of download: DownloadID, host: String) -> Int? {
        state.withLockedValue { $0.schedule.effectiveLimit(of: download, host: host) }
    }

    /// How many bytes each request of the download should ask for under the limits now in
    /// effect, shared with the downloads running (``RateSchedule/expectedRate(of:host:)``,
    /// ``RateSchedule/pacedRequestSize(forLimit:)``); `nil`: no need to pace.
    func pacedRequestSize(of download: DownloadID, host: String) -> Int64? {
        let rate = state.withLockedValue { state in
            state.isLimited ? state.schedule.expectedRate(of: download, host: host) : nil
        }
        return rate.flatMap(RateSchedule.pacedRequestSize(forLimit:))
    }

    /// A download's transfer started: it shares the limits, and has its own, `limit`.
    func began(_ download: DownloadID, host: String, limit: Int?) {
        let now = ContinuousClock.now
        state.withLockedValue { state in
            state.schedule.began(download, host: host)
            state.schedule.setLimit(limit, for: download, at: now)
        }
        refreshLimited()
        wake()
    }

    /// A download's transfer stopped; its own limit is kept for when it starts again.
    func ended(_ download: DownloadID) {
        state.withLockedValue { $0.schedule.ended(download) }
    }

    /// The download's own limit.
    func limit(of download: DownloadID) -> Int? {
        state.withLockedValue { $0.schedule.limit(of: download) }
    }

    /// A download ended: its limit is dropped and any part of it still waiting is let go.
    func forget(_ download: DownloadID) {
        let dropped = state.withLockedValue { state in
            state.schedule.forget(download).compactMap { state.promises.removeValue(forKey: $0) }
        }
        for promise in dropped { promise.succeed() }
        refreshLimited()
        wake()
    }

    private func refreshLimited() {
        state.withLockedValue { state in
            // Read in place: a copy of the schedule retains every table in it.
            state.isLimited =
                state.schedule.overall != nil || state.schedule.perHostRate != nil || state.schedule.hasDownloadLimits
        }
    }

    /// Releases what may go now, and sets the timer for what waits.
    private func wake() {
        let now = ContinuousClock.now
        let released: [EventLoopPromise<Void>] = state.withLockedValue { state in
            let (ids, next) = state.schedule.release(at: now)
            let promises = ids.compactMap { state.promises.removeValue(forKey: $0) }
            guard let next else {
                state.timer?.cancel()
                state.timer = nil
                state.timerDue = nil
                return promises
            }
            let due = NIODeadline.now() + .nanoseconds(RateLimiter.nanoseconds(next))
            // A timer due sooner (or almost as soon) serves as it is.
            if let current = state.timerDue, current <= due + .microseconds(200) { return promises }
            state.timer?.cancel()
            state.timerDue = due
            state.timer = timerLoop.scheduleTask(deadline: due) { [weak self] in
                self?.timerFired()
            }
            return promises
        }
        for promise in released { promise.succeed() }
    }

    private func timerFired() {
        state.withLockedValue { state in
            state.timer = nil
            state.timerDue = nil
        }
        wake()
    }

    static func nanoseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
    }
}
