public import Foundation

/// A parsed HTTP Live Streaming playlist (RFC 8216).
///
/// A playlist is either a *master* playlist, which lists the variant streams and
/// alternative renditions of a presentation, or a *media* playlist, which lists
/// the media segments of one stream. Use ``parse(_:url:)`` to read one.
enum HLSPlaylist: Sendable, Equatable {
    /// A master (multivariant) playlist: variant streams and renditions.
    case master(HLSMasterPlaylist)
    /// A media playlist: a sequence of media segments.
    case media(HLSMediaPlaylist)
}

/// An error found while parsing a playlist, pointing at the offending line.
struct HLSPlaylistError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The 1-based line number the error refers to.
    let line: Int
    /// A human-readable explanation, e.g. `"EXTINF without a URI"`.
    let reason: String

    /// The error formatted as `"line <n>: <reason>"`.
    var description: String { "line \(line): \(reason)" }
}

// MARK: - Media playlists

/// A media playlist: the segments of one rendition of a presentation.
struct HLSMediaPlaylist: Sendable, Equatable {
    /// The value of `EXT-X-PLAYLIST-TYPE`.
    enum PlaylistType: String, Sendable, Equatable {
        /// The playlist will never change (`VOD`).
        case vod = "VOD"
        /// Segments may only be appended to the playlist (`EVENT`).
        case event = "EVENT"
    }

    /// `EXT-X-TARGETDURATION`, in seconds (0 if absent from a playlist without segments).
    var targetDuration: Int
    /// `EXT-X-MEDIA-SEQUENCE`: the sequence number of the first segment.
    var mediaSequence: Int = 0
    /// `EXT-X-DISCONTINUITY-SEQUENCE`: the discontinuity sequence number of the first segment.
    var discontinuitySequence: Int = 0
    /// Whether the playlist contains `EXT-X-ENDLIST` (false for a live playlist).
    var hasEndList: Bool = false
    /// `EXT-X-PLAYLIST-TYPE`, or nil when absent.
    var playlistType: PlaylistType? = nil
    /// The media segments, in playlist order.
    var segments: [HLSSegment] = []
    /// Whether the playlist contains `EXT-X-INDEPENDENT-SEGMENTS`.
    var independentSegments: Bool = false

    /// The sum of all segment durations, in seconds.
    var totalDuration: Double {
        segments.reduce(0) { $0 + $1.duration }
    }

    /// The distinct keys used by the segments, in order of first use.
    var keys: [HLSKey] {
        var seen = Set<HLSKey>()
        return segments.compactMap(\.key).filter { seen.insert($0).inserted }
    }

    /// Whether any segment is protected by a key that needs a DRM system (see ``HLSKey/requiresDRM``).
    var requiresDRM: Bool {
        segments.contains { $0.key?.requiresDRM ?? false }
    }

    /// Whether the segments are fragmented MP4, i.e. any segment has an `EXT-X-MAP` initialization section.
    var isFragmentedMP4: Bool {
        segments.contains { $0.map != nil }
    }
}

/// One media segment of a media playlist.
struct HLSSegment: Sendable, Equatable {
    /// The segment URI, resolved against the playlist URL.
    var url: URL
    /// The `EXTINF` duration, in seconds.
    var duration: Double
    /// The `EXTINF` title, or nil when empty or absent.
    var title: String? = nil
    /// The media sequence number: the playlist's media sequence plus the segment's index.
    var sequenceNumber: Int
    /// The `EXT-X-BYTERANGE` sub-range of the resource, or nil for the whole resource.
    var byteRange: HLSByteRange? = nil
    /// Whether an `EXT-X-DISCONTINUITY` precedes this segment.
    var discontinuity: Bool = false
    /// The discontinuity sequence number of this segment.
    var discontinuitySequence: Int = 0
    /// The key protecting the segment, or nil when it is not encrypted.
    var key: HLSKey? = nil
    /// The media initialization section (`EXT-X-MAP`) that applies, if any.
    var map: HLSMap? = nil
    /// The raw `EXT-X-PROGRAM-DATE-TIME` value attached to this segment, if any.
    var programDateTime: String? = nil

    /// The initialization vector for decrypting this segment, or nil when it is not encrypted.
    var initializationVector: [UInt8]? {
        key?.initializationVector(sequenceNumber: sequenceNumber)
    }
}

/// A sub-range of a resource, as given by `EXT-X-BYTERANGE` or the `BYTERANGE` attribute of `EXT-X-MAP`.
struct HLSByteRange: Sendable, Hashable, Codable {
    /// The offset of the first byte.
    var offset: Int
    /// The number of bytes.
    var length: Int
    /// The offset just past the last byte (`offset + length`).
    var end: Int { offset + length }
}

/// A media initialization section (`EXT-X-MAP`).
struct HLSMap: Sendable, Hashable, Codable {
    /// The resource holding the initialization section, resolved against the playlist URL.
    var url: URL
    /// The sub-range of the resource, or nil for the whole resource.
    var byteRange: HLSByteRange? = nil
}

/// An encryption key (`EXT-X-KEY` or `EXT-X-SESSION-KEY`).
struct HLSKey: Sendable, Hashable, Codable {
    /// The encryption method (`METHOD`); `NONE` is represented by the absence of a key.
    enum Method: Sendable, Hashable, Codable {
        /// `AES-128`: whole segments encrypted with AES-128-CBC and PKCS7 padding.
        case aes128
        /// `SAMPLE-AES`: individual media samples encrypted.
        case sampleAES
        /// Any other method, e.g. `SAMPLE-AES-CTR`.
        case other(String)

        /// Maps a `METHOD` attribute value (other than `NONE`) to a method.
        init(attributeValue: String) {
            switch attributeValue {
            case "AES-128": self = .aes128
            case "SAMPLE-AES": self = .sampleAES
            default: self = .other(attributeValue)
            }
        }
    }

    /// The `KEYFORMAT` of plain keys fetched from the key URI.
    static let identityKeyFormat = "identity"

    /// The encryption method.
    var method: Method
    /// The key URI, resolved against the playlist URL.
    var url: URL? = nil
    /// The explicit 16-byte initialization vector (`IV`), if given.
    var iv: [UInt8]? = nil
    /// `KEYFORMAT`, `"identity"` by default.
    var keyFormat: String = HLSKey.identityKeyFormat
    /// `KEYFORMATVERSIONS`, if given.
    var keyFormatVersions: String? = nil

    /// Whether decrypting needs a DRM system rather than a plain AES-128 key:
    /// true for `SAMPLE-AES` and other methods, or any key format other than `identity`.
    var requiresDRM: Bool {
        switch method {
        case .aes128: keyFormat != HLSKey.identityKeyFormat
        case .sampleAES, .other: true
        }
    }

    /// The initialization vector for the segment with the given media sequence number:
    /// ``iv`` if given, otherwise the sequence number as a 16-byte big-endian integer (RFC 8216 §5.2).
    func initializationVector(sequenceNumber: Int) -> [UInt8] {
        if let iv { return iv }
        let value = UInt64(truncatingIfNeeded: sequenceNumber)
        var bytes = [UInt8](repeating: 0, count: 8)
        for shift in stride(from: 56, through: 0, by: -8) {
            bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
        }
        return bytes
    }
}

// MARK: - Master playlists

/// A master playlist: the variant streams and renditions of a presentation.
struct HLSMasterPlaylist: Sendable, Equatable {
    /// The variant streams (`EXT-X-STREAM-INF`), in playlist order. I-frame streams are not included.
    var variants: [HLSVariant] = []
    /// The alternative renditions (`EXT-X-MEDIA`), in playlist order.
    var renditions: [HLSRendition] = []
    /// The session keys (`EXT-X-SESSION-KEY`), in playlist order.
    var sessionKeys: [HLSKey] = []
    /// Whether the playlist contains `EXT-X-INDEPENDENT-SEGMENTS`.
    var independentSegments: Bool = false

    /// The renditions belonging to the groups referenced by `variant`: audio renditions of its
    /// `AUDIO` group, video renditions of its `VIDEO` group, subtitles of its `SUBTITLES` group
    /// and closed captions of its `CLOSED-CAPTIONS` group, in playlist order.
    func renditions(for variant: HLSVariant) -> [HLSRendition] {
        renditions.filter { rendition in
            let group: String? = switch rendition.type {
            case .audio: variant.audioGroup
            case .video: variant.videoGroup
            case .subtitles: variant.subtitlesGroup
            case .closedCaptions: variant.closedCaptions
            }
            return group == rendition.groupID
        }
    }
}

/// A variant stream of a master playlist (`EXT-X-STREAM-INF` and the URI line after it).
public struct HLSVariant: Sendable, Equatable {
    /// The media playlist URI, resolved against the master playlist URL.
    public internal(set) var url: URL
    /// `BANDWIDTH`: peak bits per second.
    public internal(set) var bandwidth: Int
    /// `AVERAGE-BANDWIDTH`: average bits per second.
    public internal(set) var averageBandwidth: Int? = nil
    /// `CODECS`, e.g. `"avc1.4d401f,mp4a.40.2"`.
    public internal(set) var codecs: String? = nil
    /// `RESOLUTION`.
    public internal(set) var resolution: HLSResolution? = nil
    /// `FRAME-RATE`.
    public internal(set) var frameRate: Double? = nil
    /// `AUDIO`: the group ID of the audio renditions.
    public internal(set) var audioGroup: String? = nil
    /// `VIDEO`: the group ID of the video renditions.
    public internal(set) var videoGroup: String? = nil
    /// `SUBTITLES`: the group ID of the subtitle renditions.
    public internal(set) var subtitlesGroup: String? = nil
    /// `CLOSED-CAPTIONS`: the group ID of the closed-caption renditions (nil for `NONE`).
    public internal(set) var closedCaptions: String? = nil
}

/// An alternative rendition of a master playlist (`EXT-X-MEDIA`).
struct HLSRendition: Sendable, Equatable {
    /// The `TYPE` attribute.
    enum MediaType: String, Sendable, Equatable {
        /// `AUDIO`.
        case audio = "AUDIO"
        /// `VIDEO`.
        case video = "VIDEO"
        /// `SUBTITLES`.
        case subtitles = "SUBTITLES"
        /// `CLOSED-CAPTIONS`.
        case closedCaptions = "CLOSED-CAPTIONS"
    }

    /// The rendition type.
    var type: MediaType
    /// `GROUP-ID`.
    var groupID: String
    /// `NAME`.
    var name: String
    /// `LANGUAGE`, if given.
    var language: String? = nil
    /// The media playlist URI, resolved against the master playlist URL (always nil for closed captions).
    var url: URL? = nil
    /// `DEFAULT=YES`.
    var isDefault: Bool = false
    /// `AUTOSELECT=YES`.
    var autoselect: Bool = false
}

/// A video resolution, written `<width>x<height>` in playlists.
public struct HLSResolution: Sendable, Hashable {
    /// The width in pixels.
    public internal(set) var width: Int
    /// The height in pixels.
    public internal(set) var height: Int

    /// Parses `"<width>x<height>"` (an upper-case `X` is accepted too); nil if malformed.
    init?(parsing text: some StringProtocol) {
        guard let separator = text.firstIndex(where: { $0 == "x" || $0 == "X" }),
              let width = HLSAttributeList.decimalInteger(text[..<separator]),
              let height = HLSAttributeList.decimalInteger(text[text.index(after: separator)...])
        else { return nil }
        self.init(width: width, height: height)
    }

    /// Creates a resolution from its dimensions.
    init(width: Int, height: Int) {
        self.width = width
        self.height = height
    }

    /// `width * height`, saturating at `Int.max` instead of overflowing.
    var pixelCount: Int {
        let (product, overflow) = width.multipliedReportingOverflow(by: height)
        return overflow ? Int.max : product
    }
}
