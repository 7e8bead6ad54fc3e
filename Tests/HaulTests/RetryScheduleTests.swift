import Testing

@testable import Haul

/// The retry rules as a pure value: which failure is retried, when, and when the network is
/// waited for. No sockets, no clock.
@Suite("Retry schedule (rules)")
struct RetryScheduleTests {
    static let policy = RetryPolicy(maxRetries: 3, baseDelay: .seconds(1), maxDelay: .seconds(8))

    /// The failures a fetch meets, by kind.
    enum Failure: String, CaseIterable, Sendable {
        case refused, reset, timeout, busy, tooMany, notFound, forbidden, checksum, badRange

        var error: DownloadError {
            switch self {
            case .refused: DownloadError(.network, "connection refused", isConnectivity: true)
            case .reset: DownloadError(.network, "connection reset")
            case .timeout: DownloadError(.timeout, "no data within the idle timeout")
            case .busy: DownloadError(.httpStatus, "HTTP 503", statusCode: 503)
            case .tooMany: DownloadError(.httpStatus, "HTTP 429", statusCode: 429)
            case .notFound: DownloadError(.httpStatus, "HTTP 404", statusCode: 404)
            case .forbidden: DownloadError(.httpStatus, "HTTP 403", statusCode: 403)
            case .checksum: DownloadError(.checksumMismatch, "sha256 check failed")
            case .badRange: DownloadError(.protocolViolation, "Content-Range starts at 5")
            }
        }
    }

    /// A decision without its random delay, to compare in tables.
    enum Kind: Hashable, Sendable {
        case retry(attempt: Int)
        case checkNetwork, waitForNetwork, giveUp
    }

    static func kind(_ decision: RetrySchedule.Decision) -> Kind {
        switch decision {
        case .retry(let attempt, _): .retry(attempt: attempt)
        case .checkNetwork: .checkNetwork
        case .waitForNetwork: .waitForNetwork
        case .giveUp: .giveUp
        }
    }

    @Test(arguments: [
        // failure, network, first decision
        (Failure.refused, RetrySchedule.Network.unwatched, Kind.retry(attempt: 1)),
        (.refused, .unchecked, .checkNetwork),
        (.refused, .neverReached, .retry(attempt: 1)),
        (.refused, .hostAnswers, .retry(attempt: 1)),
        (.refused, .down, .waitForNetwork),
        (.reset, .unwatched, .retry(attempt: 1)),
        (.reset, .unchecked, .retry(attempt: 1)),
        (.reset, .down, .retry(attempt: 1)),
        (.timeout, .unchecked, .retry(attempt: 1)),
        (.busy, .unchecked, .retry(attempt: 1)),
        (.tooMany, .unwatched, .retry(attempt: 1)),
        (.badRange, .unwatched, .retry(attempt: 1)),
        (.notFound, .unchecked, .giveUp),
        (.notFound, .down, .giveUp),
        (.forbidden, .unwatched, .giveUp),
        (.checksum, .unwatched, .giveUp),
    ])
    func decidesByFailureAndNetwork(failure: Failure, network: RetrySchedule.Network, expected: Kind) {
        // Given a fresh schedule
        var schedule = RetrySchedule(policy: Self.policy)
        // When an attempt fails
        let decision = schedule.decide(after: failure.error, network: network)
        // Then the decision depends on the failure and, for connection failures, the network
        #expect(Self.kind(decision) == expected)
        // Only a retry counts against the policy
        #expect(schedule.retries == (expected == .retry(attempt: 1) ? 1 : 0))
    }

    @Test(arguments: Failure.allCases)
    func retriesRunOutAfterMaxRetries(failure: Failure) {
        var schedule = RetrySchedule(policy: Self.policy)
        let decisions = (1...5).map { _ in Self.kind(schedule.decide(after: failure.error, network: .unwatched)) }
        if failure.error.isRetryable {
            #expect(decisions == [.retry(attempt: 1), .retry(attempt: 2), .retry(attempt: 3), .giveUp, .giveUp])
        } else {
            #expect(decisions == [.giveUp, .giveUp, .giveUp, .giveUp, .giveUp])
        }
    }

    @Test func noRetriesMeansTheFirstFailureIsFinal() {
        var schedule = RetrySchedule(policy: RetryPolicy(maxRetries: 0))
        #expect(schedule.decide(after: Failure.busy.error, network: .unwatched) == .giveUp)
    }

    @Test func waitingForTheNetworkSpendsNoRetries() {
        var schedule = RetrySchedule(policy: Self.policy)
        let refused = Failure.refused.error
        #expect(schedule.decide(after: refused, network: .unchecked) == .checkNetwork)
        #expect(schedule.decide(after: refused, network: .down) == .waitForNetwork)
        #expect(schedule.decide(after: refused, network: .down) == .waitForNetwork)
        #expect(Self.kind(schedule.decide(after: refused, network: .hostAnswers)) == .retry(attempt: 1))
    }

    @Test(arguments: [
        // Retry-After, delay
        (Duration.seconds(0), Duration.seconds(0)),
        (.seconds(3), .seconds(3)),
        (.seconds(30), .seconds(8)),
    ])
    func retryAfterIsHonouredUpToMaxDelay(retryAfter: Duration, delay: Duration) {
        var schedule = RetrySchedule(policy: Self.policy)
        let error = DownloadError(.httpStatus, "HTTP 503", statusCode: 503, retryAfter: retryAfter)
        #expect(schedule.decide(after: error, network: .unwatched) == .retry(attempt: 1, after: delay))
    }

    @Test func backoffDoublesWithJitterUpToMaxDelay() {
        var schedule = RetrySchedule(
            policy: RetryPolicy(maxRetries: 6, baseDelay: .seconds(1), maxDelay: .seconds(8)))
        for attempt in 1...6 {
            guard case .retry(let number, let delay) = schedule.decide(after: Failure.reset.error, network: .unwatched)
            else {
                Issue.record("expected a retry")
                return
            }
            let ceiling = min(Duration.seconds(1) * (1 << (attempt - 1)), .seconds(8))
            #expect(number == attempt)
            #expect(delay >= ceiling / 2 && delay <= ceiling)
        }
    }
}

/// Attempts that made progress before failing: a resume at once, and the count afresh.
@Suite("Retry schedule after progress (rules)")
struct RetryAfterProgressTests {
    static let policy = RetryScheduleTests.policy
    typealias Failure = RetryScheduleTests.Failure

    @Test(arguments: [
        // failure, decision after an attempt that received bytes first
        (Failure.reset, RetryAfterProgressTests.Outcome.atOnce),
        (.timeout, .atOnce),
        (.badRange, .atOnce),
        (.busy, .backedOff),
        (.tooMany, .backedOff),
        (.notFound, .giveUp),
        (.checksum, .giveUp),
    ])
    func progressMakesARetryImmediateUnlessTheServerAskedToWait(failure: Failure, expected: Outcome) {
        var schedule = RetrySchedule(policy: Self.policy)
        let decision = schedule.decide(after: failure.error, network: .unchecked, progressed: true)
        #expect(Outcome(decision) == expected, "\(decision)")
    }

    @Test func aRetryAfterIsWaitedForEvenAfterProgress() {
        var schedule = RetrySchedule(policy: Self.policy)
        let error = DownloadError(.httpStatus, "HTTP 500", statusCode: 500, retryAfter: .seconds(3))
        #expect(schedule.decide(after: error, network: .unwatched, progressed: true) == .retry(attempt: 1, after: .seconds(3)))
    }

    @Test func progressStartsTheCountAndTheBackoffAfresh() {
        // Given two failures without progress (the budget of 3 is two thirds spent)
        var schedule = RetrySchedule(policy: Self.policy)
        let reset = Failure.reset.error
        #expect(RetryScheduleTests.kind(schedule.decide(after: reset, network: .unwatched)) == .retry(attempt: 1))
        #expect(RetryScheduleTests.kind(schedule.decide(after: reset, network: .unwatched)) == .retry(attempt: 2))
        #expect(schedule.retries == 2)

        // When an attempt makes progress and then fails
        #expect(schedule.decide(after: reset, network: .unwatched, progressed: true) == .retry(attempt: 3, after: .zero))

        // Then the count starts again: three more failures without progress are retried,
        // the first after the base delay again, and only the fourth gives up
        #expect(schedule.retries == 0)
        guard case .retry(4, let delay) = schedule.decide(after: reset, network: .unwatched) else {
            Issue.record("expected retry 4")
            return
        }
        #expect(delay >= .milliseconds(500) && delay <= .seconds(1))
        #expect(RetryScheduleTests.kind(schedule.decide(after: reset, network: .unwatched)) == .retry(attempt: 5))
        #expect(RetryScheduleTests.kind(schedule.decide(after: reset, network: .unwatched)) == .retry(attempt: 6))
        #expect(schedule.decide(after: reset, network: .unwatched) == .giveUp)
    }

    @Test func attemptsThatKeepMakingProgressNeverRunOutOfRetries() {
        var schedule = RetrySchedule(policy: RetryPolicy(maxRetries: 0))
        for number in 1...50 {
            #expect(schedule.decide(after: Failure.reset.error, network: .unwatched, progressed: true) == .retry(attempt: number, after: .zero))
        }
        #expect(schedule.decide(after: Failure.reset.error, network: .unwatched) == .giveUp)
    }

    @Test func aRequestTheServerDidNotProcessIsSentAgainAtOnceWithoutSpendingARetry() {
        // Given a policy with no retries at all
        var schedule = RetrySchedule(policy: RetryPolicy(maxRetries: 0))
        let refused = DownloadError(.network, "stream refused", wasNotProcessed: true)
        // Then ten unprocessed requests in a row are sent again at once
        for number in 1...RetrySchedule.maximumResends {
            #expect(schedule.decide(after: refused, network: .unwatched) == .retry(attempt: number, after: .zero))
        }
        #expect(schedule.retries == 0)
        // and the eleventh counts as an ordinary failure: with no retries, the last
        #expect(schedule.decide(after: refused, network: .unwatched) == .giveUp)
    }

    @Test func anotherFailureBetweenUnprocessedOnesStartsTheirCountAgain() {
        var schedule = RetrySchedule(policy: RetryPolicy(maxRetries: 5, baseDelay: .milliseconds(1)))
        let refused = DownloadError(.network, "stream refused", wasNotProcessed: true)
        for _ in 1...RetrySchedule.maximumResends { _ = schedule.decide(after: refused, network: .unwatched) }
        _ = schedule.decide(after: Failure.reset.error, network: .unwatched)
        #expect(schedule.decide(after: refused, network: .unwatched) == .retry(attempt: RetrySchedule.maximumResends + 2, after: .zero))
    }

    enum Outcome: Hashable, Sendable {
        case atOnce, backedOff, giveUp, other

        init(_ decision: RetrySchedule.Decision) {
            switch decision {
            case .retry(_, let delay): self = delay == .zero ? .atOnce : .backedOff
            case .giveUp: self = .giveUp
            case .checkNetwork, .waitForNetwork: self = .other
            }
        }
    }
}

/// The one attempt loop, run with attempts that fail on cue: no sockets.
@Suite("Attempt loop")
struct AttemptLoopTests {
    static let quick = RetryPolicy(maxRetries: 3, baseDelay: .milliseconds(1), maxDelay: .milliseconds(2))
    static let refused = DownloadError(.network, "connection refused", isConnectivity: true)
    static let busy = DownloadError(.httpStatus, "HTTP 503", statusCode: 503)

    @Test func retriesUntilAnAttemptSucceeds() async {
        // Given an attempt that fails twice
        var attempts = 0
        var retries: [Int] = []
        // When it runs in the loop
        let outcome = await withRetries(Self.quick, onRetry: { number, _, _ in retries.append(number) }) {
            () throws(DownloadError) -> String in
            attempts += 1
            if attempts < 3 { throw Self.busy }
            return "done"
        }
        // Then the third attempt's value comes back, after two announced retries
        guard case .succeeded("done") = outcome else {
            Issue.record("expected success, got \(outcome)")
            return
        }
        #expect(attempts == 3)
        #expect(retries == [1, 2])
    }

    @Test(arguments: [
        // error, attempts made
        (AttemptLoopTests.busy, 4),
        (DownloadError(.httpStatus, "HTTP 404", statusCode: 404), 1),
    ])
    func givesUpWithTheLastError(error: DownloadError, attempts expected: Int) async {
        var attempts = 0
        let outcome = await withRetries(Self.quick) { () throws(DownloadError) -> Int in
            attempts += 1
            throw error
        }
        guard case .failed(let last) = outcome else {
            Issue.record("expected failure, got \(outcome)")
            return
        }
        #expect(last.message == error.message)
        #expect(attempts == expected)
    }

    @Test(arguments: [
        // what the check finds, outcome, attempts made
        (RetrySchedule.Network.down, "waiting", 1),
        (.hostAnswers, "failed", 4),
        (.neverReached, "failed", 4),
    ])
    func aConnectionFailureChecksTheNetwork(found: RetrySchedule.Network, expected: String, attempts expectedAttempts: Int)
        async
    {
        var attempts = 0
        var checks = 0
        let outcome = await withRetries(
            Self.quick,
            checkingNetwork: {
                checks += 1
                return found
            }
        ) { () throws(DownloadError) -> Int in
            attempts += 1
            throw Self.refused
        }
        let name =
            switch outcome {
            case .waitingForNetwork: "waiting"
            case .failed: "failed"
            case .succeeded: "succeeded"
            case .interrupted: "interrupted"
            }
        #expect(name == expected)
        #expect(attempts == expectedAttempts)
        #expect(checks == expectedAttempts)
    }

    @Test func otherFailuresDoNotCheckTheNetwork() async {
        var checks = 0
        _ = await withRetries(
            Self.quick,
            checkingNetwork: {
                checks += 1
                return .down
            }
        ) { () throws(DownloadError) -> Int in throw Self.busy }
        #expect(checks == 0)
    }

    @Test func anAttemptThatMadeProgressIsRetriedWithoutWaiting() async {
        // Given a policy whose first wait is a minute, and an attempt that receives bytes
        // and then fails, then one that succeeds
        let slow = RetryPolicy(maxRetries: 1, baseDelay: .seconds(60), maxDelay: .seconds(60))
        var received: Int64 = 0
        var delays: [Duration] = []
        // When they run in the loop
        let outcome = await withRetries(slow, progress: { received }, onRetry: { _, _, delay in delays.append(delay) }) {
            () throws(DownloadError) -> String in
            received += 1000
            if received < 3000 { throw DownloadError(.network, "connection reset") }
            return "done"
        }
        // Then both retries were made at once, and the one retry allowed was never spent
        guard case .succeeded("done") = outcome else {
            Issue.record("expected success, got \(outcome)")
            return
        }
        #expect(delays == [.zero, .zero])
    }

    @Test func cancellationInterrupts() async {
        // Given attempts that always fail, with long waits between them
        let slow = RetryPolicy(maxRetries: 3, baseDelay: .seconds(60), maxDelay: .seconds(60))
        let (waiting, wait) = AsyncStream.makeStream(of: Void.self)
        let task = Task { () -> String in
            let outcome = await withRetries(slow, onRetry: { _, _, _ in wait.yield() }) {
                () throws(DownloadError) -> Int in throw Self.busy
            }
            if case .interrupted(nil) = outcome { return "interrupted while waiting" }
            return "\(outcome)"
        }
        // When the task is cancelled once it is about to wait
        for await _ in waiting { break }
        task.cancel()
        // Then the loop stops at once
        #expect(await task.value == "interrupted while waiting")
    }

    @Test func aFailureAfterCancellationIsNotRetried() async {
        let task = Task { () -> String in
            withUnsafeCurrentTask { $0?.cancel() }
            var attempts = 0
            let outcome = await withRetries(Self.quick) { () throws(DownloadError) -> Int in
                attempts += 1
                throw Self.busy
            }
            guard case .interrupted(let error?) = outcome else { return "\(outcome)" }
            return "\(error.message) after \(attempts)"
        }
        #expect(await task.value == "HTTP 503 after 1")
    }
}
