/// How urgently a download is wanted. Queued downloads start in priority order, then in
/// the order they were added.
public enum DownloadPriority: Int, Comparable, Sendable, CaseIterable, Codable {
    case veryLow = 0
    case low = 1
    case normal = 2
    case high = 3
    case veryHigh = 4

    public static func < (lhs: DownloadPriority, rhs: DownloadPriority) -> Bool {
        lhs.rawValue < rhs.rawValue
    }
}
