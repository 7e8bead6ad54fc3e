import HTTPTypes
package import Hummingbird

/// Applies ``AccessRules`` to every request before it reaches a handler: the API and the
/// metrics (`/metrics`) need the token or a session cookie; the dashboard's files and its sign-in need only the right
/// `Host` (and `Origin`, when the browser sends one).
@available(macOS 14, iOS 17, tvOS 17, *)
package struct AccessMiddleware<Context: RequestContext>: RouterMiddleware {
    let box: AccessRulesBox
    let sessions: Sessions

    package init(rules: AccessRulesBox, sessions: Sessions) {
        self.box = rules
        self.sessions = sessions
    }

    package func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        let rules = box.rules
        // Every Host the request names must be allowed: the authority (how HTTP/1's Host
        // header arrives) and any Host field besides it.
        let presented = (request.head.authority.map { [$0] } ?? []) + request.headers[values: hostField]
        let host = presented.first { !rules.allowedHosts.contains($0.lowercased()) } ?? presented.first
        let path = request.uri.path
        let verdict: AccessRules.Verdict
        if path == Aria2API.path {
            // The aria2 JSON-RPC interface: the token travels inside each call.
            verdict = rules.checkRPC(host: host, origin: request.headers[.origin])
        } else if (!path.hasPrefix("/api/") && path != MetricsAPI.path) || path == "/api/v1/session" {
            verdict = rules.check(host: host, origin: request.headers[.origin])
        } else {
            verdict = rules.check(
                method: request.method.rawValue, host: host, origin: request.headers[.origin],
                authorization: request.headers[.authorization],
                sessionValid: sessions.isValid(request.cookies[Sessions.cookie]?.value))
        }
        guard case .reject(let status, let code, let message) = verdict else {
            return try await next(request, context)
        }
        throw APIError(HTTPResponse.Status(code: status), code: code, message: message)
    }
}

/// `Host`, which HTTP/2 and HTTPTypes carry as the authority; an HTTP/1 request given as
/// fields may still have it as a field.
private let hostField = HTTPField.Name("Host")!
