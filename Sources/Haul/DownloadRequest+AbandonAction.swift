extension DownloadRequest {
    /// What happens to a file download's partial file when every task awaiting its result
    /// is cancelled, as when a SwiftUI `.task` ends because its view went away.
    ///
    /// The download stops either way, and its result throws ``DownloadError/Code/cancelled``
    /// with the reason ``DownloadError/CancellationReason/noLongerWanted``. Memory
    /// destinations have no partial file, so for them this changes nothing.
    public enum AbandonAction: Sendable, Hashable {
        /// Keep the partial file, so asking for the download again resumes it; the
        /// journal, if any, records the download as paused. The default: a large partial
        /// is expensive to fetch again.
        case keepPartial
        /// Delete the partial file, as ``DownloadHandle/cancel()`` does. For downloads not
        /// worth resuming, such as thumbnails cancelled as they scroll off screen.
        case deletePartial
    }
}
