/// How a run of attempts under ``withRetries(_:checkingNetwork:onRetry:_:)`` ended.
enum AttemptOutcome<Success> {
    /// An attempt succeeded.
    case succeeded(Success)
    /// The last attempt failed with an error that is final, or the retries ran out.
    case failed(DownloadError)
    /// The task was cancelled: after an attempt failed with `error`, or while waiting
    /// before a retry (`nil`).
    case interrupted(DownloadError?)
    /// The last attempt could not reach its host, and the network is gone.
    case waitingForNetwork(DownloadError)
}

/// Runs `attempt` until it succeeds, retrying under a ``RetrySchedule`` of `policy`: the
/// one attempt loop of plain, segmented and manifest fetches.
///
/// After a failure, a cancelled task stops at once. Otherwise the schedule decides: wait
/// and try again (`onRetry` hears of each retry first, with its number, the error and
/// the delay), check the network (with `checkNetwork`, which tells apart a host that
/// failed from a network that is gone; without it the network is not watched), wait for
/// the network, or give up. `progress` is a count that grows with what attempts receive
/// (bytes written, say): an attempt that raised it before failing made progress, and is
/// retried at once (see ``RetrySchedule``).
///
/// ```swift
/// switch await withRetries(configuration.retry) { () throws(DownloadError) in try await fetchOnce() } {
/// case .succeeded(let value): …
/// case .failed(let error), .waitingForNetwork(let error): …
/// case .interrupted: …
/// }
/// ```
func withRetries<Success>(
    _ policy: RetryPolicy,
    checkingNetwork checkNetwork: (() async -> RetrySchedule.Network)? = nil,
    progress: () -> Int64 = { 0 },
    onRetry: (_ attempt: Int, _ error: DownloadError, _ delay: Duration) -> Void = { _, _, _ in },
    _ attempt: () async throws(DownloadError) -> Success
) async -> AttemptOutcome<Success> {
    var schedule = RetrySchedule(policy: policy)
    while true {
        let error: DownloadError
        let before = progress()
        do {
            return .succeeded(try await attempt())
        } catch let failure {
            error = failure
        }
        if Task.isCancelled { return .interrupted(error) }
        let progressed = progress() > before
        var network: RetrySchedule.Network = checkNetwork == nil ? .unwatched : .unchecked
        deciding: while true {
            switch schedule.decide(after: error, network: network, progressed: progressed) {
            case .retry(let number, let delay):
                onRetry(number, error, delay)
                if delay > .zero {
                    do { try await Task.sleep(for: delay) } catch { return .interrupted(nil) }
                }
                break deciding
            case .checkNetwork:
                network = await checkNetwork?() ?? .unwatched
                if Task.isCancelled { return .interrupted(error) }
            case .waitForNetwork:
                return .waitingForNetwork(error)
            case .giveUp:
                return .failed(error)
            }
        }
    }
}

extension AttemptOutcome: Sendable where Success: Sendable {}
