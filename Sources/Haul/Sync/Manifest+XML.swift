import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif

extension Manifest {
    /// Parses the XML form and validates it.
    ///
    /// ```xml
    /// <manifest version="2026-01-01">
    ///   <file path="docs/a.txt" url="a.txt" size="12" sha256="…" mtime="2026-01-01T00:00:00Z" mode="0644"/>
    /// </manifest>
    /// ```
    static func parseXML(_ data: Data) throws(DownloadError) -> Manifest {
        let reader = ManifestXMLReader()
        try SafeXML.parse(data, with: reader, namespaces: false, root: "manifest") { reason in
            DownloadError(.invalidManifest, "invalid manifest: \(reason)")
        }
        guard let version = reader.version else {
            throw DownloadError(.invalidManifest, "invalid manifest: no <manifest> element")
        }
        let manifest = Manifest(version: version, files: reader.files)
        try manifest.validate(lines: reader.lines)
        return manifest
    }

    /// The XML form: a declaration, `<manifest version="…">` and one `<file …/>` per line.
    func xmlData() -> Data {
        var text = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        text += "<manifest version=\"\(Self.escapeAttribute(version))\">\n"
        for entry in files {
            text += "  <file path=\"\(Self.escapeAttribute(entry.path))\""
            text += " url=\"\(Self.escapeAttribute(entry.url))\""
            text += " size=\"\(entry.size)\""
            if let sha256 = entry.sha256 { text += " sha256=\"\(sha256)\"" }
            if let mtime = entry.mtime { text += " mtime=\"\(Self.formatDate(mtime))\"" }
            if let mode = entry.mode { text += " mode=\"\(Self.formatMode(mode))\"" }
            if let zsync = entry.zsync { text += " zsync=\"\(Self.escapeAttribute(zsync))\"" }
            text += "/>\n"
        }
        text += "</manifest>\n"
        return Data(text.utf8)
    }

    /// Escapes `&`, `<`, `>`, `"` and `'`, and writes tab, newline and carriage return as
    /// character references so attribute-value normalisation keeps them.
    static func escapeAttribute(_ value: String) -> String {
        var escaped = ""
        escaped.reserveCapacity(value.utf8.count)
        for scalar in value.unicodeScalars {
            switch scalar {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&apos;"
            case "\t": escaped += "&#9;"
            case "\n": escaped += "&#10;"
            case "\r": escaped += "&#13;"
            default: escaped.unicodeScalars.append(scalar)
            }
        }
        return escaped
    }
}

/// The `XMLParser` delegate behind ``Manifest/parseXML(_:)``: collects the entries and the
/// line of each, and stops at the first error.
private final class ManifestXMLReader: NSObject, SafeXMLReader {
    var version: String?
    var sawRoot: Bool { version != nil }
    var files: [Manifest.Entry] = []
    var lines: [Int] = []
    var failure: DownloadError?
    /// Whether `</manifest>` was seen.
    var rootClosed = false
    private var depth = 0

    func parser(
        _ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
        qualifiedName qName: String?, attributes: [String: String] = [:]
    ) {
        defer { depth += 1 }
        let line = parser.lineNumber
        switch depth {
        case 0:
            guard version == nil else {
                return fail(parser, "invalid manifest: malformed XML at line \(line): a second root element")
            }
            guard elementName == "manifest" else {
                return fail(parser, "invalid manifest: unknown root element <\(elementName)> at line \(line)")
            }
            guard let version = attributes["version"] else {
                return fail(parser, "invalid manifest: <manifest> at line \(line) has no version attribute")
            }
            self.version = version
        case 1:
            let index = files.count
            guard elementName == "file" else {
                return fail(
                    parser, "invalid manifest: unknown element <\(elementName)> at line \(line) (expected <file>)")
            }
            do throws(DownloadError) {
                files.append(try entry(attributes, index: index, line: line))
                lines.append(line)
            } catch {
                failure = error
                parser.abortParsing()
            }
        default:
            fail(parser, "invalid manifest: unexpected element <\(elementName)> inside <file> at line \(line)")
        }
    }

    func parser(
        _ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName qName: String?
    ) {
        depth -= 1
        if depth == 0 { rootClosed = true }
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) {
        guard string.contains(where: { !$0.isWhitespace }) else { return }
        fail(parser, "invalid manifest: unexpected text at line \(parser.lineNumber)")
    }

    func parser(_ parser: XMLParser, foundCDATA CDATABlock: Data) {
        fail(parser, "invalid manifest: unexpected CDATA at line \(parser.lineNumber)")
    }

    func parser(_ parser: XMLParser, foundInternalEntityDeclarationWithName name: String, value: String?) {
        fail(parser, "invalid manifest: entity declarations are not allowed (line \(parser.lineNumber))")
    }

    func parser(
        _ parser: XMLParser, foundExternalEntityDeclarationWithName name: String, publicID: String?, systemID: String?
    ) {
        fail(parser, "invalid manifest: entity declarations are not allowed (line \(parser.lineNumber))")
    }

    private func fail(_ parser: XMLParser, _ message: String) {
        guard failure == nil else { return }
        failure = DownloadError(.invalidManifest, message)
        parser.abortParsing()
    }

    private func entry(_ attributes: [String: String], index: Int, line: Int) throws(DownloadError) -> Manifest.Entry {
        let path = attributes["path"]
        func problem(_ reason: String) -> DownloadError {
            Manifest.entryError(index: index, path: path, line: line, reason)
        }
        func required(_ name: String) throws(DownloadError) -> String {
            guard let value = attributes[name] else { throw problem("missing attribute \(name)") }
            return value
        }
        guard let path else { throw problem("missing attribute path") }
        let url = try required("url")
        let sizeText = try required("size")
        guard let size = Int64(sizeText) else { throw problem("size \(String(reflecting: sizeText)) is not an integer") }
        var mtime: Date?
        if let mtimeText = attributes["mtime"] {
            guard let date = Manifest.parseDate(mtimeText) else {
                throw problem("mtime \(String(reflecting: mtimeText)) is not an ISO 8601 date and time")
            }
            mtime = date
        }
        var mode: Int?
        if let modeText = attributes["mode"] {
            guard let bits = Manifest.parseMode(modeText) else {
                throw problem("mode \(String(reflecting: modeText)) is not an octal mode such as 0644")
            }
            mode = bits
        }
        let sha256 = attributes["sha256"]
        if let sha256, !Manifest.isSHA256(sha256.lowercased()) {
            throw problem("sha256 \(String(reflecting: sha256)) is not 64 hex digits")
        }
        return Manifest.Entry(
            path: path, url: url, size: size, sha256: sha256, mtime: mtime, mode: mode, zsync: attributes["zsync"])
    }
}
