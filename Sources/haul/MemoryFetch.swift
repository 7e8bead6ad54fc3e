import Foundation
import Haul

/// A document fetched into memory before the downloads it names start (a Metalink file
/// with `--metalink`, a zsync control file), with the command's network settings, by a
/// manager of its own that lives for the one request.
enum MemoryFetch {
    /// Fetches `url` into memory, at most `limit` bytes, with `headers` and the credentials
    /// `secretHeaders` (which go to `url`'s origin only).
    static func fetch(
        _ url: URL, limit: Int, configuration: DownloadManager.Configuration,
        headers: [(name: String, value: String)] = [], secretHeaders: [(name: String, value: String)] = []
    ) async throws -> DownloadResult {
        let manager = DownloadManager(
            configuration: configuration, eventLoopGroup: ProcessResources.eventLoopGroup,
            threadPool: ProcessResources.threadPool)
        do {
            var request = DownloadRequest(url: url, destination: .memory(limit: limit), headers: headers + secretHeaders)
            request.sensitiveHeaderNames = Set(secretHeaders.map(\.name))
            let result = try await manager.download(request).result
            await manager.shutdown()
            return result
        } catch {
            await manager.shutdown()
            throw error
        }
    }
}
