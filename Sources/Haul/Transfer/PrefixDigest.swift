import NIOConcurrencyHelpers
import NIOPosix

/// A segmented download's checksum, computed as its file fills in from the start: the
/// check at the end then reads only what arrived last, not the whole file again.
///
/// The table's first missing byte is where the file is whole up to. Every few MiB written,
/// unless it runs already, a job on the I/O pool hashes on from where it last stopped to
/// there, and on as long as the writes move it; the writes do not wait for it. Bytes below
/// that point are never written again in a transfer without piece checksums (a piece that
/// fails its digest is reopened, so such a transfer has none of these), so hashing them
/// early is hashing them at the end. A delta download's file is mostly blocks copied from
/// its seeds, with the missing ranges fetched in order: its SHA-1 of 512 MiB took 0.4 s
/// after the last byte, and now runs while the ranges arrive.
///
/// A read that fails leaves the digest unusable: ``finish()`` then gives `nil`, and the
/// file is hashed whole as before.
final class PrefixDigest: Sendable {
    private struct State {
        /// Bytes from the file's start fed to the digest.
        var hashed: Int64 = 0
        /// Bytes written since the job last started.
        var written: Int64 = 0
        /// Whether the job runs.
        var hashing = false
        /// Whether a read failed: the digest is unusable.
        var broken = false
        /// ``finish()``, waiting for the job to stop.
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private let digest: ContentDigest
    private let file: PartialFile
    private let table: SegmentTable
    private let threadPool: NIOThreadPool
    private let state = NIOLockedValueBox(State())

    /// Bytes written between starts of the job: each look for the first missing byte
    /// walks the table's segments (thousands, for a delta download), so not at every write.
    static let stride: Int64 = 1 << 20
    /// The most bytes read and hashed before the first missing byte is looked up again.
    static let turn: Int64 = 16 << 20

    init(_ algorithm: Checksum.Algorithm, file: PartialFile, table: SegmentTable, threadPool: NIOThreadPool) {
        digest = ContentDigest(algorithm)
        self.file = file
        self.table = table
        self.threadPool = threadPool
    }

    /// Notes `count` bytes written (on the I/O pool, after the write), and every
    /// ``stride`` bytes starts the job unless it runs.
    func wrote(_ count: Int) {
        let start = state.withLockedValue { state -> Bool in
            state.written += Int64(count)
            guard !state.hashing, !state.broken, state.written >= Self.stride else { return false }
            state.hashing = true
            state.written = 0
            return true
        }
        guard start else { return }
        threadPool.submit { [self] workState in
            if case .active = workState { hashOn() }
            stopped()
        }
    }

    /// Hashes from where the digest stopped to the first missing byte, and on while the
    /// other writes move it. Blocking.
    private func hashOn() {
        var start = state.withLockedValue { $0.hashed }
        while true {
            let end = min(table.firstMissing(), start + Self.turn)
            guard end > start else { return }
            do throws(DownloadError) {
                try file.digest(into: digest, from: start, length: end - start)
            } catch {
                state.withLockedValue { $0.broken = true }
                return
            }
            start = end
            state.withLockedValue { $0.hashed = end }
        }
    }

    private func stopped() {
        let waiting = state.withLockedValue { state in
            state.hashing = false
            defer { state.waiting = [] }
            return state.waiting
        }
        for waiter in waiting { waiter.resume() }
    }

    /// Bytes from the file's start hashed so far.
    var hashedBytes: Int64 { state.withLockedValue { $0.hashed } }

    /// Returns once the job is not running.
    func settled() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let running = state.withLockedValue { state in
                if state.hashing { state.waiting.append(continuation) }
                return state.hashing
            }
            if !running { continuation.resume() }
        }
    }

    /// The digest of the whole file, once every byte is written: waits for the job, then
    /// hashes the rest on the I/O pool. `nil` when a read failed.
    func finish() async -> ContentDigest? {
        await settled()
        let start: Int64? = state.withLockedValue { state in
            guard !state.broken else { return nil }
            // (No write comes after the last one: nothing starts the job again.)
            state.hashing = true
            return state.hashed
        }
        guard let start else { return nil }
        let (digest, file, total) = (self.digest, self.file, table.total)
        let finished = try? await threadPool.perform { () throws(DownloadError) -> Bool in
            try file.digest(into: digest, from: start, length: total - start)
            return digest.byteCount == total
        }
        return finished == true ? digest : nil
    }
}
