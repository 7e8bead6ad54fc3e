import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A download's completed file (or object) as the journal recorded it: where, how big,
/// when last modified (an object: its entity tag), and the validator its content came
/// with. While it is still there unchanged, the same download is a conditional request
/// (`If-None-Match`, else `If-Modified-Since`), and a `304 Not Modified` completes it
/// without a body.
package struct CompletedFile: Codable, Sendable, Hashable {
    /// The file's path, or the object's `s3://bucket/key` address.
    var path: String
    var size: Int64
    /// A file's modification time, in nanoseconds since 1970 (an object's: 0).
    var modified: Int64
    /// An object's entity tag, as its store gave it when the object was stored; `nil` for
    /// a file.
    var objectTag: String? = nil
    var validator: Validator

    /// The object this is, if it is one.
    var object: S3Location? {
        guard objectTag != nil else { return nil }
        return try? S3Location(parsing: path)
    }

    /// Where the completed download is, as ``DownloadResult/fileURL`` says it: the file's
    /// URL, or the object's `s3://` one.
    var url: URL { object?.address ?? URL(fileURLWithPath: path) }

    /// Whether it is still there unchanged: a file with the recorded size and modification
    /// time (see ``isUnchanged``), an object with the recorded size and entity tag, as a
    /// `HEAD` of it in `store` says. An object that cannot be asked about (no store, the
    /// store unreachable) counts as changed: it is downloaded again.
    func isUnchanged(in store: S3Client?) async -> Bool {
        guard let object else { return isUnchanged }
        guard let store else { return false }
        do {
            guard let stored = try await store.headObject(object) else { return false }
            return stored.size == size && stored.etag == objectTag
        } catch {
            return false
        }
    }

    /// Reads the size and modification time of the file at `path`; `nil` if it is not a
    /// regular file.
    static func attributes(path: String) -> (size: Int64, modified: Int64)? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return attributes(info)
    }

    /// The size and modification time `info` gives of a regular file.
    static func attributes(_ info: stat) -> (size: Int64, modified: Int64)? {
        guard (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        #if canImport(Darwin)
        let modified = Int64(info.st_mtimespec.tv_sec) * 1_000_000_000 + Int64(info.st_mtimespec.tv_nsec)
        #else
        let modified = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
        #endif
        return (Int64(info.st_size), modified)
    }

    /// Whether the file is still there with the recorded size and modification time.
    var isUnchanged: Bool {
        guard let now = Self.attributes(path: path) else { return false }
        return now.size == size && now.modified == modified
    }

    /// The header that makes a GET conditional on the content having changed.
    var conditionalHeader: (String, String) {
        switch validator {
        case .etag(let etag): ("If-None-Match", etag)
        case .lastModified(let date): ("If-Modified-Since", date)
        }
    }
}
