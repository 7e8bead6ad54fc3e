import Foundation
import NIOPosix

/// Builds a delta download's partial file from its seeds (see ``DeltaSource``): scans each
/// seed for the target's blocks, copies the blocks found to their places in the partial,
/// and records the ranges still missing in the sidecar, as a segmented download records
/// its own. From then on the download is a resumed segmented one.
///
/// The scan is the client's CPU cost: a seed is mapped, cut into parts, and each part is
/// scanned on a thread of the I/O pool with a matcher of its own (``BlockMatcher``), the
/// matchers merged after. Blocks a later seed holds that an earlier one gave already are
/// not copied twice.
///
/// Crash safety: the sidecar is written last, after the partial is synced; until it exists,
/// nothing is recorded, and the next run scans again (a partial it finds without a record
/// is moved aside to ``PartialPaths/seedAside`` and scanned as a seed, not trusted).
struct DeltaSeeder: Sendable {
    let control: ZsyncControl
    let threadPool: NIOThreadPool
    /// Threads one seed is scanned on at most.
    let parallelism: Int

    /// Parts smaller than this are not scanned on a thread of their own.
    static let minimumPart = 4 << 20

    /// A partial's seeds and what is known of the partial, found on the I/O pool.
    private struct Setup: Sendable {
        /// Whether the partial is already seeded (its sidecar records what it holds).
        var recorded: Bool
        var seeds: [String]
    }

    /// Seeds the partial at `paths` for the content of `url`, unless its sidecar already
    /// records what it holds (then `nil`: it resumes as it is).
    ///
    /// `seeds` are scanned in order, then the destination's existing file, then a partial
    /// moved aside.
    func prepare(seeds: [URL], paths: PartialPaths, url: URL) async throws(DownloadError) -> DeltaReport? {
        let start = ContinuousClock.now
        let setup = try await threadPool.perform { () throws(DownloadError) -> Setup in
            try Self.setUp(paths, seeds: seeds.filter(\.isFileURL).map(\.path))
        }
        guard !setup.recorded else { return nil }
        var matcher = BlockMatcher(control)
        var scanned: Int64 = 0
        try await threadPool.perform { () throws(DownloadError) in
            try Self.createPartial(paths.partial, length: control.length)
        }
        for seed in setup.seeds where !matcher.isComplete {
            guard let bytes = try await threadPool.perform({ () throws(DownloadError) in Self.map(seed) }) else {
                continue
            }
            scanned += Int64(bytes.count)
            let before = matcher
            matcher = await scan(bytes, from: matcher)
            try await threadPool.perform { [matcher] () throws(DownloadError) in
                try Self.copy(newlyFound: matcher, since: before, from: bytes, into: paths.partial)
            }
        }
        let missing = matcher.missingRanges()
        let metadata = PartialMetadata(
            url: url.absoluteString, validator: nil, totalBytes: control.length,
            remaining: missing.map { [$0.lowerBound, $0.upperBound] })
        try await threadPool.perform { () throws(DownloadError) in
            try Self.record(metadata, paths: paths)
        }
        let missingBytes = missing.reduce(Int64(0)) { $0 + ($1.upperBound - $1.lowerBound) }
        return DeltaReport(
            length: control.length, reusedBytes: control.length - missingBytes, missingBytes: missingBytes,
            missingRanges: missing.count, scannedBytes: scanned, duration: .now - start)
    }

    /// Scans `seed` in parts, each on a thread of the pool, from what `matcher` found so far.
    private func scan(_ seed: Data, from matcher: BlockMatcher) async -> BlockMatcher {
        let parts = max(1, min(parallelism, seed.count / Self.minimumPart))
        let step = (seed.count + parts - 1) / parts
        let pool = threadPool
        let scanned = await withTaskGroup(of: BlockMatcher?.self) { group in
            for part in 0..<parts {
                let windows = (part * step)..<min((part + 1) * step, seed.count)
                group.addTask {
                    try? await pool.perform { () throws(DownloadError) -> BlockMatcher in
                        var own = matcher
                        seed.withUnsafeBytes { _ = own.scan($0, windows: windows) }
                        return own
                    }
                }
            }
            var all: [BlockMatcher] = []
            for await result in group { if let result { all.append(result) } }
            return all
        }
        var merged = matcher
        for part in scanned { merged.merge(part) }
        return merged
    }

    // MARK: - Blocking steps, on the I/O pool

    /// Finds out whether the partial is recorded already; if not, moves an unrecorded
    /// partial aside as a seed and lists the seeds that exist.
    private static func setUp(_ paths: PartialPaths, seeds: [String]) throws(DownloadError) -> Setup {
        var info = stat()
        let hasPartial = stat(paths.partial, &info) == 0
        if hasPartial, PartialMetadata.load(from: paths.metadata)?.remaining != nil {
            return Setup(recorded: true, seeds: [])
        }
        let aside = paths.seedAside
        if hasPartial {
            // An earlier scan that stopped midway left both: the one aside is the original.
            if stat(aside, &info) == 0 {
                _ = unlink(paths.partial)
            } else if rename(paths.partial, aside) != 0 {
                throw .fileSystem("rename", path: paths.partial, errno: errno)
            }
        }
        _ = unlink(paths.metadata)
        var all: [String] = []
        for path in seeds + [paths.fixedDestination, aside].compactMap({ $0 }) where !all.contains(path) {
            if stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, info.st_size > 0 { all.append(path) }
        }
        return Setup(recorded: false, seeds: all)
    }

    /// A seed's bytes, mapped; `nil` when it cannot be read (it is then no help, not an
    /// error: the bytes are fetched).
    private static func map(_ path: String) -> Data? {
        try? Data(contentsOf: URL(fileURLWithPath: path), options: .alwaysMapped)
    }

    /// Creates an empty partial of `length` bytes (a sparse file: the blocks found are
    /// written into it, the missing ones later).
    private static func createPartial(_ path: String, length: Int64) throws(DownloadError) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw .fileSystem("open", path: path, errno: errno) }
        defer { close(descriptor) }
        guard ftruncate(descriptor, off_t(length)) == 0 else { throw .fileSystem("truncate", path: path, errno: errno) }
    }

    /// Writes the blocks `matcher` found that `before` had not (found in `seed`) into the
    /// partial, runs of blocks that follow each other in the seed as one write.
    private static func copy(newlyFound matcher: BlockMatcher, since before: BlockMatcher, from seed: Data, into path: String)
        throws(DownloadError)
    {
        let size = Int64(matcher.control.blockSize)
        let length = matcher.control.length
        let descriptor = open(path, O_WRONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .fileSystem("open", path: path, errno: errno) }
        defer { close(descriptor) }
        // A run: target bytes [target, target + count) are seed bytes [source, source + count).
        var run: (target: Int64, source: Int64, count: Int64)?
        func flush() throws(DownloadError) {
            guard let current = run else { return }
            run = nil
            // Past the seed's end a window reads as zeros, which the sparse file holds already.
            let available = min(current.count, Int64(seed.count) - current.source)
            guard available > 0 else { return }
            let written = seed.withUnsafeBytes { bytes in
                pwrite(descriptor, bytes.baseAddress! + Int(current.source), Int(available), off_t(current.target))
            }
            guard written == Int(available) else { throw .fileSystem("write", path: path, errno: errno) }
        }
        for block in matcher.found.indices {
            guard let source = matcher.found[block], before.found[block] == nil else { continue }
            let target = Int64(block) * size
            let count = min(size, length - target)
            if let current = run, current.target + current.count == target, current.source + current.count == source,
                current.count < 8 << 20
            {
                run?.count += count
            } else {
                try flush()
                run = (target, source, count)
            }
        }
        try flush()
    }

    /// Makes the partial durable, then records what it misses beside it.
    private static func record(_ metadata: PartialMetadata, paths: PartialPaths) throws(DownloadError) {
        let descriptor = open(paths.partial, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .fileSystem("open", path: paths.partial, errno: errno) }
        let synced = fsync(descriptor)
        let code = errno
        close(descriptor)
        guard synced == 0 else { throw .fileSystem("fsync", path: paths.partial, errno: code) }
        try metadata.save(to: paths.metadata)
        _ = unlink(paths.seedAside)
    }
}
