import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// Receives one ranged response of a segmented download and writes it at its offset,
/// carrying out what its ``TransferMachine/SegmentResponse`` decides.
///
/// The segment's end can shrink while the response runs (another connection took half of
/// it): the delegate writes up to the end and then cancels the request. A response chasing
/// another connection's rest (``SegmentTable``'s end game) passes over what that one has
/// taken, and a chase decided here stops the losing connection (`stopFetch`).
final class SegmentDelegate: ResponseReceiver {

    private struct State {
        var machine: TransferMachine.SegmentResponse
        var eventLoop: (any EventLoop)?
    }

    private let claim: SegmentTable.Claim
    private let table: SegmentTable
    private let url: URL
    private let core: JobCore
    private let state: NIOLockedValueBox<State>
    private let writer: BatchWriter
    private let stopFetch: @Sendable (Int) -> Void
    private let onPart: (@Sendable (Int, ContinuousClock.Instant, any EventLoop) -> Void)?

    /// - Parameters:
    ///   - stopFetch: Stops the request of the segment at an index: one whose chase was decided.
    ///   - onPart: Told of each body part's size and time, on its event loop.
    ///   - onWrite: Runs on the I/O pool after each write, with the range written and the
    ///     time: the checkpointing hook.
    init(
        _ machine: TransferMachine.SegmentResponse, claim: SegmentTable.Claim, table: SegmentTable, file: PartialFile,
        core: JobCore, threadPool: NIOThreadPool, stopFetch: @escaping @Sendable (Int) -> Void,
        onPart: (@Sendable (Int, ContinuousClock.Instant, any EventLoop) -> Void)? = nil,
        onWrite: @escaping @Sendable (Range<Int64>, ContinuousClock.Instant) throws -> Void
    ) {
        self.stopFetch = stopFetch
        self.onPart = onPart
        self.claim = claim
        self.table = table
        self.url = machine.url
        self.core = core
        self.state = NIOLockedValueBox(State(machine: machine))
        self.writer = BatchWriter(threadPool: threadPool) { batch in
            var position = batch.offset
            for part in batch.parts {
                try file.write(part, at: position)
                position += Int64(part.readableBytes)
            }
            let now = ContinuousClock.now
            table.wrote(claim.index, upTo: position, at: now)
            try onWrite(batch.offset..<position, now)
            core.received(batch.bytes, at: now)
        }
    }

    /// Sends what is still batched to the disk, without waiting (see ``drained(error:)``).
    func flush() {
        if let eventLoop = state.withLockedValue({ $0.eventLoop }) { _ = writer.flush(on: eventLoop) }
    }

    /// Writes what is still batched, waits until every write is done, and says how the
    /// request went; `error` is the transport's.
    func drained(error: DownloadError?) async -> TransferMachine.SegmentResponse.Ending {
        if let eventLoop = state.withLockedValue({ $0.eventLoop }) {
            do {
                try await writer.flush(on: eventLoop).get()
            } catch {
                record(error)
            }
        }
        let machine = state.withLockedValue { $0.machine }
        return machine.requestEnded(
            error: error, finished: table.isFinished(claim.index),
            wroteSomething: table.written(claim.index) > claim.start)
    }

    /// The validator of the response, once its head was accepted.
    var responseValidator: Validator? { state.withLockedValue { $0.machine.validator } }

    /// The request failed for this claim with `error` (an answer to several ranges that could
    /// not be read, see ``MultiRangeDelegate``), unless the claim is in the file already.
    func fail(_ error: DownloadError) {
        guard !table.isFinished(claim.index) else { return }
        record(error)
    }

    private func record(_ error: any Error) {
        let failure =
            (error as? DownloadError) ?? DownloadError(.fileSystem, "cannot write \(url.lastPathComponent): \(error)")
        state.withLockedValue { $0.machine.failed(failure) }
    }

    func receivedHead(task: any ResponseTask, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        core.charge(head, for: task, after: receive(head, task: task))
    }

    private func receive(_ head: HTTPResponseHead, task: any ResponseTask) -> EventLoopFuture<Void> {
        let action = state.withLockedValue { state in
            state.eventLoop = task.eventLoop
            return state.machine.receivedHead(status: Int(head.status.code), headers: head.headers)
        }
        if case .stop = action { task.cancel() }
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func receivedBodyPart(task: any ResponseTask, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        let (writing, requestEnd) = state.withLockedValue { state in
            // (An adopted response had its head before this delegate: its loop is known here.)
            if state.eventLoop == nil { state.eventLoop = task.eventLoop }
            return (state.machine.isWriting, state.machine.requestEnd)
        }
        guard writing else { return task.eventLoop.makeSucceededVoidFuture() }
        onPart?(buffer.readableBytes, .now, task.eventLoop)
        let reservation = table.reserve(claim.index, buffer.readableBytes)
        if let other = reservation.stopping { stopFetch(other) }
        guard reservation.count > 0 else {
            // Nothing to write: the end is reached, or a chase is still behind.
            if reservation.stops { stop(task) }
            return task.eventLoop.makeSucceededVoidFuture()
        }
        let (offset, allowed) = (reservation.offset, reservation.count)
        let part =
            allowed == buffer.readableBytes
            ? buffer : buffer.getSlice(at: buffer.readerIndex + reservation.skipped, length: allowed)!
        let future = writer.add(part, at: offset, on: task.eventLoop)
        if reservation.stops {
            // The segment's last bytes go to the disk now, not when the request ends: a
            // request for many ranges ends many segments, each written as it completes.
            // Not waited on here (the response reads on): `drained` collects its outcome.
            _ = writer.flush(on: task.eventLoop)
            stop(task)
        }
        let written = future.flatMapErrorThrowing { [weak self] error in
            self?.record(error)
            throw error
        }
        // The download's speed limits (shared by its segments) hold the next read back.
        guard let limited = core.throttle(part.readableBytes, on: task.eventLoop) else { return written }
        // A limit lowered while a long request runs: it stops here, and the rest of the
        // segment is asked for in paced steps (see `SegmentedTransfer`).
        if allowed == buffer.readableBytes, let size = core.pacedRequestSize,
            requestEnd - (offset + Int64(allowed)) > 2 * size
        {
            stop(task)
        }
        return written.and(limited).map { _ in }
    }

    private func stop(_ task: any ResponseTask) {
        state.withLockedValue { $0.machine.stopped() }
        task.cancel()
    }


}
