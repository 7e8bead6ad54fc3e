import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// Gathers the body parts of one response into batches of about 1 MiB and hands each batch
/// to the I/O pool in one hop, instead of one hop per part.
///
/// A part that does not fill a batch is accepted at once. A batch that goes out is queued
/// behind the ones being written. The event loop is told to wait (for the batch before it)
/// only when more than ``batchSize`` bytes would then be queued: memory stays bounded, the
/// socket is read while the disk is written, and a response smaller than that is never held
/// back, however slow the disk. That matters when a connection ends early: AsyncHTTPClient
/// drops the parts it holds back for a delegate once the connection closes, so every byte
/// read before the end is written, and the retry asks for no byte twice.
/// A batch whose first part has waited ``maximumDelay`` goes out too,
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
        /// Bytes queued for the I/O pool and not yet written.
        var queuedBytes = 0
        /// The timer for a pending batch, if one is scheduled (at most one).
        var timer: Scheduled<Void>?
        /// Set by ``flush(on:)``: no timer is scheduled after it.
        var flushed = false
    }

    private let threadPool: NIOThreadPool
    private let write: @Sendable (Batch) throws -> Void
    private let now: @Sendable () -> NIODeadline
    private let state = NIOLockedValueBox(State())

    /// - Parameters:
    ///   - after: What the first batch waits for (the file's preparation), if anything: its
    ///     failure fails every batch.
    ///   - now: The clock that dates parts (tests hand in their own).
    ///   - write: Writes a batch; runs on the I/O pool, one batch at a time, in order.
    init(
        threadPool: NIOThreadPool, after: EventLoopFuture<Void>? = nil,
        now: @escaping @Sendable () -> NIODeadline = { .now() },
        write: @escaping @Sendable (Batch) throws -> Void
    ) {
        self.threadPool = threadPool
        self.now = now
        self.write = write
        if let after { state.withLockedValue { $0.inFlight = after } }
    }

    /// Adds `part`, which must follow the previous part, to be written at `offset`.
    /// Returns the future the event loop should wait on before delivering the next part.
    func add(_ part: ByteBuffer, at offset: Int64, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        let now = self.now()
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
            if self.now() - state.pendingSince >= Self.maximumDelay {
                // Nobody waits on the previous batch here; a failure still reaches the
                // delegate through the next batch or the flush, which wait on this one.
                _ = submitPending(&state, on: eventLoop)
            } else {
                scheduleTimer(&state, on: eventLoop)
            }
        }
    }

    /// Queues the pending batch behind the batches being written. Returns what the event loop
    /// should wait on: the batch before it when more than ``batchSize`` bytes are now queued,
    /// else nothing. Called with the lock held.
    private func submitPending(_ state: inout State, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        guard let batch = state.pending else { return state.inFlight ?? eventLoop.makeSucceededVoidFuture() }
        state.pending = nil
        state.queuedBytes += batch.bytes
        let (write, threadPool, box) = (self.write, self.threadPool, self.state)
        let previous = state.inFlight ?? eventLoop.makeSucceededVoidFuture()
        state.inFlight = previous.flatMap {
            threadPool.runIfActive(eventLoop: eventLoop) {
                defer { box.withLockedValue { $0.queuedBytes -= batch.bytes } }
                try write(batch)
            }
        }
        return state.queuedBytes > Self.batchSize ? previous : eventLoop.makeSucceededVoidFuture()
    }
}
