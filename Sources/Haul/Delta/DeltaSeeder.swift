import Foundation
import NIOPosix

/// Builds a delta download's partial file from its seeds (see ``DeltaSource``): scans each
/// seed for the target's blocks, copies the blocks found to their places in the partial,
/// and records the ranges still missing in the sidecar, as a segmented download records
/// its own. From then on the download is a resumed segmented one.
///
/// The scan is the client's CPU cost: a seed is read a piece at a time (``defaultPieceSize``, so
/// memory stays bounded for a seed of any size), each piece cut into parts, and each part
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
    /// Bytes of a seed read into memory at once (see ``defaultPieceSize``).
    var pieceSize = Self.defaultPieceSize

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
        // Two buffers for every piece of every seed, taking turns: the next piece is read
        // into one while the other is scanned. Memory stays bounded whatever the seeds' size.
        let size = control.blockSize
        let buffers = [Buffer(capacity: pieceSize + 2 * size), Buffer(capacity: pieceSize + 2 * size)]
        defer { for buffer in buffers { buffer.deallocate() } }
        let pool = threadPool
        var copied = [Bool](repeating: false, count: control.table.count)
        // The blocks found in a piece are copied out of its buffer while the next piece is
        // scanned; the buffer is read into again once that copy is done.
        var copying: Task<Result<[Bool], DownloadError>, Never>?
        func copiedPiece() async throws(DownloadError) {
            guard let pending = copying else { return }
            copying = nil
            for (block, wrote) in try await pending.value.get().enumerated() where wrote { copied[block] = true }
        }
        for seed in setup.seeds where !matcher.isComplete {
            var origin: Int64 = 0
            var turn = 0
            var count = await Self.read(seed, at: origin, into: buffers[turn], on: pool)
            // A piece, and two blocks past it (a pair's second block): windows start in its
            // first `pieceSize` bytes, or all of it at the seed's end.
            while !matcher.isComplete, let bytes = count, bytes > 0 {
                let buffer = buffers[turn]
                let last = bytes < buffer.capacity
                let windows = last ? bytes : pieceSize
                let next = origin + Int64(pieceSize)
                // (Awaited below; on a throw, awaited as the scope ends: the pool always
                // runs the read and the copy, so no buffer is freed under them.)
                let previous = copying
                async let ahead = last ? nil : Self.read(seed, at: next, into: buffers[1 - turn], on: pool, after: previous)
                matcher = await scan(buffer, count: bytes, windows: windows, origin: origin, from: matcher)
                // Each copy writes the blocks found and not copied yet, which must be this
                // piece's alone: the previous piece's copy is done first.
                try await copiedPiece()
                copying = Task { [matcher, copied, origin] () -> Result<[Bool], DownloadError> in
                    do throws(DownloadError) {
                        return .success(
                            try await pool.perform { () throws(DownloadError) -> [Bool] in
                                try Self.copy(
                                    found: matcher, skipping: copied, from: buffer, count: bytes, origin: origin,
                                    into: paths.partial)
                            })
                    } catch {
                        return .failure(error)
                    }
                }
                scanned += Int64(windows)
                count = await ahead
                origin = next
                turn = 1 - turn
            }
            // The next seed is read into the buffers from the first.
            try await copiedPiece()
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

    /// Bytes of a seed read into memory: a piece at a time, so that a seed of any size
    /// costs the same memory (a mapping would count the whole file in the process's RSS).
    static let defaultPieceSize = 16 << 20

    /// The memory a piece of a seed is read into, shared read-only by the threads that scan
    /// it (each scans its own windows).
    final class Buffer: @unchecked Sendable {
        let bytes: UnsafeMutableRawBufferPointer
        var capacity: Int { bytes.count }
        init(capacity: Int) { bytes = .allocate(byteCount: capacity, alignment: 64) }
        func deallocate() { bytes.deallocate() }
    }

    /// Scans the windows starting in the first `windows` bytes of `buffer` (a piece at
    /// `origin` in its seed, `count` bytes read into it) in parts, each on a thread of the
    /// pool, from what `matcher` found so far.
    ///
    /// Only the `count` bytes read are the seed's: past them the buffer holds an earlier
    /// piece, and a window that runs past the seed's end must read zeros there, as the
    /// control file pads the last block.
    private func scan(_ buffer: Buffer, count: Int, windows: Int, origin: Int64, from matcher: BlockMatcher) async
        -> BlockMatcher
    {
        let parts = max(1, min(parallelism, windows / min(Self.minimumPart, max(1, pieceSize / 4))))
        let step = (windows + parts - 1) / parts
        let pool = threadPool
        let scanned = await withTaskGroup(of: BlockMatcher?.self) { group in
            for part in 0..<parts {
                let range = (part * step)..<min((part + 1) * step, windows)
                group.addTask {
                    try? await pool.perform { () throws(DownloadError) -> BlockMatcher in
                        var own = matcher
                        own.scan(UnsafeRawBufferPointer(rebasing: buffer.bytes[..<count]), windows: range, origin: origin)
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

    /// ``read(_:at:into:)`` on `pool`: `nil` when the seed cannot be read or the pool is
    /// stopped (the bytes are then fetched).
    private static func read(
        _ path: String, at offset: Int64, into buffer: Buffer, on pool: NIOThreadPool,
        after copy: Task<Result<[Bool], DownloadError>, Never>? = nil
    ) async -> Int? {
        // A copy out of the buffer still running is waited for (its outcome is its owner's).
        _ = await copy?.value
        return (try? await pool.perform { () throws(DownloadError) in try Self.read(path, at: offset, into: buffer) }) ?? nil
    }

    /// Reads as much of the seed at `path` from `offset` as fills `buffer`; returns how
    /// many bytes it read (fewer at the seed's end), or `nil` when the seed cannot be read
    /// (it is then no help, not an error: the bytes are fetched).
    private static func read(_ path: String, at offset: Int64, into buffer: Buffer) throws(DownloadError) -> Int? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var total = 0
        while total < buffer.capacity {
            let count = pread(
                descriptor, buffer.bytes.baseAddress! + total, buffer.capacity - total, off_t(offset) + off_t(total))
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return count == 0 ? total : (total > 0 ? total : nil) }
            total += count
        }
        return total
    }

    /// Creates an empty partial of `length` bytes (a sparse file: the blocks found are
    /// written into it, the missing ones later).
    private static func createPartial(_ path: String, length: Int64) throws(DownloadError) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw .fileSystem("open", path: path, errno: errno) }
        defer { close(descriptor) }
        guard ftruncate(descriptor, off_t(length)) == 0 else { throw .fileSystem("truncate", path: path, errno: errno) }
    }

    /// Writes the blocks `matcher` found that are not `copied` yet (found in this piece:
    /// `count` bytes of `buffer`, at `origin` in its seed) into the partial, runs of blocks
    /// that follow each other in the seed as one write; returns the blocks it wrote.
    private static func copy(
        found matcher: BlockMatcher, skipping copied: [Bool], from buffer: Buffer, count: Int, origin: Int64,
        into path: String
    ) throws(DownloadError) -> [Bool] {
        let size = Int64(matcher.control.blockSize)
        let length = matcher.control.length
        var wrote = [Bool](repeating: false, count: copied.count)
        let descriptor = open(path, O_WRONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .fileSystem("open", path: path, errno: errno) }
        defer { close(descriptor) }
        // A run: target bytes [target, target + count) are seed bytes [source, source + count).
        var run: (target: Int64, source: Int64, count: Int64)?
        func flush() throws(DownloadError) {
            guard let current = run else { return }
            run = nil
            // Past the seed's end a window reads as zeros, which the sparse file holds already.
            let local = current.source - origin
            let available = min(current.count, Int64(count) - local)
            guard available > 0 else { return }
            let written = pwrite(descriptor, buffer.bytes.baseAddress! + Int(local), Int(available), off_t(current.target))
            guard written == Int(available) else { throw .fileSystem("write", path: path, errno: errno) }
        }
        for block in matcher.found.indices where !copied[block] {
            guard let source = matcher.found[block] else { continue }
            wrote[block] = true
            let target = Int64(block) * size
            let blockCount = min(size, length - target)
            if let current = run, current.target + current.count == target, current.source + current.count == source {
                run?.count += blockCount
            } else {
                try flush()
                run = (target, source, blockCount)
            }
        }
        try flush()
        return wrote
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
