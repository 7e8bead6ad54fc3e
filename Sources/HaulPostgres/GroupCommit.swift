/// Group commit, as a plain value: completions that arrive while one statement is in
/// flight wait, and all of them go together in the next statement, so that a worker
/// finishing many small jobs at once pays one round trip per batch rather than per job.
///
/// The caller whose arrival finds nothing in flight sends a batch of one at once (no
/// waiting for company when the queue is quiet); whoever sends a batch asks
/// ``sent()`` for the next one when it is done, until none waited.
///
/// ```swift
/// var group = GroupCommit<String>(maxBatch: 100)
/// group.arrive("a")   // ["a"]: send it now
/// group.arrive("b")   // nil: "a" is in flight, "b" waits
/// group.arrive("c")   // nil
/// group.sent()        // ["b", "c"]: send them together
/// group.sent()        // nil: idle again
/// ```
struct GroupCommit<Item: Sendable>: Sendable {
    /// The most items one statement carries; more wait for the next one.
    let maxBatch: Int
    /// Items waiting for the statement in flight to end.
    private(set) var waiting: [Item] = []
    /// Whether a statement is in flight.
    private(set) var isBusy = false

    init(maxBatch: Int = 1_000) {
        self.maxBatch = max(1, maxBatch)
    }

    /// `item` arrives. Returns the batch (just `item`) its caller must send now, or `nil`
    /// when a statement is in flight: `item` then goes with a later batch.
    mutating func arrive(_ item: Item) -> [Item]? {
        if isBusy {
            waiting.append(item)
            return nil
        }
        isBusy = true
        return [item]
    }

    /// The statement in flight ended. Returns the next batch to send (the oldest waiting
    /// items, at most ``maxBatch``), or `nil` when none waited: then nothing is in flight.
    mutating func sent() -> [Item]? {
        guard !waiting.isEmpty else {
            isBusy = false
            return nil
        }
        let count = min(maxBatch, waiting.count)
        defer { waiting.removeFirst(count) }
        return Array(waiting.prefix(count))
    }
}
