import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// Puts a staged, verified file into its object: one `PUT`, or a multipart upload whose
/// parts survive a kill.
///
/// The download has already checked the file (size, checksum, pieces). The object appears
/// at its key only at the last step (the `PUT`, or `CompleteMultipartUpload`), and only
/// after `beforeCommit` (a shared queue's fence) says this run still holds the job.
///
/// A multipart upload's ID and each finished part (number, ETag, SHA-256) are kept in a
/// sidecar beside the staged file, written atomically after every part, so that a run
/// after a kill uploads only the parts it had not finished. A segmented download sends its
/// parts while it runs (``PartStream``), into the same sidecar; the parts are bound to the
/// content's validator, and the sidecar is abandoned whenever the staged bytes are
/// discarded (a download that starts over, a checksum that does not match). The sidecar is checked against
/// the store (`ListParts`) before it is trusted: an upload the store no longer has (aborted
/// by a lifecycle rule) starts again. Any other unfinished upload to the same key is a
/// stale one of ours (killed before its sidecar was written) and is aborted, never leaked.
struct ObjectUpload: Sendable {
    let client: S3Client
    let location: S3Location
    /// The staged file, complete and verified.
    let file: PartialFile
    let size: Int64
    /// The upload's sidecar: ``UploadRecord`` as JSON.
    let recordPath: String
    let threadPool: NIOThreadPool
    let retry: RetryPolicy
    let settings: DownloadManager.ObjectStorage
    /// The content's validator (see ``UploadRecord/validator``).
    let validator: String?
    /// Told of each request to the store that is tried again (the download's `retrying`
    /// events).
    let onRetry: @Sendable (_ attempt: Int, _ error: DownloadError, _ delay: Duration) -> Void
    /// Serialises the sidecar's writes.
    private let saving = NIOLock()

    init(
        client: S3Client, location: S3Location, file: PartialFile, size: Int64, recordPath: String,
        threadPool: NIOThreadPool, retry: RetryPolicy, settings: DownloadManager.ObjectStorage, validator: String?,
        onRetry: @escaping @Sendable (_ attempt: Int, _ error: DownloadError, _ delay: Duration) -> Void = { _, _, _ in }
    ) {
        self.onRetry = onRetry
        self.client = client
        self.location = location
        self.file = file
        self.size = size
        self.recordPath = recordPath
        self.threadPool = threadPool
        self.retry = retry
        self.settings = settings
        self.validator = validator
    }

    /// What a multipart upload has done so far, kept in the sidecar.
    struct UploadRecord: Codable, Sendable, Hashable {
        var bucket: String
        var key: String
        var uploadID: String
        var size: Int64
        var partSize: Int64
        var parts: [Part]
        /// The validator (`ETag` or `Last-Modified`) of the content the parts were read
        /// from, empty for a content without one: parts of another version of the content
        /// (or of one that cannot say it is the same) are never completed into the object.
        /// `nil` in a record written by a release that uploaded only after the download was
        /// verified.
        var validator: String?

        struct Part: Codable, Sendable, Hashable {
            var number: Int
            var etag: String
            var sha256: String?
        }

        func matches(_ location: S3Location, size: Int64, partSize: Int64, validator: String?) -> Bool {
            bucket == location.bucket && key == location.key && self.size == size && self.partSize == partSize
                && (self.validator == nil || (self.validator != "" && self.validator == validator))
        }
    }

    /// Uploads the file and returns the object's ETag: the parts not yet sent (a
    /// ``PartStream`` may have sent some while the download ran, or a run before a kill),
    /// then the completion.
    ///
    /// - Parameter beforeCommit: runs just before the object is made visible; throwing stops
    ///   the upload (its parts are kept for a later run).
    func run(beforeCommit: () async throws(DownloadError) -> Void) async throws(DownloadError) -> String {
        let plan = try self.plan()
        if plan.isSinglePut {
            let stored = try await io { () throws(DownloadError) in Self.load(recordPath) }
            if let stored { try await abandon(stored) }
            let (body, sha256) = try await read(0..<size)
            try await beforeCommit()
            return try await toTheEnd { () throws(DownloadError) in
                try await retrying { () throws(DownloadError) in
                    try await client.putObject(location, body: body, sha256: sha256)
                }
            }
        }
        let shared = try await begin(plan: plan)
        try await uploadParts(UploadResumption.missing(shared.withLockedValue { $0 }, plan: plan), plan: plan, into: shared)
        let record = shared.withLockedValue { $0 }
        try await beforeCommit()
        let parts = record.parts.sorted { $0.number < $1.number }.map {
            S3CompletedPart(number: $0.number, etag: $0.etag, checksumSHA256: $0.sha256)
        }
        let uploadID = record.uploadID
        let etag = try await toTheEnd { () throws(DownloadError) in
            try await retrying { () throws(DownloadError) in
                try await client.completeMultipartUpload(location, uploadID: uploadID, parts: parts)
            }
        }
        try await io { () throws(DownloadError) in Self.remove(recordPath) }
        return etag
    }

    /// How the object goes: one `PUT`, or parts of the configured size.
    func plan() throws(DownloadError) -> MultipartPlan {
        try MultipartPlan(
            totalSize: size, singlePutThreshold: settings.singlePutThreshold, preferredPartSize: settings.partSize)
    }

    /// The multipart upload to go on with: the sidecar's, as far as the store confirms it,
    /// else a new one (see ``resumable(_:plan:)``). Its parts are added to the record as
    /// ``send(part:plan:into:)`` finishes them.
    func begin(plan: MultipartPlan) async throws(DownloadError) -> NIOLockedValueBox<UploadRecord> {
        let stored = try await io { () throws(DownloadError) in Self.load(recordPath) }
        return NIOLockedValueBox(try await resumable(stored, plan: plan))
    }

    /// The upload to continue: the stored one if the store still has it (its parts that the
    /// store lacks or holds with another ETag are forgotten), else a new one. Other
    /// unfinished uploads to the key are aborted.
    private func resumable(_ stored: UploadRecord?, plan: MultipartPlan) async throws(DownloadError) -> UploadRecord {
        let partSize = plan.partSize
        var keep: UploadRecord?
        switch UploadResumption.start(
            stored: stored, location: location, size: size, partSize: partSize, validator: validator)
        {
        case .verify(let record):
            do {
                let listed = try await retrying { () throws(DownloadError) in
                    try await client.listParts(location, uploadID: record.uploadID)
                }
                keep = UploadResumption.reconcile(record, listed: listed, plan: plan)
            } catch where error.code == .objectStorage && error.statusCode == 404 {
                keep = nil  // NoSuchUpload: aborted meanwhile
            }
        case .abandon(let record):
            try await abandon(record)
        case .fresh:
            break
        }
        let pending = try await retrying { () throws(DownloadError) in try await client.pendingUploads(location) }
        for uploadID in UploadResumption.stale(pending, keeping: keep?.uploadID) {
            try await retrying { () throws(DownloadError) in
                try await client.abortMultipartUpload(location, uploadID: uploadID)
            }
        }
        if let keep {
            if keep != stored { try await save(keep) }
            return keep
        }
        let uploadID = try await retrying { () throws(DownloadError) in
            try await client.createMultipartUpload(location)
        }
        let record = UploadRecord(
            bucket: location.bucket, key: location.key, uploadID: uploadID, size: size, partSize: partSize, parts: [],
            validator: validator ?? "")
        try await save(record)
        return record
    }

    /// Uploads `numbers`, ``DownloadManager/ObjectStorage/uploadConcurrency`` at a time,
    /// recording each in the sidecar as it finishes.
    private func uploadParts(
        _ numbers: [Int], plan: MultipartPlan, into record: NIOLockedValueBox<UploadRecord>
    ) async throws(DownloadError) {
        let width = max(1, settings.uploadConcurrency)
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                var next = numbers.makeIterator()
                func start() -> Bool {
                    guard let number = next.next() else { return false }
                    group.addTask { try await send(part: number, plan: plan, into: record) }
                    return true
                }
                for _ in 0..<width where !start() { break }
                while try await group.next() != nil { _ = start() }
            }
        } catch let error as DownloadError {
            throw error
        } catch {
            throw DownloadError(.cancelled, "the upload to \(location) was interrupted")
        }
    }

    /// Reads part `number` from the staged file, uploads it, and records it in `record` and
    /// the sidecar (one sidecar write at a time, each with every part finished so far).
    func send(part number: Int, plan: MultipartPlan, into record: NIOLockedValueBox<UploadRecord>)
        async throws(DownloadError)
    {
        guard let range = plan.byteRange(ofPart: number) else { return }
        let uploadID = record.withLockedValue { $0.uploadID }
        let (body, sha256) = try await read(range)
        let part = try await retrying { () throws(DownloadError) in
            try await client.uploadPart(location, uploadID: uploadID, number: number, body: body, sha256: sha256)
        }
        record.withLockedValue {
            $0.parts.append(UploadRecord.Part(number: number, etag: part.etag, sha256: part.checksumSHA256))
        }
        let saving = self.saving
        let path = recordPath
        try await io { () throws(DownloadError) in
            saving.lock()
            defer { saving.unlock() }
            try Self.store(record.withLockedValue { $0 }, at: path)
        }
    }

    /// Aborts `record`'s upload and forgets it.
    private func abandon(_ record: UploadRecord) async throws(DownloadError) {
        if let location = try? S3Location(bucket: record.bucket, key: record.key) {
            try await retrying { () throws(DownloadError) in
                try await client.abortMultipartUpload(location, uploadID: record.uploadID)
            }
        }
        try await io { () throws(DownloadError) in Self.remove(recordPath) }
    }

    /// Aborts the upload a sidecar names, if any, and removes the sidecar: for a download
    /// that is cancelled or fails for good.
    static func abandon(recordPath: String, client: S3Client, threadPool: NIOThreadPool) async {
        guard let record = try? await threadPool.perform({ () throws(DownloadError) in load(recordPath) }) else { return }
        if let location = try? S3Location(bucket: record.bucket, key: record.key) {
            try? await client.abortMultipartUpload(location, uploadID: record.uploadID)
        }
        try? await threadPool.perform { () throws(DownloadError) in remove(recordPath) }
    }

    // MARK: - Files

    /// Reads `range` of the staged file and its SHA-256, on the I/O pool.
    private func read(_ range: Range<Int64>) async throws(DownloadError) -> (ByteBuffer, String) {
        let file = self.file
        return try await io { () throws(DownloadError) in
            let body = try file.read(range)
            return (body, S3Client.sha256(of: body))
        }
    }

    private func save(_ record: UploadRecord) async throws(DownloadError) {
        let path = recordPath
        try await io { () throws(DownloadError) in try Self.store(record, at: path) }
    }

    static func load(_ path: String) -> UploadRecord? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return try? JSONDecoder().decode(UploadRecord.self, from: data)
    }

    /// Writes the sidecar atomically and durably: a temporary file, synced, renamed (the
    /// rename is made durable with the staged file's own directory sync at the end, and a
    /// lost rename only costs parts uploaded again).
    static func store(_ record: UploadRecord, at path: String) throws(DownloadError) {
        let data: Data
        do { data = try JSONEncoder().encode(record) } catch {
            throw DownloadError(.fileSystem, "cannot encode the upload record \(path): \(error)")
        }
        let temporary = path + ".tmp"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .fileSystem("write", path: temporary, errno: errno) }
        let written = data.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        let synced = durableSync(descriptor)
        close(descriptor)
        guard written == data.count, synced == 0 else { throw .fileSystem("write", path: temporary, errno: errno) }
        guard rename(temporary, path) == 0 else { throw .fileSystem("rename", path: temporary, errno: errno) }
    }

    static func remove(_ path: String) {
        _ = unlink(path)
    }

    private func io<T: Sendable>(_ body: @escaping @Sendable () throws(DownloadError) -> T) async throws(DownloadError)
        -> T
    {
        try await threadPool.perform(body)
    }

    /// Runs the step that makes the object visible to its end, even if the transfer is
    /// cancelled meanwhile (a pause, a worker's shutdown): once `beforeCommit` has let a
    /// shared queue record the completion, the object must follow, as a file's rename does.
    private func toTheEnd<T: Sendable>(_ body: @escaping @Sendable () async throws(DownloadError) -> T)
        async throws(DownloadError) -> T
    {
        let step = Task { () async -> Result<T, DownloadError> in
            do throws(DownloadError) {
                return .success(try await body())
            } catch {
                return .failure(error)
            }
        }
        return try await step.value.get()
    }

    /// One S3 request under the retry policy.
    private func retrying<T: Sendable>(_ body: () async throws(DownloadError) -> T) async throws(DownloadError) -> T {
        switch await withRetries(retry, onRetry: onRetry, body) {
        case .succeeded(let value): return value
        case .failed(let error), .waitingForNetwork(let error): throw error
        case .interrupted(let error):
            throw error ?? DownloadError(.cancelled, "the upload to \(location) was interrupted")
        }
    }
}
