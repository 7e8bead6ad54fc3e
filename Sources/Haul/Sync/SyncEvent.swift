/// Something that happened during a sync, delivered in order to the sync's event handler.
public enum SyncEvent: Sendable {
    /// A stage began.
    case stage(SyncStage)
    /// The manifest arrived; `notModified` is `true` when the server answered 304 and the
    /// copy remembered in the journal was used.
    case manifest(version: String, fileCount: Int, notModified: Bool)
    /// The plan is ready.
    case planned(SyncPlan)
    /// A file was downloaded, verified and is in place (or staged, for an atomic sync).
    case fileSynced(path: String, action: SyncPlan.Action, bytes: Int64)
    /// A file could not be synced; the sync goes on with the others.
    case fileFailed(path: String, error: DownloadError)
    /// An extraneous file was deleted.
    case deleted(path: String)
    /// The sync ended.
    case finished(SyncSummary)
}
