import AsyncHTTPClient
import Dispatch
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// The way a request leaves: directly, to one pinned address, or through a proxy.
///
/// AsyncHTTPClient takes its proxy and its address overrides per client, so a manager
/// keeps one client per route (see ``HTTPClients``). A pure value: ``HTTPClients/route(for:)``
/// chooses it from the settings, and the tests check that choice without sockets.
enum NetworkRoute: Hashable, Sendable {
    /// Straight to the URL's host, resolved as the system does.
    case direct
    /// Straight to `host`, connecting to `address` (an address of the forced family).
    case pinned(host: String, address: String)
    /// Through `proxy`, whose host is reached at `address` when one is forced; through a
    /// ``DownloadManager/ProxyServer/Kind/socks5`` proxy, the URL's host name is resolved
    /// here and the proxy is given `origin`'s address.
    case proxy(DownloadManager.ProxyServer, address: String?, origin: Pin? = nil)

    /// A host name and the address requests to it connect to.
    struct Pin: Hashable, Sendable {
        var host: String
        var address: String
    }
}

/// A manager's HTTP clients, one per ``NetworkRoute``, and the rule choosing one for each
/// request: every request (downloads, their segments, manifests) asks here, so they all
/// route the same way.
///
/// Every client runs on the manager's event loop group. The direct client exists from the
/// start; the others are made on first use and live until ``shutdown()``. With ``DownloadManager/AddressFamily/ipv4`` or `ipv6`, each host
/// name is resolved (on the I/O pool, with `getaddrinfo`) to an address of that family,
/// and the request goes to a client that maps the name to that address
/// (AsyncHTTPClient's `dnsOverride`, which keeps the name for TLS checks); a new address
/// gets a new client.
final class HTTPClients: Sendable {
    /// Every client shares this, except for the proxy and address overrides.
    private let base: HTTPClient.Configuration
    private let proxies: DownloadManager.ProxySettings
    private let family: DownloadManager.AddressFamily
    /// The manager's event loops, which every client (and the certificate probe) runs on.
    let eventLoopGroup: any EventLoopGroup
    private let threadPool: NIOThreadPool
    private let direct: HTTPClient
    private let others = NIOLockedValueBox<[NetworkRoute: HTTPClient]>([:])
    /// The absolute-form paths through HTTP proxies for plain `http` URLs, one per route.
    private let forwards = NIOLockedValueBox<(paths: [NetworkRoute: ForwardProxy], shutDown: Bool)>(([:], false))
    /// HTTP/2 for `https` requests that go direct (or pinned to an address), when allowed.
    private let http2: HTTP2Path?

    /// Clients sharing `base`; with `http2`, `https` requests that do not go through a
    /// proxy try HTTP/2 first (see ``HTTP2Path``), and the clients speak HTTP/1.1.
    /// `onSpeaksHTTP2` is told each host and port that chose HTTP/2, once, as it does.
    init(
        base: HTTPClient.Configuration, proxies: DownloadManager.ProxySettings,
        family: DownloadManager.AddressFamily, eventLoopGroup: any EventLoopGroup, threadPool: NIOThreadPool,
        http2: Bool = false, onSpeaksHTTP2: (@Sendable (_ host: String, _ port: Int) -> Void)? = nil
    ) {
        var base = base
        base.httpVersion = .http1Only
        self.base = base
        self.proxies = proxies
        self.family = family
        self.eventLoopGroup = eventLoopGroup
        self.threadPool = threadPool
        self.direct = HTTPClient(eventLoopGroup: eventLoopGroup, configuration: base)
        self.http2 = http2 ? base.tlsConfiguration.map { tls in
            HTTP2Path(
                tls: tls, group: eventLoopGroup, threadPool: threadPool,
                connectTimeout: base.timeout.connect ?? .seconds(10), readTimeout: base.timeout.read,
                onSpeaksHTTP2: onSpeaksHTTP2)
        } : nil
    }

    /// Starts making what a first request to `url` needs before it can connect, when that
    /// takes long: the TLS context of the HTTP/2 path (see ``HTTP2Path/prepare()``), and
    /// when `connecting` (the request starts as soon as it is journaled), its connection
    /// too (see ``HTTP2Path/preconnect(host:port:)``), if it goes there directly.
    func prepare(for url: URL, connecting: Bool = false) {
        guard let http2, url.scheme?.lowercased() == "https", proxies.proxy(for: url) == nil else { return }
        http2.prepare()
        // A forced address family resolves the name first (``route(for:)``): not ahead.
        guard connecting, family == .any, let host = url.host, !host.isEmpty else { return }
        http2.preconnect(host: host, port: url.port ?? 443)
    }

    /// The proxy a request to `url` goes through, if any.
    func proxy(for url: URL) -> DownloadManager.ProxyServer? { proxies.proxy(for: url) }

    /// The client for a request to `url`.
    ///
    /// - Throws: what resolving a name for a forced address family throws (see
    ///   ``AddressResolver/resolve(_:family:)``); ``DownloadError/Code/cancelled`` after
    ///   ``shutdown()``.
    private func client(for route: NetworkRoute) throws(DownloadError) -> HTTPClient {
        guard route != .direct else { return direct }
        let client: HTTPClient? = others.withLockedValue { clients in
            if let client = clients[route] { return client }
            // After shutdown (marked by the direct entry) no client is made.
            guard clients[.direct] == nil else { return nil }
            let client = HTTPClient(eventLoopGroup: eventLoopGroup, configuration: configuration(for: route))
            clients[route] = client
            return client
        }
        guard let client else {
            throw DownloadError(.cancelled, "the download manager is shut down", cancellationReason: .shutdown)
        }
        return client
    }

    /// Sends `request` the way its URL routes and hands the response to `receiver`;
    /// returns how the request ended: `nil` when the whole response arrived, else the
    /// transport error as the client reports it (see ``TransferOperation/translate(_:url:)``).
    ///
    /// One way for every request (downloads, their segments, manifests): plain `http`
    /// through an HTTP proxy goes in absolute form on a ``ForwardProxy``, since the client
    /// would tunnel it with `CONNECT`, which most proxies allow to port 443 only; every
    /// `https` request with no body that goes direct tries HTTP/2 on the ``HTTP2Path``
    /// when it is allowed; every other request goes through the route's AsyncHTTPClient. Cancelling
    /// the Swift task cancels the request.
    func execute(
        _ request: HTTPClient.Request, receiver: some ResponseReceiver, deadline: NIODeadline? = nil, logger: Logger
    ) async -> (any Error)? {
        let way: Way
        do {
            way = try await self.way(for: request)
        } catch {
            return error
        }
        return await execute(request, way: way, receiver: receiver, deadline: deadline, logger: logger)
    }

    /// A request under way (``start(_:receiver:deadline:logger:)``).
    struct Started: Sendable {
        /// Succeeds when the whole response has arrived; fails with the transport error, as
        /// the client reports it.
        let end: EventLoopFuture<Void>
        /// Stops the request.
        let cancel: @Sendable () -> Void
    }

    /// Sends `request` as ``execute(_:receiver:deadline:logger:)`` does, and returns once it
    /// is under way, for a caller that waits for something else too (see
    /// ``ResponseHandover``). A request through AsyncHTTPClient or on the HTTP/2 path takes
    /// no task of its own: its end completes on its event loop. A forward proxy's exchange
    /// (and the HTTP/2 path's one HTTP/1.1 exchange on a connection that learned the
    /// origin speaks only that) runs in a task of its own.
    func start(
        _ request: HTTPClient.Request, receiver: some ResponseReceiver, deadline: NIODeadline? = nil, logger: Logger
    ) async -> Started {
        let way: Way
        do {
            way = try await self.way(for: request)
        } catch {
            return failed(error)
        }
        let client: HTTPClient
        switch way {
        case .client(let routed):
            client = routed
        case .http2(let http2, let address, let fallback):
            let placement = await http2.start(
                request, address: address, receiver: receiver, deadline: deadline, logger: logger)
            if case .started(let started) = placement { return started }
            client = fallback
        case .forward:
            // A forward proxy's exchange runs to its end in a task of its own.
            let promise = eventLoopGroup.next().makePromise(of: Void.self)
            let task = Task {
                if let error = await self.execute(request, way: way, receiver: receiver, deadline: deadline, logger: logger) {
                    promise.fail(error)
                } else {
                    promise.succeed()
                }
            }
            return Started(end: promise.futureResult, cancel: { task.cancel() })
        }
        let task = client.execute(request: request, delegate: receiver, deadline: deadline, logger: logger)
        return Started(end: task.futureResult, cancel: { task.cancel() })
    }

    /// A request that failed before it was sent, as ``start(_:receiver:deadline:logger:)`` returns it.
    func failed(_ error: any Error) -> Started {
        Started(end: eventLoopGroup.next().makeFailedFuture(error), cancel: {})
    }

    /// How a request goes, once its URL is routed.
    private enum Way {
        /// In absolute form through an HTTP proxy.
        case forward(ForwardProxy)
        /// On the HTTP/2 path, connecting to `address` when one is given; through `fallback`
        /// when the origin speaks HTTP/1.1 only.
        case http2(HTTP2Path, address: String?, fallback: HTTPClient)
        /// Through the route's AsyncHTTPClient.
        case client(HTTPClient)
    }

    /// How `request` goes (see ``execute(_:receiver:deadline:logger:)``).
    private func way(for request: HTTPClient.Request) async throws -> Way {
        let url = request.url
        if url.scheme?.lowercased() == "http", let proxy = proxies.proxy(for: url), proxy.kind == .http {
            return .forward(try await forwardPath(for: url))
        }
        let route = try await self.route(for: url)
        let client = try self.client(for: route)
        // (A request with a body, an upload to object storage, goes the HTTP/1.1 way: the
        // HTTP/2 path sends none.)
        if let http2, url.scheme?.lowercased() == "https", request.body == nil {
            let address: String??
            switch route {
            case .direct: address = .some(nil)
            case .pinned(_, let pinned): address = pinned
            case .proxy: address = nil
            }
            if let address { return .http2(http2, address: address, fallback: client) }
        }
        return .client(client)
    }

    /// Sends `request` on `way` and waits for its end.
    private func execute(
        _ request: HTTPClient.Request, way: Way, receiver: some ResponseReceiver, deadline: NIODeadline?, logger: Logger
    ) async -> (any Error)? {
        let client: HTTPClient
        switch way {
        case .forward(let forward):
            return await forward.execute(request, receiver: receiver, deadline: deadline, logger: logger)
        case .http2(let http2, let address, let fallback):
            let outcome = await http2.execute(
                request, address: address, receiver: receiver, deadline: deadline, logger: logger)
            if case .finished(let error) = outcome { return error }
            client = fallback
        case .client(let routed):
            client = routed
        }
        let task = client.execute(request: request, delegate: receiver, deadline: deadline, logger: logger)
        do {
            try await withTaskCancellationHandler {
                try await task.futureResult.get()
            } onCancel: {
                task.cancel()
            }
            return nil
        } catch {
            return error
        }
    }

    /// The absolute-form path for a plain `http` request to `url` through its HTTP proxy.
    private func forwardPath(for url: URL) async throws(DownloadError) -> ForwardProxy {
        let route = try await route(for: url)
        guard case .proxy(let proxy, let address, _) = route else {
            preconditionFailure("a forward path for a request that goes direct")
        }
        let base = self.base
        let group = eventLoopGroup
        let forward = forwards.withLockedValue { forwards -> ForwardProxy? in
            guard !forwards.shutDown else { return nil }
            if let existing = forwards.paths[route] { return existing }
            let made = ForwardProxy(
                proxy: proxy, address: address, group: group, connectTimeout: base.timeout.connect ?? .seconds(10),
                readTimeout: base.timeout.read)
            forwards.paths[route] = made
            return made
        }
        guard let forward else {
            throw DownloadError(.cancelled, "the download manager is shut down", cancellationReason: .shutdown)
        }
        return forward
    }

    /// The route of a request to `url`: through its proxy if the settings give one, else
    /// direct; pinned to an address of the forced family, if one is forced.
    func route(for url: URL) async throws(DownloadError) -> NetworkRoute {
        let family = self.family
        if let proxy = proxies.proxy(for: url) {
            var address: String?
            if family != .any {
                let host = proxy.host
                address = try await threadPool.perform { () throws(DownloadError) in
                    try AddressResolver.resolve(host, family: family)
                }
            }
            // socks5:// is given addresses: the name is resolved here, as curl does.
            guard proxy.kind == .socks5, let host = url.host, !host.isEmpty, IPAddress(host) == nil else {
                return .proxy(proxy, address: address)
            }
            let origin = try await threadPool.perform { () throws(DownloadError) in
                try AddressResolver.resolve(host, family: family, evenForAny: true)
            }
            return .proxy(proxy, address: address, origin: NetworkRoute.Pin(host: host, address: origin))
        }
        guard family != .any, let host = url.host, !host.isEmpty else { return .direct }
        let address = try await threadPool.perform { () throws(DownloadError) in
            try AddressResolver.resolve(host, family: family)
        }
        return address == host ? .direct : .pinned(host: host, address: address)
    }

    /// The client configuration for `route`.
    private func configuration(for route: NetworkRoute) -> HTTPClient.Configuration {
        var configuration = base
        switch route {
        case .direct:
            break
        case .pinned(let host, let address):
            configuration.dnsOverride = [host: address]
        case .proxy(let proxy, let address, let origin):
            switch proxy.kind {
            case .http:
                let authorization = proxy.username.map {
                    HTTPClient.Authorization.basic(username: $0, password: proxy.password ?? "")
                }
                configuration.proxy = .server(
                    host: address ?? proxy.host, port: proxy.port, authorization: authorization)
            case .socks5, .socks5h:
                // The client gives a SOCKS proxy the request's host as a name, or as an
                // address when the name is mapped to one (socks5://).
                configuration.proxy = .socksServer(host: address ?? proxy.host, port: proxy.port)
                if let origin { configuration.dnsOverride = [origin.host: origin.address] }
            }
        }
        return configuration
    }

    /// Shuts every client down, waiting for each.
    func shutdown() async {
        closeForwardPaths()
        await http2?.shutdown()
        let clients = takeAll()
        for client in clients { try? await client.shutdown() }
    }

    /// Shuts every client down without waiting (for a manager's `deinit`); `then` runs once
    /// they are all shut down.
    func shutdownWithoutWaiting(then: @escaping @Sendable () -> Void) {
        closeForwardPaths()
        http2?.shutdownWithoutWaiting()
        let pending = DispatchGroup()
        for client in takeAll() {
            pending.enter()
            // The callback holds the client until its shutdown is complete.
            client.shutdown(queue: .global()) { _ in
                withExtendedLifetime(client) {}
                pending.leave()
            }
        }
        pending.notify(queue: .global(), execute: then)
    }

    /// Closes the forward paths' kept connections; no new path is made after this.
    private func closeForwardPaths() {
        let paths = forwards.withLockedValue { forwards -> [ForwardProxy] in
            forwards.shutDown = true
            return Array(forwards.paths.values)
        }
        for path in paths { path.shutdown() }
    }

    /// Every client, once: later calls get none, and no new client is made after it.
    private func takeAll() -> [HTTPClient] {
        others.withLockedValue { clients in
            guard clients[.direct] == nil else { return [] }
            let all = Array(clients.values) + [direct]
            // The direct entry marks the clients as shut down.
            clients = [.direct: direct]
            return all
        }
    }
}

extension HTTPClients {
    /// The one way a download's `GET` is made, for whole responses and segments alike:
    /// Haul's `User-Agent`, the hop's `headers` (a request's own, credentials only to their
    /// origin; see ``RedirectPolicy``), then the headers the transfer's rules chose
    /// (`Range`, `If-Range`, revalidation), which replace any of the same name.
    static func get(
        _ url: URL, userAgent: String, headers: [(name: String, value: String)], replacing ruled: [(String, String)]
    ) throws(DownloadError) -> HTTPClient.Request {
        var fields = HTTPHeaders()
        fields.reserveCapacity(1 + headers.count + ruled.count)
        fields.add(name: "User-Agent", value: userAgent)
        for header in headers { fields.add(name: header.name, value: header.value) }
        for (name, value) in ruled { fields.replaceOrAdd(name: name, value: value) }
        do {
            return try HTTPClient.Request(url: url, method: .GET, headers: fields)
        } catch {
            throw DownloadError.invalid("\(url.absoluteString): \(error)")
        }
    }
}
