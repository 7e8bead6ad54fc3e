import AsyncHTTPClient
import NIOCore
import NIOHTTP1

/// One HTTP/1.1 connection's side of a request sent outside AsyncHTTPClient (through a
/// ``ForwardProxy``, or on the connection ``HTTP2Path`` opened to a server that chose
/// HTTP/1.1): sends a request, reads its response one read at a time (the channel does not
/// read on its own), and hands each part to the receiver only once the receiver has
/// finished with the previous one. Event-loop bound.
final class HTTP1ExchangeHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    private struct Exchange {
        var receiver: any ResponseReceiver
        var task: ChannelTask
        var promise: EventLoopPromise<Bool>
        var readTimeout: TimeAmount?
        var timer: Scheduled<Void>?
        var deadline: Scheduled<Void>?
        /// Parts read but not yet handed over.
        var pending: [HTTPClientResponsePart] = []
        /// The receiver is working on a part.
        var busy = false
        var keepAlive = true
        var ended = false
    }

    private var context: ChannelHandlerContext?
    private var exchange: Exchange?

    /// Sends `head` (a request with no body) on `channel`, whose pipeline ends in HTTP/1.1
    /// client handlers and this handler, and hands the response to `receiver`. Returns
    /// whether the connection may carry another request; cancelling the Swift task
    /// cancels the request (``HTTPClientError/cancelled``).
    static func exchange(
        _ head: HTTPRequestHead, on channel: any Channel, receiver: some ResponseReceiver, readTimeout: TimeAmount?,
        deadline: NIODeadline?
    ) async throws -> Bool {
        let promise = channel.eventLoop.makePromise(of: Bool.self)
        let task = ChannelTask(channel: channel) { task in
            (try? channel.pipeline.syncOperations.handler(type: HTTP1ExchangeHandler.self))?.cancel(task)
        }
        channel.eventLoop.execute {
            do {
                let handler = try channel.pipeline.syncOperations.handler(type: HTTP1ExchangeHandler.self)
                handler.start(
                    head, receiver: receiver, task: task, readTimeout: readTimeout, deadline: deadline,
                    promise: promise)
            } catch {
                promise.fail(error)
                channel.close(promise: nil)
            }
        }
        return try await withTaskCancellationHandler {
            try await promise.futureResult.get()
        } onCancel: {
            task.cancel()
        }
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func start(
        _ head: HTTPRequestHead, receiver: any ResponseReceiver, task: ChannelTask, readTimeout: TimeAmount?,
        deadline: NIODeadline?, promise: EventLoopPromise<Bool>
    ) {
        // (A kept connection the proxy closed just before it was taken ends at once: the
        // caller's retry policy then opens a new one.)
        guard let context, exchange == nil, context.channel.isActive else {
            promise.fail(HTTPClientError.remoteConnectionClosed)
            return
        }
        exchange = Exchange(receiver: receiver, task: task, promise: promise, readTimeout: readTimeout)
        if let deadline {
            exchange?.deadline = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
                fail(HTTPClientError.deadlineExceeded)
            }
        }
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        readMore()
    }

    func cancel(_ task: ChannelTask) {
        guard exchange?.task === task else { return }
        fail(HTTPClientError.cancelled)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard exchange != nil else { return }
        exchange?.timer?.cancel()
        exchange?.timer = nil
        let part = unwrapInboundIn(data)
        if case .head(let head) = part, head.status == .proxyAuthenticationRequired {
            fail(HTTPClientError.proxyAuthenticationRequired)
            return
        }
        exchange?.pending.append(part)
        deliver()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // Everything this read brought has been queued: read on if the receiver is idle.
        if let exchange, !exchange.busy, exchange.pending.isEmpty, !exchange.ended { readMore() }
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail(HTTPClientError.remoteConnectionClosed)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(error)
        context.close(promise: nil)
    }

    /// Hands the next queued part to the receiver, once it is free; finishes at the end.
    private func deliver() {
        guard var current = exchange, !current.busy else { return }
        guard !current.pending.isEmpty else {
            if current.ended { succeed() }
            return
        }
        let part = current.pending.removeFirst()
        let future: EventLoopFuture<Void>
        switch part {
        case .head(let head):
            current.keepAlive = head.isKeepAlive
            current.busy = true
            exchange = current
            future = current.receiver.receivedHead(task: current.task, head)
        case .body(let buffer):
            current.busy = true
            exchange = current
            future = current.receiver.receivedBodyPart(task: current.task, buffer)
        case .end:
            current.ended = true
            exchange = current
            deliver()
            return
        }
        future.hop(to: current.task.eventLoop).assumeIsolated().whenComplete { [self] result in
            guard exchange != nil else { return }
            exchange?.busy = false
            if case .failure(let error) = result {
                fail(error)
                return
            }
            if exchange?.pending.isEmpty == true, exchange?.ended == false {
                readMore()
            } else {
                deliver()
            }
        }
    }

    /// Asks the socket for more, and starts the read timeout.
    private func readMore() {
        guard let context, var current = exchange else { return }
        if let timeout = current.readTimeout, current.timer == nil {
            current.timer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [self] in
                fail(HTTPClientError.readTimeout)
            }
            exchange = current
        }
        context.read()
    }

    private func succeed() {
        guard let current = exchange else { return }
        exchange = nil
        current.timer?.cancel()
        current.deadline?.cancel()
        current.promise.succeed(current.keepAlive)
    }

    /// Ends the request with `error`, closing the connection (its state is unknown).
    private func fail(_ error: any Error) {
        guard let current = exchange else { return }
        exchange = nil
        current.timer?.cancel()
        current.deadline?.cancel()
        current.promise.fail(error)
        context?.close(promise: nil)
    }
}
