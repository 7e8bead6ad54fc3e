import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// Gathers the body parts of one response into batches of about 1 MiB and hands each batch
/// to the I/O pool in one hop, instead of one hop per part.
///
/// A part that does not fill a batch is accepted at once. When a batch is full it is queued
/// behind the one being written, and the event loop is told to wait for that one: at most
/// two batches are outstanding, so memory stays bounded and the socket is read while the
/// disk is written. A batch whose first part has waited ``maximumDelay`` goes out too,
/// whether or not more parts arrive: a timer on the response's event loop sends it, so the
/// bytes of a response that stalls reach the file, the progress meter and the checkpoints
/// at once rather than at the idle timeout, and a killed process loses little. ``flush(on:)``
/// writes what is left when the response ends.
///
/// The timer costs at most one scheduled task per batch, and fewer when batches fill
/// quickly: it is not cancelled when its batch goes out full, but when it fires it finds the
/// batch gone and is scheduled again for the batch then pending, if any (about one task per
/// ``maximumDelay`` for a fast response, whatever its number of batches).
///
/// ``add(_:at:on:)`` and the timer run on the response's event loop (AsyncHTTPClient calls
/// a delegate serially); ``flush(on:)`` may run anywhere. The lock makes each of them take
/// the pending batch and queue it in one step.
final class BatchWriter: Sendable {
    /// Contiguous parts starting at `offset`.
    struct Batch: Sendable {
        var parts: [ByteBuffer]
        var offset: Int64
        var bytes: Int

        /// Whether the batch went out before it was full (so the response is slow, or
        /// stalled, or ended).
        var isPartial: Bool { bytes < BatchWriter.batchSize }
    }

    /// The batch size: large enough to make the hop's cost vanish, small enough to keep
    /// memory low.
    static let batchSize = 1 << 20
    /// The longest a part waits in an unfinished batch: a slow download reaches the disk,
    /// the progress meter and the checkpoints within this, even if no further part comes.
    /// Only responses slower than `batchSize` per `maximumDelay` (40 MiB/s) are cut by it;
    /// for them it costs at most 40 hops a second, and it keeps what a SIGKILL loses to a
    /// fortieth of a second of the response.
    static let maximumDelay = TimeAmount.milliseconds(25)

    private struct State {
        var pending: Batch?
        /// When the pending batch's first part arrived.
        var pendingSince = NIODeadline.distantPast
        var inFlight: EventLoopFuture<Void>?
        /// The timer for a pending batch, if one is scheduled (at most one).
        var timer: Scheduled<Void>?
        /// Set by ``flush(on:)``: no timer is scheduled after it.
        var flushed = false
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
        let now = NIODeadline.now()
        return state.withLockedValue { state in
            if var pending = state.pending, pending.offset + Int64(pending.bytes) == offset {
                state.pending = nil  // (so the append below does not copy the array)
                pending.parts.append(part)
                pending.bytes += part.readableBytes
                state.pending = pending
            } else {
                // (A gap cannot happen with one writer per response; start a new batch anyway.)
                if state.pending != nil { _ = submitPending(&state, on: eventLoop) }
                state.pending = Batch(parts: [part], offset: offset, bytes: part.readableBytes)
                state.pendingSince = now
            }
            if state.pending!.bytes >= Self.batchSize || now - state.pendingSince >= Self.maximumDelay {
                return submitPending(&state, on: eventLoop)
            }
            if state.timer == nil { scheduleTimer(&state, on: eventLoop) }
            return eventLoop.makeSucceededVoidFuture()
        }
    }

    /// Writes whatever is pending; the future completes once every batch is written.
    func flush(on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        state.withLockedValue { state in
            state.flushed = true
            state.timer?.cancel()
            state.timer = nil
            if state.pending != nil { _ = submitPending(&state, on: eventLoop) }
            return state.inFlight ?? eventLoop.makeSucceededVoidFuture()
        }
    }

    /// Schedules the timer for the pending batch's deadline. Called with the lock held.
    private func scheduleTimer(_ state: inout State, on eventLoop: any EventLoop) {
        guard !state.flushed else { return }
        state.timer = eventLoop.scheduleTask(deadline: state.pendingSince + Self.maximumDelay) {
            self.timerFired(on: eventLoop)
        }
    }

    /// Sends the pending batch if it is due, else waits for the batch pending now.
    private func timerFired(on eventLoop: any EventLoop) {
        state.withLockedValue { state in
            state.timer = nil
            guard state.pending != nil else { return }
            if NIODeadline.now() - state.pendingSince >= Self.maximumDelay {
                // Nobody waits on the previous batch here; a failure still reaches the
                // delegate through the next batch or the flush, which wait on this one.
                _ = submitPending(&state, on: eventLoop)
            } else {
                scheduleTimer(&state, on: eventLoop)
            }
        }
    }

    /// Queues the pending batch behind the batch being written; returns the latter.
    /// Called with the lock held.
    private func submitPending(_ state: inout State, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        guard let batch = state.pending else { return state.inFlight ?? eventLoop.makeSucceededVoidFuture() }
        state.pending = nil
        let (write, threadPool) = (self.write, self.threadPool)
        let previous = state.inFlight ?? eventLoop.makeSucceededVoidFuture()
        state.inFlight = previous.flatMap {
            threadPool.runIfActive(eventLoop: eventLoop) { try write(batch) }
        }
        return previous
    }
}
