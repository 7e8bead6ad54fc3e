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
        var header = header
        guard let parsed = header.withUTF8({ Self(bytes: $0) }) else { return nil }
        self = parsed
    }

    /// Parses the header's value from its bytes: a multipart answer has one per part, tens
    /// of thousands in a delta download, so no `String` work per part.
    init?(bytes: UnsafeBufferPointer<UInt8>) {
        var cursor = Cursor(bytes: bytes)
        cursor.skipSpaces()
        guard cursor.takeUnit("bytes") else { return nil }
        let spaces = cursor.skipSpaces()
        guard spaces > 0 else { return nil }
        var range: ClosedRange<Int64>?
        if cursor.take(UInt8(ascii: "*")) {
            range = nil
        } else {
            guard let first = cursor.number(), cursor.take(UInt8(ascii: "-")), let last = cursor.number(), last >= first
            else { return nil }
            range = first...last
        }
        cursor.skipSpaces()
        guard cursor.take(UInt8(ascii: "/")) else { return nil }
        cursor.skipSpaces()
        var total: Int64?
        if cursor.take(UInt8(ascii: "*")) {
            guard range != nil else { return nil }
        } else {
            guard let value = cursor.number() else { return nil }
            total = value
        }
        cursor.skipSpaces()
        guard cursor.isAtEnd else { return nil }
        if let total, let range, range.upperBound >= total { return nil }
        self.init(range: range, total: total)
    }

    private struct Cursor {
        let bytes: UnsafeBufferPointer<UInt8>
        var position = 0

        var isAtEnd: Bool { position == bytes.count }

        @discardableResult
        mutating func skipSpaces() -> Int {
            let start = position
            while position < bytes.count, bytes[position] == UInt8(ascii: " ") || bytes[position] == UInt8(ascii: "\t") {
                position += 1
            }
            return position - start
        }

        mutating func take(_ byte: UInt8) -> Bool {
            guard position < bytes.count, bytes[position] == byte else { return false }
            position += 1
            return true
        }

        /// The unit, in any case.
        mutating func takeUnit(_ unit: StaticString) -> Bool {
            let count = unit.utf8CodeUnitCount
            guard bytes.count - position >= count else { return false }
            for offset in 0..<count where bytes[position + offset] | 0x20 != unit.utf8Start[offset] {
                return false
            }
            position += count
            return true
        }

        /// A decimal number without sign; `nil` when there are no digits or it overflows.
        mutating func number() -> Int64? {
            var value: Int64 = 0
            let start = position
            while position < bytes.count, bytes[position] >= UInt8(ascii: "0"), bytes[position] <= UInt8(ascii: "9") {
                let (times, overflowTimes) = value.multipliedReportingOverflow(by: 10)
                let (sum, overflowSum) = times.addingReportingOverflow(Int64(bytes[position] - UInt8(ascii: "0")))
                guard !overflowTimes, !overflowSum else { return nil }
                value = sum
                position += 1
            }
            return position > start ? value : nil
        }
    }
}
