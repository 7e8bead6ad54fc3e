import Foundation

/// When a signed URL expires, as its query says.
///
/// Object stores and CDNs put the expiry in the URL they sign:
///
/// | signer | query |
/// |---|---|
/// | AWS Signature V4 (S3, MinIO, SeaweedFS, R2 …) | `X-Amz-Date=20261127T010000Z&X-Amz-Expires=300` |
/// | Google Cloud Storage V4 | `X-Goog-Date=…&X-Goog-Expires=…` |
/// | AWS Signature V2, CloudFront, GCS V2 | `Expires=1795741200` (seconds since 1970) |
/// | Azure SAS | `se=2026-11-27T01:05:00Z` |
///
/// Names are matched without regard to case.
enum SignedURLExpiry {
    /// When `url` stops being valid, if its query says; `nil` for a URL that does not say.
    static func expiry(of url: URL) -> Date? {
        // Most URLs have no query: nothing to parse again.
        guard url.query != nil, let items = URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems,
            !items.isEmpty
        else { return nil }
        var query: [String: String] = [:]
        for item in items {
            if let value = item.value { query[item.name.lowercased()] = value }
        }
        for prefix in ["x-amz-", "x-goog-"] {
            if let signed = query[prefix + "date"].flatMap(compactDate), let seconds = query[prefix + "expires"].flatMap(Int.init),
                seconds >= 0
            {
                return signed.addingTimeInterval(TimeInterval(seconds))
            }
        }
        if let epoch = query["expires"].flatMap(Int.init), epoch > 0 {
            return Date(timeIntervalSince1970: TimeInterval(epoch))
        }
        if let end = query["se"].flatMap(isoDate) {
            return end
        }
        return nil
    }

    /// Whether `url` carries a signature (its query names one), so that a `401`, `403` or
    /// `410` from it most likely means it expired or was revoked.
    static func isSigned(_ url: URL) -> Bool {
        guard url.query != nil, let items = URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems
        else { return false }
        let names: Set = ["x-amz-signature", "x-goog-signature", "signature", "sig", "token", "x-amz-security-token"]
        return items.contains { names.contains($0.name.lowercased()) }
    }

    /// `20261127T010000Z`.
    private static func compactDate(_ text: String) -> Date? {
        let digits = text.filter(\.isNumber)
        guard text.count == 16, text.hasSuffix("Z"), digits.count == 14 else { return nil }
        var components = DateComponents()
        components.timeZone = TimeZone(identifier: "UTC")
        let numbers = Array(digits)
        func number(_ range: Range<Int>) -> Int { Int(String(numbers[range]))! }
        components.year = number(0..<4)
        components.month = number(4..<6)
        components.day = number(6..<8)
        components.hour = number(8..<10)
        components.minute = number(10..<12)
        components.second = number(12..<14)
        return Calendar(identifier: .gregorian).date(from: components)
    }

    /// `2026-11-27T01:05:00Z` (or with fractional seconds, or a date alone).
    private static func isoDate(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withFullDate]
        return formatter.date(from: text)
    }
}

/// What a download does when its URL stops serving the content: a signed URL that expired,
/// or a redirect target (a presigned object behind a release page) that did.
///
/// A plain value that returns actions, tested without sockets; ``TransferOperation`` carries
/// them out. A `401`, `403` or `410`:
/// - from a URL other than the one the attempt started at (a redirect's target, or the
///   location a segmented partial stored), is tried once more from the start, following
///   the redirects afresh: a signing endpoint hands out a fresh URL;
/// - else, with a way to refresh, asks for a new URL, at most
///   ``maximumRefreshesWithoutProgress`` times in a row without a byte gained;
/// - else fails, as ``DownloadError/Code/urlExpired`` when the URL is signed, saying how
///   to give a fresh one.
///
/// Before an attempt, a URL whose signature has expired by its own query is refreshed
/// first, when it can be, rather than sent.
struct URLRefreshRule: Sendable {
    enum Action: Equatable, Sendable {
        /// Attempt again from ``current``, following its redirects afresh (not from a
        /// stored location).
        case refollow
        /// Ask for a fresh URL in place of `expired`.
        case refresh(expired: URL)
        /// Send the attempt as planned.
        case proceed
        /// Give up with this error.
        case fail(DownloadError)
    }

    /// Refreshes in a row that may each be followed by the same failure, with no byte
    /// gained in between, before the download fails.
    static let maximumRefreshesWithoutProgress = 2

    /// The URL attempts start from: the request's, then each fresh one.
    private(set) var current: URL
    /// Whether attempts may start from a stored location (after redirects) rather than
    /// from ``current``: not after a refresh or a refollow.
    private(set) var usesStoredLocation = true
    private let canRefresh: Bool
    private var refollowedFrom: URL?
    /// The expiry that led to the refollow under way.
    private var refollowedFor: DownloadError?
    private var refreshesWithoutProgress = 0
    /// The URL last asked about before an attempt (asked once).
    private var checkedBeforeAttempt: URL?

    init(url: URL, canRefresh: Bool) {
        current = url
        self.canRefresh = canRefresh
    }

    static func isExpiryStatus(_ error: DownloadError) -> Bool {
        error.code == .httpStatus && [401, 403, 410].contains(error.statusCode ?? 0)
    }

    /// Before an attempt at `now`: refresh a URL whose query says it has expired.
    mutating func beforeAttempt(now: Date) -> Action {
        guard canRefresh, checkedBeforeAttempt != current else { return .proceed }
        checkedBeforeAttempt = current
        if let expiry = SignedURLExpiry.expiry(of: current), expiry <= now { return .refresh(expired: current) }
        return .proceed
    }

    /// An attempt failed for good with `error`; `progressed` says whether any byte was
    /// gained since the last refresh.
    mutating func failed(_ error: DownloadError, progressed: Bool, now: Date) -> Action {
        var error = error
        if let expiry = refollowedFor, error.code == .httpStatus, (300..<400).contains(error.statusCode ?? 0) {
            // Segments do not follow redirects: a segmented partial cannot be refollowed
            // from a URL that redirects, so the expiry stands.
            error = expiry
        }
        guard Self.isExpiryStatus(error) else { return .fail(error) }
        if progressed { refreshesWithoutProgress = 0 }
        let answered = error.url ?? current
        if answered != current, refollowedFrom != answered {
            refollowedFrom = answered
            refollowedFor = error
            usesStoredLocation = false
            return .refollow
        }
        if canRefresh, refreshesWithoutProgress < Self.maximumRefreshesWithoutProgress {
            refreshesWithoutProgress += 1
            return .refresh(expired: current)
        }
        return .fail(Self.expired(error, url: answered, now: now, refreshed: canRefresh))
    }

    /// The source in use was dropped (see ``SourceSet``): attempts start from `url`, another
    /// address of the same content, following its redirects.
    mutating func switched(to url: URL) {
        current = url
        usesStoredLocation = false
        refollowedFrom = nil
        refollowedFor = nil
        checkedBeforeAttempt = nil
    }

    /// A fresh URL came: attempts start from it.
    mutating func refreshed(to url: URL) {
        current = url
        usesStoredLocation = false
        refollowedFrom = nil
        refollowedFor = nil
    }

    /// The error a download ends with when its URL stopped serving it: ``urlExpired`` for
    /// a signed URL, saying how to give a fresh one; else the status as it was.
    static func expired(_ error: DownloadError, url: URL, now: Date, refreshed: Bool) -> DownloadError {
        let expiry = SignedURLExpiry.expiry(of: url)
        guard expiry != nil || SignedURLExpiry.isSigned(url) else { return error }
        var why = "HTTP \(error.statusCode ?? 0)"
        if let expiry, expiry <= now {
            why += "; its signature expired at \(ISO8601DateFormatter().string(from: expiry))"
        }
        let remedy =
            refreshed
            ? "the fresh URLs asked for were refused too"
            : "give a way to get a fresh one (haul get --refresh-command PROGRAM, or DownloadManager.Configuration.refreshURL), or add the download again with a fresh URL: it resumes from the partial file"
        return DownloadError(
            .urlExpired, "\(url.absoluteString): the URL has expired (\(why)): \(remedy)", statusCode: error.statusCode,
            url: url)
    }
}
