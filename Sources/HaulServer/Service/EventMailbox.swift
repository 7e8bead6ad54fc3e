import Haul
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
    /// The most bytes waiting for a client before it is cut off.
    package let byteLimit: Int
    private let inbox = TakeAllInbox(empty: ByteBuffer(), isEmpty: { $0.readableBytes == 0 })

    package init(byteLimit: Int) {
        self.byteLimit = byteLimit
    }

    /// Adds a frame. Returns `false` when the mailbox is finished, or when the frame would
    /// put it over ``byteLimit`` (it is then finished, and what was waiting is dropped).
    @discardableResult
    package func post(_ frame: ByteBuffer) -> Bool {
        inbox.add { pending, clientWaits in
            // A waiting client takes the frame whatever its size.
            guard clientWaits || pending.readableBytes + frame.readableBytes <= byteLimit else { return false }
            if pending.readableBytes == 0 {
                pending = frame
            } else {
                pending.writeImmutableBuffer(frame)
            }
            return true
        }
    }

    /// Ends the stream: ``next()`` answers what is still waiting, then `nil`.
    package func finish() {
        inbox.finish()
    }

    /// Everything waiting, in one buffer; waits for a frame when none is. `nil` once the
    /// mailbox is finished and empty, or when the task is cancelled.
    package func next() async -> ByteBuffer? {
        await inbox.take()
    }
}
