/// Evaluation of a `Range` request header against a representation of a given size.
enum ByteRange: Equatable {
    /// The header is absent, malformed, has several ranges or another unit: serve 200.
    case ignore
    /// No byte of the requested range exists: serve 416.
    case unsatisfiable
    /// Serve 206 with these byte offsets (non-empty, within the representation).
    case satisfiable(Range<Int>)

    /// Evaluates `bytes=N-`, `bytes=N-M` and `bytes=-K` (a single range only).
    init(header: String, total: Int) {
        let value = header.trimmingASCIIWhitespace()
        guard value.lowercased().hasPrefix("bytes=") else {
            self = .ignore
            return
        }
        let spec = value.dropFirst("bytes=".count).trimmingASCIIWhitespace()
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else {
            self = .ignore
            return
        }
        let first = spec[..<dash].trimmingASCIIWhitespace()
        let second = spec[spec.index(after: dash)...].trimmingASCIIWhitespace()

        if first.isEmpty {
            guard let suffix = Self.number(second) else {
                self = .ignore
                return
            }
            guard suffix > 0, total > 0 else {
                self = .unsatisfiable
                return
            }
            self = .satisfiable((total - min(suffix, total))..<total)
            return
        }
        guard let start = Self.number(first) else {
            self = .ignore
            return
        }
        var end = Int.max
        if !second.isEmpty {
            guard let last = Self.number(second), last >= start else {
                self = .ignore
                return
            }
            end = last
        }
        guard start < total else {
            self = .unsatisfiable
            return
        }
        self = .satisfiable(start..<(min(end, total - 1) + 1))
    }

    private static func number(_ text: Substring) -> Int? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return nil
        }
        return Int(text)
    }
}

extension StringProtocol {
    /// The string without leading and trailing spaces and tabs.
    func trimmingASCIIWhitespace() -> Substring {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let first = self.firstIndex(where: { !isSpace($0) }),
            let last = self.lastIndex(where: { !isSpace($0) })
        else { return Substring() }
        return Substring(self[first...last])
    }
}
