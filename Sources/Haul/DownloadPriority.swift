/// How urgently a download is wanted. Queued downloads start in priority order, then in
/// the order they were added.
public enum DownloadPriority: Int, Comparable, Sendable, CaseIterable, Codable {
    /// The lowest: starts after every queued download of a higher priority.
    case veryLow = 0
    /// Below the default: prefetching.
    case low = 1
    /// The default.
    case normal = 2
    /// Above the default: what the user is looking at.
    case high = 3
    /// First in line: what the user is waiting for now.
    case veryHigh = 4

    public static func < (lhs: DownloadPriority, rhs: DownloadPriority) -> Bool {
        lhs.rawValue < rhs.rawValue
    }
}
