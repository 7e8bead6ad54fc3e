import Foundation
import Testing
@testable import Haul

// MARK: - Helpers

/// The URL test playlists are "loaded" from.
private let playlistURL = URL(string: "https://cdn.example/a/b/index.m3u8")!

/// A test-only failure for unexpected playlist kinds.
private struct UnexpectedPlaylist: Error {}

/// Parses `text` and returns it as a media playlist, failing otherwise.
private func parseMedia(_ text: String, url: URL = playlistURL) throws -> HLSMediaPlaylist {
    guard case .media(let playlist) = try HLSPlaylist.parse(text, url: url) else { throw UnexpectedPlaylist() }
    return playlist
}

/// Parses `text` and returns it as a master playlist, failing otherwise.
private func parseMaster(_ text: String, url: URL = playlistURL) throws -> HLSMasterPlaylist {
    guard case .master(let playlist) = try HLSPlaylist.parse(text, url: url) else { throw UnexpectedPlaylist() }
    return playlist
}

/// The error parsing `text` throws, or nil if it parses.
private func parseError(_ text: String, url: URL = playlistURL) -> HLSPlaylistError? {
    do throws(HLSPlaylistError) {
        _ = try HLSPlaylist.parse(text, url: url)
        return nil
    } catch {
        return error
    }
}

/// The error parsing an attribute list throws, or nil if it parses.
private func attributeError(_ text: String) -> HLSAttributeList.ParseError? {
    do throws(HLSAttributeList.ParseError) {
        _ = try HLSAttributeList(parsing: text)
        return nil
    } catch {
        return error
    }
}

/// A URL from a literal.
private func url(_ string: String) -> URL { URL(string: string)! }

/// The playlist ffmpeg's HLS muxer writes for a 24.5 s VOD in MPEG-TS segments.
private let ffmpegVOD = """
    #EXTM3U
    #EXT-X-VERSION:3
    #EXT-X-TARGETDURATION:10
    #EXT-X-MEDIA-SEQUENCE:0
    #EXT-X-PLAYLIST-TYPE:VOD
    #EXTINF:10.000000,
    out0.ts
    #EXTINF:10.000000,
    out1.ts
    #EXTINF:4.533333,
    out2.ts
    #EXT-X-ENDLIST

    """

/// A master playlist with three variants, an audio group, subtitles, captions and an I-frame stream.
private let masterPlaylist = """
    #EXTM3U
    #EXT-X-INDEPENDENT-SEGMENTS
    #EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="aac",NAME="English",LANGUAGE="en",DEFAULT=YES,AUTOSELECT=YES,URI="audio/en.m3u8"
    #EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="aac",NAME="Deutsch",LANGUAGE="de",DEFAULT=NO,AUTOSELECT=YES,URI="audio/de.m3u8"
    #EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="ac3",NAME="English 5.1",LANGUAGE="en",URI="audio/en-ac3.m3u8"
    #EXT-X-MEDIA:TYPE=SUBTITLES,GROUP-ID="subs",NAME="English",LANGUAGE="en",URI="subs/en.m3u8"
    #EXT-X-MEDIA:TYPE=CLOSED-CAPTIONS,GROUP-ID="cc",NAME="CC1",INSTREAM-ID="CC1",URI="ignored.m3u8"
    #EXT-X-SESSION-KEY:METHOD=SAMPLE-AES,URI="skd://key1",KEYFORMAT="com.apple.streamingkeydelivery",KEYFORMATVERSIONS="1"
    #EXT-X-STREAM-INF:BANDWIDTH=800000,AVERAGE-BANDWIDTH=700000,CODECS="avc1.4d401e,mp4a.40.2",RESOLUTION=640x360,FRAME-RATE=25.000,AUDIO="aac"
    low/index.m3u8
    #EXT-X-STREAM-INF:BANDWIDTH=2500000,CODECS="avc1.4d401f,mp4a.40.2",RESOLUTION=1280x720,FRAME-RATE=29.97,AUDIO="aac",SUBTITLES="subs",CLOSED-CAPTIONS="cc"
    mid/index.m3u8
    #EXT-X-I-FRAME-STREAM-INF:BANDWIDTH=90000,CODECS="avc1.4d401f",RESOLUTION=1280x720,URI="iframes.m3u8"
    #EXT-X-STREAM-INF:BANDWIDTH=5000000,CODECS="avc1.640028,mp4a.40.2",RESOLUTION=1920x1080,AUDIO="aac",CLOSED-CAPTIONS=NONE
    https://other.example/high/index.m3u8

    """

/// Builds a variant for choice tests.
private func variant(_ bandwidth: Int, _ width: Int? = nil, _ height: Int? = nil, _ name: String = "v") -> HLSVariant {
    HLSVariant(
        url: url("https://cdn.example/\(name)-\(bandwidth).m3u8"),
        bandwidth: bandwidth,
        resolution: width.flatMap { w in height.map { HLSResolution(width: w, height: $0) } }
    )
}

// MARK: - Media playlists

@Suite("HLS: media playlists")
struct HLSMediaPlaylistTests {
    @Test("ffmpeg-style VOD playlist with MPEG-TS segments")
    func ffmpegVODPlaylist() throws {
        let playlist = try parseMedia(ffmpegVOD)
        #expect(playlist.targetDuration == 10)
        #expect(playlist.mediaSequence == 0)
        #expect(playlist.playlistType == .vod)
        #expect(playlist.hasEndList)
        #expect(!playlist.independentSegments)
        #expect(playlist.segments.map(\.url.absoluteString) == [
            "https://cdn.example/a/b/out0.ts",
            "https://cdn.example/a/b/out1.ts",
            "https://cdn.example/a/b/out2.ts",
        ])
        #expect(playlist.segments.map(\.duration) == [10, 10, 4.533333])
        #expect(playlist.segments.map(\.sequenceNumber) == [0, 1, 2])
        #expect(playlist.segments.allSatisfy { $0.title == nil && $0.key == nil && $0.byteRange == nil })
        #expect(abs(playlist.totalDuration - 24.533333) < 1e-9)
        #expect(playlist.keys.isEmpty)
        #expect(!playlist.requiresDRM)
        #expect(!playlist.isFragmentedMP4)
    }

    @Test("fMP4 playlist with EXT-X-MAP, including a map change and a map byte range")
    func fragmentedMP4WithMap() throws {
        let playlist = try parseMedia("""
            #EXTM3U
            #EXT-X-VERSION:7
            #EXT-X-TARGETDURATION:6
            #EXT-X-INDEPENDENT-SEGMENTS
            #EXT-X-MAP:URI="init.mp4"
            #EXTINF:6.0,
            seg1.m4s
            #EXTINF:6.0,
            seg2.m4s
            #EXT-X-DISCONTINUITY
            #EXT-X-MAP:URI="/other/init2.mp4",BYTERANGE="720@100"
            #EXTINF:3.5,
            seg3.m4s
            #EXT-X-ENDLIST
            """)
        #expect(playlist.isFragmentedMP4)
        #expect(playlist.independentSegments)
        let firstMap = HLSMap(url: url("https://cdn.example/a/b/init.mp4"))
        #expect(playlist.segments[0].map == firstMap)
        #expect(playlist.segments[1].map == firstMap)
        #expect(playlist.segments[2].map == HLSMap(
            url: url("https://cdn.example/other/init2.mp4"),
            byteRange: HLSByteRange(offset: 100, length: 720)
        ))
        #expect(playlist.totalDuration == 15.5)
    }

    @Test("EXT-X-MAP without URI is an error")
    func mapWithoutURI() {
        let error = parseError("#EXTM3U\n#EXT-X-TARGETDURATION:6\n#EXT-X-MAP:BYTERANGE=\"10@0\"\n")
        #expect(error == HLSPlaylistError(line: 3, reason: "EXT-X-MAP without URI"))
    }

    @Test("byte ranges with explicit and implicit offsets (single-file playlist)")
    func byteRanges() throws {
        let playlist = try parseMedia("""
            #EXTM3U
            #EXT-X-TARGETDURATION:10
            #EXT-X-VERSION:4
            #EXTINF:10.0,
            #EXT-X-BYTERANGE:75232@0
            main.ts
            #EXT-X-BYTERANGE:82112
            #EXTINF:10.0,
            main.ts
            #EXTINF:10.0,
            #EXT-X-BYTERANGE:69864
            main.ts
            #EXTINF:5.0,
            #EXT-X-BYTERANGE:1000@500000
            main.ts
            #EXT-X-ENDLIST
            """)
        #expect(playlist.segments.map(\.byteRange) == [
            HLSByteRange(offset: 0, length: 75232),
            HLSByteRange(offset: 75232, length: 82112),
            HLSByteRange(offset: 157344, length: 69864),
            HLSByteRange(offset: 500000, length: 1000),
        ])
        #expect(playlist.segments[2].byteRange?.end == 227208)
        #expect(Set(playlist.segments.map(\.url)).count == 1)
    }

    @Test("a byte range without offset needs a previous sub-range of the same resource")
    func byteRangeWithoutPreviousRange() {
        let first = parseError("#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n#EXT-X-BYTERANGE:1000\nmain.ts\n")
        #expect(first?.line == 4)
        #expect(first?.reason.contains("EXT-X-BYTERANGE without an offset") == true)

        let previousWithoutRange = parseError("""
            #EXTM3U
            #EXT-X-TARGETDURATION:10
            #EXTINF:10,
            main.ts
            #EXTINF:10,
            #EXT-X-BYTERANGE:1000
            main.ts
            """)
        #expect(previousWithoutRange?.line == 6)

        let otherResource = parseError("""
            #EXTM3U
            #EXT-X-TARGETDURATION:10
            #EXTINF:10,
            #EXT-X-BYTERANGE:1000@0
            a.ts
            #EXTINF:10,
            #EXT-X-BYTERANGE:1000
            b.ts
            """)
        #expect(otherResource?.line == 7)
    }

    @Test("malformed byte ranges are errors", arguments: ["abc", "10@", "@10", "-5@0", "10@x", "99999999999999999999"])
    func malformedByteRange(_ value: String) {
        let error = parseError("#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n#EXT-X-BYTERANGE:\(value)\nmain.ts\n")
        #expect(error?.line == 4)
    }

    @Test("discontinuities and EXT-X-DISCONTINUITY-SEQUENCE")
    func discontinuities() throws {
        let playlist = try parseMedia("""
            #EXTM3U
            #EXT-X-TARGETDURATION:10
            #EXT-X-MEDIA-SEQUENCE:20
            #EXT-X-DISCONTINUITY-SEQUENCE:3
            #EXTINF:10,
            a.ts
            #EXT-X-DISCONTINUITY
            #EXTINF:10,
            ad1.ts
            #EXTINF:10,
            ad2.ts
            #EXT-X-DISCONTINUITY
            #EXTINF:10,
            b.ts
            """)
        #expect(playlist.discontinuitySequence == 3)
        #expect(playlist.segments.map(\.discontinuity) == [false, true, false, true])
        #expect(playlist.segments.map(\.discontinuitySequence) == [3, 4, 4, 5])
    }

    @Test("media sequence numbering starts at EXT-X-MEDIA-SEQUENCE")
    func mediaSequenceNumbering() throws {
        let playlist = try parseMedia("""
            #EXTM3U
            #EXT-X-TARGETDURATION:4
            #EXT-X-MEDIA-SEQUENCE:100
            #EXTINF:4,
            s100.ts
            #EXTINF:4,
            s101.ts
            #EXTINF:4,
            s102.ts
            """)
        #expect(playlist.mediaSequence == 100)
        #expect(playlist.segments.map(\.sequenceNumber) == [100, 101, 102])
    }

    @Test("live playlist: no ENDLIST, optional EVENT type, program date time")
    func livePlaylist() throws {
        let live = try parseMedia("""
            #EXTM3U
            #EXT-X-TARGETDURATION:2
            #EXT-X-MEDIA-SEQUENCE:2680
            #EXT-X-PROGRAM-DATE-TIME:2024-05-01T12:00:00.000Z
            #EXTINF:2.002,Live title
            live2680.ts
            #EXTINF:2.002,
            live2681.ts
            """)
        #expect(!live.hasEndList)
        #expect(live.playlistType == nil)
        #expect(live.segments.map(\.sequenceNumber) == [2680, 2681])
        #expect(live.segments[0].programDateTime == "2024-05-01T12:00:00.000Z")
        #expect(live.segments[1].programDateTime == nil)
        #expect(live.segments[0].title == "Live title")

        let event = try parseMedia("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXT-X-PLAYLIST-TYPE:EVENT\n")
        #expect(event.playlistType == .event)
        #expect(event.segments.isEmpty)
        #expect(!event.hasEndList)
    }

    @Test("EXT-X-TARGETDURATION is required when there are segments")
    func missingTargetDuration() {
        let error = parseError("#EXTM3U\n#EXT-X-MEDIA-SEQUENCE:1\n#EXTINF:5,\na.ts\n")
        #expect(error == HLSPlaylistError(line: 3, reason: "media playlist without EXT-X-TARGETDURATION"))
    }

    @Test("EXTINF durations must be non-negative numbers", arguments: ["-1", "abc", "", "1.2.3", "nan", "inf", "1e3"])
    func invalidDuration(_ duration: String) {
        let error = parseError("#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:\(duration),title\na.ts\n")
        #expect(error?.line == 3)
    }

    @Test("comments, unknown tags and blank lines are ignored")
    func ignoredLines() throws {
        let playlist = try parseMedia("""
            #EXTM3U

            # a comment
            #EXT-X-TARGETDURATION:10
            #EXT-X-FUTURE-TAG:FOO=1,BAR="x"
            #EXT-X-VERSION:3
            ## another comment

            #EXTINF:10,
            # comment between EXTINF and URI
            a.ts
            """)
        #expect(playlist.segments.count == 1)
        #expect(playlist.segments[0].url == url("https://cdn.example/a/b/a.ts"))
    }

    @Test("a large playlist is parsed completely")
    func largePlaylist() throws {
        var text = "#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXT-X-MEDIA-SEQUENCE:5\n#EXTINF:2,\n#EXT-X-BYTERANGE:10@0\nall.ts\n"
        for _ in 1..<50_000 {
            text += "#EXTINF:2,\n#EXT-X-BYTERANGE:10\nall.ts\n"
        }
        let playlist = try parseMedia(text)
        #expect(playlist.segments.count == 50_000)
        #expect(playlist.segments.last?.sequenceNumber == 50_004)
        #expect(playlist.segments.last?.byteRange == HLSByteRange(offset: 499_990, length: 10))
        #expect(playlist.totalDuration == 100_000)
    }
}

// MARK: - Encryption

@Suite("HLS: encryption keys")
struct HLSKeyTests {
    @Test("AES-128 with an explicit IV")
    func aes128WithIV() throws {
        let playlist = try parseMedia("""
            #EXTM3U
            #EXT-X-TARGETDURATION:10
            #EXT-X-KEY:METHOD=AES-128,URI="https://keys.example/k1",IV=0x000102030405060708090A0B0C0D0E0F
            #EXTINF:10,
            a.ts
            """)
        let key = try #require(playlist.segments[0].key)
        #expect(key.method == .aes128)
        #expect(key.url == url("https://keys.example/k1"))
        #expect(key.iv == Array(0...15))
        #expect(key.keyFormat == "identity")
        #expect(!key.requiresDRM)
        #expect(!playlist.requiresDRM)
        #expect(key.initializationVector(sequenceNumber: 99) == Array(0...15))
        #expect(playlist.segments[0].initializationVector == Array(0...15))
    }

    @Test("AES-128 without IV derives it from the media sequence number")
    func aes128WithoutIV() throws {
        let playlist = try parseMedia("""
            #EXTM3U
            #EXT-X-TARGETDURATION:10
            #EXT-X-MEDIA-SEQUENCE:7
            #EXT-X-KEY:METHOD=AES-128,URI="key.bin"
            #EXTINF:10,
            a.ts
            #EXTINF:10,
            b.ts
            """)
        let key = try #require(playlist.segments[0].key)
        #expect(key.iv == nil)
        #expect(key.url == url("https://cdn.example/a/b/key.bin"))
        #expect(playlist.segments[0].initializationVector == [UInt8](repeating: 0, count: 15) + [0x07])
        #expect(playlist.segments[1].initializationVector == [UInt8](repeating: 0, count: 15) + [0x08])
        #expect(key.initializationVector(sequenceNumber: 0x0102_0304) == [UInt8](repeating: 0, count: 12) + [1, 2, 3, 4])
    }

    @Test("key rotation mid-playlist")
    func keyRotation() throws {
        let playlist = try parseMedia("""
            #EXTM3U
            #EXT-X-TARGETDURATION:10
            #EXT-X-KEY:METHOD=AES-128,URI="k1"
            #EXTINF:10,
            a.ts
            #EXTINF:10,
            b.ts
            #EXT-X-KEY:METHOD=AES-128,URI="k2",IV=0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF
            #EXTINF:10,
            c.ts
            """)
        let urls = playlist.segments.map { $0.key?.url?.lastPathComponent }
        #expect(urls == ["k1", "k1", "k2"])
        #expect(playlist.keys.count == 2)
        #expect(playlist.keys.map(\.url?.lastPathComponent) == ["k1", "k2"])
        #expect(playlist.segments[2].key?.iv == [UInt8](repeating: 0xFF, count: 16))
    }

    @Test("METHOD=NONE clears the key for later segments")
    func methodNone() throws {
        let playlist = try parseMedia("""
            #EXTM3U
            #EXT-X-TARGETDURATION:10
            #EXT-X-KEY:METHOD=AES-128,URI="k1"
            #EXTINF:10,
            a.ts
            #EXT-X-KEY:METHOD=NONE
            #EXTINF:10,
            b.ts
            #EXTINF:10,
            c.ts
            """)
        #expect(playlist.segments.map { $0.key != nil } == [true, false, false])
        #expect(playlist.segments[1].initializationVector == nil)
        #expect(playlist.keys.count == 1)
    }

    @Test("SAMPLE-AES requires DRM")
    func sampleAES() throws {
        let playlist = try parseMedia("""
            #EXTM3U
            #EXT-X-TARGETDURATION:10
            #EXT-X-KEY:METHOD=SAMPLE-AES,URI="skd://content-id"
            #EXTINF:10,
            a.ts
            """)
        #expect(playlist.segments[0].key?.method == .sampleAES)
        #expect(playlist.requiresDRM)
    }

    @Test("a non-identity KEYFORMAT requires DRM, even with AES-128")
    func nonIdentityKeyFormat() throws {
        let playlist = try parseMedia("""
            #EXTM3U
            #EXT-X-TARGETDURATION:10
            #EXT-X-KEY:METHOD=AES-128,URI="skd://x",KEYFORMAT="com.apple.streamingkeydelivery",KEYFORMATVERSIONS="1"
            #EXTINF:10,
            a.ts
            """)
        let key = try #require(playlist.segments[0].key)
        #expect(key.keyFormat == "com.apple.streamingkeydelivery")
        #expect(key.keyFormatVersions == "1")
        #expect(key.requiresDRM)
        #expect(playlist.requiresDRM)
        #expect(HLSKey(method: .other("SAMPLE-AES-CTR")).requiresDRM)
    }

    @Test("several EXT-X-KEY tags in a row: identity wins, otherwise the first")
    func multipleKeyFormats() throws {
        let withIdentity = try parseMedia("""
            #EXTM3U
            #EXT-X-TARGETDURATION:10
            #EXT-X-KEY:METHOD=SAMPLE-AES,URI="skd://fairplay",KEYFORMAT="com.apple.streamingkeydelivery"
            #EXT-X-KEY:METHOD=AES-128,URI="clear.key"
            #EXT-X-KEY:METHOD=SAMPLE-AES,URI="data:text/plain;base64,AAAA",KEYFORMAT="urn:uuid:edef8ba9-79d6-4ace-a3c8-27dcd51d21ed"
            #EXTINF:10,
            a.ts
            """)
        #expect(withIdentity.segments[0].key?.url?.lastPathComponent == "clear.key")
        #expect(!withIdentity.requiresDRM)

        let withoutIdentity = try parseMedia("""
            #EXTM3U
            #EXT-X-TARGETDURATION:10
            #EXT-X-KEY:METHOD=SAMPLE-AES,URI="skd://fairplay",KEYFORMAT="com.apple.streamingkeydelivery"
            #EXT-X-KEY:METHOD=SAMPLE-AES,URI="data:text/plain;base64,AAAA",KEYFORMAT="urn:uuid:edef8ba9-79d6-4ace-a3c8-27dcd51d21ed"
            #EXTINF:10,
            a.ts
            #EXT-X-KEY:METHOD=AES-128,URI="later.key"
            #EXTINF:10,
            b.ts
            """)
        #expect(withoutIdentity.segments[0].key?.keyFormat == "com.apple.streamingkeydelivery")
        #expect(withoutIdentity.segments[0].key?.requiresDRM == true)
        // A key tag after a segment starts a new run and replaces the key.
        #expect(withoutIdentity.segments[1].key?.url?.lastPathComponent == "later.key")
        #expect(withoutIdentity.requiresDRM)
    }

    @Test("key errors: AES-128 without URI, bad IVs, missing METHOD", arguments: [
        ("METHOD=AES-128", "METHOD=AES-128 without URI"),
        ("METHOD=AES-128,URI=\"k\",IV=0x0102", "IV must be 0x followed by 32 hexadecimal digits"),
        ("METHOD=AES-128,URI=\"k\",IV=0x000102030405060708090A0B0C0D0E0F00", "IV must be 0x followed by 32 hexadecimal digits"),
        ("METHOD=AES-128,URI=\"k\",IV=000102030405060708090A0B0C0D0E0F", "IV must be 0x followed by 32 hexadecimal digits"),
        ("METHOD=AES-128,URI=\"k\",IV=0x000102030405060708090A0B0C0D0EZZ", "IV must be 0x followed by 32 hexadecimal digits"),
        ("URI=\"k\"", "key without METHOD"),
    ])
    func keyErrors(_ attributes: String, _ reason: String) {
        let error = parseError("#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXT-X-KEY:\(attributes)\n#EXTINF:10,\na.ts\n")
        #expect(error == HLSPlaylistError(line: 3, reason: reason))
    }
}

// MARK: - Master playlists

@Suite("HLS: master playlists")
struct HLSMasterPlaylistTests {
    @Test("three variants with an audio rendition group")
    func threeVariants() throws {
        let master = try parseMaster(masterPlaylist)
        #expect(master.independentSegments)
        #expect(master.variants.count == 3)  // the I-frame stream is not a variant
        #expect(master.variants.map(\.bandwidth) == [800_000, 2_500_000, 5_000_000])
        #expect(master.variants.map(\.url.absoluteString) == [
            "https://cdn.example/a/b/low/index.m3u8",
            "https://cdn.example/a/b/mid/index.m3u8",
            "https://other.example/high/index.m3u8",
        ])

        let low = master.variants[0]
        #expect(low.averageBandwidth == 700_000)
        #expect(low.codecs == "avc1.4d401e,mp4a.40.2")
        #expect(low.resolution == HLSResolution(width: 640, height: 360))
        #expect(low.frameRate == 25)
        #expect(low.audioGroup == "aac")
        #expect(low.subtitlesGroup == nil)

        let mid = master.variants[1]
        #expect(mid.frameRate == 29.97)
        #expect(mid.closedCaptions == "cc")
        #expect(master.variants[2].closedCaptions == nil)  // CLOSED-CAPTIONS=NONE

        #expect(master.renditions.count == 5)
        let english = master.renditions[0]
        #expect(english == HLSRendition(
            type: .audio, groupID: "aac", name: "English", language: "en",
            url: url("https://cdn.example/a/b/audio/en.m3u8"), isDefault: true, autoselect: true
        ))
        #expect(!master.renditions[1].isDefault)
        #expect(master.renditions[4].type == .closedCaptions)
        #expect(master.renditions[4].url == nil)

        #expect(master.renditions(for: low).map(\.name) == ["English", "Deutsch"])
        #expect(master.renditions(for: mid).map(\.name) == ["English", "Deutsch", "English", "CC1"])
        #expect(master.renditions(for: mid).map(\.type) == [.audio, .audio, .subtitles, .closedCaptions])
        #expect(master.renditions(for: master.variants[2]).map(\.groupID) == ["aac", "aac"])

        #expect(master.sessionKeys.count == 1)
        #expect(master.sessionKeys[0].requiresDRM)
        #expect(master.sessionKeys[0].keyFormatVersions == "1")
    }

    @Test("BANDWIDTH is required")
    func missingBandwidth() {
        let error = parseError("#EXTM3U\n#EXT-X-STREAM-INF:RESOLUTION=1280x720\nv.m3u8\n")
        #expect(error == HLSPlaylistError(line: 2, reason: "EXT-X-STREAM-INF without BANDWIDTH"))
    }

    @Test("malformed variant attributes are errors", arguments: [
        "BANDWIDTH=12k", "BANDWIDTH=1000,RESOLUTION=1280", "BANDWIDTH=1000,FRAME-RATE=fast", "BANDWIDTH=-1",
    ])
    func malformedVariantAttributes(_ attributes: String) {
        #expect(parseError("#EXTM3U\n#EXT-X-STREAM-INF:\(attributes)\nv.m3u8\n")?.line == 2)
    }

    @Test("EXT-X-STREAM-INF needs a URI line")
    func streamInfWithoutURI() {
        #expect(parseError("#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1\n")
            == HLSPlaylistError(line: 2, reason: "EXT-X-STREAM-INF without a URI"))
        #expect(parseError("#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1\n#EXT-X-STREAM-INF:BANDWIDTH=2\nb.m3u8\n")?.line == 2)
    }

    @Test("a playlist with both EXT-X-STREAM-INF and EXTINF is an error")
    func mixedPlaylist() {
        let streamInfFirst = parseError("""
            #EXTM3U
            #EXT-X-TARGETDURATION:10
            #EXT-X-STREAM-INF:BANDWIDTH=1000
            v.m3u8
            #EXTINF:10,
            a.ts
            """)
        #expect(streamInfFirst?.line == 5)
        let extinfFirst = parseError("""
            #EXTM3U
            #EXT-X-TARGETDURATION:10
            #EXTINF:10,
            a.ts
            #EXT-X-STREAM-INF:BANDWIDTH=1000
            v.m3u8
            """)
        #expect(extinfFirst?.line == 5)
    }
}

// MARK: - Variant choice

@Suite("HLS: variant choice")
struct HLSVariantChoiceTests {
    /// Variants in deliberately unsorted order, with a bandwidth tie at 2.5 Mbit/s.
    static let variants = [
        variant(2_500_000, 1280, 720, "720a"),
        variant(800_000, 640, 360),
        variant(5_000_000, 1920, 1080),
        variant(2_500_000, 1024, 576, "576"),
        variant(1_200_000, 1280, 720, "720b"),
    ]

    @Test("choosing from a set of variants", arguments: [
        (HLSVariantChoice.best, 5_000_000, "1920x1080"),
        (.worst, 800_000, "640x360"),
        (.bandwidth(3_000_000), 2_500_000, "1280x720"),  // tie broken by the larger resolution
        (.bandwidth(2_500_000), 2_500_000, "1280x720"),  // the limit itself is allowed
        (.bandwidth(2_499_999), 1_200_000, "1280x720"),
        (.bandwidth(10_000_000), 5_000_000, "1920x1080"),
        (.bandwidth(1), 800_000, "640x360"),  // nothing fits: the lowest
        (.resolution(width: 1280, height: 720), 2_500_000, "1280x720"),  // highest bandwidth among matches
        (.resolution(width: 1024, height: 576), 2_500_000, "1024x576"),
    ])
    func choose(_ choice: HLSVariantChoice, _ bandwidth: Int, _ resolution: String) throws {
        let chosen = try #require(choice.choose(from: Self.variants))
        #expect(chosen.bandwidth == bandwidth)
        #expect(chosen.resolution == HLSResolution(parsing: resolution))
    }

    @Test("no choice from nothing, no inexact resolution match")
    func nothingToChoose() {
        #expect(HLSVariantChoice.best.choose(from: []) == nil)
        #expect(HLSVariantChoice.worst.choose(from: []) == nil)
        #expect(HLSVariantChoice.bandwidth(1000).choose(from: []) == nil)
        #expect(HLSVariantChoice.resolution(width: 1280, height: 721).choose(from: Self.variants) == nil)
        // Variants without a resolution still work for the other rules.
        let bare = [variant(100), variant(300), variant(200)]
        #expect(HLSVariantChoice.best.choose(from: bare)?.bandwidth == 300)
        #expect(HLSVariantChoice.bandwidth(250).choose(from: bare)?.bandwidth == 200)
    }

    @Test("worst breaks bandwidth ties by the smaller resolution")
    func worstTieBreak() {
        let tied = [variant(1000, 1920, 1080), variant(1000, 640, 360), variant(1000, 1280, 720)]
        #expect(HLSVariantChoice.worst.choose(from: tied)?.resolution == HLSResolution(width: 640, height: 360))
        #expect(HLSVariantChoice.best.choose(from: tied)?.resolution == HLSResolution(width: 1920, height: 1080))
    }

    @Test("parsing valid arguments", arguments: [
        ("best", HLSVariantChoice.best),
        ("BEST", .best),
        ("worst", .worst),
        (" Worst ", .worst),
        ("1280x720", .resolution(width: 1280, height: 720)),
        ("1920X1080", .resolution(width: 1920, height: 1080)),
        ("2500000", .bandwidth(2_500_000)),
        ("1", .bandwidth(1)),
    ])
    func parseArgument(_ argument: String, _ expected: HLSVariantChoice) {
        #expect(HLSVariantChoice(argument: argument) == expected)
    }

    @Test("rejecting invalid arguments", arguments: [
        "", "   ", "better", "-1", "0", "-2500000", "+2500000", "2.5M", "2500k", "0x0", "0x720", "1280x0",
        "1280x", "x720", "1280x720x2", "-1280x720", "1280x-720", "12 80", "99999999999999999999", "best!",
    ])
    func rejectArgument(_ argument: String) {
        #expect(HLSVariantChoice(argument: argument) == nil)
    }
}

// MARK: - Attribute lists

@Suite("HLS: attribute lists")
struct HLSAttributeListTests {
    @Test("value kinds: integer, hex, decimal, quoted and enumerated strings, resolution")
    func valueKinds() throws {
        let list = try HLSAttributeList(parsing:
            #"BANDWIDTH=1280000,IV=0x0aFF,FRAME-RATE=23.976,TIME-OFFSET=-2.5,NAME="Main",DEFAULT=YES,RESOLUTION=1920x1080"#)
        #expect(list.attributes.map(\.name) == ["BANDWIDTH", "IV", "FRAME-RATE", "TIME-OFFSET", "NAME", "DEFAULT", "RESOLUTION"])
        #expect(try list.integer("BANDWIDTH") == 1_280_000)
        #expect(try list.hexBytes("IV") == [0x0A, 0xFF])
        #expect(try list.decimal("FRAME-RATE") == 23.976)
        #expect(try list.decimal("TIME-OFFSET") == -2.5)
        #expect(list["NAME"] == "Main")
        #expect(list.isQuoted("NAME"))
        #expect(list.string("DEFAULT") == "YES")
        #expect(!list.isQuoted("DEFAULT"))
        #expect(list.flag("DEFAULT"))
        #expect(try list.resolution("RESOLUTION") == HLSResolution(width: 1920, height: 1080))
        #expect(list["MISSING"] == nil)
        #expect(try list.integer("MISSING") == nil)
        #expect(throws: HLSAttributeList.ParseError.self) { try list.integer("NAME") }
        #expect(throws: HLSAttributeList.ParseError.self) { try list.hexBytes("BANDWIDTH") }
    }

    @Test("a quoted string may contain commas and equals signs")
    func quotedComma() throws {
        let list = try HLSAttributeList(parsing: #"CODECS="avc1.4d401f,mp4a.40.2",URI="a.m3u8?x=1,y=2",BANDWIDTH=5"#)
        #expect(list["CODECS"] == "avc1.4d401f,mp4a.40.2")
        #expect(list["URI"] == "a.m3u8?x=1,y=2")
        #expect(try list.integer("BANDWIDTH") == 5)
        #expect(list.attributes.count == 3)

        let master = try parseMaster("#EXTM3U\n#EXT-X-STREAM-INF:CODECS=\"avc1.4d401f,mp4a.40.2\",BANDWIDTH=900000\nv.m3u8\n")
        #expect(master.variants[0].codecs == "avc1.4d401f,mp4a.40.2")
        #expect(master.variants[0].bandwidth == 900_000)
    }

    @Test("duplicate attribute names are an error")
    func duplicateAttributes() {
        #expect(attributeError("BANDWIDTH=1,BANDWIDTH=2") == HLSAttributeList.ParseError(reason: "duplicate attribute 'BANDWIDTH'"))
        #expect(parseError("#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1,CODECS=\"a\",CODECS=\"b\"\nv.m3u8\n")
            == HLSPlaylistError(line: 2, reason: "duplicate attribute 'CODECS'"))
    }

    @Test("malformed attribute lists are errors", arguments: [
        "BANDWIDTH", "BANDWIDTH=1,CODECS", #"NAME="unterminated"#, #"NAME="a"b"#, "=5", "A=1,,B=2", #"A=x"y"#,
    ])
    func malformed(_ text: String) {
        #expect(attributeError(text) != nil)
    }

    @Test("whitespace, trailing commas and empty lists are tolerated")
    func lenientSyntax() throws {
        let list = try HLSAttributeList(parsing: #" A = 1 , B="x" ,"#)
        #expect(list["A"] == "1")
        #expect(list["B"] == "x")
        #expect(try HLSAttributeList(parsing: "").attributes.isEmpty)
    }
}

// MARK: - Syntax, errors and URL resolution

@Suite("HLS: syntax and errors")
struct HLSSyntaxTests {
    @Test("relative URIs resolve against the (redirected) playlist URL")
    func relativeResolution() throws {
        let redirected = url("https://cdn.example/a/b/master.m3u8")
        let playlist = try parseMedia("""
            #EXTM3U
            #EXT-X-TARGETDURATION:10
            #EXT-X-KEY:METHOD=AES-128,URI="../keys/k.bin"
            #EXTINF:10,
            ../c/seg.ts
            #EXTINF:10,
            /root/seg.ts
            #EXTINF:10,
            https://elsewhere.example/seg.ts
            #EXTINF:10,
            seg.ts?token=abc
            """, url: redirected)
        #expect(playlist.segments.map(\.url.absoluteString) == [
            "https://cdn.example/a/c/seg.ts",
            "https://cdn.example/root/seg.ts",
            "https://elsewhere.example/seg.ts",
            "https://cdn.example/a/b/seg.ts?token=abc",
        ])
        #expect(playlist.segments[0].url.baseURL == nil)  // absolute, not relative-to-base
        #expect(playlist.keys.first?.url?.absoluteString == "https://cdn.example/a/keys/k.bin")
    }

    @Test("an unresolvable URI is an error on its line")
    func unresolvableURI() {
        let error = parseError("#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\nhttp://[::1\n")
        #expect(error?.line == 4)
        #expect(error?.reason.contains("http://[::1") == true)
    }

    @Test("CRLF line endings parse like LF")
    func crlf() throws {
        let crlf = ffmpegVOD.replacingOccurrences(of: "\n", with: "\r\n")
        #expect(crlf.contains("\r\n"))
        #expect(try parseMedia(crlf) == parseMedia(ffmpegVOD))
        let mixed = "#EXTM3U\r\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\r\na.ts\r\n\r\n"
        #expect(try parseMedia(mixed).segments.map(\.url.lastPathComponent) == ["a.ts"])
    }

    @Test("a byte order mark before #EXTM3U is accepted")
    func byteOrderMark() throws {
        #expect(try parseMedia("\u{FEFF}" + ffmpegVOD).segments.count == 3)
    }

    @Test("#EXTM3U must be the first non-empty line")
    func missingHeader() {
        #expect(parseError("#EXT-X-TARGETDURATION:10\n#EXTINF:10,\na.ts\n")
            == HLSPlaylistError(line: 1, reason: "playlist does not start with #EXTM3U"))
        #expect(parseError("\n\n<html>\n")?.line == 3)
        #expect(parseError("")?.reason == "empty playlist (no #EXTM3U)")
        #expect(parseError(" \n\r\n") != nil)
    }

    @Test("EXTINF without a URI at the end of the playlist")
    func extinfAtEnd() {
        let error = parseError("#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\na.ts\n#EXTINF:10,\n#EXT-X-ENDLIST\n")
        #expect(error == HLSPlaylistError(line: 5, reason: "EXTINF without a URI"))
        #expect(error?.description == "line 5: EXTINF without a URI")
    }

    @Test("EXTINF followed by another EXTINF before its URI")
    func extinfTwice() {
        let error = parseError("#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n#EXTINF:10,\na.ts\n")
        #expect(error == HLSPlaylistError(line: 3, reason: "EXTINF without a URI"))
    }

    @Test("a URI line without EXTINF is an error")
    func uriWithoutExtinf() {
        #expect(parseError("#EXTM3U\n#EXT-X-TARGETDURATION:10\na.ts\n")?.line == 3)
    }

    @Test("error descriptions name the line")
    func errorDescription() {
        #expect(HLSPlaylistError(line: 12, reason: "EXTINF without a URI").description == "line 12: EXTINF without a URI")
        #expect(String(describing: HLSPlaylistError(line: 1, reason: "x")) == "line 1: x")
    }
}

// MARK: - Sniffing

@Suite("HLS: playlist sniffing")
struct HLSSniffingTests {
    @Test("HLS content types", arguments: [
        "application/vnd.apple.mpegurl", "application/x-mpegURL", "audio/mpegurl", "audio/x-mpegurl",
        "Application/VND.Apple.MPEGURL; charset=utf-8", "  application/x-mpegurl ;foo=bar",
    ])
    func contentTypes(_ contentType: String) {
        #expect(HLSPlaylist.looksLikePlaylist(contentType: contentType, firstBytes: [UInt8]()))
    }

    @Test("other content types with non-playlist bytes", arguments: [
        "video/mp2t", "text/html", "application/octet-stream", "application/vnd.apple.mpegurl.extra", "",
    ])
    func otherContentTypes(_ contentType: String) {
        #expect(!HLSPlaylist.looksLikePlaylist(contentType: contentType, firstBytes: Array("<html>".utf8)))
    }

    @Test("sniffing the first bytes")
    func firstBytes() {
        #expect(HLSPlaylist.looksLikePlaylist(contentType: nil, firstBytes: Array("#EXTM3U\n#EXT-X-VERSION:3".utf8)))
        #expect(HLSPlaylist.looksLikePlaylist(contentType: "text/plain", firstBytes: Array("#EXTM3U".utf8)))
        #expect(HLSPlaylist.looksLikePlaylist(contentType: nil, firstBytes: [0xEF, 0xBB, 0xBF] + Array("#EXTM3U\r\n".utf8)))
        #expect(HLSPlaylist.looksLikePlaylist(contentType: nil, firstBytes: Data("#EXTM3U".utf8)))
        #expect(HLSPlaylist.looksLikePlaylist(contentType: nil, firstBytes: Array("#EXTM3U".utf8)[...]))
        #expect(!HLSPlaylist.looksLikePlaylist(contentType: nil, firstBytes: Array("#EXTM3".utf8)))
        #expect(!HLSPlaylist.looksLikePlaylist(contentType: nil, firstBytes: Array(" #EXTM3U".utf8)))
        #expect(!HLSPlaylist.looksLikePlaylist(contentType: nil, firstBytes: Array("#extm3u".utf8)))
        #expect(!HLSPlaylist.looksLikePlaylist(contentType: nil, firstBytes: [UInt8]()))
        #expect(!HLSPlaylist.looksLikePlaylist(contentType: nil, firstBytes: [0x47, 0x40, 0x00, 0x10]))  // a TS packet
    }
}

// MARK: - Robustness

/// A small deterministic PRNG (SplitMix64) so mutation runs are reproducible.
private struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

@Suite("HLS: robustness")
struct HLSRobustnessTests {
    /// Fragments that are likely to hit interesting parser paths when spliced in.
    static let fragments = [
        "\n", "\r\n", ",", "\"", "=", "@", ":", "#", "-", ".", "0x", "x", "0", "9", " ", "é", "\u{FEFF}", "\u{0}",
        "#EXTINF:", "#EXTINF:-1,", "#EXT-X-BYTERANGE:", "#EXT-X-BYTERANGE:9223372036854775807@9223372036854775807",
        "#EXT-X-KEY:METHOD=AES-128", "#EXT-X-KEY:METHOD=NONE", "#EXT-X-MAP:URI=\"i.mp4\",BYTERANGE=\"5\"",
        "#EXT-X-STREAM-INF:BANDWIDTH=1", "#EXT-X-MEDIA-SEQUENCE:9223372036854775807",
        "#EXT-X-DISCONTINUITY-SEQUENCE:9223372036854775807", "#EXT-X-DISCONTINUITY", "#EXT-X-TARGETDURATION:1e400",
        "99999999999999999999999", "http://[::1", "../", "IV=0x", "RESOLUTION=9999999999x9999999999",
    ]

    /// Applies one random mutation to `scalars`.
    private static func mutate(_ scalars: inout [Unicode.Scalar], using rng: inout SplitMix64) {
        let position = scalars.isEmpty ? 0 : Int.random(in: 0...scalars.count, using: &rng)
        switch Int.random(in: 0..<5, using: &rng) {
        case 0 where !scalars.isEmpty:  // delete a short run
            let end = min(scalars.count, position + Int.random(in: 1...8, using: &rng))
            scalars.removeSubrange(min(position, end)..<end)
        case 1:  // insert a fragment
            let fragment = fragments.randomElement(using: &rng)!
            scalars.insert(contentsOf: fragment.unicodeScalars, at: position)
        case 2 where !scalars.isEmpty:  // duplicate a chunk elsewhere
            let start = Int.random(in: 0..<scalars.count, using: &rng)
            let chunk = scalars[start..<min(scalars.count, start + Int.random(in: 1...40, using: &rng))]
            scalars.insert(contentsOf: Array(chunk), at: position)
        case 3:  // truncate
            scalars.removeSubrange(position...)
        default:  // replace a scalar with a random ASCII one
            if position < scalars.count {
                scalars[position] = Unicode.Scalar(UInt8.random(in: 0...127, using: &rng))
            }
        }
    }

    @Test("random mutations of valid playlists never crash", arguments: [0, 1, 2])
    func mutations(_ seedIndex: Int) {
        let seeds = [
            ffmpegVOD,
            masterPlaylist,
            """
            #EXTM3U
            #EXT-X-TARGETDURATION:6
            #EXT-X-MEDIA-SEQUENCE:7
            #EXT-X-MAP:URI="init.mp4",BYTERANGE="720@0"
            #EXT-X-KEY:METHOD=AES-128,URI="k",IV=0x000102030405060708090A0B0C0D0E0F
            #EXTINF:6,
            #EXT-X-BYTERANGE:1000@720
            all.mp4
            #EXT-X-DISCONTINUITY
            #EXTINF:6,
            #EXT-X-BYTERANGE:1000
            all.mp4
            #EXT-X-KEY:METHOD=NONE
            #EXTINF:6,
            other.mp4
            """,
        ]
        var rng = SplitMix64(state: UInt64(seedIndex) &* 0x1234_5678_9ABC_DEF1 &+ 42)
        var parsed = 0
        for _ in 0..<3_000 {
            var scalars = Array(seeds[seedIndex].unicodeScalars)
            for _ in 0..<Int.random(in: 1...6, using: &rng) {
                Self.mutate(&scalars, using: &rng)
            }
            var text = ""
            text.unicodeScalars.append(contentsOf: scalars)
            do throws(HLSPlaylistError) {
                let playlist = try HLSPlaylist.parse(text, url: playlistURL)
                parsed += 1
                if case .media(let media) = playlist {
                    // Invariants of every successfully parsed media playlist.
                    #expect(media.segments.indices.allSatisfy { media.segments[$0].sequenceNumber == media.mediaSequence + $0 })
                    #expect(media.segments.allSatisfy { $0.duration >= 0 && $0.duration.isFinite })
                    #expect(media.segments.allSatisfy { ($0.byteRange?.length ?? 0) >= 0 })
                    _ = (media.totalDuration, media.keys, media.requiresDRM)
                }
            } catch {
                #expect(error.line >= 1)
                #expect(!error.reason.isEmpty)
            }
        }
        // Mutations are small, so a fair share of them still parse.
        #expect(parsed > 100)
    }
}
