/// The stages of a sync, in order.
public enum SyncStage: String, Sendable, Hashable, CaseIterable {
    /// Fetching the manifest, conditionally when an earlier one is known.
    case fetchManifest = "fetch-manifest"
    /// Comparing the manifest with the directory (hashing local files not yet cached).
    case plan
    /// Downloading missing and changed files through the manager.
    case transfer
    /// Checking that every file now matches the manifest.
    case verify
    /// Deleting extraneous files, or switching the staged tree in (``SyncOptions/atomic``).
    case commit
}
