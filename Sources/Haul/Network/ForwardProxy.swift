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
        do {
            let reusable = try await HTTP1ExchangeHandler.exchange(
                head, on: channel, receiver: receiver, readTimeout: readTimeout, deadline: deadline)
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
                    try channel.pipeline.syncOperations.addHandler(HTTP1ExchangeHandler())
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

