import NIOCore
import NIOHTTP1

/// Everything a connection handler needs to send one response: the head, the body and
/// which fault (if any) to inject while sending the body.
struct ResponsePlan {
    /// What to do once `bodyLimit` body bytes have been written.
    enum Ending: Equatable {
        /// Write the response end normally (the connection stays open if keep-alive).
        case complete
        /// Close the connection abruptly: with SO_LINGER 0 (TCP RST) unless `orderly`,
        /// in which case it is a plain close (FIN).
        case reset(orderly: Bool)
        /// Send nothing more but keep the connection open.
        case stall
        /// Close the connection (FIN) without writing a response end; used when the
        /// advertised Content-Length is a lie.
        case close
    }

    static let defaultChunkSize = 64 * 1024

    var status: HTTPResponseStatus
    var headers: HTTPHeaders
    /// The body to send, or `nil` if the response has no body.
    var body: ByteBuffer?
    /// How many bytes of `body` to send before `ending` (defaults to all of it).
    var bodyLimit: Int
    var chunkSize = ResponsePlan.defaultChunkSize
    /// Bytes per second, if the body is to be trickled.
    var rate: Int?
    /// With `gate=G&gate_after=N`: after `after` body bytes, the body trickles at `rate`
    /// until the gate is released (`gate_rate`, else ``trickleRate``).
    var hold: (gate: String, after: Int, rate: Int)?
    var ending: Ending = .complete

    /// How fast a body waiting at its `gate_after` gate goes on unless `gate_rate` says:
    /// 4 KiB every 100 ms.
    static let trickleRate = 40 << 10

    init(status: HTTPResponseStatus, headers: HTTPHeaders = HTTPHeaders(), body: ByteBuffer?) {
        self.status = status
        self.headers = headers
        self.body = body
        self.bodyLimit = body?.readableBytes ?? 0
    }

    /// A `text/plain` response with a fixed body (and correct Content-Length).
    static func text(_ status: HTTPResponseStatus, _ text: String) -> ResponsePlan {
        var headers = HTTPHeaders()
        guard status.mayHaveResponseBody else {
            return ResponsePlan(status: status, headers: headers, body: nil)
        }
        let body = ByteBuffer(string: text)
        headers.add(name: "content-type", value: "text/plain; charset=utf-8")
        headers.add(name: "content-length", value: String(body.readableBytes))
        return ResponsePlan(status: status, headers: headers, body: body)
    }
}
