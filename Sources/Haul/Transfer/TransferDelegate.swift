import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// Receives one HTTP response on its event loop and carries out what the
/// ``TransferMachine`` decides: streams a kept body to the file or to memory, discards
/// the bodies of errors and redirects, stops the request when told.
///
/// The machine travels with the request: handed in at creation, handed back by
/// ``drained()``. The file is prepared and written on the I/O thread pool, through a
/// ``BatchWriter``: the future handed back to AsyncHTTPClient waits for the disk only once
/// more than a batch is queued, which is the back-pressure that keeps memory flat without
/// leaving parts in the client's buffer, where a connection that ends would lose them.
final class TransferDelegate: ResponseReceiver {

    /// Where body bytes go.
    enum Sink: Sendable {
        case file(PartialFile, PartialPaths)
        case memory
    }

    /// What every response of a transfer needs besides the machine.
    struct Context: Sendable {
        let core: JobCore
        let threadPool: NIOThreadPool
        /// Records progress in the journal (file sinks with a journal).
        let checkpointer: Checkpointer?
        /// The checksum's algorithm, when the request has one.
        let algorithm: Checksum.Algorithm?
        /// The digest of the previous attempt, continued by a resume that starts where it ends.
        let carriedDigest: ContentDigest?
        /// Names the download in write errors.
        let name: String
    }

    /// What the response left, once the request has ended and the writes are done.
    struct Received: Sendable {
        /// The machine, having seen the response's head and body.
        var machine: TransferMachine
        /// Whether a head came: the host answered.
        var answered: Bool
        /// A body kept in memory: a memory download's, or a small body for the file.
        var body: ByteBuffer?
        /// The digest covering the content from byte 0 to the end of what was written,
        /// or `nil` when the file must be hashed from disk.
        var digest: ContentDigest?
    }

    private struct State {
        var machine: TransferMachine
        var answered = false
        var body: ByteBuffer?
        var digest: ContentDigest?
        /// Batches the body's writes (a body written to the file).
        var writer: BatchWriter?
        /// The file's preparation (emptying, sidecar, reservation), awaited before the end.
        var preparation: EventLoopFuture<Void>?
        var eventLoop: (any EventLoop)?
        /// The response was handed over to the segments: its body is theirs.
        var handedOver = false
    }

    private let sink: Sink
    private let context: Context
    private let state: NIOLockedValueBox<State>
    /// Takes the response over when the content is split; without it, such a response is
    /// stopped after its head.
    private let handover: ResponseHandover?

    init(machine: TransferMachine, sink: Sink, context: Context, handover: ResponseHandover? = nil) {
        self.sink = sink
        self.context = context
        self.handover = handover
        self.state = NIOLockedValueBox(State(machine: machine))
    }

    /// Writes what is still batched, waits for every write to finish (so the file may be
    /// synced or closed), and hands back what the response left.
    func drained() async -> Received {
        let (preparation, writer, eventLoop) = state.withLockedValue { ($0.preparation, $0.writer, $0.eventLoop) }
        _ = try? await preparation?.get()
        if let writer, let eventLoop {
            do {
                try await writer.flush(on: eventLoop).get()
            } catch {
                let failure = Self.failure(error, name: context.name)
                state.withLockedValue { $0.machine.failed(failure) }
            }
        }
        return state.withLockedValue { state in
            Received(machine: state.machine, answered: state.answered, body: state.body, digest: state.digest)
        }
    }

    /// The writer for a file body: each batch is written, hashed, checkpointed and counted
    /// on the I/O pool.
    private func makeWriter(file: PartialFile, digest: ContentDigest?, after: EventLoopFuture<Void>?) -> BatchWriter {
        let (core, checkpointer) = (context.core, context.checkpointer)
        return BatchWriter(threadPool: context.threadPool, after: after) { batch in
            var position = batch.offset
            for part in batch.parts {
                try file.write(part, at: position)
                digest?.update(part)
                position += Int64(part.readableBytes)
            }
            // One clock read per batch, shared by the checkpointer and the progress meter.
            let now = ContinuousClock.now
            if let checkpointer, checkpointer.wrote(batch.bytes, at: now) {
                try file.sync()
                checkpointer.synced(upTo: position)
            }
            core.received(batch.bytes, at: now)
        }
    }

    func receivedHead(task: any ResponseTask, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        context.core.charge(head, for: task, after: receive(head, task: task))
    }

    private func receive(_ head: HTTPResponseHead, task: any ResponseTask) -> EventLoopFuture<Void> {
        let action = state.withLockedValue { state in
            state.answered = true
            return state.machine.receivedHead(
                status: Int(head.status.code), headers: head.headers, multiplexed: head.version.major >= 2)
        }
        let take: TransferMachine.Take
        switch action {
        case .discard:
            return task.eventLoop.makeSucceededVoidFuture()
        case .stop:
            task.cancel()
            return task.eventLoop.makeSucceededVoidFuture()
        case .split:
            if let handover {
                state.withLockedValue { $0.handedOver = true }
                handover.handOver(task)
            } else {
                task.cancel()
            }
            return task.eventLoop.makeSucceededVoidFuture()
        case .take(let taken):
            take = taken
        }
        let digest: ContentDigest? =
            switch take.digest {
            case .none: nil
            case .fresh: context.algorithm.map(ContentDigest.init)
            case .carried: context.carriedDigest
            }
        context.core.meter.reset(completed: take.offset, total: take.total)
        context.checkpointer?.describe(validator: take.checkpointValidator, total: take.total)
        // The file is prepared on the I/O pool while the body comes: its first batch waits for
        // the preparation, not the response. (Were the response held back instead, every
        // part AsyncHTTPClient read meanwhile would be lost if the connection then ended.)
        var preparation: EventLoopFuture<Void>?
        if case .file(let file, let paths) = sink {
            switch take.preparation {
            case .none:
                break
            case .reserve(let total):
                preparation = context.threadPool.runIfActive(eventLoop: task.eventLoop) {
                    try file.reserve(upTo: total)
                }
            case .startOver(let metadata, let total):
                let checkpointer = context.checkpointer
                preparation = context.threadPool.runIfActive(eventLoop: task.eventLoop) {
                    try file.truncate(to: 0)
                    try metadata.save(to: paths.metadata)
                    checkpointer?.synced(upTo: 0)
                    if let total { try file.reserve(upTo: total) }
                }
            }
        }
        let prepared = preparation.map { recordingFailure(of: $0) }
        var writer: BatchWriter?
        if case .file(let file, _) = sink, !take.inMemory {
            writer = makeWriter(file: file, digest: digest, after: prepared)
        }
        state.withLockedValue { state in
            state.digest = digest
            state.writer = writer
            state.eventLoop = task.eventLoop
        }
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func receivedBodyPart(task: any ResponseTask, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        let count = buffer.readableBytes
        let (action, writer, digest) = state.withLockedValue {
            state -> (TransferMachine.BodyAction?, BatchWriter?, ContentDigest?) in
            guard !state.handedOver else { return (nil, nil, nil) }
            let action = state.machine.receivedBodyPart(count)
            switch action {
            case .keep:
                state.body.setOrWriteImmutableBuffer(buffer)
                return (action, nil, state.digest)
            case .write:
                return (action, state.writer, nil)
            case .discard, .drop:
                return (action, nil, nil)
            }
        }
        guard let action else {
            return handover?.received(buffer, task: task) ?? task.eventLoop.makeSucceededVoidFuture()
        }
        switch action {
        case .discard:
            return task.eventLoop.makeSucceededVoidFuture()
        case .drop:
            task.cancel()
            return task.eventLoop.makeSucceededVoidFuture()
        case .keep:
            digest?.update(buffer)
            context.core.received(count, at: .now)
            return context.core.throttle(count, on: task.eventLoop) ?? task.eventLoop.makeSucceededVoidFuture()
        case .write(let offset):
            guard let writer else { return task.eventLoop.makeSucceededVoidFuture() }
            let written = recordingFailure(of: writer.add(buffer, at: offset, on: task.eventLoop), isWrite: true)
            // The speed limits hold the next read back, not this write.
            guard let allowed = context.core.throttle(count, on: task.eventLoop) else { return written }
            return written.and(allowed).map { _ in }
        }
    }

    /// Remembers `future` as the file's preparation (unless it is a write), and turns its
    /// failure into the transfer's failure so the request stops.
    private func recordingFailure(of future: EventLoopFuture<Void>, isWrite: Bool = false) -> EventLoopFuture<Void> {
        if !isWrite { state.withLockedValue { $0.preparation = future } }
        return future.flatMapErrorThrowing { [state, name = context.name] error in
            let failure = Self.failure(error, name: name)
            state.withLockedValue { $0.machine.failed(failure) }
            throw failure
        }
    }

    /// A write's error as a ``DownloadError``.
    private static func failure(_ error: any Error, name: String) -> DownloadError {
        (error as? DownloadError) ?? DownloadError(.fileSystem, "cannot write \(name): \(error)")
    }
}
