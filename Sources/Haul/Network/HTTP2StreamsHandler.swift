import AsyncHTTPClient
import NIOCore
import NIOHPACK
import NIOHTTP1
import NIOHTTP2

/// One HTTP/2 connection's streams, for ``HTTP2Path``: sends each request as a `HEADERS`
/// frame on a new stream, and hands each stream's response to its ``ResponseReceiver``
/// one part at a time, as ``ForwardProxy``'s handler does on HTTP/1.1. Event-loop bound;
/// it sits right after `NIOHTTP2Handler`, with no child channel per stream and no
/// translation to HTTP/1 messages.
///
/// Flow control is the back-pressure. Every stream may receive ``streamWindow`` bytes
/// unacknowledged (announced in the connection's `SETTINGS_INITIAL_WINDOW_SIZE`); its
/// window is given back only as its receiver finishes with what it was handed, so a slow
/// disk slows that stream's sender and no other. The connection's window
/// (``connectionWindow``) is given back as bytes arrive: it only has to be larger than
/// what the streams together may hold.
///
/// A request's end:
/// - its `END_STREAM` and the receiver done with every part: success;
/// - `RST_STREAM` from the server: `NIOHTTP2Errors.StreamClosed` with its code
///   (`REFUSED_STREAM`, or `CANCEL` for the streams a `GOAWAY` left unprocessed, is sent
///   again at once by the retry rule, see ``DownloadError/wasNotProcessed``);
/// - cancelled (by the Swift task or the receiver): ``HTTPClientError/cancelled``, and a
///   `RST_STREAM` tells the server to stop sending; the connection and its other streams
///   carry on;
/// - the connection lost: ``HTTPClientError/remoteConnectionClosed``.
final class HTTP2StreamsHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    /// What the connection's pool hears of it.
    enum ConnectionEvent: Sendable {
        /// The server's `SETTINGS_MAX_CONCURRENT_STREAMS`.
        case maxStreams(Int)
        /// The server said `GOAWAY`: no new stream goes on this connection.
        case goingAway
        /// The connection is closed.
        case closed
    }

    /// Bytes a stream may receive before its receiver has taken them, at first: as curl
    /// 7.88 allows. With the window given back a sixteenth at a time, 30 MiB or more are
    /// always open, enough for one stream to fill a link of 750 MB/s at a 40 ms round
    /// trip. It bounds what a stream holds in memory when its receiver is slower than the
    /// link. A far, fast link grows it, up to ``maxStreamWindow``, from the measured
    /// bandwidth-delay product (see ``BandwidthProbe``).
    static let streamWindow = 32 << 20
    /// The largest window a stream is given.
    static let maxStreamWindow = 64 << 20
    /// Bytes the whole connection may receive unacknowledged, given back as they arrive:
    /// larger than a stream's window, so that it never binds before the streams' do.
    static let connectionWindow = 256 << 20
    /// The settings this side announces.
    static let settings: HTTP2Settings = [
        HTTP2Setting(parameter: .maxConcurrentStreams, value: 100),
        HTTP2Setting(parameter: .maxHeaderListSize, value: HPACKDecoder.defaultMaxHeaderListSize),
        HTTP2Setting(parameter: .initialWindowSize, value: streamWindow),
        HTTP2Setting(parameter: .enablePush, value: 0),
    ]

    private enum Part {
        case head(HTTPResponseHead)
        case body(ByteBuffer)
    }

    /// One request's stream. A class, so that its queue of parts is changed in place.
    private final class Stream {
        let receiver: any ResponseReceiver
        let task: ChannelTask
        let promise: EventLoopPromise<Void>
        let readTimeout: TimeAmount?
        var timer: Scheduled<Void>?
        /// A frame arrived since the read timer was last set.
        var heard = false
        var deadline: Scheduled<Void>?
        /// Parts received but not yet handed over.
        var pending: [Part] = []
        var pendingIndex = 0
        /// The receiver is working on a part.
        var busy = false
        /// The server's `END_STREAM` arrived: the stream is closed on the wire.
        var ended = false
        var sawHead = false
        /// Bytes the receiver has taken and the server has not been given back yet.
        var consumed = 0
        /// The stream's window: ``streamWindow``, grown with the connection's probe.
        var window = HTTP2StreamsHandler.streamWindow
        /// The last queued part is a body buffer of this handler's own, which later DATA
        /// frames are appended to (rather than one that is a view into a read).
        var lastBodyIsOwn = false

        init(receiver: any ResponseReceiver, task: ChannelTask, promise: EventLoopPromise<Void>, readTimeout: TimeAmount?) {
            self.receiver = receiver
            self.task = task
            self.promise = promise
            self.readTimeout = readTimeout
        }

        var hasPending: Bool { pendingIndex < pending.count }

        /// Queues a DATA frame's bytes: appended to the body part still waiting, if there
        /// is one, so that the receiver is handed what a read brought at once (a server
        /// sends 8-16 KiB frames; the receiver's work is per part).
        func queue(_ buffer: ByteBuffer, allocator: ByteBufferAllocator) {
            if hasPending, case .body(var last) = pending[pending.count - 1] {
                pending.removeLast()
                if !lastBodyIsOwn {
                    var own = allocator.buffer(capacity: max(last.readableBytes + buffer.readableBytes, 64 << 10))
                    own.writeImmutableBuffer(last)
                    last = own
                    lastBodyIsOwn = true
                }
                last.writeImmutableBuffer(buffer)
                pending.append(.body(last))
            } else {
                pending.append(.body(buffer))
                lastBodyIsOwn = false
            }
        }

        /// The next part to hand over.
        func next() -> Part {
            let part = pending[pendingIndex]
            pendingIndex += 1
            if pendingIndex == pending.count {
                pending.removeAll(keepingCapacity: true)
                pendingIndex = 0
                lastBodyIsOwn = false
            }
            return part
        }
    }

    private let onEvent: @Sendable (ConnectionEvent) -> Void
    /// Whether the server's preface (its first `SETTINGS`) has arrived.
    private var heardPreface = false
    private var context: ChannelHandlerContext?
    private var streams: [HTTP2StreamID: Stream] = [:]
    private var streamOfTask: [ObjectIdentifier: HTTP2StreamID] = [:]
    private var nextStreamID: Int32 = 1
    private var goingAway = false
    /// Streams that received something in this read: handed over at its end.
    private var touched: [HTTP2StreamID] = []
    /// What the window of a new stream is, grown as the probe measures the link.
    private var probe = BandwidthProbe(window: HTTP2StreamsHandler.streamWindow, maxWindow: HTTP2StreamsHandler.maxStreamWindow)

    /// `onEvent` hears of the connection: first the server's
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` (100 if its preface sets none), and any change.
    init(onEvent: @escaping @Sendable (ConnectionEvent) -> Void) {
        self.onEvent = onEvent
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        // The connection's window starts at 65,535 bytes (RFC 9113 §6.9.2): open it at once.
        let increment = Self.connectionWindow - 65_535
        context.writeAndFlush(
            wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: increment))),
            promise: nil)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    // MARK: - Requests

    /// Sends `headers` (a request with no body) on a new stream and hands its response to
    /// `receiver`; `promise` completes when the request has ended.
    func start(
        _ headers: HPACKHeaders, receiver: any ResponseReceiver, task: ChannelTask, readTimeout: TimeAmount?,
        deadline: NIODeadline?, promise: EventLoopPromise<Void>
    ) {
        guard let context, context.channel.isActive, !goingAway, nextStreamID < Int32.max - 2 else {
            // Not sent (the connection closed or is closing since the request was placed on
            // it): as a stream the server refused, it goes again on another connection.
            promise.fail(Self.notSent)
            return
        }
        let id = HTTP2StreamID(nextStreamID)
        nextStreamID += 2
        let stream = Stream(receiver: receiver, task: task, promise: promise, readTimeout: readTimeout)
        let loop = context.eventLoop.assumeIsolated()
        if let deadline {
            stream.deadline = loop.scheduleTask(deadline: deadline) { [self] in
                fail(id, HTTPClientError.deadlineExceeded)
            }
        }
        if let readTimeout {
            stream.timer = loop.scheduleTask(in: readTimeout) { [self] in checkIdle(id) }
        }
        streams[id] = stream
        streamOfTask[ObjectIdentifier(task)] = id
        let written = context.eventLoop.makePromise(of: Void.self)
        written.futureResult.assumeIsolated().whenFailure { [self] error in fail(id, error) }
        stream.window = probe.window
        let headersFrame = HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: true)))
        guard stream.window > Self.streamWindow else {
            context.writeAndFlush(wrapOutboundOut(headersFrame), promise: written)
            return
        }
        // The link measured wider than the initial window: this stream starts wider too.
        context.write(wrapOutboundOut(headersFrame), promise: written)
        context.writeAndFlush(
            wrapOutboundOut(
                HTTP2Frame(streamID: id, payload: .windowUpdate(windowSizeIncrement: stream.window - Self.streamWindow))),
            promise: nil)
    }

    /// The error of a request that never left: the retry rule sends it again at once.
    static var notSent: any Error { NIOHTTP2Errors.streamClosed(streamID: .rootStream, errorCode: .refusedStream) }

    /// Stops `task`'s stream: the server is told to stop sending (`RST_STREAM`), and the
    /// request ends with ``HTTPClientError/cancelled``.
    func cancel(_ task: ChannelTask) {
        guard let id = streamOfTask[ObjectIdentifier(task)] else { return }
        fail(id, HTTPClientError.cancelled)
    }

    // MARK: - Frames

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let id = frame.streamID
        switch frame.payload {
        case .headers(let headers):
            guard let stream = streams[id] else { return }
            stream.heard = true
            if !stream.sawHead {
                guard let head = Self.responseHead(headers.headers) else {
                    fail(id, DownloadError(.network, "the server's HTTP/2 response has no valid :status"))
                    return
                }
                // An informational answer (`100 Continue`, `103 Early Hints`) is not the response.
                if head.status.code >= 200 || headers.endStream {
                    stream.sawHead = true
                    stream.pending.append(.head(head))
                    stream.lastBodyIsOwn = false
                }
            }
            if headers.endStream { stream.ended = true }
            touched.append(id)
        case .data(let payload):
            if probe.received(payload.data.readableBytes, at: .now()) {
                context.writeAndFlush(
                    wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .ping(Self.probePing, ack: false))),
                    promise: nil)
            }
            guard let stream = streams[id] else { return }
            stream.heard = true
            if case .byteBuffer(let buffer) = payload.data, buffer.readableBytes > 0 {
                stream.queue(buffer, allocator: context.channel.allocator)
            }
            if payload.endStream { stream.ended = true }
            touched.append(id)
        case .rstStream(let code):
            guard let stream = streams[id] else { return }
            stream.ended = true
            fail(id, NIOHTTP2Errors.streamClosed(streamID: id, errorCode: code))
        case .ping(let data, ack: true) where data == Self.probePing:
            if let growth = probe.answered(at: .now()) { widen(by: growth) }
        case .goAway:
            // The streams it leaves unprocessed are closed by NIOHTTP2 (`StreamClosedEvent`
            // with `CANCEL`, below); the others run to their end.
            goingAway = true
            onEvent(.goingAway)
        case .settings(.settings(let settings)):
            let limit = settings.last { $0.parameter == .maxConcurrentStreams }?.value
            if !heardPreface {
                heardPreface = true
                onEvent(.maxStreams(limit ?? 100))
            } else if let limit {
                onEvent(.maxStreams(limit))
            }
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if !touched.isEmpty {
            let ids = touched
            touched.removeAll(keepingCapacity: true)
            var last: HTTP2StreamID?
            for id in ids where id != last {
                deliver(id)
                last = id
            }
        }
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let closed = event as? StreamClosedEvent, let reason = closed.reason, let stream = streams[closed.streamID],
            !stream.ended
        {
            stream.ended = true
            fail(closed.streamID, NIOHTTP2Errors.streamClosed(streamID: closed.streamID, errorCode: reason))
        } else if let window = event as? NIOHTTP2WindowUpdatedEvent, window.streamID == .rootStream,
            let inbound = window.inboundWindowSize, inbound <= Self.connectionWindow / 2
        {
            context.writeAndFlush(
                wrapOutboundOut(
                    HTTP2Frame(
                        streamID: .rootStream,
                        payload: .windowUpdate(windowSizeIncrement: Self.connectionWindow - inbound))),
                promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        for (id, stream) in streams {
            stream.ended = true
            fail(id, HTTPClientError.remoteConnectionClosed)
        }
        onEvent(.closed)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let streamError = error as? NIOHTTP2Errors.StreamError {
            // NIOHTTP2 has reset the stream already.
            streams[streamError.streamID]?.ended = true
            fail(streamError.streamID, streamError.baseError)
            return
        }
        for (id, stream) in streams {
            stream.ended = true
            fail(id, error)
        }
        context.close(promise: nil)
    }

    // MARK: - Handing over

    /// Hands `id`'s next part to its receiver, once it is free; succeeds at the end.
    private func deliver(_ id: HTTP2StreamID) {
        guard let stream = streams[id], !stream.busy, let loop = context?.eventLoop else { return }
        guard stream.hasPending else {
            if stream.ended {
                if stream.sawHead {
                    succeed(id)
                } else {
                    fail(id, HTTPClientError.remoteConnectionClosed)
                }
            }
            return
        }
        stream.busy = true
        let future: EventLoopFuture<Void>
        var bytes = 0
        switch stream.next() {
        case .head(let head):
            future = stream.receiver.receivedHead(task: stream.task, head)
        case .body(let buffer):
            bytes = buffer.readableBytes
            future = stream.receiver.receivedBodyPart(task: stream.task, buffer)
        }
        future.hop(to: loop).assumeIsolated().whenComplete { [self] result in
            guard streams[id] === stream else { return }
            stream.busy = false
            if case .failure(let error) = result {
                fail(id, error)
                return
            }
            giveBack(bytes, to: stream, id: id)
            deliver(id)
        }
    }

    /// The probe's `PING` (its payload spells "haul").
    static let probePing = HTTP2PingData(withInteger: 0x6861_756C)

    /// Opens every open stream's window by `growth`, as the probe found the link wider.
    private func widen(by growth: Int) {
        guard let context else { return }
        for (id, stream) in streams where !stream.ended {
            stream.window += growth
            context.write(
                wrapOutboundOut(HTTP2Frame(streamID: id, payload: .windowUpdate(windowSizeIncrement: growth))),
                promise: nil)
        }
        context.flush()
    }

    /// Returns `bytes` the receiver has taken to the stream's window, a sixteenth of the
    /// window at a time.
    private func giveBack(_ bytes: Int, to stream: Stream, id: HTTP2StreamID) {
        guard bytes > 0, !stream.ended else { return }
        stream.consumed += bytes
        let increment = stream.consumed
        guard increment >= stream.window / 16, let context else { return }
        stream.consumed = 0
        context.writeAndFlush(
            wrapOutboundOut(HTTP2Frame(streamID: id, payload: .windowUpdate(windowSizeIncrement: increment))),
            promise: nil)
    }

    /// The read timeout: ends `id` if nothing arrived for it while it waited on the network.
    private func checkIdle(_ id: HTTP2StreamID) {
        guard let stream = streams[id], let timeout = stream.readTimeout, let context else { return }
        let waitingOnNetwork = !stream.busy && !stream.hasPending && !stream.ended
        if stream.heard || !waitingOnNetwork {
            stream.heard = false
            stream.timer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [self] in checkIdle(id) }
            return
        }
        fail(id, HTTPClientError.readTimeout)
    }

    private func succeed(_ id: HTTP2StreamID) {
        guard let stream = remove(id) else { return }
        stream.promise.succeed(())
    }

    /// Ends `id` with `error`, telling the server to stop if the stream is still open.
    private func fail(_ id: HTTP2StreamID, _ error: any Error) {
        guard let stream = remove(id) else { return }
        if !stream.ended, let context, context.channel.isActive {
            context.writeAndFlush(
                wrapOutboundOut(HTTP2Frame(streamID: id, payload: .rstStream(.cancel))), promise: nil)
        }
        stream.promise.fail(error)
    }

    private func remove(_ id: HTTP2StreamID) -> Stream? {
        guard let stream = streams.removeValue(forKey: id) else { return nil }
        streamOfTask[ObjectIdentifier(stream.task)] = nil
        stream.timer?.cancel()
        stream.deadline?.cancel()
        return stream
    }

    /// A response's head from its header block: `:status` and the fields, without the
    /// pseudo-header fields; `nil` without a valid `:status`.
    static func responseHead(_ block: HPACKHeaders) -> HTTPResponseHead? {
        guard let text = block.first(name: ":status"), let code = Int(text), (100...999).contains(code) else {
            return nil
        }
        var headers = HTTPHeaders()
        headers.reserveCapacity(block.count)
        for (name, value, _) in block where !name.hasPrefix(":") {
            headers.add(name: name, value: value)
        }
        return HTTPResponseHead(version: .http2, status: HTTPResponseStatus(statusCode: code), headers: headers)
    }
}

/// Measures a connection's bandwidth-delay product, as gRPC does: a `PING` goes out with a
/// `DATA` frame, and the bytes that arrive before its answer are what the link carries in
/// one round trip. When that comes near the streams' window, the window is what holds the
/// link back, and it grows to twice the measure (up to `maxWindow`). A pure value: the
/// handler sends the `PING`s and the window updates it asks for.
///
/// A probe that found the window wide enough waits ``quietInterval`` before the next one.
/// Every answer is a control frame to the receiving side, and NIOHTTP2 closes a connection
/// that receives more than 200 of them in 30 s (its defence against a `PING` flood); a
/// probe sent after every answer, as long as data flows, reached that within a second on a
/// near server, and the connection went down with the streams on it. The wait keeps the
/// probe to about 30 answers in those 30 s, plus the few that find the window growing (at
/// most one per doubling up to `maxWindow`), and keeps it polite to servers that count
/// `PING`s too.
struct BandwidthProbe: Equatable, Sendable {
    /// How long a probe that found no growth keeps the next one from going out.
    static let quietInterval = TimeAmount.seconds(1)

    /// The window a stream is given now.
    private(set) var window: Int
    let maxWindow: Int
    /// A `PING` is out, and the bytes received since it was sent.
    private var outstanding = false
    private var bytes = 0
    /// No `PING` goes out before this (the last one found no growth).
    private var quietUntil = NIODeadline.uptimeNanoseconds(0)

    init(window: Int, maxWindow: Int) {
        self.window = window
        self.maxWindow = maxWindow
    }

    /// `count` bytes of `DATA` arrived at `now`; true when a `PING` should go out now.
    /// (`now` is read only when a `PING` could go.)
    mutating func received(_ count: Int, at now: @autoclosure () -> NIODeadline) -> Bool {
        if outstanding {
            bytes += count
            return false
        }
        guard window < maxWindow, now() >= quietUntil else { return false }
        outstanding = true
        bytes = 0
        return true
    }

    /// The `PING` was answered at `now`; returns by how much every stream's window grows, if
    /// it does. When it does not, the next `PING` waits ``quietInterval``.
    mutating func answered(at now: NIODeadline) -> Int? {
        guard outstanding else { return nil }
        outstanding = false
        // Near the window (more than half of it in one round trip): the window binds.
        let grown = min(maxWindow, bytes * 2)
        guard bytes * 2 > window, grown > window else {
            quietUntil = now + Self.quietInterval
            return nil
        }
        defer { window = grown }
        return grown - window
    }
}
