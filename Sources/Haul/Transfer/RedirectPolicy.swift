import Foundation

/// Which headers each request of a download carries, as redirects move it between origins.
///
/// Credential headers (``DownloadRequest/sensitiveHeaderNames`` and the ones always
/// treated as credentials: `Authorization`, `Proxy-Authorization`, `Cookie`) belong to the
/// origin of the URL they were given with: a redirect to another origin drops them, and
/// they come back only if a later hop returns to that origin (curl does the same since
/// CVE-2018-1000007). Other headers go to every hop. A redirect from `https` to `http` is
/// refused unless downgrades are allowed.
///
/// A pure value: no I/O, so the rules are tested without sockets.
struct RedirectPolicy: Sendable {
    /// A scheme, host and port: what credentials are bound to.
    struct Origin: Hashable, Sendable, CustomStringConvertible {
        /// `http` or `https`, lowercased.
        let scheme: String
        /// The host, lowercased.
        let host: String
        /// The port, with 80 and 443 filled in for `http` and `https`.
        let port: Int

        /// The origin of `url`; `nil` without a scheme or host.
        init?(_ url: URL) {
            guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased(), !host.isEmpty else {
                return nil
            }
            self.scheme = scheme
            self.host = host
            self.port = url.port ?? (scheme == "https" ? 443 : scheme == "http" ? 80 : -1)
        }

        var description: String { "\(scheme)://\(host):\(port)" }
    }

    typealias Header = (name: String, value: String)

    /// Where the credentials were given.
    let origin: Origin?
    /// Headers sent to every hop.
    let everywhere: [Header]
    /// Headers sent only to ``origin``.
    let credentials: [Header]
    /// Whether an `https` → `http` redirect is followed.
    let allowsDowngrade: Bool

    /// The policy for `request`: its credential headers are bound to its URL's origin,
    /// and so is the `netrc` entry of its host, if it has no `Authorization` of its own.
    init(request: DownloadRequest, netrc: Netrc? = nil, allowsDowngrade: Bool) {
        self.init(
            url: request.url, headers: request.headers, sensitiveNames: request.sensitiveHeaderNames, netrc: netrc,
            allowsDowngrade: allowsDowngrade)
    }

    /// A policy for `headers` given for `url`; `sensitiveNames` adds to the headers always
    /// treated as credentials (compared case-insensitively). Without an `Authorization`
    /// among `headers`, the `netrc` entry for `url`'s host becomes one, bound to `url`'s
    /// origin like the others.
    init(
        url: URL, headers: [Header], sensitiveNames: Set<String> = [], netrc: Netrc? = nil, allowsDowngrade: Bool
    ) {
        origin = Origin(url)
        let sensitive = Set(sensitiveNames.map { $0.lowercased() })
        var everywhere: [Header] = []
        var credentials: [Header] = []
        for header in headers {
            if DownloadRequest.isCredential(header.name, extra: sensitive) {
                credentials.append(header)
            } else {
                everywhere.append(header)
            }
        }
        if let netrc, let host = url.host, !headers.contains(where: { $0.name.lowercased() == "authorization" }),
            let entry = netrc.credentials(forHost: host)
        {
            credentials.append((name: "Authorization", value: entry.basicAuthorization))
        }
        self.everywhere = everywhere
        self.credentials = credentials
        self.allowsDowngrade = allowsDowngrade
    }

    /// The headers for a request to `url`: every header on the credentials' origin, the
    /// others elsewhere.
    func headers(for url: URL) -> [Header] {
        guard !credentials.isEmpty, let origin, Origin(url) == origin else { return everywhere }
        return everywhere + credentials
    }

    /// Checks a redirect from `current` to `next` and gives the headers for `next`.
    ///
    /// - Throws: ``DownloadError/Code/insecureRedirect`` for `https` → `http`, unless
    ///   downgrades are allowed.
    func follow(from current: URL, to next: URL) throws(DownloadError) -> [Header] {
        if !allowsDowngrade, current.scheme?.lowercased() == "https", next.scheme?.lowercased() == "http" {
            throw DownloadError(
                .insecureRedirect,
                "\(current.absoluteString) redirects to the insecure \(next.absoluteString): refused, since the "
                    + "content and any credentials would travel unencrypted (allow it with --allow-insecure-redirects, "
                    + "or DownloadManager.Configuration.allowsInsecureRedirects)")
        }
        return headers(for: next)
    }
}
