import Foundation

/// The redirect rules, as a plain value: where the next request goes, and with which
/// headers, or why the redirect is not followed.
///
/// - A `Location` is resolved against the URL that sent it; user info in it is dropped
///   (credentials come only from the request), and only `http` and `https` are followed.
/// - A redirect back to a URL already visited is a loop.
/// - At most `maxRedirects` redirects are followed.
/// - The ``RedirectPolicy`` gives each hop its headers (credentials only on their origin)
///   and refuses `https` → `http` unless downgrades are allowed.
///
/// Downloads and manifest fetches both follow redirects with it; `subject` words the
/// errors for each. A pure value: no I/O, so the rules are tested without sockets.
///
/// ```swift
/// var follower = RedirectFollower(url: url, policy: policy, maxRedirects: 10, subject: .download)
/// // … a 302 with a Location arrives:
/// let hop = try follower.follow(status: 302, location: location)
/// // send the next request to hop.url with hop.headers
/// ```
struct RedirectFollower: Sendable {
    /// What is being fetched, which words the errors.
    enum Subject: Hashable, Sendable {
        /// A download: errors name the requested URL.
        case download
        /// A manifest for content sync: errors say it is the manifest.
        case manifest
    }

    /// Where the next request goes, and the headers it carries.
    struct Hop: Sendable {
        let url: URL
        let headers: [RedirectPolicy.Header]
    }

    /// The URL first requested.
    let original: URL
    let policy: RedirectPolicy
    let maxRedirects: Int
    let subject: Subject
    /// The URL of the current request: the original, then each followed Location.
    private(set) var url: URL
    /// The headers for the current request.
    private(set) var headers: [RedirectPolicy.Header]
    /// Every URL requested so far, as absolute strings.
    private var visited: Set<String>

    /// A follower starting at `url`, whose headers `policy` chooses.
    init(url: URL, policy: RedirectPolicy, maxRedirects: Int, subject: Subject) {
        self.original = url
        self.policy = policy
        self.maxRedirects = maxRedirects
        self.subject = subject
        self.url = url
        self.headers = policy.headers(for: url)
        self.visited = [url.absoluteString]
    }

    /// How many redirects have been followed.
    var redirects: Int { visited.count - 1 }

    /// Follows a `status` redirect of the current request to `location` and gives the next hop.
    ///
    /// - Throws: ``DownloadError/Code/unusableRedirect`` for a missing or unusable
    ///   Location (not retried: asking again gets the same answer), ``DownloadError/Code/redirectLoop``, ``DownloadError/Code/tooManyRedirects``,
    ///   or the policy's ``DownloadError/Code/insecureRedirect``.
    @discardableResult
    mutating func follow(status: Int, location: String?) throws(DownloadError) -> Hop {
        // User info in a Location is dropped: credentials come only from the request.
        guard let location, let next = URL(string: location, relativeTo: url)?.absoluteURL.removingUserInfo,
            next.isWebAddress
        else {
            throw unusable(status: status, location: location)
        }
        guard !visited.contains(next.absoluteString) else {
            switch subject {
            case .download:
                throw DownloadError(.redirectLoop, "its redirects loop back to \(next.absoluteString)")
            case .manifest:
                throw DownloadError(.redirectLoop, "the manifest's redirects loop back to \(next.absoluteString)")
            }
        }
        guard redirects < maxRedirects else {
            switch subject {
            case .download:
                throw DownloadError(.tooManyRedirects, "more than \(maxRedirects) redirects")
            case .manifest:
                throw DownloadError(
                    .tooManyRedirects,
                    "fetching the manifest \(original.absoluteString) took more than \(maxRedirects) redirects")
            }
        }
        headers = try policy.follow(from: url, to: next)
        visited.insert(next.absoluteString)
        url = next
        return Hop(url: next, headers: headers)
    }

    private func unusable(status: Int, location: String?) -> DownloadError {
        switch subject {
        case .download:
            return DownloadError(
                .unusableRedirect,
                "\(url.absoluteString) redirects to an unusable location '\(Self.redacted(location ?? ""))'\(Self.reason(location))")
        case .manifest:
            return DownloadError(
                .unusableRedirect,
                "\(url.absoluteString) redirected (\(status)) without a usable Location\(Self.reason(location))")
        }
    }

    /// Why a Location cannot be followed, for a message: "" when that is plain.
    static func reason(_ location: String?) -> String {
        guard let location, !location.isEmpty else { return " (no Location header)" }
        guard let parsed = URL(string: location) else { return " (not a URL)" }
        guard let scheme = parsed.scheme?.lowercased() else { return "" }
        return scheme == "http" || scheme == "https" ? "" : " (\(scheme): is not a scheme Haul downloads)"
    }

    /// A Location for a message: without user info, which may hold a password.
    static func redacted(_ location: String) -> String {
        guard let url = URL(string: location), url.user != nil || url.password != nil else { return location }
        return url.removingUserInfo.absoluteString
    }
}
