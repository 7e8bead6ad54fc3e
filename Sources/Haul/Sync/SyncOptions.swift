/// How a ``Syncer`` brings a directory in line with a manifest.
public struct SyncOptions: Sendable, Hashable {
    /// Delete files and directories that the manifest does not list (and anything in the
    /// way of its layout, such as a directory where it has a file). Off by default:
    /// extraneous files are reported and kept.
    public var deleteExtraneous: Bool
    /// Plan only: report what would change and change nothing.
    public var dryRun: Bool
    /// Stage every change beside the directory and switch the whole new tree in with one
    /// atomic exchange at the end, so a reader sees the old set or the new set, never a
    /// mix. Without it, each file is replaced on its own, atomically.
    public var atomic: Bool
    /// Hash every local file again instead of trusting the digests cached in the journal.
    public var verifyContents: Bool
    /// The priority of the sync's downloads in the manager.
    public var priority: DownloadPriority

    /// Creates options; by default a plain, non-atomic sync that keeps extraneous files.
    public init(
        deleteExtraneous: Bool = false, dryRun: Bool = false, atomic: Bool = false, verifyContents: Bool = false,
        priority: DownloadPriority = .normal
    ) {
        self.deleteExtraneous = deleteExtraneous
        self.dryRun = dryRun
        self.atomic = atomic
        self.verifyContents = verifyContents
        self.priority = priority
    }
}
