package import Foundation
package import Haul

/// One job of a shared queue (`haul worker`) as a plain value: its state, its lease and
/// the rules of who may write to it. The Swift twin of the SQL that `HaulPostgres` runs:
/// every statement there does in one step, on the row, what one method here does on the
/// value, and the tests hold the two together.
///
/// ```
///                claim (attempt + 1, lease)           complete (fenced)
///   available ──────────────────────────► running ─────────────────────► completed
///   retryable ─┘ (once scheduled_at ≤ now)  │  │ fail (fenced): retries left ─► retryable (scheduled_at = now + backoff)
///       ▲                                   │  │ fail (fenced): none left, or final error ─► failed
///       │ lease expired: any worker claims ─┘  │ release (fenced, worker stops) ─► available
///       └── retry (a person) ── failed, cancelled, paused      pause / cancel (a person) ─► paused / cancelled
/// ```
///
/// **Fencing.** A worker holds a ``Lease``: its owner token and the attempt its claim
/// made. Every write a worker makes names that lease, and is refused unless the row is
/// still running under that very owner and attempt. A lease that expired still writes
/// until another worker claims the job, since the claim is what moves the attempt on: the
/// attempt is the fencing token, and it only ever grows (``retry(maxAttempts:at:)`` raises
/// the budget rather than resetting the count).
///
/// **Rescue.** A running job whose lease expired is claimable like an available one, by
/// any worker, at once: there is no separate rescue timeout.
package struct LeasedJob: Hashable, Sendable {
    /// Where a job of the shared queue stands (the `state` column).
    package enum State: String, Hashable, Sendable, CaseIterable {
        case available, running, retryable, paused, completed, failed, cancelled

        /// Whether the job still has work to do.
        package var isUnfinished: Bool {
            switch self {
            case .available, .running, .retryable, .paused: true
            case .completed, .failed, .cancelled: false
            }
        }
    }

    /// What a claim gives a worker, and what each of its writes names.
    package struct Lease: Hashable, Sendable {
        package var owner: Int64
        package var attempt: Int

        package init(owner: Int64, attempt: Int) {
            self.owner = owner
            self.attempt = attempt
        }
    }

    /// What a failed attempt leads to.
    package enum FailureDecision: Hashable, Sendable {
        /// Queue it again, to be claimed no earlier than `after` from now.
        case retry(after: Duration)
        /// It failed for good.
        case fail
    }

    package var state: State
    package var attempt: Int
    package var maxAttempts: Int
    package var scheduledAt: Date
    package var leaseOwner: Int64?
    package var leaseExpiresAt: Date?
    /// Bytes of the partial file known to be on stable storage.
    package var bytesCommitted: Int64 = 0
    package var lastError: String?

    package init(maxAttempts: Int, scheduledAt: Date) {
        state = .available
        attempt = 0
        self.maxAttempts = maxAttempts
        self.scheduledAt = scheduledAt
    }

    /// The lease the row shows now, if it is running.
    package var lease: Lease? {
        guard state == .running, let leaseOwner else { return nil }
        return Lease(owner: leaseOwner, attempt: attempt)
    }

    // MARK: - Claims

    /// Whether a claim at `now` may take the job: it is available, or retryable and due, or
    /// running under a lease that expired (a rescue).
    package func isClaimable(at now: Date) -> Bool {
        switch state {
        case .available, .retryable: scheduledAt <= now
        case .running: (leaseExpiresAt ?? .distantPast) <= now
        case .paused, .completed, .failed, .cancelled: false
        }
    }

    /// Whether the job counts against its host's cap at `now`: running under a live lease.
    package func holdsHostSlot(at now: Date) -> Bool {
        state == .running && (leaseExpiresAt ?? .distantPast) > now
    }

    /// `owner` claims the job at `now` for `duration`; `nil` if it is not claimable.
    package mutating func claim(by owner: Int64, at now: Date, for duration: Duration) -> Lease? {
        guard isClaimable(at: now) else { return nil }
        state = .running
        attempt += 1
        leaseOwner = owner
        leaseExpiresAt = now + duration.timeInterval
        return Lease(owner: owner, attempt: attempt)
    }

    // MARK: - Fenced writes

    /// Whether a write under `lease` is accepted: the row still runs under that very owner
    /// and attempt.
    package func accepts(_ lease: Lease) -> Bool {
        state == .running && leaseOwner == lease.owner && attempt == lease.attempt
    }

    /// A heartbeat (with a checkpoint, if any): extends the lease to `now + duration`.
    package mutating func renew(_ lease: Lease, at now: Date, for duration: Duration, committed: Int64? = nil) -> Bool {
        guard accepts(lease) else { return false }
        leaseExpiresAt = now + duration.timeInterval
        if let committed { bytesCommitted = committed }
        return true
    }

    /// The transfer is done and verified: the completion is recorded before the file is
    /// renamed into place, and only if the lease still holds.
    package mutating func complete(_ lease: Lease, bytes: Int64) -> Bool {
        guard accepts(lease) else { return false }
        state = .completed
        bytesCommitted = bytes
        leaseExpiresAt = nil
        return true
    }

    /// The attempt failed with `error`: retried later or failed for good, by
    /// ``decide(after:attempt:maxAttempts:policy:)``. `nil` if the lease no longer holds.
    package mutating func fail(
        _ lease: Lease, error: DownloadError, policy: RetryPolicy, at now: Date
    ) -> FailureDecision? {
        guard accepts(lease) else { return nil }
        let decision = Self.decide(after: error, attempt: attempt, maxAttempts: maxAttempts, policy: policy)
        lastError = error.message
        leaseExpiresAt = nil
        switch decision {
        case .retry(let delay):
            state = .retryable
            scheduledAt = now + delay.timeInterval
        case .fail:
            state = .failed
        }
        return decision
    }

    /// The worker gives the job back (it stops): available again at once, with its bytes.
    package mutating func release(_ lease: Lease, at now: Date) -> Bool {
        guard accepts(lease) else { return false }
        state = .available
        scheduledAt = now
        leaseExpiresAt = nil
        return true
    }

    // MARK: - A person's commands

    /// `haul pause --queue`: a job that waits is paused at once; a running one is the
    /// running worker's to stop (it is left a command, and records `paused` fenced).
    package mutating func pause() -> Bool {
        guard state == .available || state == .retryable else { return false }
        state = .paused
        return true
    }

    /// `haul cancel --queue`, for a job no worker runs.
    package mutating func cancel() -> Bool {
        guard state == .available || state == .retryable || state == .paused else { return false }
        state = .cancelled
        return true
    }

    /// `haul retry --queue`: a failed, cancelled or paused job is available again, with
    /// `maxAttempts` more attempts (the attempt count never goes back: it fences).
    package mutating func retry(maxAttempts more: Int, at now: Date) -> Bool {
        guard state == .failed || state == .cancelled || state == .paused else { return false }
        state = .available
        maxAttempts = attempt + more
        scheduledAt = now
        lastError = nil
        return true
    }

    // MARK: - Rules

    /// After an attempt failed with `error`: the same retryable errors as a single
    /// process's (``DownloadError/isRetryable``), while attempts remain, after the
    /// policy's exponential backoff or the server's `Retry-After` (capped by the policy).
    package static func decide(
        after error: DownloadError, attempt: Int, maxAttempts: Int, policy: RetryPolicy
    ) -> FailureDecision {
        guard error.isRetryable, attempt < maxAttempts else { return .fail }
        return .retry(after: policy.delay(beforeRetry: max(1, attempt), retryAfter: error.retryAfter))
    }

    /// Where a claimed job's transfer starts, given the partial file this worker can see.
    ///
    /// The job's partial is at the same path for every worker that has the same download
    /// directory. On shared storage (NFS, a shared volume) the new holder finds the last
    /// one's partial and resumes from its committed bytes, or from all of it when the
    /// same machine, in the same boot, wrote it; without shared storage it finds none and
    /// starts from zero. (The transfer carries this out: ``StoredProgress/trustedLength(of:currentBoot:)``.)
    package static func resumeOffset(
        partialLength: Int64?, committed: Int64, writtenInThisBoot: Bool
    ) -> Int64 {
        guard let partialLength, partialLength > 0 else { return 0 }
        let progress = StoredProgress(committed: committed, bootID: writtenInThisBoot ? "boot" : "other")
        return progress.trustedLength(of: partialLength, currentBoot: "boot")
    }
}

extension Duration {
    /// The duration in seconds, as a `TimeInterval`.
    package var timeInterval: TimeInterval {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
