/// Speed limits, changed while downloads run (see ``RateLimiter`` for how they hold).
extension DownloadManager {
    /// The limit across every download, in bytes per second; `nil` for none.
    public nonisolated var overallRateLimit: Int? { rateLimiter.limits.overall }

    /// The limit of each host, in bytes per second; `nil` for none.
    public nonisolated var perHostRateLimit: Int? { rateLimiter.limits.perHost }

    /// Sets the limits across every download and per host, in bytes per second (`nil`:
    /// none). Running downloads take the change at their next body part: within a quarter
    /// of a second at any limit they were held to, sooner when raised.
    ///
    /// - Precondition: a limit is above 0.
    public nonisolated func setRateLimits(overall: Int?, perHost: Int?) {
        precondition((overall ?? 1) > 0 && (perHost ?? 1) > 0, "a rate limit must be above 0")
        rateLimiter.setLimits(overall: overall, perHost: perHost)
    }

    /// The limit a download queued or running in this manager is held to (its own, else
    /// ``Configuration/maxBytesPerSecondPerDownload``), in bytes per second; `nil` for none.
    public func rateLimit(of id: DownloadID) -> Int? {
        guard let job = jobs[id] else { return nil }
        return job.request.maxBytesPerSecond ?? configuration.maxBytesPerSecondPerDownload
    }

    /// Sets one download's own limit, in bytes per second (`nil`: none), while it is
    /// queued or running in this manager; it keeps it through retries and pauses here.
    /// Returns whether the manager had the download.
    ///
    /// - Precondition: the limit is above 0.
    @discardableResult
    public func setRateLimit(_ bytesPerSecond: Int?, for id: DownloadID) -> Bool {
        precondition((bytesPerSecond ?? 1) > 0, "a rate limit must be above 0")
        guard let job = jobs[id] else { return false }
        job.request.maxBytesPerSecond = bytesPerSecond
        if job.task != nil { rateLimiter.setLimit(bytesPerSecond, for: id) }
        return true
    }
}
