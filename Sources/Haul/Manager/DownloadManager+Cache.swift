import Foundation

extension DownloadDestination {
    /// Whether the bytes go to memory.
    var isMemory: Bool {
        if case .memory = self { return true }
        return false
    }
}

extension DownloadRequest {
    /// Whether the request may use a cache: into memory or a file, and not a delta download.
    var usesCache: Bool {
        guard delta == nil else { return false }
        switch destination {
        case .memory, .file, .directory: return true
        case .object: return false
        }
    }
}

extension DownloadManager {
    /// Looks `request` up in the cache and says how its run uses it (its
    /// ``DownloadRequest/cacheUse``), as ``CacheRules`` decide. A memory download that a
    /// stored response answers gets its handle here, already completed, with no job.
    ///
    /// - Throws: ``DownloadError/Code/notCached`` for
    ///   ``DownloadRequest/CachePolicy-swift.enum/returnCacheDataDontLoad`` with nothing
    ///   stored; the cache's setup error, if its directory could not be used.
    func consultCache(_ request: inout DownloadRequest) async throws(DownloadError) -> DownloadHandle? {
        if let cacheSetupError { throw cacheSetupError }
        guard let cache, request.usesCache else {
            throw DownloadError.notCached(request.url, configured: false)
        }
        switch await cache.decide(for: request, netrc: configuration.netrc, promoting: true) {
        case .answer(let entry, let tier):
            return try answer(&request, with: entry, from: tier)
        case .answerAndRevalidate(let entry, let tier, let conditions):
            revalidateInBackground(request, entry: entry, conditions: conditions)
            return try answer(&request, with: entry, from: tier)
        case .revalidate(let entry, let conditions):
            request.cacheUse = .revalidate(entry, conditions: conditions)
        case .load:
            request.cacheUse = .store
        case .unavailable:
            throw DownloadError.notCached(request.url, configured: true)
        }
        return nil
    }

    /// Answers a memory download from `entry` at once, with a handle already completed (its
    /// events carry the `completed` event).
    private func answer(_ request: inout DownloadRequest, with entry: CachedEntry, from tier: DownloadResult.Source)
        throws(DownloadError) -> DownloadHandle?
    {
        guard case .memory(let limit) = request.destination else { return nil }
        let size = Int64(entry.body.count)
        guard entry.body.count <= limit else {
            throw DownloadError(
                .tooLarge, "\(request.url.absoluteString) is \(size) bytes, over the \(limit)-byte memory limit")
        }
        let core = JobCore(
            id: request.id, url: request.url, managerEvents: managerEvents, eventLoopGroup: resources.eventLoopGroup)
        core.meter.reset(completed: size, total: size)
        var result = DownloadResult(
            id: request.id, fileURL: nil, data: entry.body, finalURL: URL(string: entry.response.url) ?? request.url,
            byteCount: size, bytesTransferred: 0)
        result.source = tier
        core.finish(.success(result))
        subscriberCounter += 1
        return DownloadHandle(id: request.id, core: core, manager: self, subscriber: subscriberCounter)
    }

    /// Starts a low-priority download that revalidates `entry` (served stale within its
    /// `stale-while-revalidate`): its answer, a `304` or a new body, updates the cache.
    /// One at a time per URL: a second joins the first.
    private func revalidateInBackground(_ request: DownloadRequest, entry: CachedEntry, conditions: [HeaderField]) {
        var background = DownloadRequest(
            url: request.url, destination: .memory(limit: Int(clamping: cache?.configuration.diskEntryLimit ?? 0)),
            id: DownloadID("\(ResponseCache.key(for: request.url)) (revalidating the cache)"), priority: .low,
            headers: request.headers)
        background.sensitiveHeaderNames = request.sensitiveHeaderNames
        background.cachePolicy = request.cachePolicy
        background.cacheUse = .revalidate(entry, conditions: conditions)
        Task { _ = try? await self.download(background, paused: false) }
    }
}

extension DownloadError {
    /// ``Code/notCached`` for `url`: nothing stored (or, unless `configured`, no cache for
    /// the request) and a policy that forbids loading.
    static func notCached(_ url: URL, configured: Bool) -> DownloadError {
        DownloadError(
            .notCached,
            "\(url.absoluteString) is not in the cache\(configured ? "" : " (no cache is configured for this request)"), and its cache policy, returnCacheDataDontLoad, forbids loading it"
        )
    }
}

extension CachedEntry {
    /// Whether the entry can be what `request` asks for: the size and digest it expects, if
    /// it says.
    func canAnswer(_ request: DownloadRequest) -> Bool {
        if let expected = request.expectedSize, expected != Int64(body.count) { return false }
        if let checksum = request.checksum {
            let digest = ContentDigest(checksum.algorithm)
            body.withUnsafeBytes { digest.update($0) }
            guard digest.hex() == checksum.hex else { return false }
        }
        return request.pieces == nil
    }
}
