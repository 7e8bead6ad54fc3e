import Foundation

/// Turns names offered by servers and URLs into one safe path component.
package enum FileNaming {
    /// The name used when neither the response nor the URL offers one.
    static let fallbackName = "download"

    /// The file name a `Content-Disposition` header offers, preferring the RFC 6266
    /// `filename*` form, or `nil`. The result is not yet sanitized.
    static func dispositionName(_ header: String) -> String? {
        var plain: String?
        var extended: String?
        for parameter in splitParameters(header).dropFirst() {
            guard let equals = parameter.firstIndex(of: "=") else { continue }
            let key = parameter[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            var value = parameter[parameter.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            if key == "filename*" {
                // charset'language'percent-encoded
                let pieces = value.split(separator: "'", maxSplits: 2, omittingEmptySubsequences: false)
                if pieces.count == 3 { extended = String(pieces[2]).removingPercentEncoding }
            } else if key == "filename" {
                if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") {
                    value = String(value.dropFirst().dropLast()).replacingOccurrences(of: "\\\"", with: "\"")
                        .replacingOccurrences(of: "\\\\", with: "\\")
                }
                plain = value
            }
        }
        return extended ?? plain
    }

    /// The last path component of `url`, percent-decoded, or `nil` when there is none.
    static func urlName(_ url: URL) -> String? {
        let component = url.lastPathComponent
        guard !component.isEmpty, component != "/" else { return nil }
        return component
    }

    /// Reduces `name` to a single safe path component: no separators, no control
    /// characters, no leading dots, no `..`, at most 255 bytes. Returns `nil` if nothing
    /// usable is left.
    package static func sanitize(_ name: String) -> String? {
        // Fast path, the common case: printable ASCII without separators, not starting
        // with a dot, short enough. Such a name is already safe.
        let bytes = name.utf8
        if !bytes.isEmpty, bytes.count <= 255, bytes.first != UInt8(ascii: "."),
            bytes.allSatisfy({ (0x21...0x7E).contains($0) && $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "\\") })
        {
            return name
        }
        let lastComponent = name.split(whereSeparator: { $0 == "/" || $0 == "\\" }).last.map(String.init) ?? ""
        var cleaned = String(lastComponent.unicodeScalars.filter { scalar in
            !CharacterSet.controlCharacters.contains(scalar) && scalar != "\u{0}"
        }.map(Character.init))
        cleaned = cleaned.trimmingCharacters(in: .whitespacesAndNewlines)
        while cleaned.hasPrefix(".") { cleaned.removeFirst() }
        guard !cleaned.isEmpty else { return nil }
        while cleaned.utf8.count > 255 { cleaned.removeFirst() }
        return cleaned
    }

    /// Splits a header into `;`-separated parameters, respecting quoted strings.
    private static func splitParameters(_ header: String) -> [String] {
        var parts: [String] = []
        var current = ""
        var quoted = false
        var escaped = false
        for character in header {
            if escaped {
                current.append(character)
                escaped = false
            } else if character == "\\" && quoted {
                current.append(character)
                escaped = true
            } else if character == "\"" {
                quoted.toggle()
                current.append(character)
            } else if character == ";" && !quoted {
                parts.append(current)
                current = ""
            } else {
                current.append(character)
            }
        }
        parts.append(current)
        return parts
    }
}
