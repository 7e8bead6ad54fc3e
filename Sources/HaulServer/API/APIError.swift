package import Foundation
package import Hummingbird

/// An API failure, sent as `{ "error": { "code": …, "message": … } }` with its status.
///
/// Codes are stable words a script can test (`invalidField`, `notFound`, `unauthorized`,
/// `forbiddenHost`, `forbiddenOrigin`, `tooLarge`, `internal`); messages are for people,
/// and a bad field's message starts with the field's path (`downloads[1].url: …`).
@available(macOS 14, iOS 17, tvOS 17, *)
package struct APIError: HTTPResponseError, Equatable {
    package var status: HTTPResponse.Status
    package var code: String
    package var message: String
    /// The bad field's path, for `invalidField`.
    package var field: String?

    package init(_ status: HTTPResponse.Status, code: String, message: String, field: String? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.field = field
    }

    /// A bad field of the request: 400, naming it.
    package static func invalid(_ field: String, _ message: String) -> APIError {
        APIError(.badRequest, code: "invalidField", message: "\(field): \(message)", field: field)
    }

    package static func notFound(_ what: String) -> APIError {
        APIError(.notFound, code: "notFound", message: "no \(what)")
    }

    private struct Body: Encodable {
        struct Detail: Encodable {
            var code: String
            var message: String
            var field: String?
        }
        var error: Detail
    }

    package func response(from request: Request, context: some RequestContext) throws -> Response {
        try ServiceJSON.response(Body(error: .init(code: code, message: message, field: field)), status: status)
    }
}

/// The JSON coders of the API: ISO 8601 dates, sorted keys (stable output for scripts).
package enum ServiceJSON {
    package static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }

    /// `value` as a JSON response.
    @available(macOS 14, iOS 17, tvOS 17, *)
    static func response(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        Response(
            status: status, headers: [.contentType: "application/json; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: try encoder.encode(value))))
    }

    package static var decoder: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}

/// Turns whatever a handler throws into the API's error body: ``APIError`` as it is,
/// Hummingbird's own errors (404 for an unknown route, 413 for a body over the limit) with
/// a code, anything else as a 500 that does not leak its details.
@available(macOS 14, iOS 17, tvOS 17, *)
package struct APIErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    package init() {}

    package func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        do {
            return try await next(request, context)
        } catch let error as APIError {
            return try error.response(from: request, context: context)
        } catch let error as HTTPError {
            let code =
                switch error.status {
                case .notFound: "notFound"
                case .contentTooLarge: "tooLarge"
                case .methodNotAllowed: "methodNotAllowed"
                case .badRequest: "invalidField"
                default: "error"
                }
            return try APIError(error.status, code: code, message: error.body ?? error.status.reasonPhrase)
                .response(from: request, context: context)
        } catch {
            context.logger.error("request failed", metadata: ["error": "\(error)"])
            return try APIError(.internalServerError, code: "internal", message: "internal error")
                .response(from: request, context: context)
        }
    }
}
