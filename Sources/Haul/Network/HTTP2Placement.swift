/// Which HTTP/2 connection to an origin the next request goes on, and whether to open
/// another: the rule of ``HTTP2Path``'s pool, a pure value tested without sockets
/// (`HTTP2PlacementTests`).
///
/// - A request goes on the open connection with the fewest streams, as long as the server
///   allows one more (its `SETTINGS_MAX_CONCURRENT_STREAMS`) and the connection has not
///   said `GOAWAY`.
/// - At most ``maxConnections`` connections to an origin (issue 42: at most 2). The
///   second one is opened by a request that finds the first carrying a stream, and that
///   request waits for it (the ones arriving meanwhile go on the first): two downloads, or
///   the two segments of one, run on two connections and two event loops (two cores). TLS
///   and HTTP/2 framing cost CPU, one connection is served by one thread, and a server
///   sends the streams of one connection one after another.
/// - Until the first connection has said what it speaks (ALPN), nothing else is opened:
///   an origin that answers `http/1.1` costs one handshake, not one per request.
/// - When no connection can take the request and no more may be opened, it waits for a
///   stream to end.
struct HTTP2Placement: Equatable, Sendable {
    /// What the pool knows of one connection.
    struct Connection: Equatable, Sendable {
        var id: Int
        /// Streams it carries now (including ones placed and not yet started).
        var active: Int
        /// Streams the server allows at once (`SETTINGS_MAX_CONCURRENT_STREAMS`):
        /// ``HTTP2Placement/limitBeforePreface`` until its preface says.
        var limit: Int
        /// False once the server said `GOAWAY`: it takes no new stream.
        var accepting: Bool = true
    }

    /// Connections to one origin at most.
    static let maxConnections = 2

    /// Streams a connection is given before the server's preface (its first `SETTINGS`)
    /// says how many it allows: 100, as nghttp2 (curl) and NIOHTTP2 itself assume, and as
    /// RFC 9113 recommends as the least a server allows (its initial limit is none).
    ///
    /// The server's `SETTINGS` come a round trip after the client's preface, with the
    /// first response: waiting for them (as a limit of one did) held every request but the
    /// first back by that round trip on each new connection, 40 ms on a far link. A server
    /// that allows fewer refuses the streams beyond its limit (`REFUSED_STREAM`); those
    /// are sent again at once (``RetrySchedule``), and from then on its limit is kept.
    static let limitBeforePreface = 100

    /// Where a request goes.
    struct Decision: Equatable, Sendable {
        /// The connection to start the request's stream on; `nil`: wait.
        var use: Int?
        /// Whether to open another connection (the waiting requests go on it when it is up).
        var open: Bool

        static func use(_ id: Int) -> Decision { Decision(use: id, open: false) }
        static let open = Decision(use: nil, open: true)
        static let wait = Decision(use: nil, open: false)
    }

    /// Where the next request goes, given the origin's `connections` and how many are
    /// being opened (`connecting`).
    static func place(connections: [Connection], connecting: Int) -> Decision {
        let accepting = connections.filter(\.accepting)
        let total = accepting.count + connecting
        // One connection is opened at a time, so nothing is opened while the first one's
        // protocol is unknown.
        let mayOpen = total < maxConnections && connecting == 0
        let best = accepting.filter { $0.active < $0.limit }.min { ($0.active, $0.id) < ($1.active, $1.id) }
        guard let best else { return mayOpen ? .open : .wait }
        return mayOpen && best.active > 0 ? .open : .use(best.id)
    }
}
