import Foundation

extension Manifest: Codable {
    enum CodingKeys: String, CodingKey {
        case version
        case files
    }

    /// Decodes the JSON form without validating it; ``Manifest/parse(data:format:)`` also
    /// validates.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        version = try container.decode(String.self, forKey: .version)
        files = try container.decode([Entry].self, forKey: .files)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(version, forKey: .version)
        try container.encode(files, forKey: .files)
    }

    /// Parses the JSON form and validates it.
    ///
    /// ```json
    /// {"version": "2026-01-01", "files": [{"path": "docs/a.txt", "url": "a.txt", "size": 12,
    ///  "sha256": "…", "mtime": "2026-01-01T00:00:00Z", "mode": "0644"}]}
    /// ```
    static func parseJSON(_ data: Data) throws(DownloadError) -> Manifest {
        let manifest: Manifest
        do {
            manifest = try JSONDecoder().decode(Manifest.self, from: data)
        } catch let error as DownloadError {
            throw error
        } catch let error as DecodingError {
            throw Self.describe(error)
        } catch {
            throw DownloadError(.invalidManifest, "invalid manifest: malformed JSON: \(error)")
        }
        try manifest.validate(lines: nil)
        return manifest
    }

    /// The JSON form, pretty-printed with sorted keys.
    func jsonData() throws(DownloadError) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        do {
            return try encoder.encode(self) + Data("\n".utf8)
        } catch {
            throw DownloadError(.invalidManifest, "cannot encode manifest: \(error)")
        }
    }

    /// A decoding error as a message that names where in the document it happened.
    private static func describe(_ error: DecodingError) -> DownloadError {
        func location(_ path: [any CodingKey]) -> String {
            var text = ""
            for key in path {
                if let index = key.intValue { text += "[\(index)]" } else { text += (text.isEmpty ? "" : ".") + key.stringValue }
            }
            return text.isEmpty ? "the document" : text
        }
        let message: String
        switch error {
        case .keyNotFound(let key, let context):
            message = "\(location(context.codingPath)) has no \"\(key.stringValue)\""
        case .typeMismatch(let type, let context):
            message = "\(location(context.codingPath)) is not \(Self.describe(type))"
        case .valueNotFound(let type, let context):
            message = "\(location(context.codingPath)) is null, expected \(Self.describe(type))"
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty {
                let underlying = context.underlyingError.map { ": \($0)" } ?? ""
                message = "malformed JSON\(underlying)"
            } else {
                message = "\(location(context.codingPath)): \(context.debugDescription)"
            }
        @unknown default:
            message = "\(error)"
        }
        return DownloadError(.invalidManifest, "invalid manifest: \(message)")
    }

    private static func describe(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Int64.Type, is Int.Type: "an integer"
        case is [Entry].Type, is [Any].Type: "an array"
        default: "an object"
        }
    }
}

extension Manifest.Entry: Codable {
    enum CodingKeys: String, CodingKey {
        case path
        case url
        case size
        case sha256
        case mtime
        case mode
        case zsync
    }

    /// Decodes one entry of the JSON form; a failure names the entry's index and path.
    public init(from decoder: any Decoder) throws {
        let index = decoder.codingPath.last?.intValue ?? 0
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let path: String
        do {
            path = try container.decode(String.self, forKey: .path)
        } catch {
            throw Manifest.entryError(index: index, path: nil, line: nil, Self.reason(error, key: .path))
        }
        func problem(_ reason: String) -> DownloadError {
            Manifest.entryError(index: index, path: path, line: nil, reason)
        }
        func field<T: Decodable>(_ type: T.Type, _ key: CodingKeys) throws -> T {
            do {
                return try container.decode(type, forKey: key)
            } catch {
                throw problem(Self.reason(error, key: key))
            }
        }
        let url = try field(String.self, .url)
        let size = try field(Int64.self, .size)
        func optional(_ key: CodingKeys) throws -> String? {
            do {
                return try container.decodeIfPresent(String.self, forKey: key)
            } catch {
                throw problem(Self.reason(error, key: key))
            }
        }
        var mtime: Date?
        if let mtimeText = try optional(.mtime) {
            guard let date = Manifest.parseDate(mtimeText) else {
                throw problem("mtime \(String(reflecting: mtimeText)) is not an ISO 8601 date and time")
            }
            mtime = date
        }
        var mode: Int?
        if let modeText = try optional(.mode) {
            guard let bits = Manifest.parseMode(modeText) else {
                throw problem("mode \(String(reflecting: modeText)) is not an octal mode such as \"0644\"")
            }
            mode = bits
        }
        let sha256: String?
        do {
            sha256 = try container.decodeIfPresent(String.self, forKey: .sha256)
        } catch {
            throw problem(Self.reason(error, key: .sha256))
        }
        if let sha256, !Manifest.isSHA256(sha256.lowercased()) {
            throw problem("sha256 \(String(reflecting: sha256)) is not 64 hex digits")
        }
        self.init(path: path, url: url, size: size, sha256: sha256, mtime: mtime, mode: mode, zsync: try optional(.zsync))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(path, forKey: .path)
        try container.encode(url, forKey: .url)
        try container.encode(size, forKey: .size)
        try container.encodeIfPresent(sha256, forKey: .sha256)
        try container.encodeIfPresent(mtime.map(Manifest.formatDate), forKey: .mtime)
        try container.encodeIfPresent(mode.map(Manifest.formatMode), forKey: .mode)
        try container.encodeIfPresent(zsync, forKey: .zsync)
    }

    private static func reason(_ error: any Error, key: CodingKeys) -> String {
        switch error as? DecodingError {
        case .keyNotFound?: "missing \"\(key.stringValue)\""
        case .valueNotFound?: "\"\(key.stringValue)\" is null"
        case .typeMismatch?:
            key == .size ? "\"size\" is not an integer" : "\"\(key.stringValue)\" is not a string"
        case .dataCorrupted(let context)?: "\"\(key.stringValue)\": \(context.debugDescription)"
        default: "\"\(key.stringValue)\": \(error)"
        }
    }
}
