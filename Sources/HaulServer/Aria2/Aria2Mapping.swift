package import Haul

/// aria2's `status` of a download.
package enum Aria2Status: String, Sendable, CaseIterable {
    case active, waiting, paused, error, complete, removed

    /// The status of a Haul job in `state`.
    ///
    /// | Haul        | aria2      |
    /// |-------------|------------|
    /// | `running`   | `active`   |
    /// | `queued`    | `waiting`  |
    /// | `waiting` (its host is unreachable; it goes on by itself) | `waiting` |
    /// | `paused`    | `paused`   |
    /// | `completed` | `complete` |
    /// | `failed`    | `error`    |
    /// | `cancelled` | `removed`  |
    package init(_ state: JobState) {
        switch state {
        case .running: self = .active
        case .queued, .waiting: self = .waiting
        case .paused: self = .paused
        case .completed: self = .complete
        case .failed: self = .error
        case .cancelled: self = .removed
        }
    }

    /// The Haul states a status covers.
    package var states: Set<JobState> {
        switch self {
        case .active: [.running]
        case .waiting: [.queued, .waiting]
        case .paused: [.paused]
        case .complete: [.completed]
        case .error: [.failed]
        case .removed: [.cancelled]
        }
    }

    /// Whether aria2 lists it with `tellStopped` (it has an `errorCode`).
    package var isStopped: Bool { self == .error || self == .complete || self == .removed }
}

/// aria2's exit-status numbers (the manual's EXIT STATUS section), as `errorCode` carries
/// them, for Haul's error codes.
package enum Aria2ExitStatus {
    /// The number for a job's last error: its ``DownloadError/Code`` name as the journal
    /// keeps it, and its message (which names the HTTP status: `HTTP 404 Not Found: …`).
    ///
    /// | Haul code | aria2 | aria2's meaning |
    /// |---|---|---|
    /// | none (completed) | 0 | success |
    /// | `httpStatus` 404 | 3 | resource not found |
    /// | `httpStatus` 401, 407 | 24 | HTTP authorization failed |
    /// | `httpStatus` 503 | 29 | server overloaded or in maintenance |
    /// | `httpStatus` other | 22 | HTTP response header bad or unexpected |
    /// | `timeout` | 2 | time out |
    /// | `network` | 6 | network problem |
    /// | `network` naming a failed name lookup | 19 | name resolution failed |
    /// | `diskFull` | 9 | not enough disk space |
    /// | `duplicate`, `runningElsewhere` | 11 | the same file is being downloaded |
    /// | `fileSystem` | 17 | file I/O error |
    /// | `tooManyRedirects`, `redirectLoop` | 23 | too many redirects |
    /// | `protocolViolation`, `insecureRedirect`, `unusableRedirect` | 22 | HTTP response bad or unexpected |
    /// | `credentialsRequired` | 24 | HTTP authorization failed |
    /// | `urlExpired` | 22 | HTTP response bad or unexpected (aria2 reports an expired URL's 403 so) |
    /// | `checksumMismatch` | 32 | checksum validation failed |
    /// | `sizeMismatch` | 8 | the server did not resume as required |
    /// | `invalidRequest`, `unsafePath` | 28 | bad option or argument |
    /// | `cancelled` (removed) | 31 | reserved: aria2 reports removed downloads so |
    /// | anything else (`tls`, `tooLarge`, …) | 1 | unknown error |
    package static func number(code: String?, message: String?) -> Int {
        switch code {
        case nil: return 0
        case "httpStatus":
            switch httpStatus(in: message) {
            case 404: return 3
            case 401, 407: return 24
            case 503: return 29
            default: return 22
            }
        case "timeout": return 2
        case "network":
            let lowered = message?.lowercased() ?? ""
            return lowered.contains("resolve") || lowered.contains("name lookup") || lowered.contains("dns") ? 19 : 6
        case "diskFull": return 9
        case "duplicate", "runningElsewhere": return 11
        case "fileSystem": return 17
        case "tooManyRedirects", "redirectLoop": return 23
        case "protocolViolation", "insecureRedirect", "unusableRedirect", "urlExpired": return 22
        case "credentialsRequired": return 24
        case "checksumMismatch": return 32
        case "sizeMismatch": return 8
        case "invalidRequest", "unsafePath": return 28
        case "cancelled": return 31
        default: return 1
        }
    }

    /// The status in `HTTP 404 Not Found: …`.
    static func httpStatus(in message: String?) -> Int? {
        guard let message, let range = message.range(of: "HTTP ") else { return nil }
        return Int(message[range.upperBound...].prefix(3))
    }
}

/// Which part of a list `tellWaiting` and `tellStopped` return, as aria2 defines `offset`
/// and `num`: from `offset` on, or, for a negative offset, from the `-offset`-th last
/// element backwards (so the result is in reverse order).
package struct Aria2Window: Sendable, Equatable {
    /// The first index to read, in list order.
    package var start: Int
    package var count: Int
    /// Whether the answer lists them last first.
    package var reversed: Bool

    package init(start: Int, count: Int, reversed: Bool) {
        self.start = start
        self.count = count
        self.reversed = reversed
    }

    /// The window for `offset` and `num` over a list of `total` elements.
    package init(offset: Int, num: Int, total: Int) {
        let num = max(0, num)
        if offset >= 0 {
            start = min(offset, total)
            count = max(0, min(num, total - min(offset, total)))
            reversed = false
        } else {
            // -1 is the last element; the window runs from there towards the front.
            let last = total + offset
            let first = max(0, last - num + 1)
            start = last >= 0 ? first : 0
            count = last >= 0 && num > 0 ? last - first + 1 : 0
            reversed = true
        }
    }
}

/// `changePosition`'s `how`.
package enum Aria2PositionOrigin: String, Sendable {
    case set = "POS_SET"
    case current = "POS_CUR"
    case end = "POS_END"

    /// The index the element at `current` moves to in a list of `count`, for `pos`
    /// (clamped to the list, as aria2 does).
    package func target(pos: Int, current: Int, count: Int) -> Int {
        let raw: Int
        switch self {
        case .set: raw = pos
        case .current: raw = current + pos
        case .end: raw = count - 1 + pos
        }
        return max(0, min(count - 1, raw))
    }
}

/// Haul keeps its queue in priority order (five levels, oldest first within one), not in
/// positions: a move is made by giving the download a priority one level above the
/// download it must pass (moving up) or one level below the one it must fall behind
/// (moving down), within the five levels. `changePosition` then answers with the position
/// the download really has, which can differ from the one asked for when levels run out.
package enum Aria2QueueMove {
    /// The priority for the download at `current` in `queue` (the priorities of the waiting
    /// downloads in queue order, highest first) that moves to `target`.
    package static func priority(queue: [DownloadPriority], current: Int, target: Int) -> DownloadPriority {
        var others = queue
        let own = others.remove(at: current)
        guard !others.isEmpty, target != current else { return own }
        if target < current {
            let passed = others[target]
            return DownloadPriority(rawValue: min(DownloadPriority.veryHigh.rawValue, max(own.rawValue, passed.rawValue + 1)))!
        }
        let passed = others[min(target, others.count) - 1]
        return DownloadPriority(rawValue: max(DownloadPriority.veryLow.rawValue, min(own.rawValue, passed.rawValue - 1)))!
    }
}

/// Numbers aria2 writes as decimal strings.
extension JSONValue {
    static func number(_ value: some BinaryInteger) -> JSONValue { .string(String(value)) }
}
