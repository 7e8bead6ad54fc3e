public import Foundation
import NIOPosix

/// A cache of HTTP responses in memory and on disk, used as RFC 9111 says a private cache
/// may be: fresh responses answer without a request, stale ones are revalidated with a
/// conditional request, and nothing half-written is ever served.
///
/// A manager owns one when its ``DownloadManager/Configuration/cache`` is set, and every
/// request into memory or into a file uses it as its ``DownloadRequest/cachePolicy`` says.
///
/// ```swift
/// var configuration = DownloadManager.Configuration()
/// configuration.cache = ResponseCache.Configuration(directory: cachesDirectory.appending(path: "images"))
/// let manager = DownloadManager(configuration: configuration)
/// let image = try await manager.download(DownloadRequest(url: url, destination: .memory(limit: 1 << 20))).result
/// print(image.source)  // .network the first time, then .memory
/// ```
///
/// The memory tier keeps the most recently used responses up to a cost in bytes; the disk
/// tier keeps one file per URL in its directory, up to a size, and forgets the least
/// recently used first. Each disk entry is written whole to a temporary file and renamed
/// into place, and carries a checksum of everything in it: an entry a crash cut short, or
/// one damaged on disk, is deleted when read, never served. Several processes may share a
/// directory.
public final class ResponseCache: Sendable {
    /// How large the cache's tiers may grow, and where its disk tier is.
    public struct Configuration: Sendable {
        /// The most bytes the memory tier keeps (bodies and headers). Default: a fifth of
        /// the machine's memory, at most 512 MiB.
        public var memoryCostLimit: Int
        /// The largest response the memory tier keeps. Default: a tenth of
        /// ``memoryCostLimit``.
        public var memoryEntryCostLimit: Int?
        /// The disk tier's directory (created if missing, owner-only); `nil` for a cache in
        /// memory only.
        public var directory: URL?
        /// The most bytes the disk tier's entries may take. Default 150 MB. A sweep that
        /// finds more removes the least recently used entries until 70% of it is left.
        public var diskSizeLimit: Int64
        /// The largest response the disk tier keeps. Default: a tenth of ``diskSizeLimit``.
        public var diskEntrySizeLimit: Int64?
        /// How often the disk tier is swept (its size brought within its limit, and the
        /// temporary files of crashed writers removed). Default 30 seconds.
        public var sweepInterval: Duration = .seconds(30)

        /// A memory and disk cache: `directory` `nil` for memory only.
        public init(
            directory: URL? = nil, memoryCostLimit: Int = Configuration.defaultMemoryCostLimit,
            diskSizeLimit: Int64 = 150_000_000
        ) {
            self.directory = directory
            self.memoryCostLimit = memoryCostLimit
            self.diskSizeLimit = diskSizeLimit
        }

        /// A fifth of the machine's memory, at most 512 MiB.
        public static var defaultMemoryCostLimit: Int {
            Int(min(ProcessInfo.processInfo.physicalMemory / 5, 512 << 20))
        }

        var entryCostLimit: Int { memoryEntryCostLimit ?? memoryCostLimit / 10 }
        var diskEntryLimit: Int64 { diskEntrySizeLimit ?? diskSizeLimit / 10 }
    }

    /// Where an answer came from.
    enum Tier: Sendable {
        case memory
        case disk
    }

    let configuration: Configuration
    let memory: MemoryTier
    let disk: DiskTier?
    private let threadPool: NIOThreadPool

    /// Opens the cache; its directory is created when missing (blocking).
    init(configuration: Configuration, threadPool: NIOThreadPool) throws(DownloadError) {
        self.configuration = configuration
        self.threadPool = threadPool
        memory = MemoryTier(costLimit: configuration.memoryCostLimit, entryCostLimit: configuration.entryCostLimit)
        if let directory = configuration.directory {
            do {
                disk = try DiskTier(directory: directory, sizeLimit: configuration.diskSizeLimit)
            } catch {
                throw DownloadError(
                    .invalidConfiguration, "cannot use \(directory.path) as the cache's directory: \(error)")
            }
        } else {
            disk = nil
        }
    }

    /// The key of `url`'s responses: its absolute string without a fragment.
    static func key(for url: URL) -> String {
        let text = url.absoluteString
        guard let hash = text.firstIndex(of: "#") else { return text }
        return String(text[..<hash])
    }

    /// The stored entry for `key`: from memory, else from disk (then kept in memory too
    /// when `promoting`).
    func entry(for key: String, promoting: Bool = true) async -> (CachedEntry, Tier)? {
        if let entry = memory.entry(for: key) { return (entry, .memory) }
        guard let disk else { return nil }
        let found = try? await threadPool.perform { () throws(DownloadError) in disk.read(key) }
        guard let found else { return nil }
        if promoting { memory.store(found, for: key) }
        return (found, .disk)
    }

    /// What the cache gives a request, as ``CacheRules`` decide from what it holds.
    enum Decision: Sendable {
        /// A stored response answers, with no request.
        case answer(CachedEntry, from: DownloadResult.Source)
        /// A stale stored response answers, and is revalidated behind with `conditions`.
        case answerAndRevalidate(CachedEntry, from: DownloadResult.Source, conditions: [HeaderField])
        /// The request goes out with `conditions`; a `304` answers with the entry.
        case revalidate(CachedEntry, conditions: [HeaderField])
        /// Nothing stored can answer: fetch (and store what the rules allow).
        case load
        /// Nothing stored, and the policy forbids loading.
        case unavailable
    }

    /// Looks `request` up (memory, then disk; what disk gives is kept in memory when
    /// `promoting`) and decides, as ``CacheRules`` say, how its run uses the cache. An entry
    /// of another size or digest than the request expects does not answer.
    func decide(for request: DownloadRequest, netrc: Netrc?, promoting: Bool) async -> Decision {
        let key = Self.key(for: request.url)
        var found: (CachedEntry, Tier)?
        if request.cachePolicy != .reloadIgnoringCache { found = await entry(for: key, promoting: promoting) }
        if let entry = found?.0, !entry.canAnswer(request) { found = nil }
        let rules = CacheRules.Request(request, netrc: netrc)
        let lookup = CacheRules.lookup(rules, facts: found?.0.facts, now: Date().timeIntervalSince1970)
        switch (lookup, found) {
        case (.serve, let (entry, tier)?):
            return .answer(entry, from: tier == .memory ? .memory : .disk)
        case (.serveStale(_, let conditions), let (entry, tier)?):
            return .answerAndRevalidate(entry, from: tier == .memory ? .memory : .disk, conditions: conditions)
        case (.revalidate(let conditions), let (entry, _)?):
            return .revalidate(entry, conditions: conditions)
        case (.unavailable, _):
            return .unavailable
        default:
            return .load
        }
    }

    /// Stores `entry` under `key`: in memory when `inMemory` and small enough, and on disk
    /// when there is a disk tier and it is small enough. A failed disk write leaves no
    /// entry (and is not an error of the download).
    func store(_ entry: CachedEntry, for key: String, inMemory: Bool) async {
        if inMemory {
            memory.store(entry, for: key)
        } else {
            memory.remove(key)
        }
        guard let disk else { return }
        guard Int64(entry.body.count) <= configuration.diskEntryLimit else {
            disk.removeQuietly(key, on: threadPool)
            return
        }
        _ = try? await threadPool.perform { () throws(DownloadError) in
            do {
                try disk.write(entry, for: key)
            } catch {
                disk.remove(key)
            }
        }
    }

    /// Replaces the stored headers of `key` (after a 304), keeping its body.
    func update(_ entry: CachedEntry, for key: String) async {
        if memory.entry(for: key) != nil { memory.store(entry, for: key) }
        guard let disk else { return }
        let response = entry.response
        _ = try? await threadPool.perform { () throws(DownloadError) in
            do {
                try disk.update(response, for: key)
            } catch {
                disk.remove(key)
            }
        }
    }

    /// The body of a fresh stored response for `url`, from the memory tier only, without
    /// waiting: what a list's cell can show at once, before it asks the manager.
    ///
    /// Only a response that HTTP says may answer now (fresh, and matching `headers` where
    /// its `Vary` names them) is returned; for anything else, download as usual.
    public func freshDataInMemory(for url: URL, headers: [(name: String, value: String)] = []) -> Data? {
        guard let entry = memory.entry(for: Self.key(for: url)) else { return nil }
        return Self.answers(entry, headers: headers) ? entry.body : nil
    }

    /// The body of a fresh stored response for `url`, from memory or else from disk (one
    /// read on the manager's I/O threads); `nil` when none may answer now.
    public func freshData(for url: URL, headers: [(name: String, value: String)] = []) async -> Data? {
        guard let (entry, _) = await entry(for: Self.key(for: url)) else { return nil }
        return Self.answers(entry, headers: headers) ? entry.body : nil
    }

    /// Whether `entry` may answer a request with `headers` now, with no request.
    private static func answers(_ entry: CachedEntry, headers: [(name: String, value: String)]) -> Bool {
        let request = CacheRules.Request(
            policy: .useProtocolCachePolicy, headers: headers.map { HeaderField($0.name, $0.value) },
            hasCredentials: false)
        if case .serve = CacheRules.lookup(request, facts: entry.facts, now: Date().timeIntervalSince1970) {
            return true
        }
        return false
    }

    /// Forgets `key`'s entry in both tiers.
    func remove(_ key: String) async {
        memory.remove(key)
        guard let disk else { return }
        _ = try? await threadPool.perform { () throws(DownloadError) in disk.remove(key) }
    }

    /// Forgets every entry, in memory and on disk.
    public func removeAll() async {
        memory.removeAll()
        guard let disk else { return }
        _ = try? await threadPool.perform { () throws(DownloadError) in disk.removeAll() }
    }

    /// Brings the disk tier within its size limit now, and removes what crashed writers
    /// left; what the background sweep does every ``Configuration/sweepInterval``.
    public func sweep() async {
        guard let disk else { return }
        _ = try? await threadPool.perform { () throws(DownloadError) in _ = disk.sweep() }
    }

    /// What the cache holds now.
    public var usage: Usage {
        Usage(memoryEntries: memory.count, memoryBytes: memory.totalCost, diskBytes: disk?.totalBytes ?? 0)
    }

    /// What a cache holds.
    public struct Usage: Sendable, Hashable {
        /// The responses in memory.
        public var memoryEntries: Int
        /// What the responses in memory cost, bodies and headers, in bytes.
        public var memoryBytes: Int
        /// The bytes of the disk tier's entries, as last accounted (exact after a
        /// ``ResponseCache/sweep()``).
        public var diskBytes: Int64
    }
}

extension DiskTier {
    /// Removes `key`'s entry on the pool, without waiting.
    fileprivate func removeQuietly(_ key: String, on threadPool: NIOThreadPool) {
        threadPool.submit { _ in self.remove(key) }
    }
}
