/// Downloads waiting for a slot: by priority, then first come first served.
///
/// One FIFO per priority. Entries go stale when a download leaves the queue or changes
/// priority; they are skipped lazily, so every operation is cheap however long the
/// queue grows.
struct DownloadQueue {
    private struct Entry {
        let id: DownloadID
        let ticket: UInt64
    }

    private var lanes: [[Entry]] = Array(repeating: [], count: DownloadPriority.allCases.count)
    private var heads: [Int] = Array(repeating: 0, count: DownloadPriority.allCases.count)
    /// The live ticket of each queued download.
    private var tickets: [DownloadID: (ticket: UInt64, priority: DownloadPriority)] = [:]
    private var nextTicket: UInt64 = 0

    /// How many downloads are queued.
    var count: Int { tickets.count }
    var isEmpty: Bool { tickets.isEmpty }

    func contains(_ id: DownloadID) -> Bool { tickets[id] != nil }

    /// Adds `id` at the back of its priority's line (or moves it there).
    mutating func enqueue(_ id: DownloadID, priority: DownloadPriority) {
        let ticket = nextTicket
        nextTicket += 1
        tickets[id] = (ticket, priority)
        lanes[priority.rawValue].append(Entry(id: id, ticket: ticket))
    }

    /// Removes `id`, if queued.
    mutating func remove(_ id: DownloadID) {
        tickets[id] = nil
    }

    /// Moves a queued download to another priority, keeping its place by arrival.
    mutating func reprioritize(_ id: DownloadID, to priority: DownloadPriority) {
        guard let current = tickets[id], current.priority != priority else { return }
        // Keep the original ticket so the arrival order among equals is preserved.
        tickets[id] = (current.ticket, priority)
        let lane = lanes[priority.rawValue]
        var index = lane.endIndex
        while index > heads[priority.rawValue], lane[index - 1].ticket > current.ticket { index -= 1 }
        lanes[priority.rawValue].insert(Entry(id: id, ticket: current.ticket), at: index)
    }

    /// Removes and returns the first queued download, by priority then arrival, that
    /// `isStartable` accepts.
    mutating func dequeue(where isStartable: (DownloadID) -> Bool) -> DownloadID? {
        for priority in DownloadPriority.allCases.reversed() {
            let lane = priority.rawValue
            var index = heads[lane]
            while index < lanes[lane].count {
                let entry = lanes[lane][index]
                guard let live = tickets[entry.id], live.ticket == entry.ticket, live.priority == priority else {
                    // Stale: drop it if it is at the head.
                    if index == heads[lane] { heads[lane] += 1 }
                    index += 1
                    continue
                }
                if isStartable(entry.id) {
                    tickets[entry.id] = nil
                    if index == heads[lane] { heads[lane] += 1 }
                    compact(lane)
                    return entry.id
                }
                index += 1
            }
            compact(lane)
        }
        return nil
    }

    private mutating func compact(_ lane: Int) {
        if heads[lane] > 1024, heads[lane] * 2 > lanes[lane].count {
            lanes[lane].removeFirst(heads[lane])
            heads[lane] = 0
        }
    }
}
