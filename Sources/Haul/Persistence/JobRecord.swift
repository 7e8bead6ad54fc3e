package import Foundation

/// One job as a ``JobStore`` keeps it: a row of the journal's `job` table.
///
/// Plain values only; how the SQLite journal reads and writes it is in
/// `JobRecord+Database.swift`.
package struct JobRecord: Codable, Hashable, Sendable {
    package var id: String
    package var url: String
    package var finalURL: String?
    /// `file` (destinationPath is the file) or `directory` (destinationPath is the folder).
    package var destinationKind: String
    package var destinationPath: String
    package var destinationName: String?
    package var partialPath: String
    package var state: JobState
    package var priority: Int
    package var attempts: Int
    /// Bytes of the partial file known to be on stable storage.
    package var bytesCommitted: Int64
    package var totalBytes: Int64?
    /// The validator, as `etag:VALUE` or `last-modified:VALUE`.
    package var validator: String?
    package var expectedSize: Int64?
    /// `ALGORITHM=HEX`.
    package var checksum: String?
    /// JSON array of `[name, value]` pairs.
    package var headers: String?
    package var lastError: String?
    package var createdAt: Date
    package var updatedAt: Date
    package var finishedAt: Date?
    // Added by migration v2.
    /// The owner token (see ``OwnerLocks``) of the process that holds the job while it is
    /// queued, running or paused in that process.
    package var owner: Int64?
    /// The owner token of the process that should run the job: the one that added or
    /// adopted it.
    package var session: Int64?
    /// The boot of the machine that last checkpointed the job (see ``ProcessIdentity``).
    package var bootID: String?
    /// A command left by another process: `pause`, `cancel` or `resume`.
    package var command: String?
    package var errorCode: String?
    package var bytesPerSecond: Double
    // Added by migration v6: the completed file, for a conditional request next time.
    /// Where the completed file was saved.
    package var filePath: String?
    package var fileSize: Int64?
    /// Its modification time, in nanoseconds since 1970.
    package var fileModified: Int64?
    /// The validator its content came with (as ``validator``).
    package var fileValidator: String?
    // Added by migration v11.
    /// For a download completed into an object store (whose `s3://` address is
    /// ``filePath``): the object's entity tag, as the store gave it.
    package var fileTag: String?
    // Added by migration v5.
    /// The credential headers the job was started with, as a ``CredentialReference``;
    /// `nil` when it has none.
    package var credentials: String?
    /// The download's own speed limit in bytes per second, if any.
    package var maxBytesPerSecond: Int?
    /// The request's own connections (``DownloadRequest/connections``).
    package var connections: Int?
    // Added by migration v9.
    /// The request's mirrors (``DownloadRequest/mirrors``), as a JSON array of URLs; `nil`
    /// without any.
    package var mirrors: String?
    /// The request's piece checksums (``DownloadRequest/pieces``), as
    /// `{"algorithm": …, "length": …, "hashes": […]}`; `nil` without any.
    package var pieces: String?
    /// Where the content is fetched from now, when not from ``url`` (``DownloadRequest/location``).
    package var location: String?
    // Added by migration v12: what the run that completed the job moved.
    /// Bytes that came over the network in that run; `nil` until it completes (and for
    /// rows completed before v12).
    package var bytesTransferred: Int64?
    /// Whether that run found the content unchanged (a `304`) and fetched nothing.
    package var unchanged = false
    // Added by migration v13.
    /// The request's zsync control file and seeds (``DownloadRequest/delta``), as
    /// ``encode(delta:seeds:)`` writes them; `nil` for any other download. A resumed delta
    /// download needs the control file again (the block table says what to verify), and
    /// its address may no longer answer.
    package var delta: String?
    // Added by migration v14.
    /// The request's stream options (``DownloadRequest/stream``) as
    /// ``HLSStream/encoded`` writes them; `nil` for any other download.
    package var stream: String?

    /// A new queued record for `request`; `nil` for memory destinations, which are not journaled.
    init?(request: DownloadRequest, paths: PartialPaths?, now: Date = Date()) {
        guard let paths else { return nil }
        id = request.id.rawValue
        url = request.url.absoluteString
        finalURL = nil
        switch request.destination {
        case .file(let file):
            destinationKind = "file"
            destinationPath = file.path
            destinationName = nil
        case .directory(let directory, let name):
            destinationKind = "directory"
            destinationPath = directory.path
            destinationName = name
        case .object(let bucket, let key, let staging):
            // The staging directory rides in the name's column: an object has no file name.
            destinationKind = "object"
            destinationPath = "s3://\(bucket)/\(key)"
            destinationName = staging.path
        case .memory:
            return nil
        }
        partialPath = paths.partial
        state = .queued
        priority = request.priority.rawValue
        attempts = 0
        bytesCommitted = 0
        totalBytes = request.expectedSize
        validator = nil
        expectedSize = request.expectedSize
        checksum = request.checksum?.description
        // Credential headers stay out of the journal unless the request says otherwise; the
        // manager's ``CredentialVault`` keeps them and fills in the reference.
        let secret = request.headers.filter { request.isCredential($0.name) }
        let stored = secret.isEmpty || request.storesCredentials ? request.headers : request.headers.filter {
            !request.isCredential($0.name)
        }
        headers = stored.isEmpty ? nil : Self.encode(headers: stored)
        credentials =
            secret.isEmpty
            ? nil : CredentialReference(names: secret.map { $0.name }, stored: request.storesCredentials).text
        lastError = nil
        createdAt = now
        updatedAt = now
        finishedAt = nil
        owner = nil
        session = nil
        bootID = nil
        command = nil
        errorCode = nil
        bytesPerSecond = 0
        filePath = nil
        fileSize = nil
        fileModified = nil
        fileValidator = nil
        fileTag = nil
        maxBytesPerSecond = request.maxBytesPerSecond
        connections = request.connections
        mirrors = Self.encode(urls: request.mirrors)
        pieces = request.pieces.map(Self.encode(pieces:))
        location = request.location?.absoluteString
        bytesTransferred = nil
        delta = request.delta.map { Self.encode(delta: $0) }
        stream = request.stream?.encoded
    }

    /// Whether another live process holds this row: it runs it or has it in memory, or
    /// it queued it and has yet to admit it. The Swift twin of ``Journal/heldElsewhereSQL``.
    func isHeld(byOtherThan me: Int64?, live: Set<Int64>) -> Bool {
        guard state.isUnfinished else { return false }
        if let owner { return owner != me && live.contains(owner) }
        if state == .queued, let session { return session != me && live.contains(session) }
        return false
    }

    /// The token of the process holding the row, if any.
    package var holder: Int64? { owner ?? session }

    /// The completed file this row describes, when it is still there unchanged and may be
    /// revalidated with a conditional request instead of downloaded again.
    func completedFile() -> CompletedFile? {
        guard let filePath, let fileSize, let fileModified, let validator = fileValidator.flatMap(Self.decode(validator:))
        else { return nil }
        return CompletedFile(
            path: filePath, size: fileSize, modified: fileModified, objectTag: fileTag, validator: validator)
    }

    /// The request this record describes.
    package func request() throws(DownloadError) -> DownloadRequest {
        guard let url = URL(string: url) else { throw .invalid("journal entry \(id) has a bad URL '\(self.url)'") }
        let destination: DownloadDestination
        switch destinationKind {
        case "file":
            destination = .file(URL(fileURLWithPath: destinationPath, isDirectory: false))
        case "object":
            guard let location = try? S3Location(parsing: destinationPath), let staging = destinationName else {
                throw .invalid("journal entry \(id) has a bad object destination '\(destinationPath)'")
            }
            destination = .object(
                bucket: location.bucket, key: location.key, staging: URL(fileURLWithPath: staging, isDirectory: true))
        default:
            destination = .directory(URL(fileURLWithPath: destinationPath, isDirectory: true), name: destinationName)
        }
        var request = DownloadRequest(
            url: url, destination: destination, id: DownloadID(id),
            priority: DownloadPriority(rawValue: priority) ?? .normal, expectedSize: expectedSize,
            checksum: try checksum.map { text throws(DownloadError) in try Checksum(parsing: text) },
            headers: headers.map(Self.decode(headers:)) ?? [])
        if let reference = credentialReference {
            request.sensitiveHeaderNames = Set(reference.names.filter { !request.isCredential($0) })
            request.storesCredentials = reference.stored
        }
        request.maxBytesPerSecond = maxBytesPerSecond
        request.connections = connections
        request.mirrors = mirrors.map(Self.decode(urls:)) ?? []
        request.location = location.flatMap(URL.init(string:))
        if let pieces {
            guard let decoded = Self.decode(pieces: pieces) else {
                throw .invalid("journal entry \(id) has unreadable piece checksums")
            }
            request.pieces = decoded
        }
        if let delta {
            guard let decoded = Self.decode(delta: delta) else {
                throw .invalid("journal entry \(id) has an unreadable zsync control file")
            }
            request.delta = decoded
        }
        if let stream {
            guard let decoded = HLSStream(encoded: stream) else {
                throw .invalid("journal entry \(id) has unreadable stream options '\(stream)'")
            }
            request.stream = decoded
        }
        return request
    }

    /// What ``credentials`` says.
    var credentialReference: CredentialReference? { credentials.flatMap(CredentialReference.init(text:)) }

    static func encode(headers: [(name: String, value: String)]) -> String {
        let pairs = headers.map { [$0.name, $0.value] }
        let data = (try? JSONSerialization.data(withJSONObject: pairs)) ?? Data("[]".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    static func decode(headers: String) -> [(name: String, value: String)] {
        guard let pairs = try? JSONSerialization.jsonObject(with: Data(headers.utf8)) as? [[String]] else { return [] }
        return pairs.compactMap { $0.count == 2 ? (name: $0[0], value: $0[1]) : nil }
    }

    /// `urls` as a JSON array of strings; `nil` for none.
    package static func encode(urls: [URL]) -> String? {
        guard !urls.isEmpty else { return nil }
        let data = (try? JSONSerialization.data(withJSONObject: urls.map(\.absoluteString))) ?? Data("[]".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    private struct StoredPieces: Codable {
        var algorithm: String
        var length: Int64
        var hashes: [String]
    }

    /// `pieces` as JSON.
    package static func encode(pieces: PieceChecksums) -> String {
        let stored = StoredPieces(algorithm: pieces.algorithm.rawValue, length: pieces.length, hashes: pieces.hashes)
        return (try? JSONEncoder().encode(stored)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    /// The piece checksums of ``encode(pieces:)``'s JSON; `nil` when unreadable.
    package static func decode(pieces text: String) -> PieceChecksums? {
        guard let stored = try? JSONDecoder().decode(StoredPieces.self, from: Data(text.utf8)),
            let algorithm = Checksum.Algorithm(rawValue: stored.algorithm)
        else { return nil }
        return try? PieceChecksums(algorithm, length: stored.length, hashes: stored.hashes)
    }

    private struct StoredDelta: Codable {
        var controlURL: String
        var seeds: [String]?
        /// The control file as zsyncmake writes it, in Base64.
        var control: String
    }

    /// `delta` as JSON: the control file's address, the seeds (unless `seeds` is false: a
    /// shared queue's workers scan only their own destination, never files a submitter
    /// names), and the control file itself.
    package static func encode(delta: DeltaSource, seeds: Bool = true) -> String {
        let stored = StoredDelta(
            controlURL: delta.controlURL.absoluteString, seeds: seeds ? delta.seeds.map(\.absoluteString) : nil,
            control: Data(delta.control.encoded()).base64EncodedString())
        return (try? JSONEncoder().encode(stored)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    /// The delta source of ``encode(delta:seeds:)``'s JSON; `nil` when unreadable.
    package static func decode(delta text: String) -> DeltaSource? {
        guard let stored = try? JSONDecoder().decode(StoredDelta.self, from: Data(text.utf8)),
            let controlURL = URL(string: stored.controlURL), let control = Data(base64Encoded: stored.control)
        else { return nil }
        return try? DeltaSource(
            controlFile: control, at: controlURL, seeds: (stored.seeds ?? []).compactMap(URL.init(string:)))
    }

    /// The URLs of a JSON array of strings; what is not a URL is left out.
    package static func decode(urls text: String) -> [URL] {
        guard let strings = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String] else { return [] }
        return strings.compactMap(URL.init(string:))
    }

    static func decode(validator text: String) -> Validator? {
        if text.hasPrefix("etag:") { return .etag(String(text.dropFirst(5))) }
        if text.hasPrefix("last-modified:") { return .lastModified(String(text.dropFirst(14))) }
        return nil
    }

    static func encode(validator: Validator?) -> String? {
        switch validator {
        case .etag(let value): "etag:" + value
        case .lastModified(let value): "last-modified:" + value
        case nil: nil
        }
    }
}
