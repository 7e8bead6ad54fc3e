import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// Gathers the body parts of one response into batches of about 1 MiB and hands each batch
/// to the I/O pool in one hop, instead of one hop per part.
///
/// A part that does not fill a batch is accepted at once. When a batch is full (or its
/// first part has waited 100 ms) it is queued behind the one being written, and the event
/// loop is told to wait for that one: at most two batches are outstanding, so memory stays
/// bounded and the socket is read while the disk is written. ``flush(on:)`` writes what is left when the response ends.
///
/// All methods are called on the response's event loop (AsyncHTTPClient calls a delegate
/// serially); the lock only guards against the I/O pool's completions.
final class BatchWriter: Sendable {
    /// Contiguous parts starting at `offset`.
    struct Batch: Sendable {
        var parts: [ByteBuffer]
        var offset: Int64
        var bytes: Int
    }

    /// The batch size: large enough to make the hop's cost vanish, small enough to keep
    /// memory low.
    static let batchSize = 1 << 20
    /// The longest a part waits in an unfinished batch when more parts arrive: a slow
    /// download still reaches the disk, the progress meter and the checkpoints about ten
    /// times a second.
    static let maximumDelay: Duration = .milliseconds(100)

    private struct State {
        var pending: Batch?
        var pendingSince: ContinuousClock.Instant?
        var inFlight: EventLoopFuture<Void>?
    }

    private let threadPool: NIOThreadPool
    private let write: @Sendable (Batch) throws -> Void
    private let state = NIOLockedValueBox(State())

    /// - Parameter write: Writes a batch; runs on the I/O pool, one batch at a time, in order.
    init(threadPool: NIOThreadPool, write: @escaping @Sendable (Batch) throws -> Void) {
        self.threadPool = threadPool
        self.write = write
    }

    /// Adds `part`, which must follow the previous part, to be written at `offset`.
    /// Returns the future the event loop should wait on before delivering the next part.
    func add(_ part: ByteBuffer, at offset: Int64, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        let now = ContinuousClock.now
        let ready: Batch? = state.withLockedValue { state in
            if var pending = state.pending, pending.offset + Int64(pending.bytes) == offset {
                pending.parts.append(part)
                pending.bytes += part.readableBytes
                state.pending = pending
            } else {
                // (A gap cannot happen with one writer per response; start a new batch anyway.)
                state.pending = Batch(parts: [part], offset: offset, bytes: part.readableBytes)
                state.pendingSince = now
            }
            let due = state.pendingSince.map { now - $0 >= Self.maximumDelay } ?? false
            guard state.pending!.bytes >= Self.batchSize || due else { return nil }
            defer {
                state.pending = nil
                state.pendingSince = nil
            }
            return state.pending
        }
        guard let ready else { return eventLoop.makeSucceededVoidFuture() }
        return submit(ready, on: eventLoop)
    }

    /// Writes whatever is pending; the future completes once every batch is written.
    func flush(on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        let pending: Batch? = state.withLockedValue { state in
            defer {
                state.pending = nil
                state.pendingSince = nil
            }
            return state.pending
        }
        if let pending { _ = submit(pending, on: eventLoop) }
        return state.withLockedValue { $0.inFlight } ?? eventLoop.makeSucceededVoidFuture()
    }

    /// Queues `batch` behind the batch being written; returns the latter.
    private func submit(_ batch: Batch, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        let write = self.write
        let threadPool = self.threadPool
        return state.withLockedValue { state in
            let previous = state.inFlight ?? eventLoop.makeSucceededVoidFuture()
            state.inFlight = previous.flatMap {
                threadPool.runIfActive(eventLoop: eventLoop) { try write(batch) }
            }
            return previous
        }
    }
}
