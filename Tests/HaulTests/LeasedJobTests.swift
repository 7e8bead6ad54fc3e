import Foundation
import Testing

@testable import Haul
@testable import HaulPostgres

/// The shared queue's rules as plain values: claims, leases, fencing, rescue, retries with
/// backoff, and where a rescued job resumes. No database, no clock.
@Suite("Shared queue: leases and fencing (rules)")
struct LeasedJobTests {
    static let start = Date(timeIntervalSince1970: 1_000_000)
    static let lease: Duration = .seconds(30)
    static let policy = RetryPolicy(maxRetries: 3, baseDelay: .seconds(2), maxDelay: .seconds(60))

    static func job(maxAttempts: Int = 3) -> LeasedJob {
        LeasedJob(maxAttempts: maxAttempts, scheduledAt: start)
    }

    @Test("A claim takes an available job, moves the attempt on and sets the lease's expiry")
    func claim() throws {
        // Given
        var job = Self.job()
        // When
        let leaseClaim = job.claim(by: 7, at: Self.start, for: Self.lease)
        let lease = try #require(leaseClaim)
        // Then
        #expect(lease == LeasedJob.Lease(owner: 7, attempt: 1))
        #expect(job.state == .running)
        #expect(job.leaseExpiresAt == Self.start + 30)
        #expect(job.holdsHostSlot(at: Self.start + 29))
        #expect(!job.holdsHostSlot(at: Self.start + 30))
    }

    @Test("A running job under a live lease cannot be claimed; once the lease expired any worker rescues it")
    func rescue() throws {
        var job = Self.job()
        let firstClaim = job.claim(by: 7, at: Self.start, for: Self.lease)
        let first = try #require(firstClaim)
        let result1 = job.claim(by: 8, at: Self.start + 29, for: Self.lease)
        #expect(result1 == nil)
        // When the lease has expired
        let secondClaim = job.claim(by: 8, at: Self.start + 30, for: Self.lease)
        let second = try #require(secondClaim)
        // Then the rescue is a new attempt, and the first holder is fenced off
        #expect(second == LeasedJob.Lease(owner: 8, attempt: 2))
        #expect(!job.accepts(first))
        #expect(job.accepts(second))
    }

    @Test("The same owner claiming again (after a restart) is fenced off from its earlier attempt")
    func sameOwnerNewAttempt() throws {
        var job = Self.job()
        let firstClaim = job.claim(by: 7, at: Self.start, for: Self.lease)
        let first = try #require(firstClaim)
        let secondClaim = job.claim(by: 7, at: Self.start + 31, for: Self.lease)
        let second = try #require(secondClaim)
        #expect(!job.accepts(first))
        #expect(job.accepts(second))
    }

    @Test("A stale holder can neither renew, complete, fail nor release the job")
    func staleWritesRejected() throws {
        // Given a job whose lease was taken over
        var job = Self.job()
        let staleClaim = job.claim(by: 7, at: Self.start, for: Self.lease)
        let stale = try #require(staleClaim)
        let freshClaim = job.claim(by: 8, at: Self.start + 40, for: Self.lease)
        let fresh = try #require(freshClaim)
        let before = job
        // When the stale holder writes
        let result2 = job.renew(stale, at: Self.start + 41, for: Self.lease, committed: 10)
        #expect(!result2)
        let result3 = job.complete(stale, bytes: 100)
        #expect(!result3)
        let result4 = job.fail(stale, error: DownloadError(.network, "reset"), policy: Self.policy, at: Self.start + 41)
        #expect(result4 == nil)
        let result5 = job.release(stale, at: Self.start + 41)
        #expect(!result5)
        // Then nothing changed, and the fresh holder completes it
        #expect(job == before)
        let result6 = job.complete(fresh, bytes: 100)
        #expect(result6)
        #expect(job.state == .completed)
        #expect(job.bytesCommitted == 100)
    }

    @Test("A lease that expired still writes until someone else claims the job: the claim is the fence")
    func expiredButUnclaimed() throws {
        var job = Self.job()
        let leaseClaim = job.claim(by: 7, at: Self.start, for: Self.lease)
        let lease = try #require(leaseClaim)
        let result7 = job.renew(lease, at: Self.start + 35, for: Self.lease, committed: 5)
        #expect(result7)
        #expect(job.leaseExpiresAt == Self.start + 65)
        #expect(job.bytesCommitted == 5)
    }

    @Test("A retryable failure queues the job again at scheduled_at = now + backoff; a final one fails it")
    func retryBackoff() throws {
        var job = Self.job(maxAttempts: 3)
        let leaseClaim = job.claim(by: 7, at: Self.start, for: Self.lease)
        let lease = try #require(leaseClaim)
        let decision = job.fail(
            lease, error: DownloadError(.httpStatus, "HTTP 503", statusCode: 503), policy: Self.policy, at: Self.start)
        guard case .retry(let delay) = decision else {
            Issue.record("expected a retry, got \(String(describing: decision))")
            return
        }
        // Equal jitter: between half and all of the base delay for the first retry.
        #expect(delay >= .seconds(1) && delay <= .seconds(2))
        #expect(job.state == .retryable)
        #expect(job.scheduledAt == Self.start + delay.timeInterval)
        #expect(!job.isClaimable(at: Self.start))
        #expect(job.isClaimable(at: job.scheduledAt))

        // A 404 is final.
        let secondClaim = job.claim(by: 7, at: job.scheduledAt, for: Self.lease)
        let second = try #require(secondClaim)
        let final = job.fail(
            second, error: DownloadError(.httpStatus, "HTTP 404", statusCode: 404), policy: Self.policy, at: Self.start)
        #expect(final == .fail)
        #expect(job.state == .failed)
    }

    @Test("Retry-After is honoured, capped by the policy's longest delay")
    func retryAfter() {
        let error = DownloadError(.httpStatus, "HTTP 429", statusCode: 429, retryAfter: .seconds(5))
        #expect(LeasedJob.decide(after: error, attempt: 1, maxAttempts: 3, policy: Self.policy) == .retry(after: .seconds(5)))
        let long = DownloadError(.httpStatus, "HTTP 503", statusCode: 503, retryAfter: .seconds(3600))
        #expect(LeasedJob.decide(after: long, attempt: 1, maxAttempts: 3, policy: Self.policy) == .retry(after: .seconds(60)))
    }

    @Test("The backoff grows with the attempt, and the last attempt fails for good")
    func exhaustion() {
        let error = DownloadError(.timeout, "no data")
        guard case .retry(let third) = LeasedJob.decide(after: error, attempt: 3, maxAttempts: 4, policy: Self.policy)
        else {
            Issue.record("expected a retry")
            return
        }
        #expect(third >= .seconds(4) && third <= .seconds(8))
        #expect(LeasedJob.decide(after: error, attempt: 4, maxAttempts: 4, policy: Self.policy) == .fail)
    }

    @Test("Releasing (a worker stopping) makes the job available at once; pause and cancel leave running jobs to their worker")
    func releaseAndCommands() throws {
        var job = Self.job()
        let leaseClaim = job.claim(by: 7, at: Self.start, for: Self.lease)
        let lease = try #require(leaseClaim)
        let result8 = job.pause()
        #expect(!result8)
        let result9 = job.cancel()
        #expect(!result9)
        let result10 = job.release(lease, at: Self.start + 3)
        #expect(result10)
        #expect(job.state == .available)
        #expect(job.isClaimable(at: Self.start + 3))
        let result11 = job.pause()
        #expect(result11)
        #expect(!job.isClaimable(at: Self.start + 3))
        let result12 = job.retry(maxAttempts: 3, at: Self.start + 4)
        #expect(result12)
        let result13 = job.cancel()
        #expect(result13)
        #expect(job.state == .cancelled)
    }

    @Test("A retry by a person grants more attempts without moving the attempt back")
    func personRetry() throws {
        var job = Self.job(maxAttempts: 1)
        let leaseClaim = job.claim(by: 7, at: Self.start, for: Self.lease)
        let lease = try #require(leaseClaim)
        let result14 = job.fail(lease, error: DownloadError(.timeout, "slow"), policy: Self.policy, at: Self.start)
        #expect(result14 == .fail)
        let result15 = job.retry(maxAttempts: 2, at: Self.start + 1)
        #expect(result15)
        #expect(job.attempt == 1)
        #expect(job.maxAttempts == 3)
        let nextClaim = job.claim(by: 8, at: Self.start + 1, for: Self.lease)
        let next = try #require(nextClaim)
        #expect(next.attempt == 2)
        #expect(!job.accepts(lease))
    }

    @Test(
        "A rescued job resumes from its committed bytes when the partial is reachable, from zero when it is not",
        arguments: [
            (Int64?.none, Int64(500), false, Int64(0)),
            (Int64(0), 500, false, 0),
            (Int64(800), 500, false, 500),
            (Int64(300), 500, false, 300),
            (Int64(800), 500, true, 800),
        ])
    func resumeOffset(partial: Int64?, committed: Int64, sameBoot: Bool, expected: Int64) {
        #expect(
            LeasedJob.resumeOffset(partialLength: partial, committed: committed, writtenInThisBoot: sameBoot) == expected)
    }

    @Test("The lease guard renews every quarter of the lease and stops the transfers after three quarters without renewal")
    func leaseGuard() {
        let clock = ContinuousClock()
        let t0 = clock.now
        var guardian = LeaseGuard(duration: .seconds(20), startedAt: t0)
        #expect(guardian.renewalInterval == .seconds(5))
        #expect(!guardian.mustStop(at: t0.advanced(by: .seconds(14))))
        #expect(guardian.mustStop(at: t0.advanced(by: .seconds(15))))
        guardian.renewed(sentAt: t0.advanced(by: .seconds(10)))
        #expect(!guardian.mustStop(at: t0.advanced(by: .seconds(24))))
        #expect(guardian.mustStop(at: t0.advanced(by: .seconds(25))))
        // A late answer to an older renewal never moves the clock back.
        guardian.renewed(sentAt: t0.advanced(by: .seconds(2)))
        #expect(guardian.safeUntil == t0.advanced(by: .seconds(25)))
    }
}
