import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A TCP relay on 127.0.0.1 in front of an S3 server that sees which multipart parts
/// reach it: every `PUT …?partNumber=N` request line that passes is counted, and a part
/// the test says to hold is never passed on (its connection goes silent), so an upload
/// stands still at a known point while the test kills the uploader; one it says to refuse
/// is answered `503 SlowDown` as a busy store answers.
///
/// Bytes are relayed untouched, so signatures (which cover the `Host` header the client
/// sent, the relay's address) still verify at the server.
final class PartRelay: Sendable {
    private struct State {
        var passed: [Int] = []
        var held: Set<Int> = []
        var holding: @Sendable (Int) -> Bool = { _ in false }
        var refused: [Int] = []
        var refusing: Set<Int> = []
    }

    let port: Int
    private let channel: any Channel
    private let state: NIOLockedValueBox<State>

    /// The part numbers passed to the server so far, in order.
    var passed: [Int] { state.withLockedValue { $0.passed } }
    /// The part numbers held back so far.
    var held: Set<Int> { state.withLockedValue { $0.held } }

    /// The part numbers refused so far, in order.
    var refused: [Int] { state.withLockedValue { $0.refused } }

    /// Answers the next upload of each part in `numbers` as a busy store does (`503
    /// SlowDown`, then the connection closed), without passing it on.
    func refuseOnce(_ numbers: Set<Int>) {
        state.withLockedValue { $0.refusing.formUnion(numbers) }
    }

    /// Holds every part for which `holding` is true (none unless told), from now on.
    func hold(where holding: @escaping @Sendable (Int) -> Bool) {
        state.withLockedValue { $0.holding = holding }
    }

    private init(port: Int, channel: any Channel, state: NIOLockedValueBox<State>) {
        self.port = port
        self.channel = channel
        self.state = state
    }

    /// Starts a relay to `127.0.0.1:targetPort` on `group`.
    static func start(to targetPort: Int, group: any EventLoopGroup) async throws -> PartRelay {
        let state = NIOLockedValueBox(State())
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { inbound in
                ClientBootstrap(group: inbound.eventLoop)
                    .connect(host: "127.0.0.1", port: targetPort)
                    .flatMap { outbound in
                        let toServer = Relay(peer: outbound, scan: state)
                        let toClient = Relay(peer: inbound, scan: nil)
                        return inbound.pipeline.addHandler(toServer).flatMap {
                            outbound.pipeline.addHandler(toClient)
                        }
                    }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return PartRelay(port: channel.localAddress?.port ?? 0, channel: channel, state: state)
    }

    func stop() async {
        try? await channel.close()
    }

    /// Passes what it reads to `peer`, closing it when its own side closes; the client's
    /// side scans for part uploads first.
    private final class Relay: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer

        private let peer: any Channel
        private let scan: NIOLockedValueBox<State>?
        /// The last bytes seen, so a request line split across reads is still found.
        private var tail = ""
        private var silent = false
        /// For a refused part: the bytes of its body still to read before the answer.
        private var refusing: Int?

        /// Answers `503 SlowDown` and closes both sides.
        private func answerBusy(_ context: ChannelHandlerContext) {
            let body = "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
            let answer =
                "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: \(body.utf8.count)\r\n"
                + "Connection: close\r\n\r\n" + body
            let channel = context.channel
            channel.writeAndFlush(ByteBuffer(string: answer)).whenComplete { [peer] _ in
                channel.close(promise: nil)
                peer.close(promise: nil)
            }
        }

        init(peer: any Channel, scan: NIOLockedValueBox<State>?) {
            self.peer = peer
            self.scan = scan
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            if let left = refusing {
                refusing = left - buffer.readableBytes
                if left > 0, refusing! <= 0 { answerBusy(context) }
                return
            }
            guard !silent else { return }
            if let scan {
                // A request's head starts a read (the next request goes only after the last
                // answer came): its first bytes are enough, and keep a body's megabytes unscanned.
                let head = buffer.readableBytesView.prefix(4_096).map { $0 < 0x80 ? $0 : 0x3F }
                let text = tail + String(decoding: head, as: UTF8.self)
                let fresh = tail.utf8.count
                for number in Self.parts(in: text, after: fresh) {
                    enum Fate { case pass, hold, refuse }
                    let fate = scan.withLockedValue { state -> Fate in
                        if state.refusing.remove(number) != nil {
                            state.refused.append(number)
                            return .refuse
                        }
                        if state.holding(number) {
                            state.held.insert(number)
                            return .hold
                        }
                        state.passed.append(number)
                        return .pass
                    }
                    switch fate {
                    case .pass:
                        continue
                    case .hold:
                        silent = true
                        return
                    case .refuse:
                        // Read the whole body first (as a store does), so the client hears the
                        // answer rather than a connection closed under its upload.
                        let bytes = Array(buffer.readableBytesView)
                        let headEnd = Self.find(Array("\r\n\r\n".utf8), in: bytes, from: 0).map { $0 + 4 } ?? bytes.count
                        let head = String(decoding: bytes[..<headEnd], as: UTF8.self).lowercased()
                        let length = head.range(of: "content-length:").flatMap { range in
                            Int(head[range.upperBound...].prefix { !$0.isNewline }.trimmingCharacters(in: .whitespaces))
                        } ?? 0
                        refusing = length - (bytes.count - headEnd)
                        if refusing! <= 0 { answerBusy(context) }
                        return
                    }
                }
                tail = buffer.readableBytes > 4_096 ? "" : String(text.suffix(256))
            }
            peer.writeAndFlush(buffer, promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            peer.close(promise: nil)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }

        /// The part numbers of `PUT` request lines in `text` that end after offset `after`.
        static func parts(in text: String, after: Int) -> [Int] {
            var found: [Int] = []
            let bytes = Array(text.utf8)
            var index = 0
            while let start = find(Array("PUT /".utf8), in: bytes, from: index) {
                let lineEnd = find(Array("\r\n".utf8), in: bytes, from: start) ?? bytes.count
                let line = String(decoding: bytes[start..<lineEnd], as: UTF8.self)
                if lineEnd > after, lineEnd < bytes.count, let range = line.range(of: "partNumber=") {
                    let digits = line[range.upperBound...].prefix { $0.isNumber }
                    if let number = Int(digits) { found.append(number) }
                }
                index = start + 1
            }
            return found
        }

        static func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
            guard needle.count <= haystack.count, start <= haystack.count - needle.count else { return nil }
            for index in start...(haystack.count - needle.count) where haystack[index] == needle[0] {
                if Array(haystack[index..<(index + needle.count)]) == needle { return index }
            }
            return nil
        }
    }
}
