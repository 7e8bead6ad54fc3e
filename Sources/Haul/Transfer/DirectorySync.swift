#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// Makes renames into a directory durable with as few directory syncs as possible.
///
/// A file renamed into place survives a crash only once its directory has been synced by
/// an fsync that started after the rename. When many downloads finish in one directory at
/// once, one caller syncs while the others wait, and the next sync covers every rename made
/// before it started (a group commit), instead of one open, fsync and close each.
///
/// Each manager has one (``DownloadManager/directorySync``), which all its downloads share;
/// two managers renaming into one directory each sync it, which is as durable, only less
/// grouped. Callers run on the I/O pool: ``sync(directoryOf:)`` blocks.
final class DirectorySync: @unchecked Sendable {
    init() {}

    private struct Directory {
        /// Renames recorded so far; each caller's ticket is the count after its own.
        var requested: UInt64 = 0
        /// Every rename up to this ticket is durable.
        var completed: UInt64 = 0
        var syncing = false
        /// Callers inside ``sync(directoryOf:)`` for this directory: the entry (and its
        /// ticket numbering) lives as long as anyone holds a ticket.
        var users = 0
    }

    // `@unchecked Sendable`: `directories` is only touched with `condition` locked.
    private let condition = NSCondition()
    private var directories: [String: Directory] = [:]
    private var syncCount = 0

    /// How many directory syncs ran, and how many directories have callers inside; for tests.
    var statistics: (syncs: Int, directories: Int) {
        condition.lock()
        defer { condition.unlock() }
        return (syncCount, directories.count)
    }

    /// Returns once the directory holding `path` has been synced after the caller's rename
    /// of `path`. A failed directory sync is ignored, as it always was: the file itself is
    /// already synced, and the rename is at worst redone by the next run.
    func sync(directoryOf path: String) {
        let directory = Self.parent(of: path)
        condition.lock()
        defer { condition.unlock() }
        directories[directory, default: Directory()].requested += 1
        directories[directory]!.users += 1
        let ticket = directories[directory]!.requested
        while directories[directory]!.completed < ticket {
            if directories[directory]!.syncing {
                condition.wait()
                continue
            }
            directories[directory]!.syncing = true
            let target = directories[directory]!.requested
            condition.unlock()
            Self.fsyncDirectory(directory)
            condition.lock()
            directories[directory]!.completed = target
            directories[directory]!.syncing = false
            syncCount += 1
            condition.broadcast()
        }
        // Forget a directory nobody is waiting on, so a run over many folders stays small.
        directories[directory]!.users -= 1
        if directories[directory]!.users == 0 { directories[directory] = nil }
    }

    static func parent(of path: String) -> String {
        guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return "." }
        if slash == path.utf8.startIndex { return "/" }
        return String(path[..<slash])
    }

    private static func fsyncDirectory(_ directory: String) {
        let descriptor = open(directory, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        _ = durableSync(descriptor)
        _ = close(descriptor)
    }
}
