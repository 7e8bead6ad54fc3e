public import Foundation

/// Something that happened to a download.
public enum DownloadEvent: Sendable {
    /// The download waits for a slot.
    case queued
    /// Another live process sharing the journal runs this download: the manager follows
    /// it from the journal (progress at each of its checkpoints, then its end) instead of
    /// downloading it a second time, and takes it over at once if that process dies.
    case attached(JournalOwner)
    /// The download took a slot and its first request is going out.
    case started
    /// Bytes arrived; sent at most about ten times a second.
    case progress(DownloadProgress)
    /// An attempt failed with a retryable error; the next one starts after `delay`,
    /// resuming from the bytes already on disk where the server allows it.
    case retrying(attempt: Int, reason: DownloadError, delay: Duration)
    /// One of the download's sources (its URL or a mirror, see
    /// ``DownloadRequest/mirrors``) failed, or answered with other content, and is no longer
    /// used in this run: the download goes on from the others, keeping its partial file.
    case sourceDropped(URL, reason: DownloadError)
    /// A delta download (``DownloadRequest/delta``) scanned its seeds and wrote what they
    /// hold into its partial file: what is left to fetch, and what was reused.
    case deltaPrepared(DeltaReport)
    /// The download was paused; its partial file is kept.
    case paused
    /// The download's host cannot be reached and a probe failed too: the download waits,
    /// without spending retries, until the host answers again.
    case networkLost(host: String)
    /// The host answers again; the download queues for a slot and resumes.
    case networkRestored(host: String)
    /// The download finished and was verified.
    case completed(DownloadResult)
    /// The download failed for good.
    case failed(DownloadError)
    /// The download was cancelled.
    case cancelled(DownloadError.CancellationReason)

    /// Whether no event follows this one.
    public var isTerminal: Bool {
        switch self {
        case .completed, .failed, .cancelled: true
        default: false
        }
    }
}
