/// Coalesces progress to at most one event per download per ``interval``, for event
/// streams that many clients watch.
///
/// A plain value keyed by download: the service offers each progress snapshot and does
/// what the decision says. Changes of state are never throttled: the service sends them
/// at once, with the download's full snapshot, and calls ``stateChanged(_:)``, which
/// drops any progress still held (the state event already carries it).
///
/// ```swift
/// var throttle = ProgressThrottle<String, Int>(interval: .milliseconds(500))
/// throttle.offer(10, for: "a", at: t)        // .send(10)
/// throttle.offer(20, for: "a", at: t + 0.1s) // .flush(after: 0.4 s): held
/// throttle.offer(30, for: "a", at: t + 0.2s) // .none: 30 replaces 20, flush already due
/// throttle.flush("a", at: t + 0.5s)          // 30
/// ```
package struct ProgressThrottle<Key: Hashable & Sendable, Progress: Sendable>: Sendable {
    /// What to do with an offered snapshot.
    package enum Decision: Sendable {
        /// Send it now.
        case send(Progress)
        /// It is held; call ``flush(_:at:)`` for this key after this long.
        case flush(after: Duration)
        /// It is held, and a flush is already due.
        case none
    }

    private struct Slot: Sendable {
        var lastSent: ContinuousClock.Instant
        var held: Progress?
        var flushDue = false
    }

    /// The least time between two progress events of one download.
    package let interval: Duration
    private var slots: [Key: Slot] = [:]

    package init(interval: Duration) {
        self.interval = interval
    }

    /// Offers a progress snapshot for `key` taken at `now`.
    package mutating func offer(_ progress: Progress, for key: Key, at now: ContinuousClock.Instant) -> Decision {
        guard var slot = slots[key] else {
            slots[key] = Slot(lastSent: now)
            return .send(progress)
        }
        let since = now - slot.lastSent
        if since >= interval, !slot.flushDue {
            slot.lastSent = now
            slot.held = nil
            slots[key] = slot
            return .send(progress)
        }
        slot.held = progress
        defer { slots[key] = slot }
        if slot.flushDue { return .none }
        slot.flushDue = true
        return .flush(after: interval - since)
    }

    /// The held snapshot for `key`, if any, to send now (the flush asked for by
    /// ``Decision/flush(after:)``).
    package mutating func flush(_ key: Key, at now: ContinuousClock.Instant) -> Progress? {
        guard var slot = slots[key] else { return nil }
        slot.flushDue = false
        defer { slots[key] = slot }
        guard let held = slot.held else { return nil }
        slot.held = nil
        slot.lastSent = now
        return held
    }

    /// The download's state changed (and the change was sent with its progress): held
    /// progress is dropped, and the next snapshot goes out at once.
    package mutating func stateChanged(_ key: Key) {
        slots[key] = nil
    }

    /// Downloads with a slot: running ones, until their end is reported.
    package var count: Int { slots.count }
}
