import Foundation
import NIOCore
import NIOHTTP1

/// The per-connection handler of a ``FaultServer``.
///
/// It sits behind NIO's HTTP/1.1 server pipeline (with pipelining assistance, so at most
/// one request per connection is being answered at any time) and confines all of its state
/// to the connection's event loop. Bodies are written in slices of the stored file with
/// back-pressure: the handler stops writing while the channel is not writable and resumes on
/// `channelWritabilityChanged`, or, when trickling (`rate=`), writes on a 100 ms timer.
final class FaultConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    /// A request whose head has been received and whose response has not been completed.
    private struct ActiveRequest {
        var head: HTTPRequestHead
        var target: RequestTarget
    }

    /// The body currently being written.
    private struct BodyJob {
        var body: ByteBuffer
        var sent = 0
        var limit: Int
        var chunkSize: Int
        /// Bytes per second when trickling, else `nil`.
        var rate: Int?
        /// Bytes that may still be written before the next rate tick (unlimited if no rate).
        var budget = Int.max
        var ending: ResponsePlan.Ending
        var keepAlive: Bool
        var path: String
        /// With `gate_after=N`: the gate the body waits at once `N` bytes are sent, `N`, and
        /// the rate it trickles at meanwhile (`gate_rate`).
        var hold: (gate: String, at: Int, rate: Int)?
        /// Trickling at ``hold``'s gate, until it is released.
        var held = false

        var isDone: Bool { self.sent >= self.limit }
    }

    private let core: ServerCore
    private var context: ChannelHandlerContext?
    private var connectionNumber = 0
    private var registered = false

    private var current: ActiveRequest?
    /// Requests of this connection currently counted as in flight by the core.
    private var outstanding = 0
    private var gateWait: (gate: String, id: Int)?
    private var job: BodyJob?
    private var lastWrite: EventLoopFuture<Void>?
    private var rateTimer: Scheduled<Void>?
    private var pumping = false
    private var pumpAgain = false

    init(core: ServerCore) {
        self.core = core
    }

    // MARK: - Lifecycle

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        if let number = self.core.connectionOpened(context.channel) {
            self.connectionNumber = number
            self.registered = true
        } else {
            context.close(promise: nil)
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.rateTimer?.cancel()
        self.rateTimer = nil
        self.job = nil
        self.current = nil
        if let gateWait = self.gateWait {
            self.core.leaveGate(gateWait.gate, id: gateWait.id)
            self.gateWait = nil
        }
        if self.outstanding > 0 {
            self.core.requestsFinished(self.outstanding)
            self.outstanding = 0
        }
        if self.registered {
            self.registered = false
            self.core.connectionClosed(context.channel)
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // Typically ECONNRESET/EPIPE from a client that went away. Nothing to report.
        context.close(promise: nil)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, self.job != nil {
            self.pump()
        }
        context.fireChannelWritabilityChanged()
    }

    // MARK: - Requests

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            let target = RequestTarget(uri: head.uri)
            _ = self.core.requestArrived(
                connection: self.connectionNumber,
                method: head.method.rawValue,
                uri: head.uri,
                target: target,
                headers: head.headers.map { (name: $0.name, value: $0.value) }
            )
            self.outstanding += 1
            self.current = ActiveRequest(head: head, target: target)
        case .body:
            break
        case .end:
            guard let request = self.current else { return }
            self.process(request, context: context)
        }
    }

    private func process(_ request: ActiveRequest, context: ChannelHandlerContext) {
        // With `gate_after`, the gate holds the body part way instead (see ``pumpOnce()``).
        if let gate = request.target.query["gate"], request.target.query["gate_after"] == nil,
            !self.enterGate(gate, context: context)
        {
            return
        }
        self.respond(to: request)
    }

    /// Whether `gate` is open; if not, the current request waits at it, and
    /// ``gateOpened(id:)`` runs once it is released.
    private func enterGate(_ gate: String, context: ChannelHandlerContext) -> Bool {
        let id = self.core.makeID()
        let eventLoop = context.eventLoop
        let handler = NIOLoopBound(self, eventLoop: eventLoop)
        let open = self.core.enterGate(gate, id: id) {
            eventLoop.execute { handler.value.gateOpened(id: id) }
        }
        if !open { self.gateWait = (gate, id) }
        return open
    }

    private func gateOpened(id: Int) {
        guard let gateWait = self.gateWait, gateWait.id == id, let request = self.current else { return }
        self.gateWait = nil
        if var job = self.job, job.held {
            // At full speed again.
            job.held = false
            job.hold = nil
            job.rate = nil
            job.budget = .max
            self.job = job
            self.rateTimer?.cancel()
            self.rateTimer = nil
            self.pump()
        } else {
            self.respond(to: request)
        }
    }

    private func respond(to request: ActiveRequest) {
        guard let context = self.context else { return }
        let plan = self.core.plan(method: request.head.method, target: request.target, headers: request.head.headers)
        let keepAlive = request.head.isKeepAlive
        var headers = plan.headers
        if !keepAlive {
            headers.replaceOrAdd(name: "connection", value: "close")
        }
        let head = HTTPResponseHead(version: .http1_1, status: plan.status, headers: headers)
        self.lastWrite = context.write(self.wrapOutboundOut(.head(head)))

        guard let body = plan.body, request.head.method != .HEAD else {
            self.finishResponse(keepAlive: keepAlive)
            return
        }
        self.job = BodyJob(
            body: body,
            limit: plan.bodyLimit,
            chunkSize: plan.chunkSize,
            rate: plan.rate,
            ending: plan.ending,
            keepAlive: keepAlive,
            path: request.target.path
        )
        self.job?.hold = plan.hold.map { ($0.gate, $0.after, $0.rate) }
        if plan.rate != nil {
            self.job?.budget = 0
            self.rateTick()
        } else {
            self.pump()
        }
    }

    // MARK: - Body writing

    /// Writes body slices while the channel is writable (and, when trickling, while the
    /// current 100 ms budget lasts). Re-entrancy safe: a writability change fired from inside
    /// `flush()` just makes the outer call loop again.
    private func pump() {
        if self.pumping {
            self.pumpAgain = true
            return
        }
        self.pumping = true
        defer { self.pumping = false }
        repeat {
            self.pumpAgain = false
            self.pumpOnce()
        } while self.pumpAgain
    }

    private func pumpOnce() {
        guard let context = self.context, self.job != nil else { return }
        while let job = self.job, !job.isDone, job.budget > 0, context.channel.isWritable {
            if let hold = job.hold, !job.held, job.sent >= hold.at {
                self.waitAtGate(hold.gate, trickling: hold.rate, context: context)
                continue
            }
            let beforeHold = job.hold.flatMap { job.held ? nil : $0.at - job.sent } ?? .max
            self.writeSlice(length: min(job.chunkSize, job.limit - job.sent, job.budget, beforeHold), context: context)
        }
        context.flush()
        if let job = self.job, job.isDone {
            self.bodyLimitReached()
        }
    }

    /// The body has reached its `gate_after` point: it goes on at once if the gate is open,
    /// else it trickles at `rate` until the gate is released (``gateOpened(id:)``), so that
    /// the client keeps receiving parts and can act on each.
    private func waitAtGate(_ gate: String, trickling rate: Int, context: ChannelHandlerContext) {
        if self.enterGate(gate, context: context) {
            self.job?.hold = nil
        } else {
            self.job?.held = true
            self.job?.rate = rate
            self.job?.budget = 0
            self.rateTimer?.cancel()
            self.rateTick()
        }
    }

    /// Runs every 100 ms while a trickled body is being sent: refills the budget to
    /// `rate / 10` bytes (unused budget does not accumulate) and writes.
    private func rateTick() {
        self.rateTimer = nil
        guard let context = self.context, let rate = self.job?.rate else { return }
        self.job?.budget = max(1, rate / 10)
        self.pump()
        if self.job != nil {
            self.rateTimer = context.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(100)) {
                self.rateTick()
            }
        }
    }

    /// Writes (without flushing) the next `length` bytes of the current job.
    private func writeSlice(length: Int, context: ChannelHandlerContext) {
        guard var job = self.job else { return }
        let slice = job.body.getSlice(at: job.body.readerIndex + job.sent, length: length)!
        job.sent += length
        job.budget -= length
        self.job = job
        let core = self.core
        let path = job.path
        let write = context.write(self.wrapOutboundOut(.body(.byteBuffer(slice))))
        write.whenSuccess { core.bodyBytesWritten(length, path: path) }
        self.lastWrite = write
    }

    private func bodyLimitReached() {
        guard let context = self.context, let job = self.job else { return }
        self.job = nil
        self.rateTimer?.cancel()
        self.rateTimer = nil
        switch job.ending {
        case .complete:
            self.finishResponse(keepAlive: job.keepAlive)
        case .stall:
            // Leave the request in flight; nothing more is sent until the connection closes.
            break
        case .reset(let orderly):
            self.closeAfterPendingWrites(context: context, abortively: !orderly)
        case .close:
            self.closeAfterPendingWrites(context: context, abortively: false)
        }
    }

    /// Completes the current response by writing its end. All state is updated *before*
    /// writing, because writing the end lets the pipelining handler deliver the next
    /// request of this connection synchronously.
    private func finishResponse(keepAlive: Bool) {
        guard let context = self.context else { return }
        self.current = nil
        if self.outstanding > 0 {
            self.outstanding -= 1
            self.core.requestsFinished()
        }
        let channel = context.channel
        let end = context.writeAndFlush(self.wrapOutboundOut(.end(nil)))
        if !keepAlive {
            end.whenComplete { _ in channel.close(promise: nil) }
        }
    }

    /// Closes the connection once everything written so far has reached the kernel;
    /// `abortively` sets SO_LINGER 0 first so that the close sends a TCP RST.
    private func closeAfterPendingWrites(context: ChannelHandlerContext, abortively: Bool) {
        let channel = context.channel
        let written = self.lastWrite ?? context.eventLoop.makeSucceededVoidFuture()
        written.whenComplete { _ in
            guard abortively, let options = channel as? any SocketOptionProvider else {
                channel.close(promise: nil)
                return
            }
            options.setSoLinger(linger(l_onoff: 1, l_linger: 0)).whenComplete { _ in
                channel.close(promise: nil)
            }
        }
    }
}
