#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import CHaulShims
import Foundation

/// The staging directory of an atomic sync: made ready before the transfer, then
/// completed into the full new tree and exchanged with the directory in one step.
struct StagedSwitch {
    let root: String
    let staging: String

    /// Empties the staging directory of everything but what this sync can still use:
    /// verified files at the paths it will download, their partial files, and the
    /// directories leading to them. What an earlier, different sync left goes.
    static func prepare(staging: String, downloads: [SyncPlanner.Download]) throws(DownloadError) {
        var files: Set<String> = []
        var directories: Set<String> = []
        for download in downloads {
            let path = download.entry.path
            files.insert(path)
            var index = path.startIndex
            while let slash = path[index...].firstIndex(of: "/") {
                directories.insert(String(path[..<slash]))
                index = path.index(after: slash)
            }
        }
        try clean(staging: staging, keepingFiles: files, directories: directories, partials: true)
    }

    private static func clean(
        staging: String, keepingFiles files: Set<String>, directories: Set<String>, partials: Bool
    ) throws(DownloadError) {
        for item in try FileTree.walk(staging, includingHaulFiles: true) {
            switch item.status.kind {
            case .directory where directories.contains(item.path):
                continue
            case .regular where files.contains(item.path):
                continue
            case .regular where partials && FileTree.isHaulFile(item.path):
                var base = item.path
                for suffix in [PartialPaths.partialSuffix, PartialPaths.metadataSuffix, PartialPaths.metadataSuffix + ".tmp"]
                where base.hasSuffix(suffix) {
                    base = String(base.dropLast(suffix.count))
                    break
                }
                if files.contains(base) { continue }
            default:
                break
            }
            try FileTree.remove(staging + "/" + item.path)
        }
    }

    /// Completes the staged tree with everything of the directory that stays (hard links,
    /// so nothing is copied), flushes it, exchanges it with the directory and removes the
    /// old tree.
    func commit(work: SyncPlanner.Result, placed: Set<String>) throws(DownloadError) {
        var directories: Set<String> = []
        for path in placed {
            var index = path.startIndex
            while let slash = path[index...].firstIndex(of: "/") {
                directories.insert(String(path[..<slash]))
                index = path.index(after: slash)
            }
        }
        try Self.clean(staging: staging, keepingFiles: placed, directories: directories, partials: false)

        let deleted = Set(work.deletions.map(\.path))
        var newModes: [String: Int] = [:]
        for item in work.unchanged {
            if let mode = item.entry.mode, mode != item.status.mode { newModes[item.entry.path] = mode }
        }
        for item in work.local where !deleted.contains(item.path) && !placed.contains(item.path) {
            let source = root + "/" + item.path
            let destination = staging + "/" + item.path
            switch item.status.kind {
            case .directory:
                if mkdir(destination, mode_t(item.status.mode)) != 0 {
                    guard errno == EEXIST, try FileStatus.of(destination)?.kind == .directory else {
                        throw DownloadError.fileSystem("create the directory", path: destination, errno: errno)
                    }
                }
                _ = chmod(destination, mode_t(item.status.mode))
            case .regular where newModes[item.path] != nil:
                // A hard link shares its mode with the old tree: copy instead.
                try Self.copy(source, to: destination, mode: newModes[item.path]!)
            default:
                try Self.link(source, to: destination, status: item.status)
            }
        }
        if let rootStatus = try FileStatus.of(root) { _ = chmod(staging, mode_t(rootStatus.mode)) }
        FileTree.syncFileSystem(containing: staging)

        let parent = PathText.directory(of: root)
        if chaul_exchange(staging, root) != 0 {
            let failure = errno
            guard failure == ENOSYS || failure == EINVAL || failure == ENOTSUP else {
                throw DownloadError.fileSystem("switch the staged files into", path: root, errno: failure)
            }
            // No atomic exchange here: two renames, with a moment when the directory is absent
            // (never a mix).
            let old = parent + "/.haul-old-" + PathText.lastComponent(root)
            try FileTree.remove(old)
            guard rename(root, old) == 0 else { throw DownloadError.fileSystem("move aside", path: root, errno: errno) }
            guard rename(staging, root) == 0 else {
                let reason = errno
                _ = rename(old, root)
                throw DownloadError.fileSystem("switch the staged files into", path: root, errno: reason)
            }
            FileTree.syncDirectory(parent)
            try FileTree.remove(old)
            return
        }
        FileTree.syncDirectory(parent)
        // The old tree now sits at the staging path.
        try FileTree.remove(staging)
    }

    /// A hard link to `source` (a link to a symbolic link, never its target), or a copy
    /// where the file system has no hard links.
    private static func link(_ source: String, to destination: String, status: FileStatus) throws(DownloadError) {
        if linkat(AT_FDCWD, source, AT_FDCWD, destination, 0) == 0 { return }
        var failure = errno
        if failure == EEXIST {
            try FileTree.remove(destination)
            if linkat(AT_FDCWD, source, AT_FDCWD, destination, 0) == 0 { return }
            failure = errno
        }
        switch status.kind {
        case .regular where failure == EPERM || failure == EMLINK || failure == ENOTSUP || failure == EXDEV:
            try copy(source, to: destination, mode: status.mode)
        case .symbolicLink where failure == EPERM || failure == EMLINK || failure == ENOTSUP || failure == EXDEV:
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let count = readlink(source, &buffer, buffer.count - 1)
            guard count >= 0, symlink(buffer, destination) == 0 else {
                throw DownloadError.fileSystem("copy the link", path: source, errno: errno)
            }
        default:
            throw DownloadError.fileSystem("link \(source) into", path: destination, errno: failure)
        }
    }

    /// Copies a regular file's content and mtime, with `mode`, and syncs it.
    private static func copy(_ source: String, to destination: String, mode: Int) throws(DownloadError) {
        let input = open(source, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard input >= 0 else { throw DownloadError.fileSystem("read", path: source, errno: errno) }
        defer { close(input) }
        _ = unlink(destination)
        let output = open(destination, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode_t(mode))
        guard output >= 0 else { throw DownloadError.fileSystem("create", path: destination, errno: errno) }
        defer { close(output) }
        let size = 1 << 20
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let count = read(input, buffer, size)
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else { throw DownloadError.fileSystem("read", path: source, errno: errno) }
            if count == 0 { break }
            var written = 0
            while written < count {
                let result = write(output, buffer + written, count - written)
                if result < 0, errno == EINTR { continue }
                guard result > 0 else { throw DownloadError.fileSystem("write", path: destination, errno: errno) }
                written += result
            }
        }
        var info = stat()
        if fstat(input, &info) == 0 {
            #if canImport(Darwin)
            var times = [info.st_atimespec, info.st_mtimespec]
            #else
            var times = [info.st_atim, info.st_mtim]
            #endif
            _ = futimens(output, &times)
        }
        _ = fchmod(output, mode_t(mode))
        guard durableSync(output) == 0 else { throw DownloadError.fileSystem("sync", path: destination, errno: errno) }
    }
}
