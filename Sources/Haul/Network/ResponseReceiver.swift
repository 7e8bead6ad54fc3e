import AsyncHTTPClient
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// What a response's receiver needs of the request carrying it: the event loop its
/// callbacks run on, and a way to stop it. AsyncHTTPClient's tasks are one kind; the
/// requests ``ForwardProxy`` sends to an HTTP proxy in absolute form are the other.
protocol ResponseTask: Sendable {
    var eventLoop: any EventLoop { get }
    /// Stops the request; its end then reports a cancellation.
    func cancel()
}

extension HTTPClient.Task: ResponseTask where Response == Void {}

/// A request on a connection of Haul's own (``HTTP1ExchangeHandler``,
/// ``HTTP2StreamsHandler``), as its receiver sees it: the channel's event loop, and a
/// cancel that `stop` carries out on it, reaching the handler in the pipeline.
final class ChannelTask: ResponseTask {
    let channel: any Channel
    private let stop: @Sendable (ChannelTask) -> Void

    init(channel: any Channel, stop: @escaping @Sendable (ChannelTask) -> Void) {
        self.channel = channel
        self.stop = stop
    }

    var eventLoop: any EventLoop { channel.eventLoop }

    func cancel() {
        channel.eventLoop.execute { self.stop(self) }
    }
}

/// Receives one HTTP response, whichever way it came (see ``HTTPClients/execute(_:receiver:deadline:logger:)``):
/// its head, then its body in parts, each callback on the request's event loop. The future
/// each returns is the back-pressure: nothing more is read until it completes. How the
/// request ended is what `execute` returns.
///
/// It is an AsyncHTTPClient delegate too, through the extension below, so that both paths
/// hand a response to the same code.
protocol ResponseReceiver: HTTPClientResponseDelegate, Sendable where Response == Void {
    func receivedHead(task: any ResponseTask, _ head: HTTPResponseHead) -> EventLoopFuture<Void>
    func receivedBodyPart(task: any ResponseTask, _ buffer: ByteBuffer) -> EventLoopFuture<Void>
}

extension ResponseReceiver {
    func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        receivedHead(task: task, head)
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        receivedBodyPart(task: task, buffer)
    }

    func didFinishRequest(task: HTTPClient.Task<Void>) throws {}
}

/// A receiver that keeps a whole response in memory, up to a limit: for small documents
/// such as a sync's manifest.
final class CollectingReceiver: ResponseReceiver {
    /// A body larger than `limit(head)` ends the request with ``NIOTooManyBytesError``.
    private let limit: @Sendable (HTTPResponseHead) -> Int
    private let state = NIOLockedValueBox<(head: HTTPResponseHead?, body: ByteBuffer, tooLarge: Bool)>(
        (nil, ByteBuffer(), false))

    init(limit: @escaping @Sendable (HTTPResponseHead) -> Int) {
        self.limit = limit
    }

    /// The head and the body received, once the request has ended.
    ///
    /// - Throws: ``NIOTooManyBytesError`` when the body went over the limit.
    func collected() throws -> (head: HTTPResponseHead?, body: ByteBuffer) {
        let (head, body, tooLarge) = state.withLockedValue { $0 }
        if tooLarge { throw NIOTooManyBytesError(maxBytes: head.map(limit) ?? 0) }
        return (head, body)
    }

    func receivedHead(task: any ResponseTask, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        state.withLockedValue { $0.head = head }
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func receivedBodyPart(task: any ResponseTask, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        var buffer = buffer
        let stop = state.withLockedValue { state -> Bool in
            let limit = state.head.map(self.limit) ?? 0
            guard state.body.readableBytes + buffer.readableBytes <= limit else {
                state.tooLarge = true
                return true
            }
            state.body.writeBuffer(&buffer)
            return false
        }
        if stop { task.cancel() }
        return task.eventLoop.makeSucceededVoidFuture()
    }
}
