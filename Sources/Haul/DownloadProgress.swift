/// A snapshot of one download's progress.
public struct DownloadProgress: Sendable, Hashable {
    /// Bytes of the content that are on disk (or in memory), including resumed bytes.
    public var completedBytes: Int64
    /// Bytes of this download received over the network in this run: without the bytes a
    /// resume found already there, with any fetched again after a restart. A download that
    /// another process runs, followed from the journal, reports 0.
    public var transferredBytes: Int64
    /// The content's size, when the server said or the request named it.
    public var totalBytes: Int64?
    /// A smoothed transfer rate in bytes per second.
    public var bytesPerSecond: Double
    /// The speed limit in effect, in bytes per second: the lowest of the download's own,
    /// its host's and the overall limit (which running downloads share); `nil` when none
    /// applies. Set on the progress events of a running download.
    public var limit: Int?

    /// The fraction done, from 0 to 1, when the total is known.
    public var fractionCompleted: Double? {
        guard let total = totalBytes, total > 0 else { return nil }
        return min(1, Double(completedBytes) / Double(total))
    }

    /// The estimated time until completion, when the total and a rate are known.
    public var estimatedTimeRemaining: Duration? {
        guard let total = totalBytes, bytesPerSecond > 1 else { return nil }
        let remaining = max(0, total - completedBytes)
        return .milliseconds(Int64(Double(remaining) / bytesPerSecond * 1000))
    }

    /// A progress report from its parts.
    public init(
        completedBytes: Int64 = 0, totalBytes: Int64? = nil, bytesPerSecond: Double = 0, limit: Int? = nil,
        transferredBytes: Int64 = 0
    ) {
        self.completedBytes = completedBytes
        self.transferredBytes = transferredBytes
        self.totalBytes = totalBytes
        self.bytesPerSecond = bytesPerSecond
        self.limit = limit
    }
}

/// A snapshot of the whole manager's progress: every download it has been given.
public struct AggregateProgress: Sendable, Hashable {
    /// Bytes done across all downloads, finished ones included.
    public var completedBytes: Int64 = 0
    /// Sum of the known totals; `nil` while any active download's size is unknown.
    public var totalBytes: Int64?
    /// Sum of the active downloads' rates.
    public var bytesPerSecond: Double = 0
    /// Downloads waiting for a slot.
    public var queued = 0
    /// Downloads holding a slot.
    public var running = 0
    /// Paused downloads.
    public var paused = 0
    /// Downloads waiting for their host to answer again.
    public var waiting = 0
    /// Completed downloads.
    public var completed = 0
    /// Of the ``completed`` downloads, those whose content was unchanged (`304 Not
    /// Modified`): nothing was fetched (``DownloadResult/isUnchanged``).
    public var unchanged = 0
    /// Bytes received from servers by this manager's downloads, ended and active: what
    /// moved over the network, where ``completedBytes`` also counts bytes resumed from
    /// partial files and the sizes of unchanged files.
    public var transferredBytes: Int64 = 0
    /// Failed or cancelled downloads.
    public var failed = 0

    /// The estimated time until everything is done, when the totals and a rate are known.
    public var estimatedTimeRemaining: Duration? {
        DownloadProgress(completedBytes: completedBytes, totalBytes: totalBytes, bytesPerSecond: bytesPerSecond)
            .estimatedTimeRemaining
    }

    /// No downloads: zero bytes, no rate, nothing running.
    public init() {}
}
