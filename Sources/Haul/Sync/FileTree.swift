#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import CHaulShims
import Foundation

/// Walking and removing directory trees without ever following a symbolic link.
enum FileTree {
    /// One thing found below a root.
    struct Item: Sendable {
        /// The path relative to the root, `/`-separated.
        var path: String
        var status: FileStatus
    }

    /// Whether `name` is one of Haul's own working files, which a sync neither lists as
    /// content nor carries into a new tree.
    static func isHaulFile(_ name: String) -> Bool {
        name.hasSuffix(PartialPaths.partialSuffix) || name.hasSuffix(PartialPaths.metadataSuffix)
            || name.hasSuffix(PartialPaths.metadataSuffix + ".tmp")
    }

    /// Everything below `root`, parents before children; symbolic links are listed, not
    /// followed, and Haul's working files are left out.
    static func walk(_ root: String, includingHaulFiles: Bool = false) throws(DownloadError) -> [Item] {
        var items: [Item] = []
        var pending: [String] = [""]
        while let relative = pending.popLast() {
            let directory = relative.isEmpty ? root : root + "/" + relative
            for name in try names(in: directory) where includingHaulFiles || !isHaulFile(name) {
                let path = relative.isEmpty ? name : relative + "/" + name
                guard let status = try FileStatus.of(root + "/" + path) else { continue }
                items.append(Item(path: path, status: status))
                if status.kind == .directory { pending.append(path) }
            }
        }
        return items
    }

    /// The names in a directory, without `.` and `..`.
    static func names(in directory: String) throws(DownloadError) -> [String] {
        guard let stream = opendir(directory) else {
            throw DownloadError.fileSystem("list", path: directory, errno: errno)
        }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Removes `path` and, if it is a directory (not a link to one), everything below it.
    /// Nothing is ever removed through a symbolic link. A missing path is not an error.
    static func remove(_ path: String) throws(DownloadError) {
        guard let status = try FileStatus.of(path) else { return }
        if status.kind == .directory {
            for name in try names(in: path) { try remove(path + "/" + name) }
            guard rmdir(path) == 0 || errno == ENOENT else {
                throw DownloadError.fileSystem("remove", path: path, errno: errno)
            }
        } else {
            guard unlink(path) == 0 || errno == ENOENT else {
                throw DownloadError.fileSystem("remove", path: path, errno: errno)
            }
        }
    }

    /// Creates `relative`'s directories below `root` as needed, refusing to go through
    /// anything that is not a real directory.
    static func makeDirectories(_ relative: String, in root: String, mode: mode_t = 0o755) throws(DownloadError) {
        var path = root
        for component in relative.split(separator: "/") {
            path += "/" + component
            if mkdir(path, mode) == 0 { continue }
            let failure = errno
            guard failure == EEXIST, let status = try FileStatus.of(path), status.kind == .directory else {
                if failure == EEXIST {
                    throw DownloadError(
                        .unsafePath, "\(path) is in the way of a directory the manifest needs, and is not one")
                }
                throw DownloadError.fileSystem("create the directory", path: path, errno: failure)
            }
        }
    }

    /// Flushes the file system holding `path` to stable storage: `syncfs` on Linux, `sync`
    /// elsewhere.
    static func syncFileSystem(containing path: String) {
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { return sync() }
        _ = chaul_sync_filesystem(descriptor)
        close(descriptor)
    }

    /// Makes a directory entry change (rename, link, unlink) in `directory` durable.
    static func syncDirectory(_ directory: String) {
        let descriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        _ = durableSync(descriptor)
        close(descriptor)
    }
}
