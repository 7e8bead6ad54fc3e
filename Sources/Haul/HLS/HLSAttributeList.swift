/// An attribute list as used by many HLS tags (RFC 8216 §4.2):
/// comma-separated `NAME=value` pairs, where a value is a decimal integer, a hexadecimal
/// sequence (`0x…`), a decimal floating point number, a quoted string (which may contain
/// commas), an enumerated string or a resolution.
///
/// Values are kept as raw text (without the quotes of quoted strings) and converted on
/// demand by the typed accessors, which return nil for an absent attribute and throw
/// for a malformed one.
struct HLSAttributeList: Sendable, Equatable {
    /// A malformed attribute list or attribute value; carries no line number.
    struct ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        /// A human-readable explanation.
        let reason: String
        /// The reason.
        var description: String { reason }
    }

    /// One `NAME=value` pair.
    struct Attribute: Sendable, Equatable {
        /// The attribute name, e.g. `BANDWIDTH`.
        let name: String
        /// The raw value, without surrounding quotes if it was a quoted string.
        let value: String
        /// Whether the value was a quoted string.
        let isQuoted: Bool
    }

    /// The attributes in order of appearance.
    private(set) var attributes: [Attribute] = []
    /// Index into `attributes` by name.
    private var indexByName: [String: Int] = [:]

    /// Parses the text after a tag's colon, e.g. `BANDWIDTH=1280000,CODECS="avc1.4d401f,mp4a.40.2"`.
    ///
    /// Whitespace around names and values is tolerated, and so is a trailing comma.
    /// Throws for an attribute without `=`, an empty name, an unterminated quoted string,
    /// stray characters after a quoted string, a quote inside an unquoted value, or a duplicate name.
    /// Runs in time linear in the length of `text`.
    init(parsing text: some StringProtocol) throws(ParseError) {
        let bytes = Array(text.utf8)
        let count = bytes.count
        let quote = UInt8(ascii: "\""), comma = UInt8(ascii: ","), equals = UInt8(ascii: "=")
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }
        func string(_ range: Range<Int>) -> String { String(decoding: bytes[range], as: UTF8.self) }

        var i = 0
        while true {
            while i < count, isSpace(bytes[i]) { i += 1 }
            if i == count { break }

            let nameStart = i
            while i < count, bytes[i] != equals, bytes[i] != comma { i += 1 }
            var nameEnd = i
            while nameEnd > nameStart, isSpace(bytes[nameEnd - 1]) { nameEnd -= 1 }
            let name = string(nameStart..<nameEnd)
            guard i < count, bytes[i] == equals else {
                throw ParseError(reason: "attribute '\(name)' has no '='")
            }
            guard !name.isEmpty else { throw ParseError(reason: "attribute without a name") }
            if name.utf8.contains(quote) {
                throw ParseError(reason: "unexpected '\"' in attribute name '\(name)'")
            }
            i += 1

            while i < count, isSpace(bytes[i]) { i += 1 }
            let value: String
            let isQuoted: Bool
            if i < count, bytes[i] == quote {
                let valueStart = i + 1
                var valueEnd = valueStart
                while valueEnd < count, bytes[valueEnd] != quote { valueEnd += 1 }
                guard valueEnd < count else {
                    throw ParseError(reason: "unterminated quoted string in attribute '\(name)'")
                }
                value = string(valueStart..<valueEnd)
                isQuoted = true
                i = valueEnd + 1
                while i < count, isSpace(bytes[i]) { i += 1 }
                guard i == count || bytes[i] == comma else {
                    throw ParseError(reason: "unexpected characters after the quoted value of attribute '\(name)'")
                }
            } else {
                let valueStart = i
                while i < count, bytes[i] != comma {
                    if bytes[i] == quote {
                        throw ParseError(reason: "unexpected '\"' in the value of attribute '\(name)'")
                    }
                    i += 1
                }
                var valueEnd = i
                while valueEnd > valueStart, isSpace(bytes[valueEnd - 1]) { valueEnd -= 1 }
                value = string(valueStart..<valueEnd)
                isQuoted = false
            }

            guard indexByName[name] == nil else {
                throw ParseError(reason: "duplicate attribute '\(name)'")
            }
            indexByName[name] = attributes.count
            attributes.append(Attribute(name: name, value: value, isQuoted: isQuoted))
            if i < count { i += 1 }  // the comma
        }
    }

    /// The attribute with the given name, if present.
    func attribute(_ name: String) -> Attribute? {
        indexByName[name].map { attributes[$0] }
    }

    /// The raw value of the named attribute (quotes removed for quoted strings), or nil if absent.
    subscript(name: String) -> String? {
        attribute(name)?.value
    }

    /// Whether the named attribute is present and its value was a quoted string.
    func isQuoted(_ name: String) -> Bool {
        attribute(name)?.isQuoted ?? false
    }

    /// The value of a quoted-string or enumerated-string attribute, or nil if absent.
    func string(_ name: String) -> String? {
        self[name]
    }

    /// The value of a decimal-integer attribute, or nil if absent; throws if it is not a
    /// non-negative decimal integer that fits in `Int`.
    func integer(_ name: String) throws(ParseError) -> Int? {
        guard let raw = self[name] else { return nil }
        guard let value = Self.decimalInteger(raw) else {
            throw ParseError(reason: "attribute '\(name)' is not a decimal integer: '\(raw)'")
        }
        return value
    }

    /// The value of a (signed) decimal floating point attribute, or nil if absent; throws if malformed.
    func decimal(_ name: String) throws(ParseError) -> Double? {
        guard let raw = self[name] else { return nil }
        guard let value = Self.decimalFloat(raw, allowNegative: true) else {
            throw ParseError(reason: "attribute '\(name)' is not a decimal number: '\(raw)'")
        }
        return value
    }

    /// The value of a decimal-resolution attribute (`<width>x<height>`), or nil if absent; throws if malformed.
    func resolution(_ name: String) throws(ParseError) -> HLSResolution? {
        guard let raw = self[name] else { return nil }
        guard let value = HLSResolution(parsing: raw) else {
            throw ParseError(reason: "attribute '\(name)' is not a resolution: '\(raw)'")
        }
        return value
    }

    /// The bytes of a hexadecimal-sequence attribute (`0x` or `0X` followed by an even,
    /// non-zero number of hex digits), or nil if absent; throws if malformed.
    func hexBytes(_ name: String) throws(ParseError) -> [UInt8]? {
        guard let raw = self[name] else { return nil }
        guard let value = Self.hexBytes(raw) else {
            throw ParseError(reason: "attribute '\(name)' is not a hexadecimal sequence: '\(raw)'")
        }
        return value
    }

    /// Whether the named enumerated-string attribute is `YES` (false if absent or anything else).
    func flag(_ name: String) -> Bool {
        self[name] == "YES"
    }

    // MARK: Value grammar

    /// Parses a decimal-integer: one or more ASCII digits, fitting in `Int`. Nil otherwise.
    static func decimalInteger(_ text: some StringProtocol) -> Int? {
        guard !text.utf8.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int(String(text))
    }

    /// Parses a decimal floating point number: digits with at most one `.` (and a leading `-`
    /// if `allowNegative`), at least one digit, finite. No exponents, `inf` or `nan`. Nil otherwise.
    static func decimalFloat(_ text: some StringProtocol, allowNegative: Bool) -> Double? {
        var digits = 0
        var dots = 0
        for (offset, byte) in text.utf8.enumerated() {
            switch byte {
            case 0x30...0x39: digits += 1
            case UInt8(ascii: "."): dots += 1
            case UInt8(ascii: "-") where offset == 0 && allowNegative: break
            default: return nil
            }
        }
        guard digits > 0, dots <= 1, let value = Double(String(text)), value.isFinite else { return nil }
        return value
    }

    /// Parses a hexadecimal-sequence (`0x` / `0X` then an even, non-zero number of hex digits)
    /// into bytes. Nil otherwise.
    static func hexBytes(_ text: some StringProtocol) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count >= 4, utf8.count % 2 == 0, utf8[0] == UInt8(ascii: "0"),
              utf8[1] == UInt8(ascii: "x") || utf8[1] == UInt8(ascii: "X")
        else { return nil }
        func nibble(_ byte: UInt8) -> UInt8? {
            switch byte {
            case 0x30...0x39: byte - 0x30
            case 0x41...0x46: byte - 0x41 + 10
            case 0x61...0x66: byte - 0x61 + 10
            default: nil
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count / 2 - 1)
        var i = 2
        while i < utf8.count {
            guard let high = nibble(utf8[i]), let low = nibble(utf8[i + 1]) else { return nil }
            bytes.append(high << 4 | low)
            i += 2
        }
        return bytes
    }
}
