import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// Plain `http` requests through an HTTP proxy, in absolute form (RFC 9112 §3.2.2:
/// `GET http://host/path HTTP/1.1`), on connections to the proxy that are kept alive and
/// reused.
///
/// AsyncHTTPClient sends every request through a proxy inside a `CONNECT` tunnel, and
/// most proxies (squid as Debian installs it, and the corporate ones built like it) allow
/// `CONNECT` to port 443 only: every plain `http` download would be refused. This is the
/// small path on SwiftNIO's HTTP/1.1 handlers that sends them as curl, wget and aria2c do.
/// Only the wire is its own: the response goes to the same ``ResponseReceiver`` as on
/// the client's path, so resume rules, redirects, retries, limits and verification are
/// shared (see ``HTTPClients/execute(_:receiver:deadline:logger:)``). Errors are the
/// client's own (``HTTPClientError``), so they read the same.
///
/// The proxy's credentials go in `Proxy-Authorization: Basic` on every request; a `407`
/// ends the request with ``HTTPClientError/proxyAuthenticationRequired``.
final class ForwardProxy: Sendable {
    private let host: String
    private let port: Int
    private let authorization: String?
    private let group: any EventLoopGroup
    private let connectTimeout: TimeAmount
    private let readTimeout: TimeAmount?
    /// How long an unused connection is kept before it is closed.
    private let idleTimeout: TimeAmount
    private let state = NIOLockedValueBox(State())

    private struct State {
        /// Kept-alive connections waiting for a request, newest last.
        var idle: [IdleConnection] = []
        var generation = 0
        var shutDown = false
    }

    private struct IdleConnection {
        var channel: any Channel
        var generation: Int
    }

    /// At most this many unused connections are kept.
    static let maxIdle = 32

    /// A path through `proxy` (an HTTP proxy), reached at `address` when one is forced.
    init(
        proxy: DownloadManager.ProxyServer, address: String?, group: any EventLoopGroup, connectTimeout: TimeAmount,
        readTimeout: TimeAmount?, idleTimeout: TimeAmount = .seconds(60)
    ) {
        host = address ?? proxy.host
        port = proxy.port
        authorization = proxy.username.map { user in
            "Basic " + Data("\(user):\(proxy.password ?? "")".utf8).base64EncodedString()
        }
        self.group = group
        self.connectTimeout = connectTimeout
        self.readTimeout = readTimeout
        self.idleTimeout = idleTimeout
    }

    /// Sends `request` (a `GET` to an `http` URL) through the proxy and hands the response
    /// to `receiver`; returns how the request ended: `nil` when the whole response was
    /// received, else the error (``HTTPClientError/cancelled`` after a cancellation, by
    /// the Swift task or the receiver).
    func execute(
        _ request: HTTPClient.Request, receiver: some ResponseReceiver, deadline: NIODeadline?, logger: Logger
    ) async -> (any Error)? {
        let channel: any Channel
        do {
            channel = try await connection()
        } catch {
            return error
        }
        let head = requestHead(request)
        let promise = channel.eventLoop.makePromise(of: Bool.self)
        let task = ForwardTask(channel: channel)
        let readTimeout = self.readTimeout
        channel.eventLoop.execute {
            do {
                let handler = try channel.pipeline.syncOperations.handler(type: ForwardHandler.self)
                handler.start(
                    head, receiver: receiver, task: task, readTimeout: readTimeout, deadline: deadline,
                    promise: promise)
            } catch {
                promise.fail(error)
                channel.close(promise: nil)
            }
        }
        do {
            let reusable = try await withTaskCancellationHandler {
                try await promise.futureResult.get()
            } onCancel: {
                task.cancel()
            }
            if reusable { keep(channel) } else { channel.close(promise: nil) }
            return nil
        } catch {
            logger.debug("request through the proxy failed", metadata: ["error": "\(error)"])
            channel.close(promise: nil)
            return error
        }
    }

    /// Closes every kept connection; no new one is opened after this.
    func shutdown() {
        let idle = state.withLockedValue { state -> [IdleConnection] in
            state.shutDown = true
            defer { state.idle = [] }
            return state.idle
        }
        for connection in idle { connection.channel.close(promise: nil) }
    }

    // MARK: - Connections

    /// A kept-alive connection, else a new one.
    private func connection() async throws -> any Channel {
        while true {
            let taken = try state.withLockedValue { state -> (any Channel)? in
                if state.shutDown {
                    throw DownloadError(.cancelled, "the download manager is shut down", cancellationReason: .shutdown)
                }
                return state.idle.popLast()?.channel
            }
            guard let channel = taken else { break }
            if channel.isActive { return channel }
        }
        let bootstrap = ClientBootstrap(group: group)
            .connectTimeout(connectTimeout)
            .channelOption(ChannelOptions.autoRead, value: false)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    try channel.pipeline.syncOperations.addHandler(ForwardHandler())
                }
            }
        return try await bootstrap.connect(host: host, port: port).get()
    }

    /// Keeps `channel` for the next request, closing it if it stays unused for the idle
    /// timeout (or if enough are kept already).
    private func keep(_ channel: any Channel) {
        let generation = state.withLockedValue { state -> Int? in
            guard !state.shutDown, state.idle.count < Self.maxIdle else { return nil }
            state.generation += 1
            state.idle.append(IdleConnection(channel: channel, generation: state.generation))
            return state.generation
        }
        guard let generation else {
            channel.close(promise: nil)
            return
        }
        channel.eventLoop.scheduleTask(in: idleTimeout) { [weak self] in
            let expired = self?.state.withLockedValue { state -> Bool in
                guard let index = state.idle.firstIndex(where: { $0.generation == generation }) else { return false }
                state.idle.remove(at: index)
                return true
            }
            if expired ?? true { channel.close(promise: nil) }
        }
    }

    /// The request's head in absolute form: the URL without user info or fragment, the
    /// `Host` header from it, and the proxy's credentials.
    private func requestHead(_ request: HTTPClient.Request) -> HTTPRequestHead {
        let url = request.url
        let host = url.host ?? ""
        let shownHost = host.contains(":") ? "[\(host)]" : host
        let port = url.port.map { $0 == 80 ? "" : ":\($0)" } ?? ""
        var target = "http://\(shownHost)\(port)"
        let path = url.path(percentEncoded: true)
        target += path.isEmpty ? "/" : path
        if let query = url.query(percentEncoded: true) { target += "?" + query }
        var headers = request.headers
        headers.replaceOrAdd(name: "Host", value: shownHost + port)
        if let authorization { headers.replaceOrAdd(name: "Proxy-Authorization", value: authorization) }
        return HTTPRequestHead(version: .http1_1, method: request.method, uri: target, headers: headers)
    }
}

/// A request sent through a ``ForwardProxy``, as its receiver sees it.
private final class ForwardTask: ResponseTask {
    let channel: any Channel

    init(channel: any Channel) {
        self.channel = channel
    }

    var eventLoop: any EventLoop { channel.eventLoop }

    func cancel() {
        let channel = self.channel
        channel.eventLoop.execute {
            (try? channel.pipeline.syncOperations.handler(type: ForwardHandler.self))?.cancel()
        }
    }
}

/// One connection's side of ``ForwardProxy``: sends a request, reads its response one
/// read at a time (the channel does not read on its own), and hands each part to the
/// receiver only once the receiver has finished with the previous one. Event-loop bound.
private final class ForwardHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    private struct Exchange {
        var receiver: any ResponseReceiver
        var task: ForwardTask
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

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func start(
        _ head: HTTPRequestHead, receiver: any ResponseReceiver, task: ForwardTask, readTimeout: TimeAmount?,
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

    func cancel() {
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
