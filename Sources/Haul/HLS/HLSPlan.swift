import Crypto
import Foundation

/// What a media playlist asks for, as a value: the resources to fetch, each once and named
/// by its URL, and the parts of the output file in order (an fMP4 init section where the
/// map starts or changes, then each segment, or its byte range of a resource, with the key
/// that decrypts it).
///
/// A live playlist is planned again at each refresh with ``append(_:)``: segments past
/// the last one recorded are added, and segments that left the playlist before they were
/// seen are counted in ``missedSegments``.
struct HLSPlan: Sendable, Equatable, Codable {
    /// A URL fetched once into the staging directory.
    struct Resource: Sendable, Hashable, Codable {
        var url: URL
        /// Its file name in the staging directory: a digest of the URL, so that a run that
        /// starts again finds what an earlier one saved, and its extension.
        var fileName: String
    }

    /// A piece of the output: a resource, or a byte range of one, decrypted if ``key`` is set.
    struct Part: Sendable, Equatable, Codable {
        enum Kind: Sendable, Equatable, Codable {
            /// An fMP4 init section (`EXT-X-MAP`).
            case initialization
            /// A media segment, by its media sequence number.
            case segment(sequence: Int, duration: Double)
        }

        var kind: Kind
        /// An index into ``HLSPlan/resources``.
        var resource: Int
        var range: HLSByteRange?
        /// The AES-128 key (never a DRM key: those are refused).
        var key: HLSKey?
        /// The initialization vector for ``key``.
        var iv: [UInt8]?
    }

    /// How the segments are packaged, which names the output's extension and what each
    /// decrypted segment is checked to start with.
    enum Container: String, Sendable, Equatable, Codable {
        /// MPEG-2 transport stream segments, concatenated (`.ts`).
        case transportStream = "ts"
        /// Fragmented MP4: an init section then `moof`/`mdat` fragments (`.mp4`).
        case fragmentedMP4 = "mp4"
        /// Packed audio (AAC, MP3, AC-3): concatenated, named by the segments' extension.
        case packed = "bin"
        /// WebVTT subtitles: joined into one WebVTT file (``WebVTTJoiner``).
        case webVTT = "vtt"
    }

    private(set) var resources: [Resource] = []
    private(set) var parts: [Part] = []
    private(set) var container: Container
    /// The output's extension: ``Container/rawValue``, or a packed stream's own.
    private(set) var fileExtension: String
    /// The media sequence number of the last segment planned.
    private(set) var lastSequence: Int?
    /// Segments of a live playlist that had left it before a refresh saw them.
    private(set) var missedSegments = 0
    /// Whether the playlist said it is complete (`EXT-X-ENDLIST`).
    private(set) var isComplete = false
    /// The target duration of the last playlist planned, in seconds.
    private(set) var targetDuration = 0
    /// The most seconds of media to plan (``HLSOptions/maxDuration``), if any.
    let limit: Double?
    /// Whether ``limit`` was reached: later segments are not planned.
    private(set) var reachedLimit = false
    private var resourceIndex: [URL: Int] = [:]
    private var lastMap: HLSMap?

    /// Plans `playlist`, up to the segment that makes `limit` seconds, if given.
    ///
    /// - Throws: ``DownloadError/Code/drmProtected`` when any segment's key needs a DRM
    ///   system; ``DownloadError/Code/invalidManifest`` for a playlist with no segments, or
    ///   an AES-128 key without a URI.
    /// `subtitles`: the playlist is a subtitle rendition's, whose segments are WebVTT
    /// whatever their names.
    init(_ playlist: HLSMediaPlaylist, url: URL, limit: Double? = nil, subtitles: Bool = false) throws(DownloadError) {
        self.limit = limit
        guard let first = playlist.segments.first else {
            if playlist.hasEndList {
                throw DownloadError(.invalidManifest, "\(url.absoluteString): the playlist lists no segments")
            }
            container = subtitles ? .webVTT : .transportStream
            fileExtension = container.rawValue
            targetDuration = playlist.targetDuration
            return
        }
        (container, fileExtension) = subtitles ? (.webVTT, Container.webVTT.rawValue) : Self.container(of: playlist, first: first)
        try append(playlist, url: url)
    }

    /// The segments planned.
    private(set) var segmentCount = 0
    /// The sum of the planned segments' durations, in seconds.
    private(set) var duration: Double = 0

    /// Adds the segments of a refreshed `playlist` that come after ``lastSequence``; returns
    /// how many were added.
    ///
    /// - Throws: as ``init(_:url:)``, for the segments added.
    @discardableResult
    mutating func append(_ playlist: HLSMediaPlaylist, url: URL) throws(DownloadError) -> Int {
        if let drm = playlist.segments.lazy.compactMap(\.key).first(where: \.requiresDRM) {
            throw Self.drmError(drm, url: url)
        }
        targetDuration = playlist.targetDuration
        isComplete = playlist.hasEndList
        var added = 0
        for segment in playlist.segments {
            if reachedLimit { break }
            if let lastSequence, segment.sequenceNumber <= lastSequence { continue }
            if let lastSequence, segment.sequenceNumber > lastSequence + 1 {
                missedSegments += segment.sequenceNumber - lastSequence - 1
            }
            if let map = segment.map, map != lastMap {
                parts.append(Part(kind: .initialization, resource: resource(for: map.url), range: map.byteRange))
                lastMap = map
            }
            var part = Part(
                kind: .segment(sequence: segment.sequenceNumber, duration: segment.duration),
                resource: resource(for: segment.url), range: segment.byteRange)
            if let key = segment.key {
                guard key.url != nil else {
                    throw DownloadError(.invalidManifest, "\(url.absoluteString): an AES-128 key without a URI")
                }
                part.key = key
                part.iv = key.initializationVector(sequenceNumber: segment.sequenceNumber)
            }
            parts.append(part)
            lastSequence = segment.sequenceNumber
            added += 1
            segmentCount += 1
            duration += segment.duration
            if let limit, duration >= limit { reachedLimit = true }
        }
        return added
    }

    /// The distinct keys the parts need, in order of first use.
    var keys: [HLSKey] {
        var seen: Set<HLSKey> = []
        return parts.compactMap(\.key).filter { seen.insert($0).inserted }
    }

    /// The index of `url`'s resource, added if new.
    private mutating func resource(for url: URL) -> Int {
        if let index = resourceIndex[url] { return index }
        let digest = Hex.lowercase(SHA256.hash(data: Data(url.absoluteString.utf8)).prefix(10))
        let name = digest + "." + Self.safeExtension(of: url, default: "seg")
        resources.append(Resource(url: url, fileName: name))
        resourceIndex[url] = resources.count - 1
        return resources.count - 1
    }

    /// The container of `playlist`'s segments: fMP4 when they have an init section, else
    /// a transport stream unless the first segment's extension names packed audio or text.
    static func container(of playlist: HLSMediaPlaylist, first: HLSSegment) -> (Container, String) {
        if playlist.isFragmentedMP4 { return (.fragmentedMP4, Container.fragmentedMP4.rawValue) }
        let packed = ["aac", "mp3", "ac3", "ec3"]
        let ext = safeExtension(of: first.url, default: "ts")
        if packed.contains(ext) { return (.packed, ext) }
        if ext == "vtt" || ext == "webvtt" { return (.webVTT, Container.webVTT.rawValue) }
        return (.transportStream, Container.transportStream.rawValue)
    }

    /// `url`'s path extension, lowercased, when it is 1-6 ASCII letters or digits; else
    /// `fallback`.
    static func safeExtension(of url: URL, default fallback: String) -> String {
        let ext = url.pathExtension.lowercased()
        guard (1...6).contains(ext.utf8.count), ext.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x7A).contains($0) })
        else { return fallback }
        return ext
    }

    /// ``DownloadError/Code/drmProtected`` for `key` in the playlist at `url`.
    static func drmError(_ key: HLSKey, url: URL) -> DownloadError {
        let method: String
        switch key.method {
        case .aes128: method = "AES-128"
        case .sampleAES: method = "SAMPLE-AES"
        case .other(let name): method = name
        }
        let format = key.keyFormat == HLSKey.identityKeyFormat ? "" : " with KEYFORMAT \"\(key.keyFormat)\""
        return DownloadError(
            .drmProtected,
            "\(url.absoluteString): the stream is DRM-protected (METHOD=\(method)\(format)); Haul downloads clear and AES-128 streams only, and fetched no segment"
        )
    }
}
