import Crypto
import Foundation

/// SHA-256 digests of local files, trusted while a file keeps its size, modification time
/// and inode, so a second sync of a large tree does not read it again.
///
/// With a journal the cache is durable (table `fileHash`); without one it lasts for one
/// sync. Changes are kept in memory until ``flush()``.
struct HashCache: Sendable {
    struct Entry: Sendable, Hashable {
        var size: Int64
        var mtime: Int64
        var inode: UInt64
        var sha256: String

        init(size: Int64, mtime: Int64, inode: UInt64, sha256: String) {
            self.size = size
            self.mtime = mtime
            self.inode = inode
            self.sha256 = sha256
        }

        init(_ status: FileStatus, sha256: String) {
            self.init(size: status.size, mtime: status.mtime, inode: status.inode, sha256: sha256)
        }

        func matches(_ status: FileStatus) -> Bool {
            status.kind == .regular && size == status.size && mtime == status.mtime && inode == status.inode
        }
    }

    private let journal: Journal?
    private var entries: [String: Entry]
    private var pendingStores: [String: Entry] = [:]
    private var pendingRemovals: Set<String> = []
    private var pendingTreeRemovals: [String] = []

    /// Loads what the journal knows about files below each of `directories`.
    init(journal: Journal?, directories: [String]) throws(DownloadError) {
        self.journal = journal
        var entries: [String: Entry] = [:]
        if let journal {
            for directory in directories {
                entries.merge(try journal.fileHashes(below: directory)) { _, new in new }
            }
        }
        self.entries = entries
    }

    /// The cached digest of `path`, if its status still matches.
    func digest(of path: String, status: FileStatus) -> String? {
        guard let entry = pendingStores[path] ?? entries[path], entry.matches(status) else { return nil }
        return entry.sha256
    }

    mutating func remember(_ path: String, status: FileStatus, sha256: String) {
        let entry = Entry(status, sha256: sha256)
        guard entries[path] != entry else { return }
        pendingStores[path] = entry
        pendingRemovals.remove(path)
    }

    mutating func forget(_ path: String) {
        pendingStores[path] = nil
        if entries[path] != nil { pendingRemovals.insert(path) }
    }

    mutating func forgetEverything(below directory: String) {
        pendingStores = pendingStores.filter { !$0.key.hasPrefix(directory + "/") }
        pendingTreeRemovals.append(directory)
    }

    /// Writes the changes to the journal in one transaction.
    mutating func flush() throws(DownloadError) {
        defer {
            entries.merge(pendingStores) { _, new in new }
            for path in pendingRemovals { entries[path] = nil }
            pendingStores = [:]
            pendingRemovals = []
            pendingTreeRemovals = []
        }
        try journal?.updateFileHashes(
            store: Array(pendingStores), remove: Array(pendingRemovals), removeBelow: pendingTreeRemovals)
    }

    /// Reads `path` and returns its status (taken before reading, checked after) and SHA-256.
    ///
    /// - Throws: ``DownloadError/Code/fileSystem`` if the file cannot be read or changed
    ///   while it was read.
    static func hash(_ path: String) throws(DownloadError) -> (FileStatus, String) {
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else { throw DownloadError.fileSystem("read", path: path, errno: errno) }
        defer { close(descriptor) }
        var before = stat()
        guard fstat(descriptor, &before) == 0 else { throw DownloadError.fileSystem("inspect", path: path, errno: errno) }
        let bufferSize = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bufferSize, alignment: 16)
        defer { buffer.deallocate() }
        var hasher = SHA256()
        while true {
            let count = read(descriptor, buffer.baseAddress, bufferSize)
            if count < 0 {
                if errno == EINTR { continue }
                throw DownloadError.fileSystem("read", path: path, errno: errno)
            }
            if count == 0 { break }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: buffer[..<count]))
        }
        var after = stat()
        guard fstat(descriptor, &after) == 0 else { throw DownloadError.fileSystem("inspect", path: path, errno: errno) }
        let status = FileStatus(before)
        guard FileStatus(after).isSameVersion(as: status) else {
            throw DownloadError(.fileSystem, "\(path) changed while it was being read: try again once it is stable")
        }
        return (status, Hex.lowercase(hasher.finalize()))
    }
}
