/// The retry rules, as a plain value: after a failed attempt, whether to try again and
/// when, to wait for the network, or to give up.
///
/// - Errors the ``RetryPolicy`` retries (connection errors, timeouts, 408, 429, 5xx) are
///   retried up to ``RetryPolicy/maxRetries`` times, after exponential backoff with jitter
///   or the server's `Retry-After` (capped by ``RetryPolicy/maxDelay``); other errors end
///   the attempts at once.
/// - An attempt that made progress before it failed (a connection that dropped after
///   bytes arrived) is a resume to make at once: it is retried without waiting, and it
///   starts the count and the backoff afresh, so a link that drops now and then costs a
///   reconnection each time, not a growing wait, and never runs out of retries while
///   bytes keep coming. A server that asked to wait (429, 503, `Retry-After`) is waited
///   for all the same.
/// - A request the server did not process (an HTTP/2 stream refused, or cancelled by the
///   server's `GOAWAY`) is sent again at once without spending a retry, up to
///   ``maximumResends`` times in a row; then the ordinary rules apply.
/// - Where the network is watched (downloads), a failure to reach a host that answered
///   before is checked first: if the network is gone, the attempts wait for it without
///   spending retries. Elsewhere (segments, manifests) it is an ordinary failure.
///
/// A pure value: no I/O and no clock, so the rules are tested without sockets.
/// ``withRetries(_:checkingNetwork:onRetry:_:)`` carries out its decisions.
struct RetrySchedule: Sendable {
    /// What is known of the network when an attempt failed to reach its host.
    enum Network: Hashable, Sendable {
        /// Nothing watches the network here: a connection failure is an ordinary failure.
        case unwatched
        /// Watched, but not yet checked for this failure.
        case unchecked
        /// The host never answered (nor left a partial file): with nothing to compare, a
        /// connection failure is an ordinary failure.
        case neverReached
        /// The host answers a probe: it was the host that failed, not the network.
        case hostAnswers
        /// Neither the host nor a probe of it answers: the network is gone.
        case down
    }

    /// What to do after a failed attempt.
    enum Decision: Hashable, Sendable {
        /// Wait `delay`, then make retry number `attempt` (1-based).
        case retry(attempt: Int, after: Duration)
        /// Find out whether the network is there, then decide again with the answer.
        case checkNetwork
        /// Stop, without spending a retry, until the network is back.
        case waitForNetwork
        /// Stop: the error is final.
        case giveUp
    }

    let policy: RetryPolicy
    /// Retries decided since the last attempt that made progress: what the policy's
    /// ``RetryPolicy/maxRetries`` bounds, and what the backoff grows with.
    private(set) var retries = 0
    /// Every retry decided, progress or not: the number a retry is announced with.
    private(set) var retriesMade = 0
    /// Requests sent again in a row because the server did not process them.
    private(set) var resends = 0
    /// How many requests in a row the server may leave unprocessed before they count as
    /// failures: a server that refuses every stream is not asked forever.
    static let maximumResends = 10

    init(policy: RetryPolicy) {
        self.policy = policy
    }

    /// Decides what follows an attempt that failed with `error`; `progressed` says whether
    /// that attempt received anything before it failed. A retry after no progress counts
    /// against the policy's ``RetryPolicy/maxRetries``; one after progress is made at once
    /// and starts the count afresh, unless the server asked to wait.
    mutating func decide(after error: DownloadError, network: Network, progressed: Bool = false) -> Decision {
        if error.wasNotProcessed, resends < Self.maximumResends {
            resends += 1
            retriesMade += 1
            return .retry(attempt: retriesMade, after: .zero)
        }
        resends = 0
        if progressed, error.isRetryable, !Self.serverAskedToWait(error) {
            retries = 0
            retriesMade += 1
            return .retry(attempt: retriesMade, after: .zero)
        }
        if error.isConnectivity {
            switch network {
            case .unchecked: return .checkNetwork
            case .down: return .waitForNetwork
            case .unwatched, .neverReached, .hostAnswers: break
            }
        }
        guard error.isRetryable, retries < policy.maxRetries else { return .giveUp }
        retries += 1
        retriesMade += 1
        return .retry(attempt: retriesMade, after: policy.delay(beforeRetry: retries, retryAfter: error.retryAfter))
    }

    /// Whether the server said it is busy or asked for a delay: 429, 503, or a
    /// `Retry-After` on any answer. Such a failure is backed off from even after progress.
    private static func serverAskedToWait(_ error: DownloadError) -> Bool {
        error.retryAfter != nil || error.statusCode == 429 || error.statusCode == 503
    }
}
