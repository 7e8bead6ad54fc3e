import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

@testable import Haul

/// The back-pressure a response's writer puts on its event loop, with a disk that does not
/// answer: a real I/O pool whose one thread is held until the test lets it go, and a clock
/// the test moves. The event loop is held back only once more than a batch's worth of bytes
/// is queued; a smaller response is read whole (AsyncHTTPClient drops the parts it holds
/// back when a connection closes, so holding back less loses less).
@Suite("Batch writer")
struct BatchWriterTests {
    /// A clock that moves only when told.
    final class Clock: Sendable {
        private let current = NIOLockedValueBox(NIODeadline.uptimeNanoseconds(1_000_000_000))
        func now() -> NIODeadline { current.withLockedValue { $0 } }
        func advance(_ amount: TimeAmount) { current.withLockedValue { $0 = $0 + amount } }
    }

    /// Whether `future` has completed, asked on its own event loop (where a completed
    /// future's callback runs at once).
    private static func isDone(_ future: EventLoopFuture<Void>) -> Bool {
        let done = NIOLockedValueBox(false)
        future.whenComplete { _ in done.withLockedValue { $0 = true } }
        return done.withLockedValue { $0 }
    }

    /// Adds `count` contiguous parts of `size` bytes on `eventLoop`, each after the batch
    /// delay has passed on `clock`; returns, for each, whether the event loop could read on
    /// at once (the future `add` returned had completed).
    private static func addLateParts(
        _ count: Int, of size: Int, to writer: BatchWriter, clock: Clock, on eventLoop: any EventLoop
    ) async throws -> [Bool] {
        try await eventLoop.submit {
            (0..<count).map { index -> Bool in
                clock.advance(BatchWriter.maximumDelay + .milliseconds(1))
                let part = ByteBuffer(repeating: 1, count: size)
                return isDone(writer.add(part, at: Int64(index * size), on: eventLoop))
            }
        }.get()
    }

    @Test func lessThanABatchQueuedNeverWaitsForAStuckDisk() async throws {
        try await Self.withStuckDisk { writer, clock, eventLoop in
            // Given late parts of 30,000 bytes: every second one finds the batch it joins
            // overdue and sends it out (five batches of 60,000 bytes)
            let answers = try await Self.addLateParts(10, of: 30_000, to: writer, clock: clock, on: eventLoop)

            // Then none of them held the event loop back, though nothing has been written
            #expect(answers == Array(repeating: true, count: 10))
        }
    }

    @Test func moreThanABatchQueuedHoldsTheEventLoopBack() async throws {
        try await Self.withStuckDisk { writer, clock, eventLoop in
            // Given late parts of 300,000 bytes each
            let answers = try await Self.addLateParts(5, of: 300_000, to: writer, clock: clock, on: eventLoop)

            // Then the event loop goes on reading while no more than 1 MiB waits for the
            // disk: the fourth part sends out a second batch of 600,000 bytes, and it is
            // held back until the first is written
            #expect(answers == [true, true, true, false, true])
        }
    }

    @Test func everythingAddedIsWrittenInOrderOnceTheDiskAnswers() async throws {
        let written = NIOLockedValueBox<[Int64]>([])
        let clock = Clock()
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let eventLoop = group.next()
        let writer = BatchWriter(threadPool: pool, now: clock.now) { batch in
            var offset = batch.offset
            for part in batch.parts {
                written.withLockedValue { $0.append(offset) }
                offset += Int64(part.readableBytes)
            }
        }
        // Given parts that go out as batches of one, two, and (by the flush) the rest
        try await eventLoop.submit {
            for index in 0..<6 {
                if index == 1 || index == 3 { clock.advance(BatchWriter.maximumDelay + .milliseconds(1)) }
                _ = writer.add(ByteBuffer(repeating: 2, count: 1_000), at: Int64(index * 1_000), on: eventLoop)
            }
        }.get()

        // When the writer is flushed
        try await writer.flush(on: eventLoop).get()

        // Then every part reached the disk once, in order
        #expect(written.withLockedValue { $0 } == [0, 1_000, 2_000, 3_000, 4_000, 5_000])
        try await pool.shutdownGracefully()
        try await group.shutdownGracefully()
    }

    /// Runs `body` with a writer whose disk writes block until `body` returns.
    private static func withStuckDisk(
        _ body: (BatchWriter, Clock, any EventLoop) async throws -> Void
    ) async throws {
        let release = ConditionLock(value: false)
        let clock = Clock()
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let eventLoop = group.next()
        let writer = BatchWriter(threadPool: pool, now: clock.now) { _ in
            release.lock(whenValue: true)
            release.unlock()
        }
        do {
            try await body(writer, clock, eventLoop)
        } catch {
            release.lock()
            release.unlock(withValue: true)
            throw error
        }
        release.lock()
        release.unlock(withValue: true)
        _ = try? await writer.flush(on: eventLoop).get()
        try await pool.shutdownGracefully()
        try await group.shutdownGracefully()
    }
}
