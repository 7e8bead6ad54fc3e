import HTTPTypes
package import Hummingbird

/// Applies ``AccessRules`` to every request before it reaches a handler.
@available(macOS 14, iOS 17, tvOS 17, *)
package struct AccessMiddleware<Context: RequestContext>: RouterMiddleware {
    let rules: AccessRules

    package init(rules: AccessRules) {
        self.rules = rules
    }

    package func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        // Every Host the request names must be allowed: the authority (how HTTP/1's Host
        // header arrives) and any Host field besides it.
        let presented = (request.head.authority.map { [$0] } ?? []) + request.headers[values: hostField]
        let host = presented.first { !rules.allowedHosts.contains($0.lowercased()) } ?? presented.first
        let verdict = rules.check(
            method: request.method.rawValue, host: host, origin: request.headers[.origin],
            authorization: request.headers[.authorization], sessionValid: false)
        guard case .reject(let status, let code, let message) = verdict else {
            return try await next(request, context)
        }
        throw APIError(HTTPResponse.Status(code: status), code: code, message: message)
    }
}

/// `Host`, which HTTP/2 and HTTPTypes carry as the authority; an HTTP/1 request given as
/// fields may still have it as a field.
private let hostField = HTTPField.Name("Host")!
