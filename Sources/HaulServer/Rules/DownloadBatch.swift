package import Foundation
package import Haul

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// One download as a client asks for it (`POST /api/v1/downloads`), before validation.
///
/// The content's address is `url`, or `urls` for several addresses of the same content
/// (the first names the download; the others are its mirrors); given both, `url` comes
/// first and `urls` adds to it.
package struct DownloadInput: Sendable, Codable, Equatable {
    package var url: String
    /// Other addresses of the same content (``DownloadRequest/mirrors``).
    package var mirrors: [String]?
    /// The digests of the content's pieces (``DownloadRequest/pieces``).
    package var pieces: Pieces?

    /// Piece digests as a client gives them: `{"algorithm": "sha-256", "length": 262144,
    /// "hashes": ["…", …]}`.
    package struct Pieces: Sendable, Codable, Equatable {
        package var algorithm: String
        package var length: Int64
        package var hashes: [String]

        package init(algorithm: String, length: Int64, hashes: [String]) {
            self.algorithm = algorithm
            self.length = length
            self.hashes = hashes
        }

        package init(_ pieces: PieceChecksums) {
            self.init(algorithm: pieces.algorithm.rawValue, length: pieces.length, hashes: pieces.hashes)
        }
    }
    /// The directory to save into: absolute, or relative to the service's default
    /// directory. Must lie inside one of the download roots. Or an S3 prefix,
    /// `s3://bucket/prefix/`, inside one of the service's object roots: the file is then an
    /// object under it.
    package var directory: String?
    /// The file name; the server's or the URL's name when absent.
    package var name: String?
    /// `veryLow`, `low`, `normal` (the default), `high` or `veryHigh`.
    package var priority: String?
    /// `ALGORITHM=HEX`, as `haul get --checksum`.
    package var checksum: String?
    package var expectedSize: Int64?
    /// Extra request headers.
    package var headers: [String: String]?
    /// The download's own speed limit, in bytes per second.
    package var maxBytesPerSecond: Int?
    /// How many connections the download may use when it is split (1-64); the service's
    /// `-x` when absent. A per-host cap that was set lower clamps it.
    package var connections: Int?
    /// Whether `url` is a zsync control file whose target is to be downloaded by delta
    /// (``DeltaSource``); when absent, a `url` whose path ends in `.zsync` is one.
    package var zsync: Bool?
    /// For a delta download: files on the service's machine that may hold blocks of the
    /// target (older versions), inside the download roots. The file already at the
    /// destination is scanned too.
    package var seeds: [String]?
    /// Whether `url` is an HLS playlist whose stream is to be downloaded into one file
    /// (``DownloadRequest/stream``), and how: `true`, `false`, or
    /// `{"variant": "best", "renditions": false, "duration": 600}`. When absent, a `url`
    /// whose path ends in `.m3u8` or `.m3u` is one, with the defaults.
    package var hls: StreamInput?

    /// An input's `hls`: a yes or no, or the stream's options.
    package struct StreamInput: Sendable, Codable, Equatable {
        /// `false` for `"hls": false`: the playlist itself is saved.
        package var enabled: Bool
        /// `best` (the default), `worst`, a bandwidth in bits per second, or `WIDTHxHEIGHT`.
        package var variant: String?
        /// Whether the variant's audio and video renditions are saved beside the file.
        package var renditions: Bool?
        /// The most media to record, in seconds.
        package var duration: Double?

        package init(enabled: Bool = true, variant: String? = nil, renditions: Bool? = nil, duration: Double? = nil) {
            self.enabled = enabled
            self.variant = variant
            self.renditions = renditions
            self.duration = duration
        }

        private enum CodingKeys: String, CodingKey {
            case variant, renditions, duration
        }

        package init(from decoder: any Decoder) throws {
            if let flag = try? decoder.singleValueContainer().decode(Bool.self) {
                self.init(enabled: flag)
                return
            }
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.init(
                variant: try container.decodeIfPresent(String.self, forKey: .variant),
                renditions: try container.decodeIfPresent(Bool.self, forKey: .renditions),
                duration: try container.decodeIfPresent(Double.self, forKey: .duration))
        }

        package func encode(to encoder: any Encoder) throws {
            guard enabled, variant != nil || renditions != nil || duration != nil else {
                var container = encoder.singleValueContainer()
                try container.encode(enabled)
                return
            }
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encodeIfPresent(variant, forKey: .variant)
            try container.encodeIfPresent(renditions, forKey: .renditions)
            try container.encodeIfPresent(duration, forKey: .duration)
        }
    }

    package init(
        url: String, directory: String? = nil, name: String? = nil, priority: String? = nil, checksum: String? = nil,
        expectedSize: Int64? = nil, headers: [String: String]? = nil, maxBytesPerSecond: Int? = nil,
        connections: Int? = nil, mirrors: [String]? = nil, pieces: Pieces? = nil, zsync: Bool? = nil,
        seeds: [String]? = nil, hls: StreamInput? = nil
    ) {
        self.hls = hls
        self.zsync = zsync
        self.seeds = seeds
        self.mirrors = mirrors
        self.pieces = pieces
        self.maxBytesPerSecond = maxBytesPerSecond
        self.connections = connections
        self.url = url
        self.directory = directory
        self.name = name
        self.priority = priority
        self.checksum = checksum
        self.expectedSize = expectedSize
        self.headers = headers
    }

    private enum CodingKeys: String, CodingKey {
        case url, urls, directory, name, priority, checksum, expectedSize, headers, maxBytesPerSecond, connections,
            pieces, zsync, seeds, hls
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let urls = try container.decodeIfPresent([String].self, forKey: .urls) ?? []
        if let url = try container.decodeIfPresent(String.self, forKey: .url) {
            self.url = url
            let others = urls.filter { $0 != url }
            mirrors = others.isEmpty ? nil : others
        } else if let first = urls.first {
            url = first
            mirrors = urls.count > 1 ? Array(urls.dropFirst()) : nil
        } else {
            throw DecodingError.keyNotFound(
                CodingKeys.url, .init(codingPath: container.codingPath, debugDescription: "give url, or urls"))
        }
        directory = try container.decodeIfPresent(String.self, forKey: .directory)
        name = try container.decodeIfPresent(String.self, forKey: .name)
        priority = try container.decodeIfPresent(String.self, forKey: .priority)
        checksum = try container.decodeIfPresent(String.self, forKey: .checksum)
        expectedSize = try container.decodeIfPresent(Int64.self, forKey: .expectedSize)
        headers = try container.decodeIfPresent([String: String].self, forKey: .headers)
        maxBytesPerSecond = try container.decodeIfPresent(Int.self, forKey: .maxBytesPerSecond)
        connections = try container.decodeIfPresent(Int.self, forKey: .connections)
        pieces = try container.decodeIfPresent(Pieces.self, forKey: .pieces)
        zsync = try container.decodeIfPresent(Bool.self, forKey: .zsync)
        seeds = try container.decodeIfPresent([String].self, forKey: .seeds)
        hls = try container.decodeIfPresent(StreamInput.self, forKey: .hls)
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(url, forKey: .url)
        if let mirrors { try container.encode([url] + mirrors, forKey: .urls) }
        try container.encodeIfPresent(directory, forKey: .directory)
        try container.encodeIfPresent(name, forKey: .name)
        try container.encodeIfPresent(priority, forKey: .priority)
        try container.encodeIfPresent(checksum, forKey: .checksum)
        try container.encodeIfPresent(expectedSize, forKey: .expectedSize)
        try container.encodeIfPresent(headers, forKey: .headers)
        try container.encodeIfPresent(maxBytesPerSecond, forKey: .maxBytesPerSecond)
        try container.encodeIfPresent(connections, forKey: .connections)
        try container.encodeIfPresent(pieces, forKey: .pieces)
        try container.encodeIfPresent(zsync, forKey: .zsync)
        try container.encodeIfPresent(seeds, forKey: .seeds)
        try container.encodeIfPresent(hls, forKey: .hls)
    }

    /// Whether this input asks for a delta download: `zsync`, or a `url` ending in `.zsync`.
    package var isDelta: Bool {
        zsync ?? (URL(string: url)?.path.lowercased().hasSuffix(".zsync") ?? false)
    }

    /// Whether this input asks for a stream download: `hls`, or a `url` whose path ends in
    /// `.m3u8` or `.m3u`.
    package var isStream: Bool {
        if let hls { return hls.enabled }
        guard let path = URL(string: url)?.path.lowercased() else { return false }
        return path.hasSuffix(".m3u8") || path.hasSuffix(".m3u")
    }
}

/// A bad field of a request body: which one (`downloads[2].url`) and why. The API answers
/// it with 400 and adds nothing.
package struct FieldError: Error, Sendable, Equatable, CustomStringConvertible {
    package var field: String
    package var message: String
    package var description: String { "\(field): \(message)" }
}

/// Turns a batch of inputs into download requests, all or nothing: the first bad field
/// fails the whole batch, so a batch with one bad URL adds none of them.
///
/// The rules: http and https URLs only; a directory that exists and lies inside one of the
/// download roots once symbolic links are resolved (so `"directory": "/etc"`, `../..` and
/// a link out of a root are refused); a name that is one safe path component; a known
/// priority; a checksum Haul can verify; a size that is not negative; header names and
/// values without line breaks.
package struct DownloadBatch: Sendable {
    /// Directories downloads may go into (and below), resolved.
    package let roots: [String]
    /// Where inputs without a directory go, and what relative directories start from.
    package let defaultDirectory: String
    /// S3 prefixes downloads may go into (and below): `haul serve --root s3://bucket/prefix/`.
    package let objectRoots: [S3Location]
    /// Where objects' bytes wait until they are uploaded (with ``objectRoots``).
    package let staging: URL?

    /// - Parameters:
    ///   - objectRoots: prefixes (``S3Location/isPrefix``) objects may go under.
    ///   - staging: the local directory objects' bytes wait in; needed with `objectRoots`.
    /// - Throws: ``FieldError`` (field `roots`) when a root or the default directory does
    ///   not exist, the default directory lies outside the roots, or object roots come
    ///   without a staging directory or are not prefixes.
    package init(
        roots: [String], defaultDirectory: String, objectRoots: [S3Location] = [], staging: URL? = nil
    ) throws(FieldError) {
        if let root = objectRoots.first(where: { !$0.isPrefix }) {
            throw FieldError(field: "roots", message: "the object root \(root) is not a prefix: end it with /")
        }
        if !objectRoots.isEmpty, staging == nil {
            throw FieldError(field: "roots", message: "object roots need a staging directory")
        }
        self.objectRoots = objectRoots
        self.staging = staging
        var resolved: [String] = []
        for root in roots {
            guard let path = Self.realPath(root) else {
                throw FieldError(field: "roots", message: "download root \(root) does not exist")
            }
            resolved.append(path)
        }
        guard let directory = Self.realPath(defaultDirectory) else {
            throw FieldError(field: "roots", message: "the default directory \(defaultDirectory) does not exist")
        }
        self.roots = resolved
        self.defaultDirectory = directory
        guard Self.isInside(directory, resolved) else {
            throw FieldError(field: "roots", message: "the default directory \(directory) is outside the download roots")
        }
    }

    /// The requests for `inputs`, in order; `field` names the array in errors.
    package func requests(for inputs: [DownloadInput], field: String = "downloads") throws(FieldError)
        -> [DownloadRequest]
    {
        guard !inputs.isEmpty else { throw FieldError(field: field, message: "no downloads given") }
        var requests: [DownloadRequest] = []
        requests.reserveCapacity(inputs.count)
        // Each directory is resolved once (it costs system calls), however many use it.
        var resolved: [String?: URL] = [:]
        for (index, input) in inputs.enumerated() {
            let field = "\(field)[\(index)]"
            let fields = try Self.checkedFields(of: input, field: field)
            if input.isDelta {
                try Self.checkDelta(input, field: field)
            } else if input.seeds != nil {
                throw FieldError(field: "\(field).seeds", message: "seeds are for delta downloads (zsync)")
            }
            if let given = input.directory, Self.isObjectAddress(given) {
                let destination = try object(given, name: fields.name, field: "\(field).directory")
                requests.append(request(for: input, fields, destination: destination))
                continue
            }
            let directory: URL
            if let known = resolved[input.directory] {
                directory = known
            } else {
                let path = try self.directory(input.directory, field: "\(field).directory")
                directory = URL(fileURLWithPath: path, isDirectory: true)
                resolved[input.directory] = directory
            }
            requests.append(request(for: input, fields, destination: .directory(directory, name: fields.name)))
        }
        return requests
    }

    /// What a delta download's input may not hold: what its control file says (the
    /// target's addresses, size and digests), and an object destination (its seeds are
    /// files here).
    static func checkDelta(_ input: DownloadInput, field: String) throws(FieldError) {
        let fromControl: [(String, Bool)] = [
            ("urls", input.mirrors != nil), ("checksum", input.checksum != nil),
            ("expectedSize", input.expectedSize != nil), ("pieces", input.pieces != nil),
        ]
        if let (name, _) = fromControl.first(where: \.1) {
            throw FieldError(field: "\(field).\(name)", message: "a delta download takes this from its control file")
        }
        if let given = input.directory, isObjectAddress(given) {
            throw FieldError(
                field: "\(field).directory", message: "a delta download builds its file here: give a local directory")
        }
    }

    /// The seeds of a delta download's input, each an existing regular file inside the
    /// download roots (resolved, links followed): a client names no other file of this
    /// machine.
    package func seeds(of input: DownloadInput, field: String) throws(FieldError) -> [URL] {
        var seeds: [URL] = []
        for (index, given) in (input.seeds ?? []).enumerated() {
            let field = "\(field).seeds[\(index)]"
            let joined = given.hasPrefix("/") ? given : defaultDirectory + "/" + given
            guard let resolved = Self.realPath(joined), Self.isInside(resolved, roots) else {
                throw FieldError(field: field, message: "\(given) is not a file inside the download roots")
            }
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: resolved, isDirectory: &isDirectory), !isDirectory.boolValue else {
                throw FieldError(field: field, message: "\(given) is not a file")
            }
            seeds.append(URL(fileURLWithPath: resolved))
        }
        if seeds.count > 16 { throw FieldError(field: "\(field).seeds", message: "at most 16 seeds per download") }
        return seeds
    }

    /// Whether a directory names an S3 prefix (`s3://…`) rather than a local directory.
    package static func isObjectAddress(_ directory: String) -> Bool {
        directory.utf8.count >= 5 && directory.prefix(5).lowercased() == "s3://"
    }

    /// The object destination for `given` (`s3://bucket/prefix`, the final `/` optional) and
    /// a file name, if one was given: inside an object root, or refused.
    private func object(_ given: String, name: String?, field: String) throws(FieldError) -> DownloadDestination {
        guard let staging, !objectRoots.isEmpty else {
            throw FieldError(
                field: field, message: "this service has no object roots: start it with --root s3://bucket/prefix/")
        }
        let prefix: S3Location
        do throws(DownloadError) {
            prefix = try S3Location(parsing: given.hasSuffix("/") ? given : given + "/")
            // A name that would make the key too long or invalid is refused now, not later.
            if let name { _ = try prefix.appending(name) }
        } catch {
            throw FieldError(field: field, message: error.message)
        }
        // Keys hold no `.` or `..` component (S3Location refuses them), so a prefix is inside
        // a root exactly when its key starts with the root's, which ends with `/`.
        guard objectRoots.contains(where: { $0.bucket == prefix.bucket && prefix.key.hasPrefix($0.key) }) else {
            throw FieldError(field: field, message: "\(given) is outside the download roots")
        }
        return .object(bucket: prefix.bucket, key: prefix.key + (name ?? ""), staging: staging)
    }

    private func request(for input: DownloadInput, _ fields: CheckedFields, destination: DownloadDestination)
        -> DownloadRequest
    {
        var request = DownloadRequest(
            url: fields.url, destination: destination,
            priority: fields.priority, expectedSize: input.expectedSize, checksum: fields.checksum,
            headers: fields.headers)
        request.maxBytesPerSecond = input.maxBytesPerSecond
        request.connections = input.connections
        request.mirrors = fields.mirrors
        request.pieces = fields.pieces
        request.stream = fields.stream
        return request
    }

    /// An input's fields but its directory, checked: what every download must satisfy,
    /// whoever runs it (this service, or the workers of a shared queue: ``ClusterBatch``).
    struct CheckedFields {
        var url: URL
        var name: String?
        var priority: DownloadPriority
        var checksum: Checksum?
        var headers: [(name: String, value: String)]
        var mirrors: [URL] = []
        var pieces: PieceChecksums?
        /// A stream download's options (``DownloadInput/isStream``).
        var stream: HLSStream?
    }

    static func checkedFields(of input: DownloadInput, field: String) throws(FieldError) -> CheckedFields {
        guard let url = URL(string: input.url), url.isWebAddress else {
            throw FieldError(field: "\(field).url", message: "'\(input.url)' is not an http or https URL")
        }
        var mirrors: [URL] = []
        for (index, text) in (input.mirrors ?? []).enumerated() {
            guard let mirror = URL(string: text), mirror.isWebAddress else {
                throw FieldError(field: "\(field).urls[\(index + 1)]", message: "'\(text)' is not an http or https URL")
            }
            guard mirror.isMirrorAddress else {
                throw FieldError(
                    field: "\(field).urls[\(index + 1)]",
                    message: "a mirror must not hold user info: credentials go only to the first URL's origin")
            }
            mirrors.append(mirror)
        }
        var pieces: PieceChecksums?
        if let given = input.pieces {
            guard let algorithm = Checksum.Algorithm(name: given.algorithm) else {
                throw FieldError(field: "\(field).pieces.algorithm", message: "use sha-256, sha-1 or md5")
            }
            do throws(DownloadError) {
                pieces = try PieceChecksums(algorithm, length: given.length, hashes: given.hashes)
            } catch {
                throw FieldError(field: "\(field).pieces", message: error.message)
            }
            if let size = input.expectedSize, !pieces!.fits(total: size) {
                throw FieldError(
                    field: "\(field).pieces", message: "\(given.hashes.count) pieces of \(given.length) bytes do not make \(size)")
            }
        }
        if mirrors.count > 63 {
            throw FieldError(field: "\(field).urls", message: "at most 64 addresses per download")
        }
        var name: String?
        if let given = input.name {
            guard let safe = FileNaming.sanitize(given), safe == given else {
                throw FieldError(field: "\(field).name", message: "'\(given)' is not a plain file name")
            }
            name = safe
        }
        var priority = DownloadPriority.normal
        if let given = input.priority {
            guard let parsed = Self.priorities[given] else {
                throw FieldError(
                    field: "\(field).priority",
                    message: "'\(given)' is not one of \(Self.priorities.keys.sorted().joined(separator: ", "))")
            }
            priority = parsed
        }
        var checksum: Checksum?
        if let given = input.checksum {
            do throws(DownloadError) {
                checksum = try Checksum(parsing: given)
            } catch {
                throw FieldError(field: "\(field).checksum", message: error.message)
            }
        }
        if let size = input.expectedSize, size < 0 {
            throw FieldError(field: "\(field).expectedSize", message: "must not be negative")
        }
        if let rate = input.maxBytesPerSecond, !(1...(1 << 40)).contains(rate) {
            throw FieldError(field: "\(field).maxBytesPerSecond", message: "must be a number of bytes per second, at least 1")
        }
        if let connections = input.connections, !(1...64).contains(connections) {
            throw FieldError(field: "\(field).connections", message: "must be between 1 and 64")
        }
        var headers: [(name: String, value: String)] = []
        for (headerName, value) in (input.headers ?? [:]).sorted(by: { $0.key < $1.key }) {
            // Bytes, not Characters: "\r\n" is one Character, equal to neither "\r" nor "\n".
            let breaksLine: (String) -> Bool = { text in
                text.utf8.contains { (byte: UInt8) -> Bool in byte == 13 || byte == 10 || byte == 0 }
            }
            guard !headerName.isEmpty, !breaksLine(headerName), !headerName.contains(":"), !breaksLine(value) else {
                throw FieldError(field: "\(field).headers", message: "header '\(headerName)' is not a valid header")
            }
            headers.append((headerName, value))
        }
        return CheckedFields(
            url: url, name: name, priority: priority, checksum: checksum, headers: headers, mirrors: mirrors,
            pieces: pieces, stream: try stream(of: input, field: field))
    }

    /// The stream options of `input`, checked; `nil` unless it asks for a stream download.
    static func stream(of input: DownloadInput, field: String) throws(FieldError) -> HLSStream? {
        guard input.isStream else { return nil }
        if input.hls == nil, input.zsync == true { return nil }
        let given = input.hls ?? DownloadInput.StreamInput()
        var stream = HLSStream(renditions: given.renditions ?? false)
        if let variant = given.variant {
            guard let choice = HLSVariantChoice(argument: variant) else {
                throw FieldError(
                    field: "\(field).hls.variant",
                    message: "'\(variant)' is not best, worst, a bandwidth (bits per second) or WIDTHxHEIGHT")
            }
            stream.variant = choice
        }
        if let duration = given.duration {
            guard duration > 0, duration <= HLSStream.longestDuration else {
                throw FieldError(
                    field: "\(field).hls.duration",
                    message: "must be a number of seconds, more than 0 and at most \(Int(HLSStream.longestDuration))")
            }
            stream.maxDuration = .seconds(duration)
        }
        let conflicting: [(String, Bool)] = [
            ("urls", input.mirrors != nil), ("checksum", input.checksum != nil), ("pieces", input.pieces != nil),
            ("zsync", input.zsync == true), ("seeds", input.seeds != nil),
        ]
        if let (name, _) = conflicting.first(where: \.1) {
            throw FieldError(
                field: "\(field).\(name)", message: "a stream (hls) is checked segment by segment: it takes no \(name)")
        }
        if let directory = input.directory, isObjectAddress(directory), stream.renditions {
            throw FieldError(
                field: "\(field).hls.renditions",
                message: "renditions are saved beside a stream's file: into an object, give the stream alone")
        }
        return stream
    }

    /// The resolved directory for `given`, inside a root.
    package func directory(_ given: String?, field: String) throws(FieldError) -> String {
        guard let given else { return defaultDirectory }
        let joined = given.hasPrefix("/") ? given : defaultDirectory + "/" + given
        guard let resolved = Self.realPath(joined) else {
            throw FieldError(field: field, message: "directory \(given) does not exist")
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: resolved, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw FieldError(field: field, message: "\(given) is not a directory")
        }
        guard Self.isInside(resolved, roots) else {
            throw FieldError(field: field, message: "\(given) is outside the download roots")
        }
        return resolved
    }

    static let priorities: [String: DownloadPriority] = [
        "veryLow": .veryLow, "low": .low, "normal": .normal, "high": .high, "veryHigh": .veryHigh,
    ]

    /// Whether `path` is one of `roots` or below one.
    static func isInside(_ path: String, _ roots: [String]) -> Bool {
        roots.contains { root in path == root || path.hasPrefix(root == "/" ? "/" : root + "/") }
    }

    /// The canonical path of an existing file, with every symbolic link resolved.
    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
