extension DownloadRequest {
    /// How a request uses the manager's cache (``DownloadManager/Configuration/cache``).
    ///
    /// Without a configured cache every policy loads from the network, except
    /// ``returnCacheDataDontLoad``, which fails with ``DownloadError/Code/notCached``.
    public enum CachePolicy: String, Sendable, Hashable, CaseIterable {
        /// As HTTP says (RFC 9111, as a private cache): a fresh response answers at once,
        /// a stale one is revalidated with a conditional request (or answered at once and
        /// revalidated in the background, within its `stale-while-revalidate`), and a
        /// response the server allows to be stored is stored. The default.
        case useProtocolCachePolicy
        /// Loads from the network and does not look in the cache; the response is stored
        /// as ``useProtocolCachePolicy`` would.
        case reloadIgnoringCache
        /// A stored response answers, however old, as long as it matches the request
        /// (`Vary`); without one, loads from the network.
        case returnCacheDataElseLoad
        /// A stored response answers, however old; without one, the download fails with
        /// ``DownloadError/Code/notCached`` and nothing is requested.
        case returnCacheDataDontLoad
    }
}
