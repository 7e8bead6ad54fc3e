/// A request target (`/path?query`) split into its path and percent-decoded query.
struct RequestTarget: Sendable {
    /// The path without the query, exactly as sent.
    let path: String
    /// Percent-decoded query parameters; for repeated names the last one wins.
    let query: [String: String]

    init(uri: String) {
        let pathPart: Substring
        let queryPart: Substring?
        if let questionMark = uri.firstIndex(of: "?") {
            pathPart = uri[..<questionMark]
            queryPart = uri[uri.index(after: questionMark)...]
        } else {
            pathPart = Substring(uri)
            queryPart = nil
        }
        var query: [String: String] = [:]
        if let queryPart {
            for item in queryPart.split(separator: "&", omittingEmptySubsequences: true) {
                if let equals = item.firstIndex(of: "=") {
                    let name = Self.percentDecode(item[..<equals])
                    query[name] = Self.percentDecode(item[item.index(after: equals)...])
                } else {
                    query[Self.percentDecode(item)] = ""
                }
            }
        }
        self.path = String(pathPart)
        self.query = query
    }

    /// The path components after the leading slash, e.g. `["files", "a"]`.
    var components: [Substring] {
        self.path.split(separator: "/", omittingEmptySubsequences: true)
    }

    /// Decodes `%XX` escapes (a `+` stays a literal plus, matching `URLComponents`).
    /// Malformed escapes are kept literally; invalid UTF-8 becomes U+FFFD.
    static func percentDecode(_ string: Substring) -> String {
        guard string.contains("%") else { return String(string) }
        let utf8 = Array(string.utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count)
        var index = 0
        while index < utf8.count {
            if utf8[index] == UInt8(ascii: "%"), index + 2 < utf8.count,
                let high = hexValue(utf8[index + 1]), let low = hexValue(utf8[index + 2])
            {
                bytes.append(high << 4 | low)
                index += 3
            } else {
                bytes.append(utf8[index])
                index += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Percent-encodes everything except unreserved characters and `/`, so the result
    /// can be used as a query value.
    static func percentEncodeQueryValue(_ string: String) -> String {
        var result = ""
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
                UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "/"):
                result.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF".utf8)
                result.unicodeScalars.append("%")
                result.unicodeScalars.append(Unicode.Scalar(hex[Int(byte >> 4)]))
                result.unicodeScalars.append(Unicode.Scalar(hex[Int(byte & 0x0F)]))
            }
        }
        return result
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
