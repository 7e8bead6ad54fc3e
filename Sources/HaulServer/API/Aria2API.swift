import Foundation
import HTTPTypes
package import Hummingbird
package import HummingbirdWebSocket
import NIOCore

/// aria2's JSON-RPC interface at `/jsonrpc`: `POST` with one call or a batch, and a
/// WebSocket at the same path that also carries aria2's notifications.
///
/// ``AccessMiddleware`` has checked `Host` and `Origin` before a request gets here; each
/// call carries the token (`"token:SECRET"`, its first parameter), which ``Aria2RPC``
/// checks. Pages of the origins listed with `--rpc-allow-origin` get CORS headers; no other
/// site's page can call.
@available(macOS 14, iOS 17, tvOS 17, *)
package struct Aria2API: Sendable {
    package static let path = "/jsonrpc"
    /// The largest request aria2 accepts by default (`--rpc-max-request-size`).
    package static let maximumBody = 2 << 20

    let rpc: Aria2RPC
    let rules: AccessRulesBox

    package init(rpc: Aria2RPC, rules: AccessRulesBox) {
        self.rpc = rpc
        self.rules = rules
    }

    package func addRoutes<Context: RequestContext>(to router: Router<Context>) {
        router.post("jsonrpc") { request, _ in try await self.post(request) }
        router.on("jsonrpc", method: .options) { request, _ in self.preflight(request) }
        router.get("jsonrpc") { request, _ in
            self.response(
                Aria2Reply(id: .null, outcome: .failure(Aria2Error("Send calls with POST, or over a WebSocket."))).value.json,
                status: .badRequest, origin: request.headers[.origin])
        }
    }

    /// The WebSocket route, on the router the server consults for upgrades.
    package func addWebSocketRoutes<Context: WebSocketRequestContext>(to router: Router<Context>) {
        let rpc = self.rpc
        router.ws("jsonrpc") { inbound, outbound, _ in
            let (notifications, client) = rpc.notifier.subscribe()
            defer { rpc.notifier.unsubscribe(client) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await notification in notifications { try await outbound.write(.text(notification.value.json)) }
                }
                for try await message in inbound.messages(maxSize: Self.maximumBody) {
                    guard case .text(let text) = message else { continue }
                    let (_, json) = await rpc.respond(to: Array(text.utf8))
                    try await outbound.write(.text(json))
                }
                group.cancelAll()
            }
        }
    }

    func post(_ request: Request) async throws -> Response {
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: Self.maximumBody)
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, code: "tooLarge", message: "the body is over \(Self.maximumBody) bytes")
        }
        let (status, json) = await rpc.respond(to: body.readableBytesView)
        return response(json, status: HTTPResponse.Status(code: status), origin: request.headers[.origin])
    }

    func preflight(_ request: Request) -> Response {
        var headers = HTTPFields()
        if let origin = rules.rules.corsOrigin(request.headers[.origin]) {
            headers[.accessControlAllowOrigin] = origin
            headers[.accessControlAllowMethods] = "POST, GET, OPTIONS"
            headers[.accessControlAllowHeaders] = "Content-Type"
            headers[.accessControlMaxAge] = "1728000"
            headers[.vary] = "Origin"
        }
        return Response(status: .ok, headers: headers)
    }

    func response(_ json: String, status: HTTPResponse.Status, origin: String?) -> Response {
        var headers: HTTPFields = [.contentType: "application/json-rpc", .cacheControl: "no-cache"]
        if let allowed = rules.rules.corsOrigin(origin) {
            headers[.accessControlAllowOrigin] = allowed
            headers[.vary] = "Origin"
        }
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: json)))
    }
}
