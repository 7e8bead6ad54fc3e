/// What a sync will change: the outcome of comparing a manifest with a directory.
public struct SyncPlan: Sendable, Hashable {
    /// What happens to one path.
    public enum Action: String, Sendable, Hashable {
        /// The file is missing locally and will be downloaded.
        case download
        /// The local file differs (size, SHA-256, or it is not a regular file) and will be
        /// replaced by a downloaded one.
        case update
        /// The path is not in the manifest and will be deleted (only with
        /// ``SyncOptions/deleteExtraneous``).
        case delete
    }

    /// One change.
    public struct Change: Sendable, Hashable {
        /// The path relative to the directory.
        public var path: String
        /// What happens to it.
        public var action: Action
        /// Bytes to download, or the size of what is deleted.
        public var size: Int64
    }

    /// A manifest entry that cannot be synced as things stand, and why.
    public struct Blocked: Sendable, Hashable {
        /// The entry's path.
        public var path: String
        /// Why, with what to do about it.
        public var reason: String
    }

    /// The manifest's version label.
    public var version: String
    /// Whether the server answered 304 and the remembered manifest was used.
    public var manifestNotModified: Bool
    /// Every change, downloads and updates in manifest order, then deletions.
    public var changes: [Change]
    /// Entries already up to date.
    public var unchangedCount: Int
    /// Their total size.
    public var unchangedBytes: Int64
    /// Local paths the manifest does not list, kept because deletion was not asked for.
    public var extraneousKept: [String]
    /// Entries that cannot be synced, such as a file whose place is taken by a local
    /// directory when deletion was not asked for.
    public var blocked: [Blocked]

    /// How many changes have `action`.
    public func count(_ action: Action) -> Int { changes.lazy.filter { $0.action == action }.count }

    /// The bytes of the changes with `action`.
    public func bytes(_ action: Action) -> Int64 {
        changes.lazy.filter { $0.action == action }.reduce(0) { $0 + $1.size }
    }

    /// Whether the directory already matches the manifest.
    public var isUpToDate: Bool { changes.isEmpty && blocked.isEmpty }
}
