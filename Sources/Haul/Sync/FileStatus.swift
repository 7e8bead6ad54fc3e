#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// What `lstat` says about one path: never follows a symbolic link.
struct FileStatus: Sendable, Hashable {
    enum Kind: Sendable, Hashable {
        case regular
        case directory
        case symbolicLink
        case other
    }

    var kind: Kind
    var size: Int64
    /// Modification time in nanoseconds since 1970.
    var mtime: Int64
    var inode: UInt64
    /// Permission bits (`st_mode & 07777`).
    var mode: Int

    /// The status of `path`, or `nil` if nothing is there.
    ///
    /// - Throws: ``DownloadError/Code/fileSystem`` for any failure other than a missing path
    ///   (`ENOTDIR` counts as missing: a parent is a file).
    static func of(_ path: String) throws(DownloadError) -> FileStatus? {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            if errno == ENOENT || errno == ENOTDIR { return nil }
            throw DownloadError.fileSystem("inspect", path: path, errno: errno)
        }
        return FileStatus(info)
    }

    init(_ info: stat) {
        switch info.st_mode & S_IFMT {
        case S_IFREG: kind = .regular
        case S_IFDIR: kind = .directory
        case S_IFLNK: kind = .symbolicLink
        default: kind = .other
        }
        size = Int64(info.st_size)
        #if canImport(Darwin)
        let time = info.st_mtimespec
        #else
        let time = info.st_mtim
        #endif
        mtime = Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
        inode = UInt64(info.st_ino)
        mode = Int(info.st_mode) & 0o7777
    }

    init(kind: Kind, size: Int64, mtime: Int64, inode: UInt64, mode: Int) {
        self.kind = kind
        self.size = size
        self.mtime = mtime
        self.inode = inode
        self.mode = mode
    }

    /// Whether `other` is the same file, unmodified: same inode, size and mtime.
    func isSameVersion(as other: FileStatus) -> Bool {
        kind == other.kind && inode == other.inode && size == other.size && mtime == other.mtime
    }
}
