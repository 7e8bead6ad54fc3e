#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import NIOPosix

/// One sync, stage by stage. See ``Syncer`` for the behaviour.
struct SyncRun {
    let manager: DownloadManager
    /// The manifest's URL, without user info.
    let manifestURL: URL
    /// `Authorization: Basic` from the manifest URL's user info, for its origin only: the
    /// manifest and the files on the same origin.
    let credentials: [(name: String, value: String)]
    /// The directory, as an absolute real path.
    let root: String
    let options: SyncOptions
    let emit: @Sendable (SyncEvent) -> Void

    /// `.haul-staging-NAME` beside the directory, for atomic syncs.
    var staging: String {
        let parent = PathText.directory(of: root)
        let name = PathText.lastComponent(root)
        return (parent == "/" ? "" : parent) + "/.haul-staging-" + name
    }

    private var journal: Journal? { manager.journal }

    init(
        manager: DownloadManager, manifestURL: URL, root: String, options: SyncOptions,
        emit: @escaping @Sendable (SyncEvent) -> Void
    ) {
        self.manager = manager
        self.manifestURL = manifestURL.removingUserInfo
        self.credentials = DownloadRequest.basicAuthorization(from: manifestURL).map { [$0] } ?? []
        self.root = root
        self.options = options
        self.emit = emit
    }

    mutating func execute() async throws(DownloadError) -> SyncSummary {
        // 1. Fetch the manifest.
        emit(.stage(.fetchManifest))
        let (manifest, base, notModified) = try await fetchManifest()
        emit(.manifest(version: manifest.version, fileCount: manifest.files.count, notModified: notModified))

        // 2. Plan.
        emit(.stage(.plan))
        var cache = try HashCache(journal: journal, directories: options.atomic ? [root, staging] : [root])
        let planner = SyncPlanner(
            manifest: manifest, root: root, options: options, manifestNotModified: notModified,
            threadPool: manager.threadPool)
        let work = try await planner.plan(cache: &cache)
        try? cache.flush()
        emit(.planned(work.plan))
        var summary = SyncSummary(plan: work.plan)
        summary.dryRun = options.dryRun
        for item in work.unchanged { summary.unchanged.add(item.entry.size) }
        guard !options.dryRun else { return summary }

        let lock = try SyncLock(directory: root)
        defer { lock.release() }

        // 3. Transfer.
        emit(.stage(.transfer))
        let target = options.atomic ? staging : root
        if options.atomic {
            if try FileStatus.of(staging).map({ $0.kind != .directory }) ?? false { try FileTree.remove(staging) }
            if mkdir(staging, 0o755) != 0, errno != EEXIST {
                throw DownloadError.fileSystem("create the staging directory", path: staging, errno: errno)
            }
            try lock.add(staging)
            try StagedSwitch.prepare(staging: staging, downloads: work.downloads)
        } else {
            for deletion in work.deletions where deletion.inTheWay {
                try FileTree.remove(root + "/" + deletion.path)
                cache.forget(root + "/" + deletion.path)
                if deletion.status.kind != .directory {
                    summary.deleted.add(deletion.status.size)
                    emit(.deleted(path: deletion.path))
                }
            }
        }
        var placed: [String: FileStatus] = [:]
        let transfers = SyncTransfers(
            manager: manager, baseURL: base, target: target, live: root, priority: options.priority,
            reuseVerified: options.atomic, credentials: credentials, credentialOrigin: RedirectPolicy.Origin(manifestURL),
            emit: emit)
        let outcomes = await transfers.run(work.downloads, cache: cache)
        for outcome in outcomes {
            switch outcome.result {
            case .success(let placedFile):
                placed[outcome.download.entry.path] = placedFile.status
                if let sha256 = outcome.download.entry.sha256 {
                    cache.remember(target + "/" + outcome.download.entry.path, status: placedFile.status, sha256: sha256)
                }
                summary.bytesTransferred += placedFile.bytesTransferred
                summary.bytesReused += placedFile.bytesReused
                if outcome.download.action == .download {
                    summary.downloaded.add(outcome.download.entry.size)
                } else {
                    summary.updated.add(outcome.download.entry.size)
                }
            case .failure(let error):
                summary.failures.append(SyncSummary.Failure(path: outcome.download.entry.path, error: error))
            }
        }
        try? cache.flush()

        // 4. Verify: every file is where it should be, as planned or as downloaded.
        emit(.stage(.verify))
        summary.failures += try verify(work, placed: placed, target: target)
        for blocked in work.plan.blocked {
            summary.failures.append(
                SyncSummary.Failure(path: blocked.path, error: DownloadError(.unsafePath, blocked.reason)))
        }
        guard summary.failures.isEmpty else {
            summary.failures.sort { $0.path < $1.path }
            return summary
        }

        // 5. Commit.
        emit(.stage(.commit))
        if options.atomic {
            try StagedSwitch(root: root, staging: staging).commit(work: work, placed: Set(placed.keys))
            for deletion in work.deletions where deletion.status.kind != .directory {
                summary.deleted.add(deletion.status.size)
                emit(.deleted(path: deletion.path))
            }
            cache.forgetEverything(below: staging)
            for download in work.downloads {
                if let status = placed[download.entry.path], let sha256 = download.entry.sha256 {
                    cache.remember(root + "/" + download.entry.path, status: status, sha256: sha256)
                }
            }
        } else {
            for deletion in work.deletions where !deletion.inTheWay {
                let full = root + "/" + deletion.path
                if deletion.status.kind == .directory {
                    // Kept if something new appeared in it, or one of Haul's partial files.
                    if rmdir(full) != 0, errno != ENOENT, errno != ENOTEMPTY, errno != EEXIST {
                        throw DownloadError.fileSystem("remove", path: full, errno: errno)
                    }
                    continue
                }
                guard unlink(full) == 0 || errno == ENOENT else {
                    throw DownloadError.fileSystem("delete", path: full, errno: errno)
                }
                cache.forget(full)
                summary.deleted.add(deletion.status.size)
                emit(.deleted(path: deletion.path))
            }
            for item in work.unchanged {
                if let mode = item.entry.mode, mode != item.status.mode {
                    _ = chmod(root + "/" + item.entry.path, mode_t(mode))
                }
            }
            if !work.deletions.isEmpty { FileTree.syncDirectory(root) }
        }
        try? cache.flush()
        return summary
    }

    // MARK: - Stages

    private func fetchManifest() async throws(DownloadError) -> (Manifest, URL, Bool) {
        if let error = manager.tlsSetupError { throw error }
        let remembered = try journal?.syncState(directory: root, manifestURL: manifestURL.absoluteString)
        let fetcher = ManifestFetcher(
            clients: manager.clients, configuration: manager.configuration, logger: manager.logger,
            credentials: credentials)
        let outcome = try await fetcher.fetch(
            manifestURL, etag: remembered?.etag, lastModified: remembered?.etag == nil ? remembered?.lastModified : nil)
        switch outcome {
        case .notModified(let finalURL):
            guard let remembered else {
                throw DownloadError(.protocolViolation, "\(manifestURL.absoluteString) answered 304 to a plain GET")
            }
            return (try Manifest.parse(data: remembered.manifest), finalURL, true)
        case .fetched(let body, let etag, let lastModified, let finalURL):
            let manifest = try Manifest.parse(data: body)
            if let journal, etag != nil || lastModified != nil || remembered != nil {
                try journal.saveSyncState(
                    Journal.SyncState(etag: etag, lastModified: lastModified, manifest: body, version: manifest.version),
                    directory: root, manifestURL: manifestURL.absoluteString)
            }
            return (manifest, finalURL, false)
        }
    }

    /// Checks every entry once more, without reading content: unchanged files must still
    /// be the files that were planned, downloaded ones the files that were placed.
    private func verify(_ work: SyncPlanner.Result, placed: [String: FileStatus], target: String)
        throws(DownloadError) -> [SyncSummary.Failure]
    {
        var failures: [SyncSummary.Failure] = []
        for item in work.unchanged {
            let full = root + "/" + item.entry.path
            guard let now = try FileStatus.of(full), now.isSameVersion(as: item.status) else {
                failures.append(
                    SyncSummary.Failure(
                        path: item.entry.path,
                        error: DownloadError(.fileSystem, "\(full) changed during the sync: sync again")))
                continue
            }
        }
        for download in work.downloads {
            guard let expected = placed[download.entry.path] else { continue }  // already a failure
            let full = target + "/" + download.entry.path
            guard let now = try FileStatus.of(full), now.isSameVersion(as: expected), now.size == download.entry.size
            else {
                failures.append(
                    SyncSummary.Failure(
                        path: download.entry.path,
                        error: DownloadError(.fileSystem, "\(full) changed after it was downloaded: sync again")))
                continue
            }
        }
        return failures
    }
}
