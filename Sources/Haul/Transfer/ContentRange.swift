import Foundation

/// A parsed `Content-Range` header: `bytes FIRST-LAST/TOTAL` or `bytes */TOTAL`.
struct ContentRange: Hashable, Sendable {
    /// First and last byte positions, inclusive; `nil` for `bytes */TOTAL`.
    var range: ClosedRange<Int64>?
    /// The full content's size, `nil` when the server sent `*`.
    var total: Int64?

    init(range: ClosedRange<Int64>?, total: Int64?) {
        self.range = range
        self.total = total
    }

    init?(_ header: String) {
        let text = header.trimmingCharacters(in: .whitespaces)
        guard text.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = text.dropFirst(6).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        if parts[1] == "*" {
            total = nil
        } else {
            guard let value = Int64(parts[1]), value >= 0 else { return nil }
            total = value
        }
        if parts[0] == "*" {
            guard total != nil else { return nil }
            range = nil
        } else {
            let bounds = parts[0].split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
            guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]),
                first >= 0, last >= first
            else { return nil }
            if let total, last >= total { return nil }
            range = first...last
        }
    }
}
