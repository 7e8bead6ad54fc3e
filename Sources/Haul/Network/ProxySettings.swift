public import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension DownloadManager {
    /// A proxy: its kind (HTTP or SOCKS5), where it listens, and the credentials it asks
    /// for, if any.
    ///
    /// Through an HTTP proxy, requests to `http` URLs and `https` URLs alike go with
    /// `CONNECT`; for `https` the TLS session runs end to end between Haul and the server,
    /// so the proxy sees only the host name and port. Credentials go to the proxy only, as
    /// `Proxy-Authorization: Basic …`, and never to the server.
    ///
    /// Through a SOCKS5 proxy (``Kind/socks5`` or ``Kind/socks5h``) every connection is
    /// opened by the proxy; TLS still runs end to end.
    ///
    /// ```swift
    /// let proxy = try DownloadManager.ProxyServer(url: "http://user:secret@proxy.example:3128")
    /// print(proxy)  // http://user:***@proxy.example:3128
    /// let tunnel = try DownloadManager.ProxyServer(url: "socks5h://127.0.0.1:1080")  // ssh -D 1080
    /// ```
    ///
    /// The password never appears in ``description`` or ``debugDescription``.
    public struct ProxyServer: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible,
        CustomReflectable
    {
        /// The protocols Haul speaks to a proxy.
        public enum Kind: String, Sendable, Hashable, CaseIterable {
            /// An HTTP proxy (`http://`): `CONNECT` for every request.
            case http
            /// A SOCKS5 proxy that is given addresses (`socks5://`): Haul resolves each
            /// host name itself, as curl's `--socks5` does.
            case socks5
            /// A SOCKS5 proxy that is given host names (`socks5h://`) and resolves them
            /// itself, as `ssh -D` tunnels and curl's `--socks5-hostname` expect: names
            /// that only the proxy's side can resolve work, and no lookup leaks here.
            case socks5h

            /// Whether this is one of the SOCKS kinds.
            public var isSOCKS: Bool { self != .http }
        }

        /// How Haul speaks to the proxy.
        public let kind: Kind
        /// The proxy's host name or IP address (without brackets).
        public let host: String
        /// The proxy's port.
        public let port: Int
        /// The user name sent to the proxy, if any.
        public let username: String?
        /// The password sent to the proxy, if any.
        let password: String?

        /// The port a proxy URL without one names: 1080, as curl assumes.
        public static let defaultPort = 1080

        /// A proxy of `kind` at `host` and `port`, with optional credentials.
        ///
        /// - Throws: ``DownloadError/Code/invalidConfiguration`` for an empty host, a port
        ///   outside 1-65535, or credentials for a SOCKS proxy (the HTTP client Haul is
        ///   built on has no SOCKS authentication).
        public init(
            host: String, port: Int = ProxyServer.defaultPort, username: String? = nil, password: String? = nil,
            kind: Kind = .http
        ) throws(DownloadError) {
            var host = host
            if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            guard !host.isEmpty, !host.contains(where: { $0 == "/" || $0 == "@" || $0.isWhitespace }) else {
                throw DownloadError(.invalidConfiguration, "'\(host)' is not a proxy host name")
            }
            guard (1...65535).contains(port) else {
                throw DownloadError(.invalidConfiguration, "the proxy port \(port) is not between 1 and 65535")
            }
            let username = username.flatMap { $0.isEmpty ? nil : $0 }
            if kind.isSOCKS, username != nil {
                throw DownloadError(
                    .invalidConfiguration,
                    "the \(kind.rawValue) proxy \(host):\(port) asks for a user name and password, which Haul cannot send to a SOCKS proxy: use one without authentication (such as an ssh -D tunnel), or an HTTP proxy"
                )
            }
            self.kind = kind
            self.host = host
            self.port = port
            self.username = username
            self.password = username == nil ? nil : password
        }

        /// The proxy a URL such as `http://proxy.example:3128`, `proxy.example:3128`,
        /// `http://user:password@proxy.example`, `socks5://127.0.0.1:1080` or
        /// `socks5h://127.0.0.1:1080` names, as curl reads `--proxy` and `https_proxy`:
        /// without a scheme it is `http://`, without a port 1080. Percent-escapes in the
        /// user name and password are decoded.
        ///
        /// - Throws: ``DownloadError/Code/invalidConfiguration`` for a URL that does not
        ///   parse, has no host, carries a path, names a scheme other than `http`,
        ///   `socks5` and `socks5h` (`https://` proxies and SOCKS4 are not supported), or
        ///   gives a SOCKS proxy credentials. The message never includes the password.
        public init(url text: String) throws(DownloadError) {
            let trimmed = text.trimmingCharacters(in: .whitespaces)
            let withScheme = trimmed.contains("://") ? trimmed : "http://" + trimmed
            let shown = Self.redacting(withScheme)
            guard let components = URLComponents(string: withScheme), let scheme = components.scheme?.lowercased()
            else {
                throw DownloadError(.invalidConfiguration, "'\(shown)' is not a proxy URL (http://host:port)")
            }
            guard let kind = Kind(rawValue: scheme) else {
                throw DownloadError(
                    .invalidConfiguration,
                    "the proxy '\(shown)' uses \(scheme)://, which Haul does not support: give an http://, socks5:// or socks5h:// proxy"
                )
            }
            guard let host = components.host, !host.isEmpty else {
                throw DownloadError(.invalidConfiguration, "the proxy URL '\(shown)' names no host")
            }
            guard components.path.isEmpty || components.path == "/", components.query == nil else {
                throw DownloadError(.invalidConfiguration, "the proxy URL '\(shown)' must not have a path")
            }
            try self.init(
                host: host, port: components.port ?? Self.defaultPort, username: components.user,
                password: components.password, kind: kind)
        }

        /// The proxy as a URL, with `***` in place of a password: safe to print.
        public var description: String {
            let shownHost = host.contains(":") ? "[\(host)]" : host
            guard let username else { return "\(kind.rawValue)://\(shownHost):\(port)" }
            return "\(kind.rawValue)://\(username):***@\(shownHost):\(port)"
        }

        /// The same as ``description``: the password is never shown.
        public var debugDescription: String { "ProxyServer(\(description))" }

        /// Host, port and user name, without the password (what `dump` shows).
        public var customMirror: Mirror {
            Mirror(self, children: ["kind": kind, "host": host, "port": port, "username": username as Any])
        }

        /// `text` with the password of any `user:password@` replaced by `***`.
        static func redacting(_ text: String) -> String {
            guard let at = text.lastIndex(of: "@") else { return text }
            let start = text.range(of: "://").map(\.upperBound) ?? text.startIndex
            guard start < at else { return text }
            let userInfo = text[start..<at]
            guard let colon = userInfo.firstIndex(of: ":") else { return text }
            return String(text[..<colon]) + ":***" + String(text[at...])
        }
    }

    /// Which downloads go through which proxy.
    ///
    /// `http` URLs use ``httpProxy``, `https` URLs ``httpsProxy``; a URL whose host
    /// matches ``noProxy`` goes direct. The default goes direct for everything: a library
    /// takes no proxy from the environment unless asked, with
    /// ``fromEnvironment(_:)``, which reads `http_proxy`, `https_proxy`, `all_proxy` and
    /// `no_proxy` as curl does (the `haul` command does this).
    ///
    /// ```swift
    /// var configuration = DownloadManager.Configuration()
    /// configuration.proxy = try .fromEnvironment()
    /// // or: configuration.proxy = .all(try .init(url: "http://proxy.example:3128"), except: ["internal.example"])
    /// ```
    public struct ProxySettings: Sendable, Hashable {
        /// The proxy for `http` URLs; `nil` to go direct.
        public var httpProxy: ProxyServer?
        /// The proxy for `https` URLs (through `CONNECT`, or SOCKS5); `nil` to go direct.
        public var httpsProxy: ProxyServer?
        /// Hosts reached directly, as curl reads `no_proxy`: `*` for every host;
        /// `example.com` (or `.example.com`) for that host and every name under it; an IPv4
        /// or IPv6 address, or a range in CIDR notation (`10.0.0.0/8`), for URLs with a
        /// literal address in that range (names are not resolved to match); and any of
        /// these with `:PORT` (IPv6 in brackets, `[::1]:8080`) for that port only. Matched
        /// case-insensitively.
        public var noProxy: [String]

        /// Settings with the given proxies and exceptions.
        public init(httpProxy: ProxyServer? = nil, httpsProxy: ProxyServer? = nil, noProxy: [String] = []) {
            self.httpProxy = httpProxy
            self.httpsProxy = httpsProxy
            self.noProxy = noProxy
        }

        /// No proxy: every download goes direct.
        public static let direct = ProxySettings()

        /// Every download through `server`, except the hosts `noProxy` matches.
        public static func all(_ server: ProxyServer, except noProxy: [String] = []) -> ProxySettings {
            ProxySettings(httpProxy: server, httpsProxy: server, noProxy: noProxy)
        }

        /// The settings the environment gives, with curl's names and precedence:
        /// `http_proxy` for `http` URLs (lower case only: a CGI program gets a request's
        /// `Proxy:` header as `HTTP_PROXY`), `https_proxy` then `HTTPS_PROXY` for `https`
        /// URLs, and for either, when that is unset, `all_proxy` then `ALL_PROXY`;
        /// `no_proxy` then `NO_PROXY` for the exceptions, separated by commas (or spaces).
        /// An empty variable counts as unset.
        ///
        /// - Throws: ``DownloadError/Code/invalidConfiguration`` naming the variable whose
        ///   proxy URL is malformed (its password is never shown).
        public static func fromEnvironment(
            _ environment: [String: String] = ProcessInfo.processInfo.environment
        ) throws(DownloadError) -> ProxySettings {
            func value(_ names: String...) -> (name: String, value: String)? {
                for name in names {
                    if let value = environment[name]?.trimmingCharacters(in: .whitespaces), !value.isEmpty {
                        return (name, value)
                    }
                }
                return nil
            }
            func server(_ names: String...) throws(DownloadError) -> ProxyServer? {
                for name in names {
                    guard let found = value(name) else { continue }
                    do {
                        return try ProxyServer(url: found.value)
                    } catch {
                        throw DownloadError(.invalidConfiguration, "\(found.name): \(error.message)")
                    }
                }
                return nil
            }
            let all = try server("all_proxy", "ALL_PROXY")
            return ProxySettings(
                httpProxy: try server("http_proxy") ?? all,
                httpsProxy: try server("https_proxy", "HTTPS_PROXY") ?? all,
                noProxy: value("no_proxy", "NO_PROXY").map { parseList($0.value) } ?? [])
        }

        /// The entries of a `no_proxy` list: separated by commas or white space.
        public static func parseList(_ text: String) -> [String] {
            text.split(whereSeparator: { $0 == "," || $0.isWhitespace }).map(String.init)
        }

        /// The proxy a request to `url` goes through, or `nil` for a direct connection.
        public func proxy(for url: URL) -> ProxyServer? {
            let scheme = url.scheme?.lowercased()
            guard let server = scheme == "https" ? httpsProxy : scheme == "http" ? httpProxy : nil,
                let host = url.host, !host.isEmpty
            else { return nil }
            let port = url.port ?? (scheme == "https" ? 443 : 80)
            return NoProxyRule.matches(noProxy, host: host, port: port) ? nil : server
        }
    }
}

/// curl's `no_proxy` matching, as a pure function (see
/// ``DownloadManager/ProxySettings/noProxy``).
enum NoProxyRule {
    /// Whether any of `entries` matches `host` (from a URL, IPv6 with or without
    /// brackets) and `port`.
    static func matches(_ entries: [String], host: String, port: Int) -> Bool {
        var host = host.lowercased()
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host.hasSuffix(".") { host.removeLast() }
        let hostAddress = IPAddress(host)
        for raw in entries {
            guard let entry = Entry(raw) else { continue }
            if let entryPort = entry.port, entryPort != port { continue }
            switch entry.pattern {
            case .everything:
                return true
            case .name(let name):
                if hostAddress == nil, host == name || host.hasSuffix("." + name) { return true }
                if let hostAddress, let address = IPAddress(name), address == hostAddress { return true }
            case .range(let network, let bits):
                if let hostAddress, hostAddress.isIn(network, prefix: bits) { return true }
            }
        }
        return false
    }

    /// One parsed entry.
    struct Entry: Equatable {
        enum Pattern: Equatable {
            case everything
            case name(String)
            case range(IPAddress, Int)
        }
        let pattern: Pattern
        let port: Int?

        init?(_ raw: String) {
            var text = raw.trimmingCharacters(in: .whitespaces).lowercased()
            guard !text.isEmpty else { return nil }
            if text == "*" {
                pattern = .everything
                port = nil
                return
            }
            var port: Int?
            if text.hasPrefix("[") {
                // [v6] or [v6]:port
                guard let close = text.firstIndex(of: "]") else { return nil }
                let rest = text[text.index(after: close)...]
                if rest.hasPrefix(":") {
                    guard let value = Int(rest.dropFirst()) else { return nil }
                    port = value
                } else if !rest.isEmpty && !rest.hasPrefix("/") {
                    return nil
                }
                let inside = text[text.index(after: text.startIndex)..<close]
                text = String(inside) + (rest.hasPrefix("/") ? String(rest) : "")
            } else if text.filter({ $0 == ":" }).count == 1, let colon = text.firstIndex(of: ":") {
                // name:port or v4:port
                guard let value = Int(text[text.index(after: colon)...]) else { return nil }
                port = value
                text = String(text[..<colon])
            }
            self.port = port
            if let slash = text.firstIndex(of: "/") {
                guard let address = IPAddress(String(text[..<slash])), let bits = Int(text[text.index(after: slash)...]),
                    (0...address.bytes.count * 8).contains(bits)
                else { return nil }
                pattern = .range(address, bits)
                return
            }
            if text.hasPrefix("*.") { text.removeFirst(2) }
            while text.hasPrefix(".") { text.removeFirst() }
            if text.hasSuffix(".") { text.removeLast() }
            guard !text.isEmpty else { return nil }
            pattern = .name(text)
        }
    }
}

/// An IPv4 or IPv6 address as bytes, for comparing and range checks.
struct IPAddress: Hashable {
    let bytes: [UInt8]

    /// The address `text` spells, or `nil` if it is not a literal address.
    init?(_ text: String) {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            bytes = withUnsafeBytes(of: &v4) { Array($0) }
            return
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            bytes = withUnsafeBytes(of: &v6) { Array($0) }
            return
        }
        return nil
    }

    var isIPv6: Bool { bytes.count == 16 }

    /// Whether the first `prefix` bits equal `network`'s (same family only).
    func isIn(_ network: IPAddress, prefix: Int) -> Bool {
        guard network.bytes.count == bytes.count else { return false }
        var remaining = prefix
        for (mine, theirs) in zip(bytes, network.bytes) {
            guard remaining > 0 else { return true }
            let bits = min(8, remaining)
            let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - bits))
            if mine & mask != theirs & mask { return false }
            remaining -= bits
        }
        return true
    }
}
