public import Logging
public import NIOCore
public import NIOPosix

/// Runs `body` with a new download manager, and shuts the manager down when `body`
/// returns or throws.
///
/// A manager must be shut down once it is no longer needed; this makes that impossible
/// to forget, and waits until it is done: running downloads are interrupted with their
/// partial files kept, and the HTTP client is closed.
///
/// ```swift
/// let data = try await withDownloadManager { manager in
///     try await manager.download(
///         DownloadRequest(url: thumbnailURL, destination: .memory(limit: 1 << 20))
///     ).result.data
/// }
/// ```
///
/// - Parameters:
///   - configuration: Slots, policies, timeouts and retries.
///   - journal: Where to record downloads durably; `nil` keeps them in memory only.
///   - connectivityMonitor: The platform's view of the network, if it has one.
///   - eventLoopGroup: The event loops the manager runs on; `nil` makes its own (see
///     ``DownloadManager/init(configuration:journal:connectivityMonitor:eventLoopGroup:threadPool:logger:)``).
///   - threadPool: The started pool for blocking file work; `nil` makes the manager's own.
///   - logger: Where the manager logs, at `debug` and below only. Logs nothing by default.
///   - isolation: The actor `body` runs on; the caller's, by default.
///   - body: What to do with the manager. Do not let the manager escape: it is shut down
///     when `body` ends.
/// - Returns: What `body` returns.
public func withDownloadManager<T>(
    configuration: DownloadManager.Configuration = DownloadManager.Configuration(),
    journal: Journal? = nil,
    connectivityMonitor: (any ConnectivityMonitor)? = nil,
    eventLoopGroup: (any EventLoopGroup)? = nil,
    threadPool: NIOThreadPool? = nil,
    logger: Logger? = nil,
    isolation: isolated (any Actor)? = #isolation,
    _ body: (DownloadManager) async throws -> T
) async rethrows -> T {
    let manager = DownloadManager(
        configuration: configuration, journal: journal, connectivityMonitor: connectivityMonitor,
        eventLoopGroup: eventLoopGroup, threadPool: threadPool, logger: logger)
    let result: T
    do {
        result = try await body(manager)
    } catch {
        await manager.shutdown()
        throw error
    }
    await manager.shutdown()
    return result
}
