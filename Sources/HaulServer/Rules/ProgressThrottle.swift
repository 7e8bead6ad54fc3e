/// Coalesces progress to at most one event per download per ``interval``, for event
/// streams that many clients watch.
///
/// A plain value keyed by download: the service offers each progress snapshot and sends
/// what comes back; a periodic sweep (``due(at:)``) sends what was held once its interval
/// has passed, so the latest snapshot always follows a burst. A download's first snapshot
/// is held too: a small file ends within the interval, and its end, a state change that
/// carries its bytes, says all. Changes of state are never throttled: the service sends
/// them at once, with the download's full snapshot, and calls ``stateChanged(_:)``, which
/// drops any progress still held.
///
/// ```swift
/// var throttle = ProgressThrottle<String, Int>(interval: .milliseconds(500))
/// throttle.offer(10, for: "a", at: t)          // nil: held
/// throttle.due(at: t + 0.5s)                   // [("a", 10)]
/// throttle.offer(20, for: "a", at: t + 0.6s)   // nil: held, 0.1 s after the last
/// throttle.offer(30, for: "a", at: t + 1.1s)   // 30: an interval has passed
/// ```
package struct ProgressThrottle<Key: Hashable & Sendable, Progress: Sendable>: Sendable {
    private struct Slot: Sendable {
        /// When the last snapshot was sent, or the first one was offered.
        var since: ContinuousClock.Instant
        var held: Progress?
    }

    /// The least time between two progress events of one download.
    package let interval: Duration
    private var slots: [Key: Slot] = [:]

    package init(interval: Duration) {
        self.interval = interval
    }

    /// Offers a progress snapshot for `key` taken at `now`: returns it when it is to be sent
    /// now, or `nil` when it is held for a later ``due(at:)``.
    package mutating func offer(_ progress: Progress, for key: Key, at now: ContinuousClock.Instant) -> Progress? {
        guard var slot = slots[key] else {
            slots[key] = Slot(since: now, held: progress)
            return nil
        }
        if now - slot.since >= interval {
            slot.since = now
            slot.held = nil
            slots[key] = slot
            return progress
        }
        slot.held = progress
        slots[key] = slot
        return nil
    }

    /// The held snapshots whose interval has passed at `now`, to send now.
    package mutating func due(at now: ContinuousClock.Instant) -> [(key: Key, progress: Progress)] {
        var due: [(key: Key, progress: Progress)] = []
        for (key, slot) in slots {
            guard let held = slot.held, now - slot.since >= interval else { continue }
            slots[key] = Slot(since: now, held: nil)
            due.append((key, held))
        }
        return due
    }

    /// The download's state changed (and the change was sent with its progress): held
    /// progress is dropped, and the next snapshot starts a new interval.
    package mutating func stateChanged(_ key: Key) {
        slots[key] = nil
    }

    /// Downloads with a slot: running ones, until their end is reported.
    package var count: Int { slots.count }
}
