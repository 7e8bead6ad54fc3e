import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A download's completed file as the journal recorded it: where, how big, when last
/// modified, and the validator its content came with. While the file is still there
/// unchanged, the same download is a conditional request (`If-None-Match`, else
/// `If-Modified-Since`), and a `304 Not Modified` completes it without a body.
package struct CompletedFile: Sendable, Hashable {
    var path: String
    var size: Int64
    /// Nanoseconds since 1970.
    var modified: Int64
    var validator: Validator

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
