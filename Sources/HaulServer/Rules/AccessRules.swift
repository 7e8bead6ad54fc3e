import NIOConcurrencyHelpers

/// Who may use the service, decided per request from its method and headers alone.
///
/// The rules, all of them defaults that cannot be turned off:
/// - Every request needs a credential: the token as `Authorization: Bearer …` (scripts,
///   the CLI), or a session cookie that the dashboard got by presenting the token once.
///   Tokens are compared in constant time, and never read from a URL.
/// - The `Host` header must name the service as it listens (or a name it was given):
///   a page on another site that rebinds its DNS name to 127.0.0.1 sends its own name,
///   and is refused.
/// - A request that changes state and is authenticated by the cookie must carry an
///   `Origin` of the service itself, so another site cannot make the browser act for it.
///   Bearer requests need no `Origin`: a browser never adds that header by itself.
///
/// ```swift
/// let rules = AccessRules(token: token, allowedHosts: ["127.0.0.1:6800", "localhost:6800"])
/// switch rules.check(method: "POST", host: "127.0.0.1:6800", origin: nil,
///                    authorization: "Bearer \(token)", sessionValid: false) {
/// case .allow: …
/// case .reject(let status, let code, let message): …
/// }
/// ```
package struct AccessRules: Sendable {
    /// Why a request is refused, as the API's error body says it.
    package enum Verdict: Sendable, Equatable {
        case allow
        case reject(status: Int, code: String, message: String)
    }

    /// The token every client must present.
    package let token: String
    /// `host[:port]` values the `Host` header may take, lowercased.
    package let allowedHosts: Set<String>
    /// Other sites' origins that may call the aria2 JSON-RPC interface (`/jsonrpc`) from a
    /// browser, with CORS (`haul serve --rpc-allow-origin`), as ``normalizedOrigin(_:)``
    /// writes them.
    package let rpcOrigins: Set<String>

    package init(token: String, allowedHosts: Set<String>, rpcOrigins: Set<String> = []) {
        self.token = token
        self.allowedHosts = Set(allowedHosts.map { $0.lowercased() })
        self.rpcOrigins = Set(rpcOrigins.compactMap(Self.normalizedOrigin))
    }

    /// `scheme://host[:port]` lowercased, for an origin a browser sends or a user lists
    /// (`https://ariang.example`, `chrome-extension://abc…`); `nil` for anything with a path,
    /// a query or no host.
    package static func normalizedOrigin(_ origin: String) -> String? {
        var lowered = origin.lowercased()
        if lowered.hasSuffix("/") { lowered.removeLast() }
        guard let separator = lowered.range(of: "://"), separator.lowerBound != lowered.startIndex else { return nil }
        let scheme = lowered[..<separator.lowerBound]
        let rest = lowered[separator.upperBound...]
        guard scheme.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "+" || $0 == "." }), !rest.isEmpty,
            !rest.contains(where: { "/?#@ ".contains($0) })
        else { return nil }
        return lowered
    }

    /// Decides a request to the aria2 JSON-RPC interface before its token (inside the body)
    /// is checked: its `Host` must name the service, and its `Origin`, when it has one,
    /// must be the service's own or one the user listed with `--rpc-allow-origin`.
    package func checkRPC(host: String?, origin: String?) -> Verdict {
        if let origin, let normalized = Self.normalizedOrigin(origin), rpcOrigins.contains(normalized) {
            return check(host: host)
        }
        return check(host: host, origin: origin)
    }

    /// The origin to allow with CORS headers: `origin` when the user listed it.
    package func corsOrigin(_ origin: String?) -> String? {
        guard let origin, let normalized = Self.normalizedOrigin(origin), rpcOrigins.contains(normalized) else {
            return nil
        }
        return origin
    }

    /// The `Host` values for a service listening on `host:port`: that address, and the
    /// loopback names when it is a loopback address.
    package static func hosts(listeningOn host: String, port: Int, names: [String] = []) -> Set<String> {
        var hosts: Set<String> = [Self.hostHeader(host, port)]
        if isLoopback(host) {
            for name in ["127.0.0.1", "localhost", "::1"] { hosts.insert(Self.hostHeader(name, port)) }
        }
        for name in names { hosts.insert(Self.hostHeader(name, port)) }
        return hosts
    }

    private static func hostHeader(_ host: String, _ port: Int) -> String {
        (host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host).lowercased() + ":\(port)"
    }

    /// Whether `host` (an address or `localhost`) is a loopback address: 127.0.0.0/8, ::1.
    package static func isLoopback(_ host: String) -> Bool {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if bare.lowercased() == "localhost" || bare == "::1" { return true }
        let parts = bare.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts.allSatisfy({ UInt8($0) != nil }) else { return false }
        return parts[0] == "127"
    }

    /// Whether the service may listen on `host`: a loopback address always; any other
    /// only with a token configured by its operator (not one generated on first start,
    /// which nobody else knows yet).
    package static func mayListen(on host: String, operatorToken: Bool) -> Bool {
        isLoopback(host) || operatorToken
    }

    /// Compares two secrets in time that depends on their lengths only, not on where they
    /// first differ.
    package static func constantTimeEquals(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8)
        let y = Array(b.utf8)
        // Compare against itself when the lengths differ, so the work stays the same.
        let other = x.count == y.count ? y : x
        var difference: UInt8 = x.count == y.count ? 0 : 1
        for index in x.indices { difference |= x[index] ^ other[index] }
        return difference == 0
    }

    /// Methods that do not change anything.
    private static let safeMethods: Set<String> = ["GET", "HEAD", "OPTIONS"]

    /// Decides a request.
    ///
    /// - Parameters:
    ///   - method: The request's method.
    ///   - host: Its `Host` header.
    ///   - origin: Its `Origin` header, if any.
    ///   - authorization: Its `Authorization` header, if any.
    ///   - sessionValid: Whether it carries a session cookie the service issued and still
    ///     holds.
    package func check(method: String, host: String?, origin: String?, authorization: String?, sessionValid: Bool)
        -> Verdict
    {
        if case .reject(let status, let code, let message) = check(host: host) {
            return .reject(status: status, code: code, message: message)
        }
        if let authorization {
            let prefix = "Bearer "
            guard authorization.hasPrefix(prefix),
                Self.constantTimeEquals(String(authorization.dropFirst(prefix.count)), token)
            else {
                return .reject(status: 401, code: "unauthorized", message: "wrong token")
            }
            return .allow
        }
        guard sessionValid else {
            return .reject(
                status: 401, code: "unauthorized",
                message: "send the token as 'Authorization: Bearer TOKEN', or sign in to the dashboard")
        }
        if !Self.safeMethods.contains(method.uppercased()) {
            guard let origin, let authority = Self.authority(ofOrigin: origin), allowedHosts.contains(authority) else {
                return .reject(
                    status: 403, code: "forbiddenOrigin",
                    message: "a request that changes state must come from the dashboard's own origin")
            }
        }
        return .allow
    }

    /// Decides a request that needs no credential (the dashboard's files, its sign-in):
    /// its `Host` must name the service, and an `Origin`, when it has one, too.
    package func check(host: String?, origin: String? = nil) -> Verdict {
        guard let host, allowedHosts.contains(host.lowercased()) else {
            return .reject(
                status: 403, code: "forbiddenHost",
                message: "the Host header '\(host ?? "")' does not name this service")
        }
        if let origin, Self.authority(ofOrigin: origin).map(allowedHosts.contains) != true {
            return .reject(status: 403, code: "forbiddenOrigin", message: "the request comes from another site's page")
        }
        return .allow
    }

    /// `host:port` of an `Origin` such as `http://127.0.0.1:6800`, lowercased.
    static func authority(ofOrigin origin: String) -> String? {
        let lowered = origin.lowercased()
        for scheme in ["http://", "https://"] where lowered.hasPrefix(scheme) {
            let rest = lowered.dropFirst(scheme.count)
            guard !rest.isEmpty, !rest.contains("/") else { return nil }
            return rest.contains(":") && !rest.hasSuffix("]") ? String(rest) : String(rest) + (scheme == "http://" ? ":80" : ":443")
        }
        return nil
    }
}

/// The rules in force, replaceable once the service knows its port (it may listen on port
/// 0, and the `Host` values name the port).
package final class AccessRulesBox: Sendable {
    private let box: NIOLockedValueBox<AccessRules>

    package init(_ rules: AccessRules) {
        box = NIOLockedValueBox(rules)
    }

    package var rules: AccessRules {
        get { box.withLockedValue { $0 } }
        set { box.withLockedValue { $0 = newValue } }
    }
}
