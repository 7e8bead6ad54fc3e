import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHPACK
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL
import NIOTLS

/// `https` requests over HTTP/2 on swift-nio-http2's handlers directly: the path every
/// `https` request tries first when ``DownloadManager/TLSOptions/allowsHTTP2`` is on.
///
/// AsyncHTTPClient's HTTP/2 runs each stream through a child channel and a translation to
/// HTTP/1 messages, and announces the protocol's default window of 64 KiB per stream:
/// measured here, one large file came 1.4-2.4× slower than over HTTP/1.1, and a far link
/// was never filled. This path (issue 42) puts one handler, ``HTTP2StreamsHandler``,
/// after `NIOHTTP2Handler`, with windows sized for a far link. Only the wire is its own:
/// the response goes to the same ``ResponseReceiver`` as on the client's path (as
/// ``ForwardProxy``'s do), so resume rules, redirects, retries, limits and verification
/// are shared, and errors are the client's own types (``HTTPClientError``, NIOHTTP2's),
/// so they translate the same.
///
/// Connections: at most ``HTTP2Placement/maxConnections`` per origin, each on an event
/// loop of its own, chosen by ``HTTP2Placement``; a connection is closed after
/// `idleTimeout` unused. An origin whose server picks `http/1.1` by ALPN is remembered:
/// the request waiting first goes over HTTP/1.1 on the connection opened to learn it (on
/// ``HTTP1ExchangeHandler``, as ``ForwardProxy``'s do), so that learning costs no
/// handshake, and every later one goes to AsyncHTTPClient's HTTP/1.1 pool
/// (``execute(_:address:receiver:deadline:logger:)`` answers ``Outcome/speaksHTTP1``).
final class HTTP2Path: Sendable {
    /// How a request on this path ended.
    enum Outcome {
        /// It was sent here: `nil` when the whole response arrived, else the error.
        case finished((any Error)?)
        /// The origin speaks HTTP/1.1 only: send the request the HTTP/1.1 way.
        case speaksHTTP1
    }

    /// A server a connection goes to: the URL's host and port, and the address to connect
    /// to when one is forced (``NetworkRoute/pinned(host:address:)``).
    struct Origin: Hashable, Sendable {
        var host: String
        var port: Int
        var address: String?
    }

    private enum Acquired {
        case connection(HTTP2Connection)
        /// The origin speaks HTTP/1.1; with the connection opened to learn it, for this
        /// request to go on (it is closed after).
        case http1((any Channel)?)
    }

    private final class HTTP2Connection: Sendable {
        let id: Int
        let channel: any Channel
        init(id: Int, channel: any Channel) {
            self.id = id
            self.channel = channel
        }
    }

    private struct Entry {
        var connection: HTTP2Connection
        var placement: HTTP2Placement.Connection
        /// Counts the times it fell idle, so that an old idle timer does nothing.
        var idleGeneration = 0
    }

    private struct Waiter {
        var id: Int
        var continuation: CheckedContinuation<Acquired, any Error>
        /// It asked for a connection to be opened and waits for that one (see
        /// ``HTTP2Placement``): while it is being opened, the requests behind it still go on
        /// the open connections.
        var forNewConnection = false
    }

    private struct OriginState {
        var speaksHTTP1 = false
        /// The connection that learned it, opened ahead of its request
        /// (``preconnect(host:port:)``): kept for the first request to come.
        var learned: (any Channel)?
        /// Whether ``onSpeaksHTTP2`` was told of the origin.
        var announcedHTTP2 = false
        var connections: [Int: Entry] = [:]
        var connecting = 0
        /// A connection failed to open while others were up: open no more until one closes.
        var openFailed = false
        var waiters: [Waiter] = []

        var placements: [HTTP2Placement.Connection] { connections.values.map(\.placement) }

        /// Places the waiting requests, in order, by ``HTTP2Placement``: returns those
        /// placed, with their connections, and whether to open a connection. A request that
        /// asks for a new connection waits for it while the ones behind it are placed on
        /// the open connections; one that must wait for a stream to end holds back those
        /// behind it (first come, first served).
        mutating func placeWaiters() -> (placed: [(Waiter, Result<Acquired, any Error>)], open: Bool) {
            var placed: [(Waiter, Result<Acquired, any Error>)] = []
            if speaksHTTP1 {
                // The first goes on the connection that learned it, if one is kept and open.
                var learned = self.learned.flatMap { $0.isActive ? $0 : nil }
                if !waiters.isEmpty { self.learned = nil }
                placed = waiters.map { waiter in
                    defer { learned = nil }
                    return (waiter, .success(.http1(learned)))
                }
                waiters = []
                return (placed, false)
            }
            var open = false
            var kept: [Waiter] = []
            var blocked = false
            for var waiter in waiters {
                if blocked || (waiter.forNewConnection && connecting > 0) {
                    kept.append(waiter)
                    continue
                }
                let decision = HTTP2Placement.place(connections: placements, connecting: connecting + (openFailed ? 1 : 0))
                if decision.open {
                    connecting += 1
                    open = true
                }
                if let id = decision.use, let chosen = connections[id] {
                    connections[id]?.placement.active += 1
                    placed.append((waiter, .success(.connection(chosen.connection))))
                } else {
                    waiter.forNewConnection = decision.open
                    blocked = !decision.open
                    kept.append(waiter)
                }
            }
            waiters = kept
            return (placed, open)
        }
    }

    private struct State {
        var origins: [Origin: OriginState] = [:]
        var nextID = 0
        var shutDown = false
        /// The TLS context, made once: under way or made.
        var context: EventLoopFuture<NIOSSLContext>?
    }

    private let tls: TLSConfiguration
    private let group: any EventLoopGroup
    private let threadPool: NIOThreadPool
    private let connectTimeout: TimeAmount
    private let readTimeout: TimeAmount?
    private let idleTimeout: TimeAmount
    /// Told an origin's host and port the first time a connection to it chooses `h2`: a
    /// round trip before its first response, so the scheduler can let as many downloads go
    /// to it as HTTP/2 allows (see ``InFlightRule``) while the connection's first streams
    /// are still on their way.
    private let onSpeaksHTTP2: (@Sendable (_ host: String, _ port: Int) -> Void)?
    private let state = NIOLockedValueBox(State())

    init(
        tls: TLSConfiguration, group: any EventLoopGroup, threadPool: NIOThreadPool, connectTimeout: TimeAmount,
        readTimeout: TimeAmount?, idleTimeout: TimeAmount = .seconds(60),
        onSpeaksHTTP2: (@Sendable (_ host: String, _ port: Int) -> Void)? = nil
    ) {
        self.onSpeaksHTTP2 = onSpeaksHTTP2
        var tls = tls
        tls.applicationProtocols = ["h2", "http/1.1"]
        self.tls = tls
        self.group = group
        self.threadPool = threadPool
        self.connectTimeout = connectTimeout
        self.readTimeout = readTimeout
        self.idleTimeout = idleTimeout
    }

    /// Sends `request` (an `https` request with no body) on an HTTP/2 connection to its
    /// origin, and hands the response to `receiver`; connects to `address` when one is
    /// given. Cancelling the Swift task cancels the request.
    func execute(
        _ request: HTTPClient.Request, address: String?, receiver: some ResponseReceiver, deadline: NIODeadline?,
        logger: Logger
    ) async -> Outcome {
        switch await start(request, address: address, receiver: receiver, deadline: deadline, logger: logger) {
        case .speaksHTTP1:
            return .speaksHTTP1
        case .started(let started):
            do {
                try await withTaskCancellationHandler {
                    try await started.end.get()
                } onCancel: {
                    started.cancel()
                }
                return .finished(nil)
            } catch {
                return .finished(error)
            }
        }
    }

    /// How ``start(_:address:receiver:deadline:logger:)`` placed a request.
    enum Placement {
        /// It is under way here.
        case started(HTTPClients.Started)
        /// The origin speaks HTTP/1.1 only: send the request the HTTP/1.1 way.
        case speaksHTTP1
    }

    /// Sends `request` as ``execute(_:address:receiver:deadline:logger:)`` does, and returns
    /// once it is under way (a stream on a connection with room for it): its end completes
    /// on the connection's event loop, which also gives its stream back.
    func start(
        _ request: HTTPClient.Request, address: String?, receiver: some ResponseReceiver, deadline: NIODeadline?,
        logger: Logger
    ) async -> Placement {
        let url = request.url
        let origin = Origin(host: url.host ?? "", port: url.port ?? 443, address: address)
        let connection: HTTP2Connection
        do {
            switch try await acquire(origin) {
            case .http1(nil):
                return .speaksHTTP1
            case .http1(let channel?):
                // The one HTTP/1.1 exchange of the connection that learned it: in a task.
                let promise = channel.eventLoop.makePromise(of: Void.self)
                let task = Task {
                    if case .finished(let error?) = await exchange(request, on: channel, receiver: receiver, deadline: deadline) {
                        promise.fail(error)
                    } else {
                        promise.succeed()
                    }
                }
                return .started(HTTPClients.Started(end: promise.futureResult, cancel: { task.cancel() }))
            case .connection(let acquired):
                connection = acquired
            }
        } catch {
            return .started(HTTPClients.Started(end: group.next().makeFailedFuture(error), cancel: {}))
        }
        let headers = Self.requestHeaders(request)
        let channel = connection.channel
        let promise = channel.eventLoop.makePromise(of: Void.self)
        let task = ChannelTask(channel: channel) { task in
            (try? channel.pipeline.syncOperations.handler(type: HTTP2StreamsHandler.self))?.cancel(task)
        }
        let readTimeout = self.readTimeout
        channel.eventLoop.execute {
            do {
                let handler = try channel.pipeline.syncOperations.handler(type: HTTP2StreamsHandler.self)
                handler.start(
                    headers, receiver: receiver, task: task, readTimeout: readTimeout, deadline: deadline,
                    promise: promise)
            } catch {
                // The connection closed since the request was placed on it.
                promise.fail(HTTP2StreamsHandler.notSent)
            }
        }
        promise.futureResult.whenComplete { result in
            self.release(connection, of: origin)
            if case .failure(let error) = result {
                logger.debug("HTTP/2 request failed", metadata: ["error": "\(error)"])
            }
        }
        return .started(HTTPClients.Started(end: promise.futureResult, cancel: { task.cancel() }))
    }

    /// Closes every connection and fails every waiting request; nothing is opened after
    /// this. Returns when the connections are closed.
    func shutdown() async {
        for channel in closeAll() { try? await channel.closeFuture.get() }
    }

    /// ``shutdown()`` without waiting for the connections to close.
    func shutdownWithoutWaiting() {
        _ = closeAll()
    }

    private func closeAll() -> [any Channel] {
        let (channels, waiters) = state.withLockedValue { state -> ([any Channel], [Waiter]) in
            state.shutDown = true
            let origins = state.origins.values
            state.origins = [:]
            return (
                origins.flatMap { $0.connections.values.map(\.connection.channel) } + origins.compactMap(\.learned),
                origins.flatMap(\.waiters)
            )
        }
        for waiter in waiters { waiter.continuation.resume(throwing: Self.shutDownError) }
        for channel in channels { channel.close(promise: nil) }
        return channels
    }

    private static var shutDownError: DownloadError {
        DownloadError(.cancelled, "the download manager is shut down", cancellationReason: .shutdown)
    }

    // MARK: - The pool

    /// A connection to `origin` with room for one more stream (its stream is counted
    /// already), or word that the origin speaks HTTP/1.1 only. Requests wait their turn
    /// in arrival order.
    private func acquire(_ origin: Origin) async throws -> Acquired {
        let waiterID = state.withLockedValue { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let (placed, open) = state.withLockedValue { state -> ([(Waiter, Result<Acquired, any Error>)], Bool) in
                    let waiter = Waiter(id: waiterID, continuation: continuation)
                    guard !state.shutDown else { return ([(waiter, .failure(Self.shutDownError))], false) }
                    guard !Task.isCancelled else { return ([(waiter, .failure(HTTPClientError.cancelled))], false) }
                    var entry = state.origins[origin, default: OriginState()]
                    defer { state.origins[origin] = entry }
                    entry.waiters.append(waiter)
                    return entry.placeWaiters()
                }
                for (waiter, result) in placed { waiter.continuation.resume(with: result) }
                if open { connect(origin) }
            }
        } onCancel: {
            let waiter = state.withLockedValue { state -> Waiter? in
                guard let index = state.origins[origin]?.waiters.firstIndex(where: { $0.id == waiterID }) else {
                    return nil
                }
                return state.origins[origin]?.waiters.remove(at: index)
            }
            waiter?.continuation.resume(throwing: HTTPClientError.cancelled)
        }
    }

    /// Places the requests waiting for `origin`, as far as its connections allow, and
    /// opens another connection if the rule says so.
    private func serve(_ origin: Origin) {
        let (placed, open) = state.withLockedValue { state -> ([(Waiter, Result<Acquired, any Error>)], Bool) in
            guard var entry = state.origins[origin] else { return ([], false) }
            defer { state.origins[origin] = entry }
            return entry.placeWaiters()
        }
        for (waiter, result) in placed { waiter.continuation.resume(with: result) }
        if open { connect(origin) }
    }

    /// A request on `connection` has ended: its stream no longer counts.
    private func release(_ connection: HTTP2Connection, of origin: Origin) {
        let idle = state.withLockedValue { state -> Int? in
            guard var entry = state.origins[origin]?.connections[connection.id] else { return nil }
            entry.placement.active -= 1
            var generation: Int?
            if entry.placement.active == 0 {
                entry.idleGeneration += 1
                generation = entry.idleGeneration
            }
            state.origins[origin]?.connections[connection.id] = entry
            return generation
        }
        if let idle {
            connection.channel.eventLoop.scheduleTask(in: idleTimeout) { [weak self] in
                self?.closeIfIdle(connection, of: origin, generation: idle)
            }
        }
        serve(origin)
    }

    private func closeIfIdle(_ connection: HTTP2Connection, of origin: Origin, generation: Int) {
        let close = state.withLockedValue { state -> Bool in
            guard let entry = state.origins[origin]?.connections[connection.id], entry.placement.active == 0,
                entry.idleGeneration == generation
            else { return false }
            state.origins[origin]?.connections[connection.id] = nil
            return true
        }
        if close { connection.channel.close(promise: nil) }
    }

    /// What a connection's handler says of it.
    private func heard(_ event: HTTP2StreamsHandler.ConnectionEvent, from id: Int, of origin: Origin) {
        state.withLockedValue { state in
            guard state.origins[origin]?.connections[id] != nil else { return }
            switch event {
            case .maxStreams(let limit):
                state.origins[origin]?.connections[id]?.placement.limit = max(0, limit)
            case .goingAway:
                state.origins[origin]?.connections[id]?.placement.accepting = false
            case .closed:
                state.origins[origin]?.connections[id] = nil
                state.origins[origin]?.openFailed = false
            }
        }
        serve(origin)
    }

    // MARK: - Connecting

    /// Opens a connection to `origin` (counted in its `connecting` already); when it is
    /// up, the waiting requests are placed.
    private func connect(_ origin: Origin) {
        let (id, busy) = state.withLockedValue { state -> (Int, [any EventLoop]) in
            state.nextID += 1
            let loops = state.origins[origin]?.connections.values.map(\.connection.channel.eventLoop) ?? []
            return (state.nextID, loops)
        }
        // An event loop the origin's other connection is not on, so that the two share no
        // thread (it would starve this one's handshake while it receives, too).
        let next = group.next()
        let loop =
            busy.contains(where: { $0 === next })
            ? group.makeIterator().first { loop in !busy.contains { $0 === loop } } ?? next : next
        sslContext(on: loop).flatMap { context in
            self.open(origin, id: id, context: context, on: loop)
        }.whenComplete { result in
            self.connected(origin, id: id, result: result)
        }
    }

    /// Opens a connection to `host` and `port` ahead of a request that is about to go
    /// there, when the origin has none open or being opened and is not known to speak
    /// HTTP/1.1 only: its handshake (two or three round trips to a far server) then runs
    /// while the request is still being journaled, as a list of a thousand is. The request
    /// takes it as it would one it opened; one nobody takes is closed after the idle
    /// timeout, as any connection left idle. It counts towards the origin's connections
    /// (``HTTP2Placement/maxConnections``) like any other.
    func preconnect(host: String, port: Int) {
        let origin = Origin(host: host, port: port, address: nil)
        let open = state.withLockedValue { state -> Bool in
            guard !state.shutDown else { return false }
            var entry = state.origins[origin, default: OriginState()]
            guard !entry.speaksHTTP1, entry.connections.isEmpty, entry.connecting == 0 else { return false }
            entry.connecting += 1
            state.origins[origin] = entry
            return true
        }
        if open { connect(origin) }
    }

    /// Starts making the TLS context, so that the first connection finds it made or under
    /// way: reading the system's trust roots takes milliseconds (about 4.5 ms for Debian's
    /// 140 authorities), which the first request of a short run would otherwise wait for.
    func prepare() {
        guard state.withLockedValue({ $0.context == nil }) else { return }
        _ = sslContext(on: group.next())
    }

    /// The TLS context, made once (reading trust roots is blocking work: on the pool); a
    /// failure is not kept, so the next connection tries again.
    private func sslContext(on loop: any EventLoop) -> EventLoopFuture<NIOSSLContext> {
        let (context, promise) = state.withLockedValue { state -> (EventLoopFuture<NIOSSLContext>, EventLoopPromise<NIOSSLContext>?) in
            if let context = state.context { return (context, nil) }
            let promise = loop.makePromise(of: NIOSSLContext.self)
            state.context = promise.futureResult
            return (promise.futureResult, promise)
        }
        if let promise {
            let tls = self.tls
            promise.completeWith(threadPool.runIfActive(eventLoop: loop) { try NIOSSLContext(configuration: tls) })
            promise.futureResult.whenFailure { _ in
                self.state.withLockedValue { state in
                    if state.context === promise.futureResult { state.context = nil }
                }
            }
        }
        return context.hop(to: loop)
    }

    /// Connects, shakes hands, and sets the connection up for HTTP/2 if the server chose
    /// `h2`, returning it with its stream limit until the server's preface gives one
    /// (``HTTP2Placement/limitBeforePreface``); if it chose HTTP/1.1 or nothing, for
    /// HTTP/1.1, with no limit.
    private func open(
        _ origin: Origin, id: Int, context: NIOSSLContext, on loop: any EventLoop
    ) -> EventLoopFuture<(channel: any Channel, limit: Int?)> {
        // The server's stream limit, or `nil` when it chose HTTP/1.1.
        let negotiated = loop.makePromise(of: Int?.self)
        let settled = NIOLockedValueBox(false)
        let settle: @Sendable (Result<Int?, any Error>) -> Void = { result in
            // Several things may settle it (the protocol chosen, an error, the timeout, a close): the first wins.
            let first = settled.withLockedValue { settled in
                defer { settled = true }
                return !settled
            }
            if first { negotiated.completeWith(result) }
        }
        let serverName = IPAddress(origin.host) == nil ? origin.host : nil
        let bootstrap = ClientBootstrap(group: loop)
            .connectTimeout(connectTimeout)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(NIOSSLClientHandler(context: context, serverHostname: serverName))
                    let errors = HandshakeErrors(settle: settle)
                    try sync.addHandler(
                        ApplicationProtocolNegotiationHandler { result, channel in
                            channel.eventLoop.makeCompletedFuture {
                                let sync = channel.pipeline.syncOperations
                                sync.removeHandler(errors, promise: nil)
                                guard case .negotiated("h2") = result else {
                                    // HTTP/1.1: the connection carries the request waiting
                                    // first, on the same handlers as ForwardProxy's.
                                    try sync.addHTTPClientHandlers()
                                    try sync.addHandler(HTTP1ExchangeHandler())
                                    channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
                                    settle(.success(nil))
                                    return
                                }
                                try sync.addHandler(
                                    NIOHTTP2Handler(mode: .client, initialSettings: HTTP2StreamsHandler.settings))
                                try sync.addHandler(
                                    HTTP2StreamsHandler(onEvent: { [weak self] event in
                                        self?.heard(event, from: id, of: origin)
                                    }))
                                // Ready now, with the limit assumed until the server's
                                // preface says its own: the first requests leave with the
                                // client's preface, a round trip before the server's
                                // arrives (its preface is read after the connection is
                                // listed, so `heard` finds it).
                                settle(.success(HTTP2Placement.limitBeforePreface))
                            }
                        })
                    try sync.addHandler(errors)
                }
            }
        let timeout = connectTimeout
        let connecting = bootstrap.connect(host: origin.address ?? origin.host, port: origin.port)
        // A connection never made settles it too, so that no promise is left unkept.
        connecting.whenFailure { error in settle(.failure(error)) }
        return connecting.flatMap { channel in
            // The handshake must come within the connect timeout too.
            let timer = loop.scheduleTask(in: timeout) { settle(.failure(HTTPClientError.connectTimeout)) }
            channel.closeFuture.whenComplete { _ in settle(.failure(HTTPClientError.remoteConnectionClosed)) }
            return negotiated.futureResult.always { _ in timer.cancel() }.flatMapError { error in
                channel.close(promise: nil)
                return loop.makeFailedFuture(error)
            }.map { limit in (channel, limit) }
        }
    }

    private func connected(_ origin: Origin, id: Int, result: Result<(channel: any Channel, limit: Int?), any Error>) {
        var resumes: [(Waiter, Result<Acquired, any Error>)] = []
        var announce = false
        // The connection listed, to be closed after the idle timeout unless a stream is
        // placed on it first (one opened ahead of its request, or whose request was
        // cancelled meanwhile, may get none).
        var listed: (connection: HTTP2Connection, generation: Int)?
        var learnedAhead: (any Channel)?
        let orphan = state.withLockedValue { state -> (any Channel)? in
            guard !state.shutDown, var entry = state.origins[origin] else { return try? result.get().channel }
            defer { state.origins[origin] = entry }
            entry.connecting -= 1
            switch result {
            case .success(let (channel, limit?)):
                // One that closed before it could be listed is not listed (its handler's
                // `closed` found nothing to remove).
                if channel.isActive {
                    var listing = Entry(
                        connection: HTTP2Connection(id: id, channel: channel),
                        placement: HTTP2Placement.Connection(id: id, active: 0, limit: limit))
                    listing.idleGeneration = 1
                    entry.connections[id] = listing
                    listed = (listing.connection, listing.idleGeneration)
                    announce = !entry.announcedHTTP2
                    entry.announcedHTTP2 = true
                }
            case .success(let (channel, nil)):
                entry.speaksHTTP1 = true
                guard !entry.waiters.isEmpty else {
                    // Opened ahead of its request: kept for it, for the idle timeout at most.
                    entry.learned = channel
                    learnedAhead = channel
                    return nil
                }
                resumes.append((entry.waiters.removeFirst(), .success(.http1(channel))))
            case .failure(let error):
                guard !entry.connections.values.contains(where: \.placement.accepting) else {
                    entry.openFailed = true
                    return nil
                }
                // No connection to wait for: the waiting requests fail (each retries as
                // its download's policy says).
                resumes = entry.waiters.map { ($0, .failure(error)) }
                entry.waiters = []
            }
            return nil
        }
        orphan?.close(promise: nil)
        for (waiter, result) in resumes { waiter.continuation.resume(with: result) }
        serve(origin)
        if let (connection, generation) = listed {
            connection.channel.eventLoop.scheduleTask(in: idleTimeout) { [weak self] in
                self?.closeIfIdle(connection, of: origin, generation: generation)
            }
        }
        if let channel = learnedAhead {
            channel.eventLoop.scheduleTask(in: idleTimeout) { [weak self] in
                let unused = self?.state.withLockedValue { state -> Bool in
                    guard let learned = state.origins[origin]?.learned, learned === channel else { return false }
                    state.origins[origin]?.learned = nil
                    return true
                }
                if unused == true { channel.close(promise: nil) }
            }
        }
        if announce { onSpeaksHTTP2?(origin.host, origin.port) }
    }

    /// Sends `request` over HTTP/1.1 on `channel`, the connection opened to a server that
    /// chose HTTP/1.1, then closes it: the origin's later requests go to AsyncHTTPClient's
    /// pool.
    private func exchange(
        _ request: HTTPClient.Request, on channel: any Channel, receiver: some ResponseReceiver,
        deadline: NIODeadline?
    ) async -> Outcome {
        defer { channel.close(promise: nil) }
        let (authority, path) = Self.target(of: request.url)
        var headers = request.headers
        headers.replaceOrAdd(name: "Host", value: authority)
        let head = HTTPRequestHead(version: .http1_1, method: request.method, uri: path, headers: headers)
        do {
            _ = try await HTTP1ExchangeHandler.exchange(
                head, on: channel, receiver: receiver, readTimeout: readTimeout, deadline: deadline)
            return .finished(nil)
        } catch {
            return .finished(error)
        }
    }

    // MARK: - Requests

    /// An `https` URL's authority (`host[:port]`, an IPv6 address in brackets, no port
    /// when it is 443) and its origin-form target (path and query).
    static func target(of url: URL) -> (authority: String, path: String) {
        let host = url.host ?? ""
        let shownHost = host.contains(":") ? "[\(host)]" : host
        let authority = url.port.map { $0 == 443 ? shownHost : "\(shownHost):\($0)" } ?? shownHost
        var path = url.path(percentEncoded: true)
        if path.isEmpty { path = "/" }
        if let query = url.query(percentEncoded: true) { path += "?" + query }
        return (authority, path)
    }

    /// The request's header block: the pseudo-header fields, then the request's own fields
    /// in lower case, without those HTTP/2 does not carry (RFC 9113 §8.2.2).
    static func requestHeaders(_ request: HTTPClient.Request) -> HPACKHeaders {
        let (authority, path) = target(of: request.url)
        var headers = HPACKHeaders()
        headers.reserveCapacity(request.headers.count + 4)
        headers.add(name: ":method", value: request.method.rawValue)
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":authority", value: authority)
        headers.add(name: ":path", value: path)
        for (name, value) in request.headers {
            let lower = name.lowercased()
            switch lower {
            case "host", "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
                continue
            case "te" where value.lowercased() != "trailers":
                continue
            default:
                headers.add(name: lower, value: value)
            }
        }
        return headers
    }
}

/// Settles a connection's negotiation with the TLS handshake's error, if it fails; taken
/// out of the pipeline once the handshake is done.
private final class HandshakeErrors: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = ByteBuffer
    private let settle: @Sendable (Result<Int?, any Error>) -> Void

    init(settle: @escaping @Sendable (Result<Int?, any Error>) -> Void) {
        self.settle = settle
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        settle(.failure(error))
        context.fireErrorCaught(error)
    }
}
