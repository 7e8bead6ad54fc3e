/// The service's recent events, numbered, so that a client of the event stream that
/// reconnects with `Last-Event-ID` gets exactly what it missed.
///
/// A plain value: the service appends every event it sends, and on a reconnection asks
/// ``replay(after:)`` what to send first. Only the last ``capacity`` events are kept; a
/// client whose last event is older than that (or that comes from another run of the
/// service, whose numbers this log never issued) must start over from a full snapshot.
///
/// ```swift
/// var log = EventLog<String>(capacity: 3, firstID: 1)
/// for event in ["a", "b", "c", "d"] { _ = log.append(event) }   // ids 1...4; 1 is gone
/// log.replay(after: 2)   // .events: 3 "c", 4 "d"
/// log.replay(after: 0)   // .resync(latest: 4): 1 is no longer kept
/// ```
package struct EventLog<Event: Sendable>: Sendable {
    /// One event and its number.
    package struct Entry: Sendable {
        package let id: UInt64
        package let event: Event
    }

    /// What a reconnecting client is sent before live events.
    package enum Replay: Sendable {
        /// These events, oldest first (none when the client is up to date).
        case events([Entry])
        /// The gap cannot be filled: send a full snapshot, numbered `latest`.
        case resync(latest: UInt64)
    }

    /// How many events are kept.
    package let capacity: Int
    /// The number the next event gets.
    package private(set) var nextID: UInt64
    /// A ring of the last `capacity` entries; `start` is the oldest.
    private var ring: [Entry] = []
    private var start = 0

    /// - Parameters:
    ///   - capacity: Events kept for replay (at least 1).
    ///   - firstID: The first event's number. A service picks one above any number an
    ///     earlier run of it can have issued (for example from the clock), so that a
    ///     client of that earlier run is told to resync rather than sent the wrong events.
    package init(capacity: Int, firstID: UInt64) {
        precondition(capacity >= 1, "an event log keeps at least one event")
        self.capacity = capacity
        self.nextID = max(1, firstID)
        ring.reserveCapacity(capacity)
    }

    /// The number of the last event appended, or one less than the first number.
    package var latestID: UInt64 { nextID - 1 }

    /// Numbers the event and keeps it, forgetting the oldest when full.
    @discardableResult
    package mutating func append(_ event: Event) -> Entry {
        let entry = Entry(id: nextID, event: event)
        nextID += 1
        if ring.count < capacity {
            ring.append(entry)
        } else {
            ring[start] = entry
            start = (start + 1) % capacity
        }
        return entry
    }

    /// What to send a client whose last event was `lastID`.
    package func replay(after lastID: UInt64) -> Replay {
        if lastID == latestID { return .events([]) }
        // A number this log never issued, or one older than what it keeps.
        guard lastID < latestID, let oldest = ring.isEmpty ? nil : ring[start].id, lastID + 1 >= oldest else {
            return .resync(latest: latestID)
        }
        let skip = Int(lastID + 1 - oldest)
        return .events((skip..<ring.count).map { ring[(start + $0) % ring.count] })
    }
}
