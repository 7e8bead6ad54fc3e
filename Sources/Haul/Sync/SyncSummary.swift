/// What a sync did.
public struct SyncSummary: Sendable, Hashable {
    /// A count of files and their bytes.
    public struct Tally: Sendable, Hashable {
        /// How many files.
        public var files = 0
        /// Their total size.
        public var bytes: Int64 = 0

        mutating func add(_ size: Int64) {
            files += 1
            bytes += size
        }
    }

    /// A file that could not be synced.
    public struct Failure: Sendable, Hashable {
        /// Its path relative to the directory.
        public var path: String
        /// What went wrong.
        public var error: DownloadError
    }

    /// The plan the sync followed.
    public var plan: SyncPlan
    /// Missing files downloaded.
    public var downloaded = Tally()
    /// Changed files replaced.
    public var updated = Tally()
    /// Extraneous files deleted.
    public var deleted = Tally()
    /// Files that were already up to date.
    public var unchanged = Tally()
    /// Bytes received from the network for the files (resumed downloads count only what
    /// this run fetched).
    public var bytesTransferred: Int64 = 0
    /// Bytes of updated files taken from their old versions instead (files whose manifest
    /// entry names a zsync control file: see ``Manifest/Entry/zsync``).
    public var bytesReused: Int64 = 0
    /// Files that failed, and blocked entries.
    public var failures: [Failure] = []
    /// Whether this was a dry run, which changes nothing.
    public var dryRun = false

    /// Whether the directory now matches the manifest: every file is in place and
    /// verified. Always `false` for a dry run that found changes.
    public var matchesManifest: Bool {
        failures.isEmpty && plan.blocked.isEmpty && (!dryRun || plan.changes.isEmpty)
    }
}
