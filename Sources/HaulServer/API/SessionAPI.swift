import Foundation
import HTTPTypes
package import Hummingbird

/// The dashboard's sign-in, under `/api/v1`: `POST /session` with `{"token": …}` answers 204
/// with an `HttpOnly; SameSite=Strict` session cookie; `GET /session` says whether the
/// cookie is valid; `DELETE /session` signs out.
///
/// The token travels once, in the body of a same-origin POST, never in a URL; the
/// browser's scripts never see the cookie.
@available(macOS 14, iOS 17, tvOS 17, *)
package struct SessionAPI: Sendable {
    let core: ServiceCore
    let rules: AccessRulesBox

    package init(core: ServiceCore, rules: AccessRulesBox) {
        self.core = core
        self.rules = rules
    }

    package func addRoutes<Context: RequestContext>(to group: RouterGroup<Context>) {
        group.post("session") { request, _ in try await self.signIn(request) }
        group.get("session") { request, _ in try self.status(request) }
        group.delete("session") { request, _ in self.signOut(request) }
    }

    struct SignIn: Decodable {
        var token: String
    }

    func signIn(_ request: Request) async throws -> Response {
        let body = try await DownloadsAPI.decode(SignIn.self, from: request)
        guard AccessRules.constantTimeEquals(body.token, rules.rules.token) else {
            throw APIError(.unauthorized, code: "unauthorized", message: "wrong token")
        }
        var response = Response(status: .noContent)
        response.setCookie(
            Cookie(name: Sessions.cookie, value: core.sessions.create(), path: "/", httpOnly: true, sameSite: .strict))
        return response
    }

    struct Status: Encodable {
        var authenticated: Bool
    }

    func status(_ request: Request) throws -> Response {
        guard core.sessions.isValid(request.cookies[Sessions.cookie]?.value) else {
            throw APIError(.unauthorized, code: "unauthorized", message: "not signed in")
        }
        return try ServiceJSON.response(Status(authenticated: true))
    }

    func signOut(_ request: Request) -> Response {
        core.sessions.remove(request.cookies[Sessions.cookie]?.value)
        var response = Response(status: .noContent)
        response.setCookie(
            Cookie(name: Sessions.cookie, value: "", maxAge: 0, path: "/", httpOnly: true, sameSite: .strict))
        return response
    }
}
