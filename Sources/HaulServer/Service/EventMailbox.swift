import NIOConcurrencyHelpers
package import NIOCore

/// One event-stream client's frames on their way out: the ``EventHub`` posts each frame,
/// and the client's response takes everything waiting in one write.
///
/// Writing frame by frame costs a write and a flush each: a batch of 5,000 downloads
/// queued at once is 5,000 frames, and a client following it cost the service more than
/// the downloads did. Taken together, a burst is one write, however many frames it has.
///
/// A client that falls behind by more than ``byteLimit`` is cut off (``post(_:)`` answers
/// `false`): it reconnects with `Last-Event-ID` and is replayed what it missed, or told
/// to resync.
package final class EventMailbox: Sendable {
    private struct State {
        var pending = ByteBuffer()
        var waiter: CheckedContinuation<ByteBuffer?, Never>?
        var isFinished = false
    }

    /// The most bytes waiting for a client before it is cut off.
    package let byteLimit: Int
    private let state = NIOLockedValueBox(State())

    package init(byteLimit: Int) {
        self.byteLimit = byteLimit
    }

    /// Adds a frame. Returns `false` when the mailbox is finished, or when the frame would
    /// put it over ``byteLimit`` (it is then finished, and what was waiting is dropped).
    @discardableResult
    package func post(_ frame: ByteBuffer) -> Bool {
        let (waiter, accepted): (CheckedContinuation<ByteBuffer?, Never>?, Bool) = state.withLockedValue { state in
            guard !state.isFinished else { return (nil, false) }
            if let waiter = state.waiter {
                state.waiter = nil
                return (waiter, true)
            }
            guard state.pending.readableBytes + frame.readableBytes <= byteLimit else {
                state.isFinished = true
                state.pending = ByteBuffer()
                return (nil, false)
            }
            state.pending.writeImmutableBuffer(frame)
            return (nil, true)
        }
        waiter?.resume(returning: frame)
        return accepted
    }

    /// Ends the stream: ``next()`` answers what is still waiting, then `nil`.
    package func finish() {
        let waiter = state.withLockedValue { state in
            state.isFinished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// Everything waiting, in one buffer; waits for a frame when none is. `nil` once the
    /// mailbox is finished and empty, or when the task is cancelled.
    package func next() async -> ByteBuffer? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<ByteBuffer?, Never>) in
                let ready: ByteBuffer?? = state.withLockedValue { state in
                    if state.pending.readableBytes > 0 {
                        defer { state.pending = ByteBuffer() }
                        return .some(state.pending)
                    }
                    if state.isFinished { return .some(nil) }
                    state.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            finish()
        }
    }
}
