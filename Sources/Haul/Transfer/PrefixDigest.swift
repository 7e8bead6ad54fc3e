import NIOConcurrencyHelpers

/// A segmented download's checksum, computed as its file fills in from the start: the
/// check at the end then reads only what arrived last, not the whole file again.
///
/// The table's first missing byte is where the file is whole up to; every few MiB written,
/// the thread that wrote them (on the I/O pool) hashes on from where the last turn stopped
/// to there, a bounded turn at a time. Bytes below that point are never written again in a
/// transfer without piece checksums (a piece that fails its digest is reopened, so such a
/// transfer has none of these), so hashing them early is hashing them at the end. A delta
/// download's file is mostly blocks copied from its seeds, with the missing ranges fetched
/// in order: its SHA-1 of 512 MiB took 0.4 s after the last byte, and now takes what the
/// last few ranges leave.
///
/// A read that fails leaves the digest unusable: ``finish()`` then gives `nil`, and the
/// file is hashed whole as before.
final class PrefixDigest: Sendable {
    private struct State {
        /// Bytes from the file's start fed to the digest.
        var hashed: Int64 = 0
        /// Bytes written since the last turn.
        var written: Int64 = 0
        /// Whether a thread is taking a turn.
        var hashing = false
        /// Whether a read failed: the digest is unusable.
        var broken = false
    }

    private let digest: ContentDigest
    private let file: PartialFile
    private let table: SegmentTable
    private let state = NIOLockedValueBox(State())

    /// Bytes written between turns: each turn looks for the first missing byte among the
    /// table's segments (thousands, for a delta download), so not at every write.
    static let stride: Int64 = 4 << 20
    /// The most bytes one turn hashes: the writing thread is held no longer than that.
    static let turn: Int64 = 64 << 20

    init(_ algorithm: Checksum.Algorithm, file: PartialFile, table: SegmentTable) {
        digest = ContentDigest(algorithm)
        self.file = file
        self.table = table
    }

    /// Notes `count` bytes written, and every ``stride`` bytes takes a turn (blocking: on
    /// the I/O pool, after the write).
    func wrote(_ count: Int) {
        let start: Int64? = state.withLockedValue { state in
            state.written += Int64(count)
            guard !state.hashing, !state.broken, state.written >= Self.stride else { return nil }
            state.hashing = true
            state.written = 0
            return state.hashed
        }
        guard let start else { return }
        let end = min(table.firstMissing(), start + Self.turn)
        var failed = false
        if end > start {
            do throws(DownloadError) {
                try file.digest(into: digest, from: start, length: end - start)
            } catch {
                failed = true
            }
        }
        state.withLockedValue { state in
            state.hashing = false
            if failed { state.broken = true } else { state.hashed = max(state.hashed, end) }
        }
    }

    /// The digest of the whole file, once every byte is written: the rest hashed
    /// (blocking: on the I/O pool). `nil` when a read failed, or a turn is still running.
    func finish() -> ContentDigest? {
        let start: Int64? = state.withLockedValue { state in
            guard !state.hashing, !state.broken else { return nil }
            state.hashing = true
            return state.hashed
        }
        guard let start else { return nil }
        do throws(DownloadError) {
            try file.digest(into: digest, from: start, length: table.total - start)
        } catch {
            return nil
        }
        return digest.byteCount == table.total ? digest : nil
    }
}
