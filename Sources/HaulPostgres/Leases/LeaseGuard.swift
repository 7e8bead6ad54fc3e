/// When a worker renews its leases, and when it must stop its transfers because it could
/// not: a plain value over a clock's instants, so the rule is tested without one.
///
/// A lease runs `duration` from the moment the database ran the renewal. The worker
/// counts from the moment it *sent* the renewal, which is earlier, so its view of the
/// expiry is never later than the database's. It renews every quarter of the lease, and
/// when no renewal has succeeded for three quarters of it (the database is unreachable,
/// or the process was stopped), it stops its transfers, keeping their partial files,
/// while a quarter of the lease is left: before any other worker can claim the jobs.
package struct LeaseGuard<Instant: InstantProtocol>: Sendable where Instant.Duration == Duration {
    package let duration: Duration
    /// When the last successful renewal (or the claim) was sent.
    package private(set) var lastRenewal: Instant

    package init(duration: Duration, startedAt now: Instant) {
        self.duration = duration
        lastRenewal = now
    }

    /// How often to renew.
    package var renewalInterval: Duration { duration / 4 }

    /// How long without a successful renewal before the transfers must stop.
    package var stopAfter: Duration { duration * 3 / 4 }

    /// A renewal sent at `sent` succeeded.
    package mutating func renewed(sentAt sent: Instant) {
        if sent > lastRenewal { lastRenewal = sent }
    }

    /// Whether, at `now`, the worker must stop its transfers: its leases may be about to
    /// expire.
    package func mustStop(at now: Instant) -> Bool {
        lastRenewal.duration(to: now) >= stopAfter
    }

    /// The latest moment at which the leases are sure to hold.
    package var safeUntil: Instant { lastRenewal.advanced(by: stopAfter) }
}
