/// The part of a download shared by the manager, its handles and its transfer:
/// events, result and progress. All of it is safe to touch from any thread.
final class JobCore: Sendable {
    let id: DownloadID
    let events = EventBroadcaster<DownloadEvent>()
    let result = ResultBox<DownloadResult>()
    let meter = ProgressMeter()
    private let managerEvents: EventBroadcaster<DownloadManager.Event>

    init(id: DownloadID, managerEvents: EventBroadcaster<DownloadManager.Event>) {
        self.id = id
        self.managerEvents = managerEvents
    }

    /// Sends an event to the download's streams and the manager's stream.
    func emit(_ event: DownloadEvent) {
        events.yield(event, terminal: event.isTerminal)
        managerEvents.yield(DownloadManager.Event(id: id, event: event))
    }

    /// Counts bytes that reached the sink at `now`, emitting a progress event when one is due.
    func received(_ count: Int, at now: ContinuousClock.Instant) {
        if let progress = meter.add(count, at: now) { emit(.progress(progress)) }
    }

    /// Ends the download: a terminal event, then the result for every waiter.
    func finish(_ outcome: Result<DownloadResult, DownloadError>) {
        switch outcome {
        case .success(let result):
            emit(.progress(meter.snapshot()))
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
