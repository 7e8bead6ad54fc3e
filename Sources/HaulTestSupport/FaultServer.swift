public import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// An in-process HTTP/1.1 server for tests that serves registered files and injects faults
/// on demand: aborted and stalled transfers, lying lengths, trickling, failures, redirects
/// and gates that hold responses until the test releases them.
///
/// The server listens on `127.0.0.1` on a random free port, supports `GET` and `HEAD`,
/// persistent connections (keep-alive) and request pipelining. It records every request and
/// keeps statistics. Nothing in it sleeps: tests synchronise with
/// ``waitForRequests(count:path:)``, ``waitForGateWaiters(_:count:)`` and ``release(_:)``.
///
/// ```swift
/// let server = try await FaultServer.start()
/// server.setFile("a", FaultServer.randomBytes(count: 1 << 20, seed: 1))
/// let url = server.url("/files/a?reset_after=1000&reset_times=1")
/// // ... download url; the first attempt is reset after 1000 body bytes ...
/// try await server.shutdown()
/// ```
///
/// ## Routes
///
/// - `/files/<name>`: the file registered with `setFile(name, ...)` (the name is
///   percent-decoded). By default a correct server: `Content-Length`,
///   `Accept-Ranges: bytes`, `ETag` and `Last-Modified` (if the file has them),
///   `Content-Type: application/octet-stream`. A single `Range` (`bytes=N-`, `bytes=N-M`,
///   `bytes=-K`) gives 206 with `Content-Range: bytes N-M/TOTAL`; a range starting at or after
///   the end gives 416 with `Content-Range: bytes */TOTAL`; malformed or multi-range headers
///   are ignored (200). `If-Range` equal to the current *strong* ETag or to the current
///   `Last-Modified` string honours the range, anything else gives 200 with the full body.
///   `If-None-Match` matching the ETag (weak comparison, lists and `*` allowed) gives 304.
///   Unknown names give 404 with a short text body.
/// - `/status/<code>` (200...999): that status with body `status <code>`.
/// - `/redirect/<n>?to=<path>`: 302 to `/redirect/<n-1>?to=<path>`; `/redirect/0` redirects
///   to `to` (default `/status/200`). Locations are absolute (`http://127.0.0.1:PORT/...`).
///   `code=301|303|307|308` changes the status (and is propagated along the chain).
/// - `/loop/a` → 302 to `/loop/b` → 302 to `/loop/a` (any other letter goes to `/loop/a`).
/// - `/echo-headers`: 200 with one `name: value` line per request header (names lowercased).
/// - Anything else: 404. Methods other than GET and HEAD: 405.
///
/// ## Fault knobs (query parameters; they combine)
///
/// Counted knobs (`reset_times`, `stall_times`, `fail_times`) count per path (without the
/// query) and per kind of fault, over the server's lifetime (see ``resetFaultCounters()``).
/// Omitting the `_times` parameter means every request. Invalid values give 400.
///
/// - `gate=G` (any route): the response is held, with nothing sent, until ``release(_:)`` is
///   called for `G`; then the request is answered normally. A released gate stays open.
///   With `gate_after=N`, the head and the first N body bytes are sent at once, then the
///   rest trickles at `gate_rate=R` bytes per second (default 40 KiB/s, sent every 100 ms)
///   until `G` is released, and goes on at full speed (every response of that URL, ranges
///   too, counting from its own first byte): the client keeps receiving parts, and a body
///   longer than R times the wait cannot end before the release.
/// - `fail=S` (any route, 200...999), `fail_times=K`: the first K requests answer status S with
///   a 512-byte `text/plain` body; `retry_after=X` adds `Retry-After: X` (to these and to
///   `/status`). Evaluated after the gate, before routing; HEAD requests count too.
/// - `reset_after=N`, `reset_times=K`: send the head and the first N body bytes, wait until
///   they have been written to the socket, then close abruptly with `SO_LINGER` 0 (TCP RST).
///   An RST may discard bytes still queued in the kernel, so a client sees *at most* N bytes
///   (exactly N for small N on loopback). `reset_fin=1` closes with a plain FIN instead, which
///   always delivers all N bytes. If N ≥ the body length the whole body is sent and the
///   connection is then reset. Only GET requests answered 200/206 count.
/// - `stall_after=N`, `stall_times=K`: send the head and N body bytes, then nothing more, keeping
///   the connection open (the request stays in flight) until the client closes it or the server
///   shuts down. Only GET requests answered 200/206 count. `reset_after` wins over
///   `stall_after` when both apply.
/// - `ignore_range=1`: ignore `Range`/`If-Range`, always 200 with the full body, and do not
///   send `Accept-Ranges`.
/// - `no_validators=1`: send neither `ETag` nor `Last-Modified` (so no `If-Range` or
///   `If-None-Match` can match).
/// - `weak_etag=1`: send the ETag as `W/"..."`; a weak ETag never matches `If-Range`.
/// - `chunked=1`: `Transfer-Encoding: chunked` instead of `Content-Length`, body in (at least)
///   four chunks.
/// - `lie_length=D` (signed, ignored with `chunked=1`): advertise
///   `Content-Length: max(0, length + D)` but send the real body, then close the connection
///   (FIN). With D > 0 the client sees a short body; with D < 0 it gets more bytes than
///   advertised.
/// - `rate=B`: trickle the body at most B bytes per second: `max(1, B/10)` bytes every 100 ms
///   (the first batch immediately).
/// - `disposition=V`: add `Content-Disposition: V` (percent-decoded) to 200/206 file responses.
/// - `token=T` (any route): a signed URL's token. Once T has expired, every request carrying it
///   is answered `403` with S3's "Request has expired" body, before routing.
/// - `token=T&expire_after=N` (files): T expires when this GET is answered; the head and N body
///   bytes are sent, then the connection is closed (FIN, so all N arrive). A signed URL that
///   expires in the middle of its download.
/// - `corrupt_at=N` (files; or `N,M,…`): the byte at offset N of the file is sent with its
///   lowest bit flipped, in every response whose range holds it (same size, same
///   validators): a mirror that corrupts a byte.
/// - Caching (files): `cache_control=V` sends `Cache-Control: V`; `expires=N` sends an
///   `Expires` N seconds after the response's `Date` (negative: before; a value that is not
///   a number is sent as it is, such as `0`); `age=N` sends `Age: N`; `vary=NAME` sends
///   `Vary: NAME`; `date_skew=N` sends a `Date` N seconds off the server's clock (a server
///   whose clock is wrong). With any of them the response carries a `Date`. Files answer
///   `If-None-Match` and `If-Modified-Since` (an exact match of their `Last-Modified`)
///   with `304 Not Modified`, with the same caching headers.
/// - `/sign/NAME` (route): `302` to `/files/NAME?token=tK` with a fresh token each time (`t1`,
///   `t2`, …); `expire_after=N` is passed on with the first token only. A signing endpoint,
///   such as a release page that redirects to a presigned object URL.
///
/// Bodies are sent as slices of the stored file in chunks of at most 64 KiB, with back-pressure
/// (writing pauses while the connection is not writable), so large files are cheap.
public final class FaultServer: Sendable {
    let core: ServerCore
    private let serverChannel: any Channel

    /// The TCP port the server listens on (on 127.0.0.1).
    public let port: Int

    /// The server's base URL, `http://127.0.0.1:PORT` (no trailing slash).
    public var baseURL: String { self.core.baseURL }

    private init(core: ServerCore, serverChannel: any Channel, port: Int) {
        self.core = core
        self.serverChannel = serverChannel
        self.port = port
    }

    deinit {
        // Safety net for tests that forget `shutdown()`.
        self.serverChannel.close(promise: nil)
        for channel in self.core.beginShutdown() {
            channel.close(promise: nil)
        }
    }

    /// Starts a server listening on `host` (127.0.0.1 unless given; any address of the
    /// loopback range works on Linux), on `port` or (0, the default) a random free one.
    ///
    /// Passing the port of a server that was shut down brings "the same" server back, for
    /// network-loss tests. Such tests should use a loopback address of their own (such as
    /// 127.0.0.2): while the server is down, another server on 127.0.0.1 may be given its
    /// port. The server runs on `MultiThreadedEventLoopGroup.singleton`; stop
    /// it with ``shutdown()``.
    public static func start(host: String = "127.0.0.1", port requestedPort: Int = 0) async throws -> FaultServer {
        let core = ServerCore()
        core.host = host
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(ChannelOptions.backlog, value: 256)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            .childChannelOption(
                ChannelOptions.writeBufferWaterMark,
                value: ChannelOptions.Types.WriteBufferWaterMark(low: 256 * 1024, high: 1024 * 1024)
            )
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withPipeliningAssistance: true,
                        withErrorHandling: true
                    )
                    try channel.pipeline.syncOperations.addHandler(FaultConnectionHandler(core: core))
                }
            }
            .bind(host: host, port: requestedPort)
            .get()
        guard let port = channel.localAddress?.port else {
            try? await channel.close()
            throw ChannelError.unknownLocalAddress
        }
        core.port = port
        return FaultServer(core: core, serverChannel: channel, port: port)
    }

    /// `baseURL + pathAndQuery`; `pathAndQuery` must start with `/`, e.g. `"/files/a?rate=1000"`.
    public func url(_ pathAndQuery: String) -> URL {
        precondition(pathAndQuery.hasPrefix("/"), "pathAndQuery must start with '/'")
        guard let url = URL(string: self.baseURL + pathAndQuery) else {
            preconditionFailure("not a valid URL: \(self.baseURL + pathAndQuery)")
        }
        return url
    }

    /// Stops listening, closes all open connections (including stalled and gated ones) and
    /// resumes every pending `waitFor…` call. Idempotent.
    public func shutdown() async throws {
        // Stop listening first: a waiting response that the shutdown ends (a stall) makes
        // its client retry at once, and that retry must find nobody listening, not a
        // connection accepted and then reset.
        do {
            try await self.serverChannel.close()
        } catch ChannelError.alreadyClosed {
            // Already shut down.
        }
        let connections = self.core.beginShutdown()
        for connection in connections {
            connection.close(promise: nil)
        }
        for connection in connections {
            try? await connection.closeFuture.get()
        }
    }

    // MARK: - Files

    /// Registers (or replaces) the file served under `/files/<name>`.
    ///
    /// - Parameters:
    ///   - name: The file name (the part of the path after `/files/`).
    ///   - bytes: The content.
    ///   - etag: `.automatic` (default): a strong ETag that changes on every `setFile` for this
    ///     name; `.none`: no ETag; `.custom(tag)`: a fixed tag.
    ///   - lastModified: `.automatic` (default): a fixed date that moves forward one second on
    ///     every `setFile` for this name; `.none`: no Last-Modified; `.custom(date)`.
    public func setFile(
        _ name: String,
        _ bytes: [UInt8],
        etag: ServedFile.ETag = .automatic,
        lastModified: ServedFile.LastModified = .automatic
    ) {
        self.core.setFile(name, content: ByteBuffer(bytes: bytes), etag: etag, lastModified: lastModified)
    }

    /// Registers (or replaces) the file served under `/files/<name>` from `Data`.
    ///
    /// See the `[UInt8]` overload for the validator options.
    public func setFile(
        _ name: String,
        _ data: Data,
        etag: ServedFile.ETag = .automatic,
        lastModified: ServedFile.LastModified = .automatic
    ) {
        var buffer = ByteBufferAllocator().buffer(capacity: data.count)
        data.withUnsafeBytes { _ = buffer.writeBytes($0) }
        self.core.setFile(name, content: buffer, etag: etag, lastModified: lastModified)
    }

    /// Registers (or replaces) the file served under `/files/<name>`.
    public func setFile(_ name: String, _ file: ServedFile) {
        self.setFile(name, file.bytes, etag: file.etag, lastModified: file.lastModified)
    }

    /// Unregisters a file; further requests for it get 404. Its ETag/Last-Modified version
    /// counter is kept, so registering it again yields new automatic validators.
    public func removeFile(_ name: String) {
        self.core.removeFile(name)
    }

    /// The ETag currently sent for a file (quoted, e.g. `"v1-1"`), or `nil` if the file is
    /// unknown or has none.
    public func etag(forFile name: String) -> String? {
        self.core.file(name)?.etag
    }

    /// The `Last-Modified` string currently sent for a file, or `nil` if the file is unknown
    /// or has none.
    public func lastModified(forFile name: String) -> String? {
        self.core.file(name)?.lastModified
    }

    // MARK: - Gates and faults

    /// Releases every request waiting on `gate` (`?gate=G`), now and in the future.
    public func release(_ gate: String) {
        self.core.release(gate)
    }

    /// Makes every later request carrying `token=T` fail as an expired signed URL (`403`).
    public func expire(token: String) {
        self.core.expire(token: token)
    }

    /// Closes a released gate again, so that later requests wait on it until the next
    /// ``release(_:)``. Requests already let through are unaffected.
    public func closeGate(_ gate: String) {
        self.core.closeGate(gate)
    }

    /// Forgets how many requests each path has had for `reset_times`, `stall_times` and
    /// `fail_times`. (``resetStatistics()`` does not touch these counters.)
    public func resetFaultCounters() {
        self.core.resetFaultCounters()
    }

    // MARK: - Synchronisation

    /// Returns once at least `count` requests have arrived (since the start or the last
    /// ``resetStatistics()``), counting only those whose path (without query) equals `path`
    /// if given. A request counts as soon as its head is received.
    ///
    /// Returns early if the task is cancelled or the server shuts down.
    public func waitForRequests(count: Int, path: String? = nil) async {
        await self.core.waitForRequests(count: count, path: path)
    }

    /// Returns once at least `count` TCP connections have been accepted (since the start
    /// or the last ``resetStatistics()``), whatever was sent on them.
    ///
    /// Returns early if the task is cancelled or the server shuts down.
    public func waitForConnections(count: Int) async {
        await self.core.waitForConnections(count: count)
    }

    /// Returns once at least `count` requests are currently blocked on `gate`.
    ///
    /// Returns early if the task is cancelled or the server shuts down.
    public func waitForGateWaiters(_ gate: String, count: Int) async {
        await self.core.waitForGateWaiters(gate, count: count)
    }

    // MARK: - Statistics

    /// A snapshot of the server's counters.
    public var statistics: Statistics {
        self.core.statistics
    }

    /// Body bytes written for requests to `path` (without query).
    public func bytesServed(path: String) -> Int {
        self.core.bytesServed(path: path)
    }

    /// The recorded requests in arrival order, optionally only those whose path (without
    /// query) equals `path`.
    public func requests(path: String? = nil) -> [RecordedRequest] {
        self.core.requests(path: path)
    }

    /// Resets the cumulative statistics, the per-path byte counts and the recorded requests.
    /// Gauges (open connections, in-flight requests) keep their current values, which also
    /// become the new maxima. Fault counters and gates are not affected.
    public func resetStatistics() {
        self.core.resetStatistics()
    }
}
