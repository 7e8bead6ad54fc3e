import Foundation
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Compares a manifest with a directory and decides, per path, between up to date,
/// missing, changed and extraneous.
///
/// "Up to date" means a regular file whose size and SHA-256 match the entry (size, and
/// the mtime if given, when the entry has no SHA-256). Digests come from the
/// ``HashCache`` when the file's size, mtime and inode are unchanged; other files are
/// hashed on the I/O pool, a few at a time. Nothing here writes to the directory.
struct SyncPlanner {
    /// A file to download.
    struct Download: Sendable {
        var entry: Manifest.Entry
        var action: SyncPlan.Action
    }

    /// An up-to-date file, as it was when planned.
    struct Unchanged: Sendable {
        var entry: Manifest.Entry
        var status: FileStatus
    }

    /// Something to delete.
    struct Deletion: Sendable {
        var path: String
        var status: FileStatus
        /// Whether it stands where the manifest needs a file or a directory, so it must go
        /// before the transfer.
        var inTheWay: Bool
    }

    /// The plan and what carrying it out needs.
    struct Result: Sendable {
        var plan: SyncPlan
        var downloads: [Download]
        var unchanged: [Unchanged]
        /// Files, links and other non-directories, then directories deepest first.
        var deletions: [Deletion]
        /// Everything found in the directory (no Haul working files), for building a staged tree.
        var local: [FileTree.Item]
    }

    let manifest: Manifest
    let root: String
    let options: SyncOptions
    let manifestNotModified: Bool
    let threadPool: NIOThreadPool

    private enum Place {
        case directory
        case missing
        /// Something other than a directory (and not a link) where a directory is needed.
        case inTheWay(String)
    }

    func plan(cache: inout HashCache) async throws(DownloadError) -> Result {
        let rootExists: Bool
        switch try FileStatus.of(root)?.kind {
        case nil: rootExists = false
        case .directory?: rootExists = true
        default: throw DownloadError(.unsafePath, "\(root) exists and is not a directory")
        }

        var manifestPaths: Set<String> = []
        var manifestDirectories: Set<String> = []
        manifestPaths.reserveCapacity(manifest.files.count)
        for entry in manifest.files {
            manifestPaths.insert(entry.path)
            var prefix = Substring()
            for component in entry.path.split(separator: "/").dropLast() {
                prefix = prefix.isEmpty ? component : entry.path[entry.path.startIndex..<component.endIndex]
                manifestDirectories.insert(String(prefix))
            }
        }

        // One walk of the directory (lstat of everything, links not followed) serves both the
        // entries' checks and the search for extraneous paths.
        let local = rootExists ? try FileTree.walk(root) : []
        var statusByPath: [String: FileStatus] = [:]
        statusByPath.reserveCapacity(local.count)
        for item in local { statusByPath[item.path] = item.status }

        var places: [String: Place] = [:]
        var unsafe: [String] = []
        var downloads: [Download] = []
        var unchanged: [Unchanged] = []
        var blocked: [SyncPlan.Blocked] = []
        var toHash: [(index: Int, entry: Manifest.Entry, status: FileStatus)] = []
        var inTheWay: [String: FileStatus] = [:]

        for (index, entry) in manifest.files.enumerated() {
            // The parents first: each must be a real directory, or missing.
            var parentPlace = rootExists ? Place.directory : Place.missing
            let components = entry.path.split(separator: "/")
            var prefix = ""
            for component in components.dropLast() {
                prefix = prefix.isEmpty ? String(component) : prefix + "/" + component
                if case .missing = parentPlace { break }
                if case .inTheWay = parentPlace { break }
                if let known = places[prefix] {
                    parentPlace = known
                    continue
                }
                let full = root + "/" + prefix
                let place: Place
                switch statusByPath[prefix] {
                case nil:
                    place = .missing
                case let status? where status.kind == .directory:
                    place = .directory
                case let status? where status.kind == .symbolicLink:
                    unsafe.append(Self.linkProblem(at: full, root: root, entry: entry.path))
                    place = .missing
                case let status?:
                    place = .inTheWay(prefix)
                    inTheWay[prefix] = status
                }
                places[prefix] = place
                parentPlace = place
            }
            if case .inTheWay(let where_) = parentPlace {
                if options.deleteExtraneous {
                    downloads.append(Download(entry: entry, action: .download))
                } else {
                    blocked.append(
                        SyncPlan.Blocked(
                            path: entry.path,
                            reason: "\(root)/\(where_) is a file where the manifest needs a directory: sync with --delete (deleteExtraneous) to replace it"))
                }
                continue
            }
            if case .missing = parentPlace {
                downloads.append(Download(entry: entry, action: .download))
                continue
            }
            let full = root + "/" + entry.path
            guard let status = statusByPath[entry.path] else {
                downloads.append(Download(entry: entry, action: .download))
                continue
            }
            switch status.kind {
            case .regular:
                if status.size != entry.size {
                    downloads.append(Download(entry: entry, action: .update))
                } else if entry.sha256 != nil {
                    if !options.verifyContents, let digest = cache.digest(of: full, status: status) {
                        if digest == entry.sha256 {
                            unchanged.append(Unchanged(entry: entry, status: status))
                        } else {
                            downloads.append(Download(entry: entry, action: .update))
                        }
                    } else {
                        toHash.append((index, entry, status))
                    }
                } else if let mtime = entry.mtime, status.mtime / 1_000_000_000 != Int64(mtime.timeIntervalSince1970) {
                    downloads.append(Download(entry: entry, action: .update))
                } else {
                    unchanged.append(Unchanged(entry: entry, status: status))
                }
            case .directory:
                if options.deleteExtraneous {
                    inTheWay[entry.path] = status
                    downloads.append(Download(entry: entry, action: .update))
                } else {
                    blocked.append(
                        SyncPlan.Blocked(
                            path: entry.path,
                            reason: "\(full) is a directory where the manifest has a file: sync with --delete (deleteExtraneous) to replace it"))
                }
            case .symbolicLink, .other:
                // Replaced by a rename, which never follows the link.
                downloads.append(Download(entry: entry, action: .update))
            }
        }

        if !unsafe.isEmpty {
            let shown = unsafe.prefix(3).joined(separator: "; ")
            let more = unsafe.count > 3 ? " (and \(unsafe.count - 3) more)" : ""
            throw DownloadError(.unsafePath, "refusing to sync: \(shown)\(more)")
        }

        // Hash what the cache could not vouch for.
        let hashed = try await Self.hash(toHash.map { (root + "/" + $0.entry.path, $0.status) }, threadPool: threadPool)
        var updatesByIndex: [Int: Download] = [:]
        for (item, result) in zip(toHash, hashed) {
            cache.remember(root + "/" + item.entry.path, status: result.status, sha256: result.sha256)
            if result.sha256 == item.entry.sha256 {
                unchanged.append(Unchanged(entry: item.entry, status: result.status))
            } else {
                updatesByIndex[item.index] = Download(entry: item.entry, action: .update)
            }
        }
        if !updatesByIndex.isEmpty {
            // Keep manifest order.
            let order = Dictionary(uniqueKeysWithValues: manifest.files.enumerated().map { ($0.element.path, $0.offset) })
            downloads.append(contentsOf: updatesByIndex.values)
            downloads.sort { order[$0.entry.path, default: 0] < order[$1.entry.path, default: 0] }
        }

        // What the directory has that the manifest does not.
        var deletions: [Deletion] = []
        var deletedDirectories: [Deletion] = []
        var extraneousKept: [String] = []
        var deletedPrefixes: [String] = []
        for item in local {
            if manifestPaths.contains(item.path) {
                if let status = inTheWay[item.path], status.kind == .directory {
                    deletedDirectories.append(Deletion(path: item.path, status: status, inTheWay: true))
                    deletedPrefixes.append(item.path + "/")
                }
                continue
            }
            if manifestDirectories.contains(item.path) {
                if item.status.kind == .directory { continue }
                if item.status.kind == .symbolicLink { continue }  // refused above
                if options.deleteExtraneous {
                    deletions.append(Deletion(path: item.path, status: item.status, inTheWay: true))
                }
                continue
            }
            let below = deletedPrefixes.contains { item.path.hasPrefix($0) }
            if item.status.kind == .directory {
                if options.deleteExtraneous {
                    deletedDirectories.append(Deletion(path: item.path, status: item.status, inTheWay: below))
                }
            } else if options.deleteExtraneous {
                deletions.append(Deletion(path: item.path, status: item.status, inTheWay: below))
            } else {
                extraneousKept.append(item.path)
            }
        }
        // Deepest directories first, so each is empty when its turn comes.
        deletedDirectories.sort { $0.path.utf8.count > $1.path.utf8.count }

        var changes = downloads.map { SyncPlan.Change(path: $0.entry.path, action: $0.action, size: $0.entry.size) }
        changes += deletions.map { SyncPlan.Change(path: $0.path, action: .delete, size: $0.status.size) }
        let plan = SyncPlan(
            version: manifest.version, manifestNotModified: manifestNotModified, changes: changes,
            unchangedCount: unchanged.count, unchangedBytes: unchanged.reduce(0) { $0 + $1.entry.size },
            extraneousKept: extraneousKept, blocked: blocked)
        return Result(
            plan: plan, downloads: downloads, unchanged: unchanged, deletions: deletions + deletedDirectories,
            local: local)
    }

    private static func linkProblem(at full: String, root: String, entry: String) -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(full, &buffer, buffer.count - 1)
        let target = count >= 0 ? String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self) : "?"
        let resolved = realpath(full, nil).map { pointer in
            defer { free(pointer) }
            return String(cString: pointer)
        }
        let outside = resolved.map { !($0 == root || $0.hasPrefix(root + "/")) } ?? true
        let where_ = outside ? "outside the directory" : "inside the directory"
        return "\(full) is a symbolic link (to \(target), \(where_)) and \(String(reflecting: entry)) would be written through it; Haul never writes through links: remove or replace the link"
    }

    /// Hashes files on the I/O pool, a few at a time; results in input order.
    static func hash(_ files: [(String, FileStatus)], threadPool: NIOThreadPool) async throws(DownloadError)
        -> [(status: FileStatus, sha256: String)]
    {
        guard !files.isEmpty else { return [] }
        let width = max(1, min(4, System.coreCount))
        var results = [(status: FileStatus, sha256: String)?](repeating: nil, count: files.count)
        do {
            try await withThrowingTaskGroup(of: (Int, FileStatus, String).self) { group in
                var next = 0
                func add() {
                    let index = next
                    let path = files[index].0
                    next += 1
                    group.addTask {
                        let (status, digest) = try await threadPool.runIfActive { try HashCache.hash(path) }
                        return (index, status, digest)
                    }
                }
                while next < min(width, files.count) { add() }
                while let (index, status, digest) = try await group.next() {
                    results[index] = (status, digest)
                    if next < files.count { add() }
                }
            }
        } catch let error as DownloadError {
            throw error
        } catch {
            throw DownloadError(.fileSystem, "hashing local files failed: \(error)")
        }
        return results.map { $0! }
    }
}
