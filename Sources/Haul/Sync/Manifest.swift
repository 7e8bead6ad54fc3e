public import Foundation

/// A list of files to sync: where each one goes, where to fetch it and what it must be.
///
/// A manifest is written as XML or JSON (see ``Format``); both carry exactly the same data.
/// ``parse(data:format:)`` reads either and validates the result, so a parsed manifest never
/// names a path outside its destination directory, the same path twice, or a path that is
/// both a file and a directory.
///
/// ```swift
/// let manifest = try Manifest.parse(data: data)
/// for entry in manifest.files {
///     let url = entry.resolvedURL(relativeTo: manifestURL)
/// }
/// ```
public struct Manifest: Sendable, Hashable {
    /// A label for this version of the content, such as a date or a release name.
    public var version: String
    /// The files, in the order they were written.
    public var files: [Entry]

    /// Creates a manifest. Nothing is validated until it is serialized.
    public init(version: String, files: [Entry]) {
        self.version = version
        self.files = files
    }

    /// One file of a manifest.
    public struct Entry: Sendable, Hashable {
        /// Where the file goes, relative to the destination directory, with `/` between
        /// components.
        public var path: String
        /// Where to fetch the file, as written: an absolute `http` or `https` URL, or a URL
        /// relative to the manifest's own URL (see ``resolvedURL(relativeTo:)``).
        public var url: String
        /// The file's size in bytes.
        public var size: Int64
        /// The SHA-256 of the content as 64 lowercase hex digits, if known.
        public var sha256: String?
        /// The file's modification time, to the second, if the manifest gives one. A sync
        /// sets it on the files it writes.
        public var mtime: Date?
        /// The file's permission bits, such as `0o644`, if the manifest gives them. A sync
        /// sets them on the files it writes and on up-to-date files whose bits differ.
        public var mode: Int?
        /// Where a zsync control file of the file is, as written (absolute, or relative to the
        /// manifest's URL like ``url``), if the publisher made one (`haul manifest --zsync`):
        /// a sync then updates a changed file from the blocks its old version still holds,
        /// fetching only the rest (see ``DeltaSource``).
        public var zsync: String?

        /// Creates an entry; `mtime` is truncated to whole seconds and `sha256` lowercased.
        public init(
            path: String, url: String, size: Int64, sha256: String? = nil, mtime: Date? = nil, mode: Int? = nil,
            zsync: String? = nil
        ) {
            self.path = path
            self.url = url
            self.size = size
            self.sha256 = sha256?.lowercased()
            self.mtime = mtime.map { Date(timeIntervalSince1970: $0.timeIntervalSince1970.rounded(.down)) }
            self.mode = mode
            self.zsync = zsync
        }

        /// The URL to fetch: ``url`` itself when it is absolute, else ``url`` resolved against
        /// `base` (normally the URL the manifest was fetched from) by the rules of RFC 3986,
        /// so `docs/a.txt` in `https://host/sync/manifest.xml` means
        /// `https://host/sync/docs/a.txt`. Returns `nil` if ``url`` is not a valid URL.
        public func resolvedURL(relativeTo base: URL) -> URL? {
            guard Manifest.isWellFormedURL(url) else { return nil }
            return URL(string: url, relativeTo: base)?.absoluteURL
        }

        /// The URL of the file's zsync control file (``zsync``), resolved as ``url`` is;
        /// `nil` without one, or if it is not a valid URL.
        public func resolvedZsyncURL(relativeTo base: URL) -> URL? {
            guard let zsync, Manifest.isWellFormedURL(zsync) else { return nil }
            return URL(string: zsync, relativeTo: base)?.absoluteURL
        }
    }

    /// The two ways to write a manifest.
    public enum Format: String, Sendable, Hashable, CaseIterable {
        /// `<manifest version="…"><file path="…" url="…" … /></manifest>`
        case xml
        /// `{"version": "…", "files": [{"path": "…", "url": "…", …}]}`
        case json
    }

    /// The format of `data` from its first byte that is not white space: `<` is XML, `{` is
    /// JSON. Returns `nil` for anything else. A UTF-8 byte order mark is skipped.
    public static func detectFormat(data: Data) -> Format? {
        var bytes = data[...]
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes = bytes.dropFirst(3) }
        guard let first = bytes.first(where: { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }) else { return nil }
        switch first {
        case UInt8(ascii: "<"): return .xml
        case UInt8(ascii: "{"): return .json
        default: return nil
        }
    }

    /// Parses and validates a manifest.
    ///
    /// - Parameters:
    ///   - data: The document.
    ///   - format: Its format; `nil` detects it with ``detectFormat(data:)``.
    /// - Throws: ``DownloadError`` with code ``DownloadError/Code/invalidManifest``, whose
    ///   message names the offending entry (`files[3] "docs/a.txt"`) and, for XML, the line.
    public static func parse(data: Data, format: Format? = nil) throws(DownloadError) -> Manifest {
        guard let format = format ?? detectFormat(data: data) else {
            throw DownloadError(.invalidManifest, "invalid manifest: neither XML (starts with '<') nor JSON (starts with '{')")
        }
        switch format {
        case .xml: return try parseXML(data)
        case .json: return try parseJSON(data)
        }
    }

    /// The manifest written in `format`, after validating it.
    ///
    /// - Throws: ``DownloadError`` with code ``DownloadError/Code/invalidManifest`` if the
    ///   manifest breaks a validation rule.
    public func serialized(as format: Format) throws(DownloadError) -> Data {
        try validate(lines: nil)
        switch format {
        case .xml: return xmlData()
        case .json: return try jsonData()
        }
    }

    /// A fast check for the common `url`: a relative reference made only of RFC 3986
    /// unreserved characters, `/` and well-formed `%XX` escapes, whose first segment has
    /// no `:` (so it cannot be read as a scheme). Anything else goes through
    /// `URLComponents`.
    private static func isPlainRelativeReference(_ text: String) -> Bool {
        var pendingHex = 0
        var sawSlash = false
        var count = 0
        for byte in text.utf8 {
            count += 1
            if pendingHex > 0 {
                guard (0x30...0x39).contains(byte) || (0x41...0x46).contains(byte) || (0x61...0x66).contains(byte)
                else { return false }
                pendingHex -= 1
                continue
            }
            switch byte {
            case 0x30...0x39, 0x41...0x5A, 0x61...0x7A, UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                continue
            case UInt8(ascii: "/"):
                sawSlash = true
            case UInt8(ascii: "%"):
                pendingHex = 2
            case UInt8(ascii: ":"):
                if !sawSlash { return false }
            default:
                return false
            }
        }
        return count > 0 && pendingHex == 0
    }

    // MARK: - Shared field syntax

    /// `0644`-style octal permission bits, at most `07777`.
    static func parseMode(_ text: String) -> Int? {
        guard (1...6).contains(text.utf8.count), text.utf8.allSatisfy({ (0x30...0x37).contains($0) }),
            let value = Int(text, radix: 8), value <= 0o7777
        else { return nil }
        return value
    }

    /// Four octal digits, such as `0644`.
    static func formatMode(_ mode: Int) -> String {
        let digits = String(mode, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    /// ISO 8601 with a `Z` or `±hh:mm` offset and optional fractional seconds (dropped).
    static func parseDate(_ text: String) -> Date? {
        let plain = ISO8601DateFormatter()
        plain.formatOptions = [.withInternetDateTime]
        if let date = plain.date(from: text) { return date }
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        guard let date = fractional.date(from: text) else { return nil }
        return Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down))
    }

    /// `2026-01-01T00:00:00Z`.
    static func formatDate(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        formatter.timeZone = TimeZone(secondsFromGMT: 0)
        return formatter.string(from: date)
    }

    /// A URL reference without white space or control characters that `URLComponents` accepts
    /// and whose scheme, if it has one, is `http` or `https`.
    static func isWellFormedURL(_ text: String) -> Bool {
        if isPlainRelativeReference(text) { return true }
        guard !text.isEmpty,
            !text.unicodeScalars.contains(where: { $0.value <= 0x20 || (0x7F...0x9F).contains($0.value) }),
            let components = URLComponents(string: text)
        else { return false }
        if let scheme = components.scheme {
            return ["http", "https"].contains(scheme.lowercased()) && components.host?.isEmpty == false
        }
        return true
    }
}
