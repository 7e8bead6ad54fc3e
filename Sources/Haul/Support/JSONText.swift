/// JSON written by hand where encoding through `JSONEncoder` costs too much per line or
/// event: the one string writer the service's events, its aria2 answers and the CLI's
/// `--json` lines share.
package enum JSONText {
    /// Appends `value` to `text` as a JSON string: quoted, with `"` and `\` escaped, and
    /// control characters written as `\n`, `\r`, `\t`, `\b`, `\f` or `\u00XX` (what
    /// `JSONEncoder` writes, slashes aside). Runs of plain characters are copied whole.
    package static func appendQuoted(_ value: String, to text: inout String) {
        text += "\""
        let utf8 = value.utf8
        var plainStart = utf8.startIndex
        var index = plainStart
        while index != utf8.endIndex {
            let byte = utf8[index]
            let escape: String? =
                switch byte {
                case UInt8(ascii: "\""): "\\\""
                case UInt8(ascii: "\\"): "\\\\"
                case 0x0A: "\\n"
                case 0x0D: "\\r"
                case 0x09: "\\t"
                case 0x08: "\\b"
                case 0x0C: "\\f"
                case 0..<0x20: "\\u00" + hex(byte)
                default: nil
                }
            if let escape {
                text += String(Substring(utf8[plainStart..<index]))
                text += escape
                plainStart = utf8.index(after: index)
            }
            index = utf8.index(after: index)
        }
        text += String(Substring(utf8[plainStart..<utf8.endIndex]))
        text += "\""
    }

    private static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789abcdef")
        return String([digits[Int(byte >> 4)], digits[Int(byte & 0xF)]])
    }
}
