import Foundation

/// The addresses one download may fetch its content from: the request's URL and its
/// mirrors (``DownloadRequest/mirrors``), with what this run of the download has learned
/// of each.
///
/// A plain value that returns decisions, tested without sockets (`SourceSetTests`);
/// ``TransferOperation`` and ``SegmentedTransfer`` carry them out.
///
/// - One connection (a first request, a small file): attempts go to ``current``, the first
///   source still in use. A source that fails while another is left is dropped
///   (``failed(_:at:)``), and the attempt goes on at once from the next, keeping the
///   partial file; the last source's failures are the download's, under the usual retries.
/// - Segments: each connection takes the source with the fewest connections
///   (``assign(maximumPerSource:)``), within a cap per source. A source whose response
///   disagrees with the content (its size, or its own validator from one response to the
///   next) is dropped; so is one that fails while another is left.
/// - A source is never dropped when it is the last: then the error is the download's.
struct SourceSet: Sendable {
    /// One address and what is known of it.
    struct Source: Sendable, Equatable {
        var url: URL
        /// Why it was dropped for the rest of this run, if it was.
        var dropped: DownloadError?
        /// Its own validator, once a response showed it: each later range request to it
        /// carries it in `If-Range`.
        var validator: Validator?
        /// Connections fetching from it now (segments).
        var active = 0
        /// The most ranges one request to it asks for (`nil`: as many as the download
        /// asks). A source that answers a request for several ranges with its whole
        /// content instead of a `multipart/byteranges` answer takes fewer than were asked
        /// (one, as object stores do, or nginx's `max_ranges`): then one. (Halving was
        /// tried: each whole answer streams the file from its start to the batch's last
        /// range, so learning 50 from 128 could cost the file several times over.)
        var rangesPerRequest: Int?
        /// Pieces it served that did not match their digests: a source with one is
        /// demoted (asked only when the others are at their cap), with two dropped.
        var badPieces = 0

        var isLive: Bool { dropped == nil }
    }

    /// What follows a source's failure.
    enum Failure: Equatable, Sendable {
        /// `url` is dropped for `reason`: go on at once from `next`.
        case dropped(URL, reason: DownloadError, next: URL)
        /// The error is the download's (the source is the last one left, or the error is
        /// not the source's fault): retry or fail as usual.
        case kept
    }

    /// A connection's source (segments).
    struct Assignment: Equatable, Sendable {
        var index: Int
        var url: URL
        /// The validator to send in `If-Range`, when the source's is known.
        var validator: Validator?
    }

    private(set) var sources: [Source]

    /// What is kept of a source beside the partial file.
    struct Health: Codable, Hashable, Sendable {
        var url: String
        var badPieces: Int
        /// Why it was dropped (``DownloadError/Code`` and message), if it was.
        var droppedCode: String?
        var droppedReason: String?
    }

    /// The sources' health, for the partial's sidecar; `nil` for a single source that
    /// nothing is known against.
    var health: [Health]? {
        guard hasMirrors || sources.contains(where: { $0.dropped != nil || $0.badPieces > 0 }) else { return nil }
        return sources.map {
            Health(
                url: $0.url.absoluteString, badPieces: $0.badPieces, droppedCode: $0.dropped?.code.description,
                droppedReason: $0.dropped?.message)
        }
    }

    /// Takes back what a sidecar kept of the sources (a resumed download): bad pieces, and
    /// sources dropped, as long as one is left.
    mutating func restore(_ health: [Health]) {
        for entry in health {
            guard let index = sources.firstIndex(where: { $0.url.absoluteString == entry.url }) else { continue }
            sources[index].badPieces = entry.badPieces
            if let reason = entry.droppedReason, sources[index].isLive, live.count > 1 {
                sources[index].dropped = DownloadError(
                    DownloadError.Code(named: entry.droppedCode) ?? .network, reason, url: sources[index].url)
            }
        }
    }

    /// `urls` in order of preference (duplicates are kept once).
    init(urls: [URL]) {
        var seen = Set<String>()
        sources = urls.filter { seen.insert($0.absoluteString).inserted }.map { Source(url: $0) }
        precondition(!sources.isEmpty, "a download has at least one URL")
    }

    /// The sources not dropped.
    var live: [Source] { sources.filter(\.isLive) }

    /// Whether the download has more than one source.
    var hasMirrors: Bool { sources.count > 1 }

    /// Where a single connection's attempts go: the first source still in use.
    var current: URL { (sources.first(where: \.isLive) ?? sources[0]).url }

    /// Whether `error` says something about the source that answered (or did not), rather
    /// than about this machine, the proxy, the request or a limit: such a source is worth
    /// dropping while others are left.
    static func blamesSource(_ error: DownloadError) -> Bool {
        // A request the server did not process (an HTTP/2 stream refused, or cancelled by
        // its GOAWAY) says nothing against the source: it is sent again.
        if error.wasNotProcessed { return false }
        return switch error.code.base {
        case .httpStatus, .network, .timeout, .tooManyRedirects, .redirectLoop, .sizeMismatch, .protocolViolation,
            .tls, .insecureRedirect, .unusableRedirect, .credentialsRequired, .urlExpired:
            true
        default:
            false
        }
    }

    /// An attempt at `url` failed with `error`: drop it and go on from the next source, or
    /// keep it and let the error stand.
    mutating func failed(_ error: DownloadError, at url: URL) -> Failure {
        guard Self.blamesSource(error), let index = sources.firstIndex(where: { $0.url == url && $0.isLive }),
            live.count > 1
        else { return .kept }
        sources[index].dropped = error
        sources[index].active = 0
        return .dropped(url, reason: error, next: current)
    }

    /// `expired` was replaced by `fresh` (a refreshed signed URL): the same source, at a
    /// new address, in use again.
    mutating func replace(_ expired: URL, with fresh: URL) {
        guard let index = sources.firstIndex(where: { $0.url == expired }) else { return }
        sources[index].url = fresh
        sources[index].dropped = nil
    }

    // MARK: - Segments

    /// Segments begin from `url` (the source `startedAt`, after its redirects, or the
    /// location a segmented partial stored) with the content's `validator`: that source
    /// comes first, and every other live one is asked for ranges of the same content.
    mutating func beginSegments(from url: URL, validator: Validator?, startedAt: URL) {
        let index =
            sources.firstIndex(where: { $0.url == url })
            ?? sources.firstIndex(where: { $0.url == startedAt }) ?? {
                sources.append(Source(url: url))
                return sources.count - 1
            }()
        var first = sources.remove(at: index)
        first.url = url
        first.validator = validator
        first.dropped = nil
        sources.insert(first, at: 0)
        for index in sources.indices { sources[index].active = 0 }
    }

    /// A connection needs a source: the live one with the fewest connections (the earlier
    /// on ties), each taking at most `maximumPerSource`; `nil` when every live source is
    /// at its cap.
    mutating func assign(maximumPerSource: Int, excluding excluded: Int? = nil) -> Assignment? {
        let candidates = sources.indices.filter {
            sources[$0].isLive && sources[$0].active < maximumPerSource && $0 != excluded
        }
        guard
            let index = candidates.min(by: {
                (sources[$0].badPieces, sources[$0].active) < (sources[$1].badPieces, sources[$1].active)
            })
        else { return nil }
        sources[index].active += 1
        return Assignment(index: index, url: sources[index].url, validator: sources[index].validator)
    }

    /// The validator `assignment`'s source has shown by now (another connection may have
    /// learned it since the assignment).
    func validator(of assignment: Assignment) -> Validator? {
        guard sources.indices.contains(assignment.index), sources[assignment.index].url == assignment.url else {
            return assignment.validator
        }
        return sources[assignment.index].validator ?? assignment.validator
    }

    /// Whether `assignment`'s source is still in use.
    func isLive(_ assignment: Assignment) -> Bool {
        sources.indices.contains(assignment.index) && sources[assignment.index].url == assignment.url
            && sources[assignment.index].isLive
    }

    /// Source `index` wrote into a piece that did not match its digest: demoted, and
    /// dropped at its second bad piece while another source is left.
    mutating func servedBadPiece(_ index: Int) -> Failure {
        guard sources.indices.contains(index), sources[index].isLive else { return .kept }
        sources[index].badPieces += 1
        guard sources[index].badPieces >= 2, live.count > 1 else { return .kept }
        let error = DownloadError(
            .checksumMismatch,
            "served \(sources[index].badPieces) pieces that did not match their digests",
            url: sources[index].url)
        sources[index].dropped = error
        sources[index].active = 0
        return .dropped(sources[index].url, reason: error, next: current)
    }

    /// A connection stopped using the source it was assigned.
    mutating func release(_ assignment: Assignment) {
        guard sources.indices.contains(assignment.index), sources[assignment.index].url == assignment.url else { return }
        sources[assignment.index].active = max(0, sources[assignment.index].active - 1)
    }

    /// How many ranges one request to `assignment`'s source asks for, of the `wanted`.
    func rangesPerRequest(_ assignment: Assignment, asking wanted: Int) -> Int {
        guard sources.indices.contains(assignment.index), sources[assignment.index].url == assignment.url,
            let limit = sources[assignment.index].rangesPerRequest
        else { return wanted }
        return min(wanted, limit)
    }

    /// `assignment`'s source answered a request for several ranges with its whole content:
    /// from now on it is asked for one range per request.
    mutating func answeredWhole(_ assignment: Assignment) {
        guard sources.indices.contains(assignment.index), sources[assignment.index].url == assignment.url else { return }
        sources[assignment.index].rangesPerRequest = 1
    }

    /// A range response from `assignment`'s source showed `validator` (or none): the first
    /// one is learned; a later one that differs means the source's content changed.
    mutating func saw(_ validator: Validator?, from assignment: Assignment) -> Failure {
        let index = assignment.index
        guard sources.indices.contains(index), sources[index].url == assignment.url else { return .kept }
        guard let known = sources[index].validator else {
            sources[index].validator = validator
            return .kept
        }
        guard let validator, validator != known else { return .kept }
        return disagreed(
            assignment,
            reason: "its validator changed (\(known.headerValue), now \(validator.headerValue))")
    }

    /// `assignment`'s source answered with other content than the download's (another
    /// size, a changed validator, ranges not honoured): dropped while another source is
    /// left; otherwise ``Failure/kept``, and the content changed for everyone.
    mutating func disagreed(_ assignment: Assignment, reason: String) -> Failure {
        let index = assignment.index
        guard sources.indices.contains(index), sources[index].url == assignment.url, sources[index].isLive,
            live.count > 1
        else { return .kept }
        // The first source's validator is the one the partial file was started with: when
        // it no longer answers with that content, the file may be a mix of two versions.
        guard index != 0 else { return .kept }
        let error = DownloadError(.sizeMismatch, reason, url: assignment.url)
        sources[index].dropped = error
        sources[index].active = 0
        return .dropped(assignment.url, reason: error, next: current)
    }

    /// A connection's request to `assignment`'s source failed with `error`.
    mutating func failed(_ error: DownloadError, from assignment: Assignment) -> Failure {
        guard sources.indices.contains(assignment.index), sources[assignment.index].url == assignment.url else {
            return .kept
        }
        return failed(error, at: assignment.url)
    }
}
