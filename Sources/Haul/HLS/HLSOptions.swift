public import Foundation

/// How ``HLSDownloader`` downloads a stream.
public struct HLSOptions: Sendable {
    /// Which variant of a master playlist to download; ``HLSVariantChoice/best`` (the
    /// highest bandwidth) by default. A media playlist has no variants.
    public var variant: HLSVariantChoice
    /// Whether the chosen variant's audio, video and subtitle renditions (`EXT-X-MEDIA`
    /// with a URI) are downloaded too, each into a file beside the stream's, named after it
    /// with the rendition's type and language (`show.audio-en.ts`, `show.subtitles-fr.vtt`:
    /// a subtitle rendition's WebVTT segments joined into one WebVTT file). Off by default.
    /// Closed captions travel inside the video and need nothing more.
    public var renditions: Bool
    /// The most media to record: a live playlist stops being refreshed once this much is
    /// planned, and a playlist of any kind is cut after the first segment that reaches it.
    /// `nil` (the default): a live playlist is recorded until it ends (`EXT-X-ENDLIST`).
    public var maxDuration: Duration?
    /// Request headers for the playlists, keys and segments. Credential headers
    /// (`Authorization`, `Cookie`, and those named in ``sensitiveHeaderNames``) go only to
    /// the origin of each request's URL as ``DownloadRequest/headers`` say.
    public var headers: [(name: String, value: String)]
    /// Further header names in ``headers`` that are credentials.
    public var sensitiveHeaderNames: Set<String>
    /// The priority of the stream's downloads.
    public var priority: DownloadPriority

    /// Creates options.
    public init(
        variant: HLSVariantChoice = .best,
        renditions: Bool = false,
        maxDuration: Duration? = nil,
        headers: [(name: String, value: String)] = [],
        sensitiveHeaderNames: Set<String> = [],
        priority: DownloadPriority = .normal
    ) {
        self.variant = variant
        self.renditions = renditions
        self.maxDuration = maxDuration
        self.headers = headers
        self.sensitiveHeaderNames = sensitiveHeaderNames
        self.priority = priority
    }
}

/// What ``HLSDownloader`` tells about a stream while it downloads it.
public enum HLSEvent: Sendable {
    /// The playlist was read: what is planned, and what an earlier run left staged.
    case started(HLSProgress)
    /// A segment (or a resource holding several) was fetched, or a live playlist's refresh
    /// added segments.
    case progress(HLSProgress)
    /// A file is complete and in place.
    case saved(HLSOutput)
}

/// How far a stream's download is, in segments, seconds of media and bytes.
public struct HLSProgress: Sendable, Hashable {
    /// The file being written.
    public let file: URL
    /// The segments planned (growing while a live playlist is recorded).
    public internal(set) var segments: Int
    /// The segments fetched (or staged by an earlier run).
    public internal(set) var segmentsCompleted = 0
    /// The seconds of media planned.
    public internal(set) var duration: Double
    /// The seconds of media fetched.
    public internal(set) var durationCompleted: Double = 0
    /// The bytes fetched in this run.
    public internal(set) var bytesReceived: Int64 = 0
    /// The bytes an earlier run had staged.
    public internal(set) var bytesStaged: Int64 = 0
    /// Whether the playlist is live (it had no `EXT-X-ENDLIST` when first read).
    public let isLive: Bool

    init(file: URL, segments: Int, duration: Double, isLive: Bool) {
        self.file = file
        self.segments = segments
        self.duration = duration
        self.isLive = isLive
    }
}

/// Counts a recording's segments and seconds, planned and fetched, as its plan grows and
/// its resources arrive: each step costs what it adds, so a recording of a day's live
/// segments does not count them all again at each one.
struct HLSTally: Sendable {
    /// The segments and seconds each resource carries (several, for byte ranges of one URL).
    private var perResource: [(segments: Int, seconds: Double)] = []
    /// How many of the plan's parts are counted.
    private var countedParts = 0
    /// The resources fetched (or staged by an earlier run).
    private(set) var fetched: Set<Int> = []

    /// Counts the parts `plan` added since the last call into `progress`.
    mutating func count(_ plan: HLSPlan, into progress: inout HLSProgress) {
        if perResource.count < plan.resources.count {
            perResource += repeatElement((segments: 0, seconds: 0.0), count: plan.resources.count - perResource.count)
        }
        for part in plan.parts[countedParts...] {
            guard case .segment(_, let seconds) = part.kind else { continue }
            perResource[part.resource].segments += 1
            perResource[part.resource].seconds += seconds
            progress.segments += 1
            progress.duration += seconds
            if fetched.contains(part.resource) {
                progress.segmentsCompleted += 1
                progress.durationCompleted += seconds
            }
        }
        countedParts = plan.parts.count
    }

    /// Counts `resource` as fetched into `progress` (once).
    mutating func fetched(_ resource: Int, into progress: inout HLSProgress) {
        guard fetched.insert(resource).inserted else { return }
        if resource < perResource.count {
            progress.segmentsCompleted += perResource[resource].segments
            progress.durationCompleted += perResource[resource].seconds
        }
    }
}

/// A file ``HLSDownloader`` wrote.
public struct HLSOutput: Sendable, Hashable {
    /// What the file holds.
    public enum Kind: Sendable, Hashable {
        /// The stream: the media playlist given, or the chosen variant's.
        case main
        /// A rendition of the chosen variant: its `TYPE` (`AUDIO`, `VIDEO`), `NAME` and
        /// `LANGUAGE`.
        case rendition(type: String, name: String, language: String?)
    }

    /// The file, complete and in place.
    public let file: URL
    /// The stream's file or one of its renditions'.
    public let kind: Kind
    /// The segments written.
    public let segments: Int
    /// Their duration in seconds, as the playlist gives it.
    public let duration: Double
    /// The file's size.
    public let byteCount: Int64
    /// The bytes fetched in this run (less than the segments' when an earlier run staged
    /// some).
    public let bytesTransferred: Int64
    /// Segments of a live playlist that had left it before it was read again (the
    /// recording has a gap where they were); 0 for a playlist that was not live.
    public let missedSegments: Int
}

/// The files of a stream ``HLSDownloader`` downloaded.
public struct HLSSummary: Sendable, Hashable {
    /// The stream's file, then its renditions'.
    public let outputs: [HLSOutput]

    /// The stream's file.
    public var main: HLSOutput { outputs[0] }
}
