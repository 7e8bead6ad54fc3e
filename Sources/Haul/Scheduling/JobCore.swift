import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// The part of a download shared by the manager, its handles and its transfer:
/// events, result and progress. All of it is safe to touch from any thread.
final class JobCore: Sendable {
    let id: DownloadID
    /// The request's URL, which the manager's events carry.
    let url: URL
    let events = EventBroadcaster<DownloadEvent>(remembering: JobCore.currentState)
    let result = ResultBox<DownloadResult>()
    let meter = ProgressMeter()
    /// Connections the running transfer uses (a segmented one sets it; 0 means one).
    private let connectionCount = NIOLockedValueBox(0)
    private let movedTo = NIOLockedValueBox<URL?>(nil)
    private let answer = NIOLockedValueBox<InFlightRule.Answer?>(nil)

    /// What the download's host answered in this run, for the scheduler's
    /// ``InFlightRule``: the protocol of the first response, or ``InFlightRule/Answer/busy``
    /// once any response was 429 or 503. Reset when the transfer ends.
    func takeHostAnswer() -> InFlightRule.Answer? {
        answer.withLockedValue { answer in
            defer { answer = nil }
            return answer
        }
    }

    /// Notes what a response head says of the host (see ``takeHostAnswer()``).
    func heard(_ head: HTTPResponseHead) {
        let status = head.status.code
        answer.withLockedValue { answer in
            if status == 429 || status == 503 {
                answer = .busy
            } else if answer == nil {
                answer = head.version.major >= 2 ? .http2 : .http1
            }
        }
    }

    /// Where the download's URL was refreshed to while it ran (see
    /// ``DownloadRequest/location``): the manager's next transfer of it starts there.
    var location: URL? {
        get { movedTo.withLockedValue { $0 } }
        set { movedTo.withLockedValue { $0 = newValue } }
    }
    private let managerEvents: EventBroadcaster<DownloadManager.Event>
    /// The manager's event loops, which time the trailing progress events.
    private let eventLoopGroup: any EventLoopGroup
    private let rateLimiter: RateLimiter?
    /// The host (`host:port`) its per-host limit counts against.
    private let host: String

    init(
        id: DownloadID, url: URL, managerEvents: EventBroadcaster<DownloadManager.Event>, eventLoopGroup: any EventLoopGroup,
        rateLimiter: RateLimiter? = nil, host: String = ""
    ) {
        self.id = id
        self.url = url
        self.managerEvents = managerEvents
        self.eventLoopGroup = eventLoopGroup
        self.rateLimiter = rateLimiter
        self.host = host
    }

    /// A body part of `bytes` asks the speed limits to go: `nil` when it may go now, else a
    /// future on `loop` that succeeds when it may (the transfer returns it to
    /// AsyncHTTPClient, which reads no more until then).
    func throttle(_ bytes: Int, on loop: any EventLoop) -> EventLoopFuture<Void>? {
        rateLimiter?.admit(bytes, download: id, host: host, on: loop)
    }

    /// Whether any speed limit is set, so that what the download reads must be counted
    /// against it.
    var isThrottled: Bool {
        rateLimiter?.isLimited ?? false
    }

    /// How many bytes each request should ask for, so that a download limited to a low
    /// rate reads its socket in small, even steps; `nil` when it need not (no limit, or a
    /// high one).
    var pacedRequestSize: Int64? {
        rateLimiter?.pacedRequestSize(of: id, host: host)
    }

    /// What a new stream of the download's events starts with: the latest progress and the
    /// last change of state (`queued`, `started`, `paused`, `networkLost`, …), in the order
    /// they happened.
    static let currentState: EventBroadcaster<DownloadEvent>.Remember = { remembered, event in
        let isProgress = event.isProgress
        remembered.removeAll { $0.isProgress == isProgress }
        remembered.append(event)
    }

    /// Connections the running transfer uses; 0 when it has not said (a single one).
    var connections: Int {
        get { connectionCount.withLockedValue { $0 } }
        set { connectionCount.withLockedValue { $0 = newValue } }
    }

    /// Sends an event to the download's streams and the manager's stream. A failure names
    /// the URL it is about only when it is not the download's (``DownloadError/naming(download:)``).
    func emit(_ event: DownloadEvent) {
        let event = event.naming(download: url)
        events.yield(event, terminal: event.isTerminal)
        managerEvents.yield(DownloadManager.Event(id: id, url: url, event: event))
    }

    /// Counts bytes that reached the sink at `now`, emitting a progress event when one is due
    /// (now, or, for bytes that came too soon after the last one, a trailing event later).
    func received(_ count: Int, at now: ContinuousClock.Instant) {
        switch meter.add(count, at: now) {
        case .none:
            break
        case .now(let progress):
            emit(.progress(limited(progress)))
        case .later(let delay):
            let later = TimeAmount.nanoseconds(DownloadManager.nanoseconds(delay))
            eventLoopGroup.next().scheduleTask(in: later) { [weak self] in
                guard let self, let progress = self.meter.flush(at: .now) else { return }
                self.emit(.progress(self.limited(progress)))
            }
        }
    }

    /// `progress` with the speed limit in effect.
    private func limited(_ progress: DownloadProgress) -> DownloadProgress {
        guard let rateLimiter else { return progress }
        var progress = progress
        progress.limit = rateLimiter.effectiveLimit(of: id, host: host)
        return progress
    }

    /// The speed limit in effect for the download now.
    var currentLimit: Int? {
        rateLimiter?.effectiveLimit(of: id, host: host)
    }

    /// Ends the download: a terminal event, then the result for every waiter. `limit` is the
    /// speed limit it ran under, for its last progress (the manager forgets a download's
    /// own limit as it ends).
    func finish(_ outcome: Result<DownloadResult, DownloadError>, limit: Int? = nil) {
        // The waiters get the failure in the events' words.
        let outcome = outcome.mapError { $0.naming(download: url) }
        meter.stop()
        // The last progress goes out before every end that had any, so that a listener
        // knows what the download held and moved in this run, whether it completed, failed
        // or was paused.
        var progress = meter.snapshot()
        progress.limit = limit
        if outcome.isSuccess || progress.completedBytes > 0 || progress.transferredBytes > 0 {
            emit(.progress(progress))
        }
        switch outcome {
        case .success(let result):
            emit(.completed(result))
        case .failure(let error):
            if error.code == .cancelled, let reason = error.cancellationReason {
                emit(.cancelled(reason))
            } else {
                emit(.failed(error))
            }
        }
        result.complete(outcome)
    }
}

extension DownloadEvent {
    fileprivate var isProgress: Bool {
        if case .progress = self { return true }
        return false
    }
}

extension DownloadEvent {
    /// The event, its failure naming the URL it is about when that is not `download`.
    fileprivate func naming(download: URL) -> DownloadEvent {
        switch self {
        case .failed(let error): .failed(error.naming(download: download))
        case .retrying(let attempt, let reason, let delay):
            .retrying(attempt: attempt, reason: reason.naming(download: download), delay: delay)
        default: self
        }
    }
}

extension Result {
    fileprivate var isSuccess: Bool {
        if case .success = self { true } else { false }
    }
}
