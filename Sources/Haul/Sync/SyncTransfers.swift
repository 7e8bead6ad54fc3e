#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// Downloads a sync's missing and changed files through the manager, a window at a time,
/// and gives each its manifest mode and mtime.
struct SyncTransfers: Sendable {
    /// A file in place: its status after mode and mtime were set.
    struct Placed: Sendable {
        var status: FileStatus
        var bytesTransferred: Int64
        /// Bytes of an updated file taken from its old version (a delta download), not fetched.
        var bytesReused: Int64 = 0
    }

    struct Outcome: Sendable {
        var download: SyncPlanner.Download
        var result: Result<Placed, DownloadError>
    }

    static let emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    let manager: DownloadManager
    /// What relative URLs resolve against: where the manifest was fetched from.
    let baseURL: URL
    /// Where files go: the directory, or the staging directory of an atomic sync.
    let target: String
    /// Where the files of the last sync are: the directory (the same as ``target`` unless
    /// the sync is atomic). A changed file's old version there seeds a delta download.
    let live: String
    let priority: DownloadPriority
    /// Whether a complete file already at the target may be kept if its SHA-256 matches:
    /// true for a staging directory, where only verified files are ever renamed in.
    let reuseVerified: Bool
    /// Credentials from the manifest URL, sent only to files on ``credentialOrigin``.
    let credentials: [(name: String, value: String)]
    /// The manifest URL's origin.
    let credentialOrigin: RedirectPolicy.Origin?
    let emit: @Sendable (SyncEvent) -> Void

    func run(_ downloads: [SyncPlanner.Download], cache: HashCache) async -> [Outcome] {
        guard !downloads.isEmpty else { return [] }
        // Enough requests in the manager to keep every slot busy, without handing it the
        // whole list at once.
        let window = max(32, manager.configuration.maxConcurrentDownloads * 4)
        var outcomes: [Outcome] = []
        outcomes.reserveCapacity(downloads.count)
        var madeDirectories: Set<Substring> = []
        await withTaskGroup(of: Outcome.self) { group in
            var next = 0
            func add() {
                let download = downloads[next]
                next += 1
                let path = download.entry.path
                if let slash = path.lastIndex(of: "/") {
                    let parent = path[..<slash]
                    if !madeDirectories.contains(parent) {
                        do {
                            try FileTree.makeDirectories(String(parent), in: target)
                            madeDirectories.insert(parent)
                        } catch {
                            group.addTask { Outcome(download: download, result: .failure(error)) }
                            return
                        }
                    }
                }
                var staged: (FileStatus, String?)?
                if reuseVerified, download.entry.sha256 != nil,
                    let status = try? FileStatus.of(target + "/" + path), status.kind == .regular,
                    status.size == download.entry.size
                {
                    staged = (status, cache.digest(of: target + "/" + path, status: status))
                }
                group.addTask { await fetch(download, staged: staged) }
            }
            while next < min(window, downloads.count) { add() }
            while let outcome = await group.next() {
                switch outcome.result {
                case .success:
                    emit(.fileSynced(path: outcome.download.entry.path, action: outcome.download.action, bytes: outcome.download.entry.size))
                case .failure(let error):
                    emit(.fileFailed(path: outcome.download.entry.path, error: error))
                }
                outcomes.append(outcome)
                if next < downloads.count { add() }
            }
        }
        return outcomes
    }

    private func fetch(_ download: SyncPlanner.Download, staged: (FileStatus, String?)?) async -> Outcome {
        let entry = download.entry
        let destination = target + "/" + entry.path
        do throws(DownloadError) {
            var transferred: Int64 = 0
            var reused: Int64 = 0
            if let staged, try await isVerified(staged, path: destination, sha256: entry.sha256) {
                // Staged by an earlier, interrupted atomic sync.
            } else if entry.size == 0 {
                guard entry.sha256 == nil || entry.sha256 == Self.emptySHA256 else {
                    throw DownloadError(
                        .checksumMismatch,
                        "the manifest gives \(entry.path) a size of 0 but a SHA-256 that is not the empty file's")
                }
                try Self.writeEmptyFile(at: destination)
            } else {
                guard let url = entry.resolvedURL(relativeTo: baseURL) else {
                    throw DownloadError.invalid("\(entry.path): '\(entry.url)' is not a valid URL")
                }
                var request = DownloadRequest(
                    url: url, destination: .file(URL(fileURLWithPath: destination, isDirectory: false)),
                    id: DownloadID("sync:" + destination), priority: priority, expectedSize: entry.size,
                    checksum: try Self.checksum(entry.sha256),
                    headers: RedirectPolicy.Origin(url) == credentialOrigin ? credentials : [])
                if download.action == .update { request.delta = await delta(for: entry) }
                let result = try await manager.download(request).result
                transferred = result.bytesTransferred
                if request.delta != nil { reused = max(0, result.byteCount - transferred) }
            }
            let status = try Self.applyAttributes(of: entry, to: destination)
            return Outcome(
                download: download,
                result: .success(Placed(status: status, bytesTransferred: transferred, bytesReused: reused)))
        } catch {
            return Outcome(download: download, result: .failure(error))
        }
    }

    /// The control file a changed file's entry names (``Manifest/Entry/zsync``), fetched and
    /// read, with the file's old version as the seed; `nil` (the file is fetched whole) when
    /// there is none, it cannot be fetched or read, or it describes other content than the
    /// entry (a control file older than the file).
    private func delta(for entry: Manifest.Entry) async -> DeltaSource? {
        guard let url = entry.resolvedZsyncURL(relativeTo: baseURL) else { return nil }
        let old = live + "/" + entry.path
        guard (try? FileStatus.of(old))??.kind == .regular else { return nil }
        let request = DownloadRequest(
            url: url, destination: .memory(limit: DeltaSource.controlFileLimit), id: DownloadID("sync-zsync:" + old), priority: priority,
            headers: RedirectPolicy.Origin(url) == credentialOrigin ? credentials : [])
        guard let result = try? await manager.download(request).result, let data = result.data,
            var delta = try? DeltaSource(controlFile: data, at: result.finalURL), delta.length == entry.size,
            entry.sha256 == nil || delta.control.sha256 == nil || delta.control.sha256?.hex == entry.sha256
        else { return nil }
        delta.seeds = [URL(fileURLWithPath: old)]
        return delta
    }

    private static func checksum(_ sha256: String?) throws(DownloadError) -> Checksum? {
        guard let sha256 else { return nil }
        return try Checksum(.sha256, hex: sha256)
    }

    /// Whether a staged file has the expected digest, from the cache or by hashing it.
    private func isVerified(_ staged: (FileStatus, String?), path: String, sha256: String?) async throws(DownloadError)
        -> Bool
    {
        guard let sha256 else { return false }
        if let cached = staged.1 { return cached == sha256 }
        let hashed = try await SyncPlanner.hash([(path, staged.0)], threadPool: manager.threadPool)
        return hashed.first?.sha256 == sha256
    }

    /// Sets the entry's mode and mtime on a file just placed, and returns its status.
    static func applyAttributes(of entry: Manifest.Entry, to path: String) throws(DownloadError) -> FileStatus {
        if let mode = entry.mode, chmod(path, mode_t(mode)) != 0 {
            throw DownloadError.fileSystem("set the mode of", path: path, errno: errno)
        }
        if let mtime = entry.mtime {
            let seconds = Int(mtime.timeIntervalSince1970)
            var times = [
                timespec(tv_sec: seconds, tv_nsec: 0), timespec(tv_sec: seconds, tv_nsec: 0),
            ]
            if utimensat(AT_FDCWD, path, &times, AT_SYMLINK_NOFOLLOW) != 0 {
                throw DownloadError.fileSystem("set the modification time of", path: path, errno: errno)
            }
        }
        guard let status = try FileStatus.of(path), status.kind == .regular else {
            throw DownloadError(.fileSystem, "\(path) disappeared right after it was downloaded")
        }
        return status
    }

    /// An empty file, made durable and renamed into place like any download.
    static func writeEmptyFile(at path: String) throws(DownloadError) {
        let temporary = path + PartialPaths.partialSuffix
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard descriptor >= 0 else { throw DownloadError.fileSystem("create", path: temporary, errno: errno) }
        let synced = durableSync(descriptor) == 0
        close(descriptor)
        guard synced, rename(temporary, path) == 0 else {
            throw DownloadError.fileSystem("write", path: path, errno: errno)
        }
    }
}
