import Foundation

/// An error as aria2's JSON-RPC interface answers it: `{"code": 1, "message": "..."}`.
///
/// aria2 uses the JSON-RPC codes for malformed requests (`-32700`, `-32600`, `-32602`) and
/// `1` for everything else, method errors included, with a message that says what.
package struct Aria2Error: Error, Sendable, Equatable {
    package var code: Int
    package var message: String

    package init(code: Int = 1, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The body was not JSON.
    package static let parseError = Aria2Error(code: -32700, "Parse error.")
    /// A request without a method or an ID.
    package static let invalidRequest = Aria2Error(code: -32600, "Invalid Request.")
    /// `params` is not an array.
    package static let invalidParams = Aria2Error(code: -32602, "Invalid params.")
    /// A wrong or missing `token:SECRET`.
    package static let unauthorized = Aria2Error("Unauthorized")

    package static func noSuchMethod(_ name: String) -> Aria2Error { Aria2Error("No such method: \(name)") }
    package static func missing(_ index: Int) -> Aria2Error {
        Aria2Error("The parameter at \(index) is required but missing.")
    }
    package static func wrongType(_ index: Int) -> Aria2Error { Aria2Error("The parameter at \(index) has wrong type.") }
    package static func badOption(_ name: String, _ reason: String? = nil) -> Aria2Error {
        Aria2Error(
            "We encountered a problem while processing the option '--\(name)'." + (reason.map { " \($0)" } ?? ""))
    }

    var value: JSONValue { ["code": .int(Int64(code)), "message": .string(message)] }
}

/// One JSON-RPC call: its ID (any JSON value), method and positional parameters.
package struct Aria2Request: Sendable, Equatable {
    package var id: JSONValue
    package var method: String
    package var params: [JSONValue]

    package init(id: JSONValue, method: String, params: [JSONValue] = []) {
        self.id = id
        self.method = method
        self.params = params
    }
}

/// A body's calls as parsed, before any is run: one call or a batch (a JSON array), each
/// either a request or the error that answers it at once.
package enum Aria2Envelope: Sendable, Equatable {
    package typealias Entry = Result<Aria2Request, Aria2Reply>

    case single(Entry)
    case batch([Entry])

    /// Parses a request body.
    ///
    /// As aria2 does: a body that is not JSON is a parse error (`id` null); an object
    /// without a method, or without an ID, is an invalid request; `params` that is not an
    /// array is invalid params; `jsonrpc` may be absent; elements of a batch that are not
    /// objects are left out.
    package static func parse(_ body: some Collection<UInt8>) -> Aria2Envelope {
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: Data(body))
        } catch {
            return .single(.failure(Aria2Reply(id: .null, outcome: .failure(.parseError))))
        }
        switch value {
        case .array(let elements):
            return .batch(
                elements.compactMap { element in
                    guard case .object(let members) = element else { return nil }
                    return entry(members)
                })
        case .object(let members):
            return .single(entry(members))
        default:
            return .single(.failure(Aria2Reply(id: .null, outcome: .failure(.invalidRequest))))
        }
    }

    static func entry(_ members: [String: JSONValue]) -> Entry {
        guard let id = members["id"], case .string(let method)? = members["method"] else {
            return .failure(Aria2Reply(id: members["id"] ?? .null, outcome: .failure(.invalidRequest)))
        }
        switch members["params"] {
        case nil, .null?: return .success(Aria2Request(id: id, method: method))
        case .array(let params)?: return .success(Aria2Request(id: id, method: method, params: params))
        default: return .failure(Aria2Reply(id: id, outcome: .failure(.invalidParams)))
        }
    }
}

/// The answer to one call.
package struct Aria2Reply: Error, Sendable, Equatable {
    package var id: JSONValue
    package var outcome: Result<JSONValue, Aria2Error>

    package init(id: JSONValue, outcome: Result<JSONValue, Aria2Error>) {
        self.id = id
        self.outcome = outcome
    }

    /// `{"id":…,"jsonrpc":"2.0","result":…}` or `{…,"error":{"code":…,"message":…}}`.
    package var value: JSONValue {
        switch outcome {
        case .success(let result): ["id": id, "jsonrpc": "2.0", "result": result]
        case .failure(let error): ["id": id, "jsonrpc": "2.0", "error": error.value]
        }
    }

    /// The HTTP status aria2 answers a single call with: 200, 400 for an error, 500 for a
    /// body it could not parse.
    package var httpStatus: Int {
        switch outcome {
        case .success: 200
        case .failure(let error): error.code == Aria2Error.parseError.code ? 500 : 400
        }
    }
}

/// A JSON-RPC notification sent over WebSocket: `{"jsonrpc":"2.0","method":…,"params":[{"gid":…}]}`.
package struct Aria2Notification: Sendable, Equatable {
    package enum Kind: String, Sendable, CaseIterable {
        case start = "aria2.onDownloadStart"
        case pause = "aria2.onDownloadPause"
        case stop = "aria2.onDownloadStop"
        case complete = "aria2.onDownloadComplete"
        case error = "aria2.onDownloadError"
    }

    package var kind: Kind
    package var gid: Aria2GID

    package init(_ kind: Kind, _ gid: Aria2GID) {
        self.kind = kind
        self.gid = gid
    }

    package var value: JSONValue {
        ["jsonrpc": "2.0", "method": .string(kind.rawValue), "params": [["gid": .string(gid.hex)]]]
    }
}
