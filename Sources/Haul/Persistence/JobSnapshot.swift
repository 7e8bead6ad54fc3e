public import Foundation

/// A journaled download as `haul list` shows it.
public struct JobSnapshot: Sendable, Hashable, Codable {
    /// The download's ID.
    public var id: DownloadID
    /// The requested URL.
    public var url: String
    /// Where the job stands.
    public var state: JobState
    /// The priority, as the `rawValue` of a ``DownloadPriority``.
    public var priority: Int
    /// Bytes known to be on disk.
    public var bytes: Int64
    /// The whole file's size, once a response has told it.
    public var totalBytes: Int64?
    /// The last measured rate, in bytes per second; 0 unless running.
    public var bytesPerSecond: Double
    /// The destination file, or the directory when the name is not known yet.
    public var destination: String
    /// Retries made so far.
    public var attempts: Int
    /// The last error's code (see ``DownloadError/Code``), if any.
    public var errorCode: String?
    /// The last error's message, if any.
    public var error: String?
    /// When the job was first added.
    public var createdAt: Date
    /// When the job last changed.
    public var updatedAt: Date
    /// When the job completed, failed or was cancelled.
    public var finishedAt: Date?
    /// For a completed job, the bytes that came over the network in the run that completed
    /// it (the rest of ``bytes`` were resumed); `nil` otherwise, and for a job an older
    /// release completed.
    public var bytesTransferred: Int64?
    /// Whether the run that completed the job found the content unchanged (`304 Not
    /// Modified`) and fetched nothing.
    public var isUnchanged: Bool = false

    /// A short name for the download: the file name.
    public var name: String { PathText.lastComponent(destination) }

    /// A snapshot from its parts (a service's client builds them from the API's answers).
    package init(
        id: DownloadID, url: String, state: JobState, priority: Int, bytes: Int64, totalBytes: Int64?,
        bytesPerSecond: Double, destination: String, attempts: Int, errorCode: String?, error: String?,
        createdAt: Date, updatedAt: Date, finishedAt: Date?, bytesTransferred: Int64? = nil, isUnchanged: Bool = false
    ) {
        self.id = id
        self.url = url
        self.state = state
        self.priority = priority
        self.bytes = bytes
        self.totalBytes = totalBytes
        self.bytesPerSecond = bytesPerSecond
        self.destination = destination
        self.attempts = attempts
        self.errorCode = errorCode
        self.error = error
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.finishedAt = finishedAt
        self.bytesTransferred = bytesTransferred
        self.isUnchanged = isUnchanged
    }

    /// Decodes a snapshot; one encoded before ``bytesTransferred`` and ``isUnchanged``
    /// existed reads as nothing known and not unchanged.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(DownloadID.self, forKey: .id)
        url = try container.decode(String.self, forKey: .url)
        state = try container.decode(JobState.self, forKey: .state)
        priority = try container.decode(Int.self, forKey: .priority)
        bytes = try container.decode(Int64.self, forKey: .bytes)
        totalBytes = try container.decodeIfPresent(Int64.self, forKey: .totalBytes)
        bytesPerSecond = try container.decode(Double.self, forKey: .bytesPerSecond)
        destination = try container.decode(String.self, forKey: .destination)
        attempts = try container.decode(Int.self, forKey: .attempts)
        errorCode = try container.decodeIfPresent(String.self, forKey: .errorCode)
        error = try container.decodeIfPresent(String.self, forKey: .error)
        createdAt = try container.decode(Date.self, forKey: .createdAt)
        updatedAt = try container.decode(Date.self, forKey: .updatedAt)
        finishedAt = try container.decodeIfPresent(Date.self, forKey: .finishedAt)
        bytesTransferred = try container.decodeIfPresent(Int64.self, forKey: .bytesTransferred)
        isUnchanged = try container.decodeIfPresent(Bool.self, forKey: .isUnchanged) ?? false
    }

    package init(_ record: JobRecord) {
        id = DownloadID(record.id)
        url = record.url
        state = record.state
        priority = record.priority
        bytes = record.bytesCommitted
        totalBytes = record.totalBytes
        bytesPerSecond = record.state == .running ? record.bytesPerSecond : 0
        if record.destinationKind == "file" {
            destination = record.destinationPath
        } else if record.stream != nil, record.state == .completed, let saved = record.filePath {
            // Where a stream was saved, with its container's extension.
            destination = saved
        } else if record.destinationKind == "object" {
            // The object's URL: the key, or the prefix and the name the staged file took.
            if record.destinationPath.hasSuffix("/") {
                let staged = String(PathText.lastComponent(record.partialPath).dropLast(PartialPaths.partialSuffix.count))
                let name = staged.split(separator: "-", maxSplits: 2).dropFirst(2).first.map(String.init) ?? staged
                destination = record.filePath ?? record.destinationPath + name
            } else {
                destination = record.destinationPath
            }
        } else if record.state == .completed, let saved = record.filePath {
            // Where it was saved (a stream's file has its container's extension).
            destination = saved
        } else {
            let name =
                record.destinationName
                ?? String(PathText.lastComponent(record.partialPath).dropLast(PartialPaths.partialSuffix.count))
            destination = PathText.appending(name, to: record.destinationPath)
        }
        attempts = record.attempts
        errorCode = record.errorCode
        error = record.lastError
        createdAt = record.createdAt
        updatedAt = record.updatedAt
        finishedAt = record.finishedAt
        if record.state == .completed {
            bytesTransferred = record.bytesTransferred
            isUnchanged = record.unchanged
        }
    }
}
