#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
public import Foundation
import NIOPosix

/// Keeps a directory identical to a published ``Manifest``.
///
/// A sync runs five stages (``SyncStage``): it fetches the manifest with a conditional
/// GET (an unchanged manifest costs one 304), plans by comparing every entry's size and
/// SHA-256 with the local file (digests are cached in the manager's journal, keyed by path,
/// size, mtime and inode), downloads missing and changed files through the
/// ``DownloadManager`` (so slots, priorities, resume, retries and the journal apply),
/// verifies, and commits: deletes extraneous files, or switches a staged tree in.
///
/// ```swift
/// let manager = DownloadManager(journal: try Journal(path: Journal.defaultPath))
/// let summary = try await Syncer(manager: manager).sync(
///     from: URL(string: "https://example.com/content/manifest.xml")!,
///     into: URL(fileURLWithPath: "/srv/content"),
///     options: SyncOptions(deleteExtraneous: true, atomic: true))
/// print(summary.downloaded.files, "new,", summary.updated.files, "updated")
/// ```
///
/// Every file is verified against the manifest's size and SHA-256 before it replaces
/// anything. A sync never writes or deletes through a symbolic link: a link where the
/// manifest needs a directory makes the sync refuse with ``DownloadError/Code/unsafePath``
/// before it changes anything, and a link where the manifest has a file is replaced by the
/// file (the link's target is untouched). An interrupted sync continues where it stopped
/// when run again: finished files are kept and partial ones resume.
///
/// With ``SyncOptions/atomic``, new files are staged in `.haul-staging-NAME` beside the
/// directory, which needs write access to the directory's parent and the same file system.
/// The staged tree is completed with hard links to the unchanged files and exchanged with
/// the directory in one `renameat2(RENAME_EXCHANGE)` (`renamex_np(RENAME_SWAP)` on Apple
/// platforms): a reader that opens the directory sees the old set or the new set, never a
/// mix. If any file fails, nothing is switched and the staged files wait for the next run.
public struct Syncer: Sendable {
    /// The manager that runs the downloads; its journal, if any, remembers manifests and digests.
    public let manager: DownloadManager

    /// Creates a syncer that downloads through `manager`.
    public init(manager: DownloadManager) {
        self.manager = manager
    }

    /// Brings `directory` in line with the manifest at `manifestURL`.
    ///
    /// The directory (and its parents) are created if missing, except for a dry run. Files that fail do not stop
    /// the others; they are listed in ``SyncSummary/failures`` and
    /// ``SyncSummary/matchesManifest`` is then `false`.
    ///
    /// - Parameters:
    ///   - manifestURL: An `http` or `https` URL of an XML or JSON manifest.
    ///   - directory: The directory to keep in step.
    ///   - options: Deletion, dry run, atomic switch, re-hashing and priority.
    ///   - events: Called in order for each ``SyncEvent``, on the syncing task.
    /// - Returns: What changed, with counts and bytes.
    /// - Throws: ``DownloadError``: the manifest's fetch error (`httpStatus`, `network`, …),
    ///   `invalidManifest`, `unsafePath` (a symbolic link in the way, or another sync of
    ///   the same directory running), or `fileSystem` when the directory cannot be changed.
    public func sync(
        from manifestURL: URL,
        into directory: URL,
        options: SyncOptions = SyncOptions(),
        events: @escaping @Sendable (SyncEvent) -> Void = { _ in }
    ) async throws(DownloadError) -> SyncSummary {
        guard manifestURL.isWebAddress else {
            throw .invalid("the manifest URL '\(manifestURL.removingUserInfo.absoluteString)' is not an http or https URL")
        }
        guard directory.isFileURL else { throw .invalid("\(directory) is not a directory path") }
        if !options.dryRun {
            do {
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            } catch {
                throw DownloadError(.fileSystem, "cannot create \(directory.path): \(error.localizedDescription)")
            }
        }
        var run = SyncRun(
            manager: manager, manifestURL: manifestURL, root: Self.resolve(directory.path), options: options,
            emit: events)
        let summary = try await run.execute()
        events(.finished(summary))
        return summary
    }

    /// The directory's real path when it exists (so links to it are followed once, here),
    /// else its absolute, standardized path.
    static func resolve(_ path: String) -> String {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        let standardized = (absolute as NSString).standardizingPath
        if let resolved = realpath(standardized, nil) {
            defer { free(resolved) }
            return String(cString: resolved)
        }
        return standardized
    }
}
