import Foundation

/// Reads a flat JSON object (strings, numbers, `true`, `false` and `null`, nothing nested)
/// in one pass over its bytes, member by member, decoding only the values asked for.
///
/// A client following thousands of downloads takes one `download` event per end, and
/// `JSONDecoder` spent more on them than the rest of the client did. What this cannot read
/// (a nested value, bad JSON) it leaves to `JSONDecoder`: ``members(of:_:)`` says so.
package enum FlatJSON {
    /// One member's value, as it appears in the text.
    package struct Value {
        fileprivate let bytes: UnsafeRawBufferPointer.SubSequence
        fileprivate let kind: Kind
        fileprivate let hasEscapes: Bool

        fileprivate enum Kind { case string, number, literal }

        /// Whether it is `null`.
        package var isNull: Bool { kind == .literal && bytes.elementsEqual("null".utf8) }

        /// The string, unescaped; `nil` for anything else, or for an escape that is not JSON.
        package var string: String? {
            guard kind == .string else { return nil }
            guard hasEscapes else { return String(decoding: bytes, as: UTF8.self) }
            return FlatJSON.unescape(bytes)
        }

        /// `true` or `false`; `nil` for anything else.
        package var bool: Bool? {
            guard kind == .literal else { return nil }
            if bytes.elementsEqual("true".utf8) { return true }
            return bytes.elementsEqual("false".utf8) ? false : nil
        }

        /// The number, when it is an integer that fits.
        package var int64: Int64? {
            guard kind == .number else { return nil }
            return Int64(String(decoding: bytes, as: UTF8.self))
        }
    }

    /// Calls `member` with each member's key (its raw bytes, between the quotes, which
    /// holds for keys without escapes) and value, in order. Returns `false` when `bytes`
    /// is not a flat JSON object; `member` may have been called for some members by then.
    package static func members(
        of bytes: UnsafeRawBufferPointer, _ member: (_ key: UnsafeRawBufferPointer.SubSequence, _ value: Value) -> Void
    ) -> Bool {
        var index = bytes.startIndex
        func skipSpace() {
            while index < bytes.endIndex, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D
                || bytes[index] == 0x09
            {
                index += 1
            }
        }
        /// A string at `index` (its opening quote): its contents, and whether they hold escapes.
        func string() -> (UnsafeRawBufferPointer.SubSequence, Bool)? {
            guard index < bytes.endIndex, bytes[index] == UInt8(ascii: "\"") else { return nil }
            index += 1
            let start = index
            var escapes = false
            while index < bytes.endIndex {
                switch bytes[index] {
                case UInt8(ascii: "\""):
                    defer { index += 1 }
                    return (bytes[start..<index], escapes)
                case UInt8(ascii: "\\"):
                    escapes = true
                    index += 2
                case 0..<0x20:
                    return nil
                default:
                    index += 1
                }
            }
            return nil
        }
        skipSpace()
        guard index < bytes.endIndex, bytes[index] == UInt8(ascii: "{") else { return false }
        index += 1
        skipSpace()
        if index < bytes.endIndex, bytes[index] == UInt8(ascii: "}") {
            index += 1
            skipSpace()
            return index == bytes.endIndex
        }
        while true {
            skipSpace()
            guard let (key, keyEscapes) = string(), !keyEscapes else { return false }
            skipSpace()
            guard index < bytes.endIndex, bytes[index] == UInt8(ascii: ":") else { return false }
            index += 1
            skipSpace()
            guard index < bytes.endIndex else { return false }
            let value: Value
            switch bytes[index] {
            case UInt8(ascii: "\""):
                guard let (text, escapes) = string() else { return false }
                value = Value(bytes: text, kind: .string, hasEscapes: escapes)
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                let start = index
                while index < bytes.endIndex, Self.isNumberByte(bytes[index]) { index += 1 }
                value = Value(bytes: bytes[start..<index], kind: .number, hasEscapes: false)
            case UInt8(ascii: "t"), UInt8(ascii: "f"), UInt8(ascii: "n"):
                let start = index
                while index < bytes.endIndex, (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(bytes[index]) { index += 1 }
                let word = bytes[start..<index]
                guard ["true", "false", "null"].contains(where: { word.elementsEqual($0.utf8) }) else { return false }
                value = Value(bytes: word, kind: .literal, hasEscapes: false)
            default:
                return false  // nested, or not JSON
            }
            member(key, value)
            skipSpace()
            guard index < bytes.endIndex else { return false }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "}") else { return false }
            index += 1
            skipSpace()
            return index == bytes.endIndex
        }
    }

    private static func isNumberByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "+"), UInt8(ascii: "."),
            UInt8(ascii: "e"), UInt8(ascii: "E"):
            true
        default: false
        }
    }

    /// A string's contents with its escapes resolved, or `nil` for one JSON does not allow.
    private static func unescape(_ bytes: UnsafeRawBufferPointer.SubSequence) -> String? {
        var scalars = String.UnicodeScalarView()
        var plain: [UInt8] = []
        var result = ""
        func flush() {
            if !plain.isEmpty {
                result += String(decoding: plain, as: UTF8.self)
                plain.removeAll(keepingCapacity: true)
            }
            if !scalars.isEmpty {
                result += String(scalars)
                scalars = String.UnicodeScalarView()
            }
        }
        var index = bytes.startIndex
        func hex4() -> UInt32? {
            guard bytes.endIndex - index >= 4 else { return nil }
            var value: UInt32 = 0
            for byte in bytes[index..<index + 4] {
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: return nil
                }
                value = value << 4 | UInt32(digit)
            }
            index += 4
            return value
        }
        while index < bytes.endIndex {
            let byte = bytes[index]
            index += 1
            guard byte == UInt8(ascii: "\\") else {
                if !scalars.isEmpty { flush() }
                plain.append(byte)
                continue
            }
            guard index < bytes.endIndex else { return nil }
            let escaped = bytes[index]
            index += 1
            let scalar: UnicodeScalar?
            switch escaped {
            case UInt8(ascii: "\""): scalar = "\""
            case UInt8(ascii: "\\"): scalar = "\\"
            case UInt8(ascii: "/"): scalar = "/"
            case UInt8(ascii: "b"): scalar = "\u{08}"
            case UInt8(ascii: "f"): scalar = "\u{0C}"
            case UInt8(ascii: "n"): scalar = "\n"
            case UInt8(ascii: "r"): scalar = "\r"
            case UInt8(ascii: "t"): scalar = "\t"
            case UInt8(ascii: "u"):
                guard let unit = hex4() else { return nil }
                if (0xD800..<0xDC00).contains(unit) {
                    // A surrogate pair: `\uD83D\uDE00`.
                    guard bytes.endIndex - index >= 6, bytes[index] == UInt8(ascii: "\\"),
                        bytes[index + 1] == UInt8(ascii: "u")
                    else { return nil }
                    index += 2
                    guard let low = hex4(), (0xDC00..<0xE000).contains(low) else { return nil }
                    scalar = UnicodeScalar(0x10000 + (unit - 0xD800) << 10 + (low - 0xDC00))
                } else {
                    scalar = UnicodeScalar(unit)
                }
            default: return nil
            }
            guard let scalar else { return nil }
            if !plain.isEmpty { flush() }
            scalars.append(scalar)
        }
        flush()
        return result
    }
}
