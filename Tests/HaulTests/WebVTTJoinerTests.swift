import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// ``WebVTTJoiner``: a subtitle rendition's WebVTT segments joined into one WebVTT file.
@Suite("HLS: WebVTT subtitles")
struct WebVTTJoinerTests {
    static func join(_ segments: [String]) throws -> String {
        var joiner = WebVTTJoiner()
        var out = Data()
        for segment in segments { out += try joiner.append(Data(segment.utf8)) }
        return String(decoding: out, as: UTF8.self)
    }

    @Test func theFirstHeaderThenEveryCueOnce() throws {
        let map = "X-TIMESTAMP-MAP=MPEGTS:900000,LOCAL:00:00:00.000"
        let joined = try Self.join([
            "\u{FEFF}WEBVTT\r\n\(map)\r\n\r\nSTYLE\r\n::cue { color: yellow }\r\n\r\n1\r\n00:00:01.000 --> 00:00:02.500\r\nOne\r\n\r\n00:00:03.000 --> 00:00:06.000 align:start\r\nSpans\r\n",
            // The spanning cue again, then a new one; a style block after cues is dropped.
            "WEBVTT\n\(map)\n\n00:00:03.000 --> 00:00:06.000 align:start\nSpans\n\nSTYLE\n::cue { color: red }\n\n05:07.000 --> 05:08.000\nThree\n",
            // Only a header: nothing.
            "WEBVTT\n\(map)\n",
        ])
        #expect(
            joined == """
                WEBVTT
                \(map)

                STYLE
                ::cue { color: yellow }

                1
                00:00:01.000 --> 00:00:02.500
                One

                00:00:03.000 --> 00:00:06.000 align:start
                Spans

                05:07.000 --> 05:08.000
                Three


                """)
    }

    @Test func aSegmentWithAnotherMapIsMovedToTheFirstsTimeline() throws {
        // The second segment's cue time 0 is 10 s of media later than the first's.
        let joined = try Self.join([
            "WEBVTT\nX-TIMESTAMP-MAP=LOCAL:00:00:00.000,MPEGTS:90000\n\n00:00:01.000 --> 00:00:02.000\nA\n",
            "WEBVTT\nX-TIMESTAMP-MAP=MPEGTS:990000,LOCAL:00:00:00.000\n\n00:00:01.000 --> 00:00:02.000 line:0\nB\n",
        ])
        #expect(joined.contains("00:00:11.000 --> 00:00:12.000 line:0\nB"), "\(joined)")
        #expect(joined.contains("00:00:01.000 --> 00:00:02.000\nA"))
    }

    @Test(arguments: [
        ("not subtitles", "no WEBVTT header"),
        ("WEBVTTX\n\n00:01.000 --> 00:02.000\nA\n", "no WEBVTT header"),
        ("WEBVTT\nX-TIMESTAMP-MAP=MPEGTS:x\n\n", "X-TIMESTAMP-MAP"),
    ])
    func whatIsNotWebVTTIsRefused(segment: String, problem: String) {
        var joiner = WebVTTJoiner()
        let error = #expect(throws: WebVTTJoiner.Problem.self) { _ = try joiner.append(Data(segment.utf8)) }
        #expect(error?.description.contains(problem) == true, "\(String(describing: error))")
    }

    @Test(arguments: [
        ("00:00:01.000", 1.0), ("01:02:03.004", 3723.004), ("59:59.999", 3599.999), ("1:00.000", 60.0),
        ("00:61.000", nil), ("00:01", nil), ("a:00.000", nil), ("00:00:00:01.000", nil),
    ] as [(String, Double?)])
    func timestamps(text: String, seconds: Double?) {
        let read = WebVTTJoiner.timestamp(text)
        #expect(read.map { abs($0 - (seconds ?? -1)) < 0.0005 } ?? (seconds == nil))
        if let seconds { #expect(WebVTTJoiner.timestamp(WebVTTJoiner.text(ofTimestamp: seconds)).map { abs($0 - seconds) < 0.0005 } == true) }
    }

    /// A master playlist whose variant has a subtitle rendition, on the fault server: the
    /// rendition's segments become `show.subtitles-fr.vtt` beside the stream.
    @Test func aSubtitleRenditionIsSavedBesideTheStream() async throws {
        try await Fixture.with { f in
            let video = HLSJobTests.serveStream(f.server, name: "v", count: 2)
            let cues = [
                "WEBVTT\nX-TIMESTAMP-MAP=MPEGTS:126000,LOCAL:00:00:00.000\n\n00:00:00.500 --> 00:00:02.500\nBonjour\n",
                "WEBVTT\nX-TIMESTAMP-MAP=MPEGTS:126000,LOCAL:00:00:00.000\n\n00:00:00.500 --> 00:00:02.500\nBonjour\n\n00:00:03.000 --> 00:00:03.900\nAu revoir\n",
            ]
            for (index, text) in cues.enumerated() { f.server.setFile("fr-\(index).webvtt", Array(text.utf8)) }
            f.server.setFile(
                "fr.m3u8",
                Array("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2.0,\nfr-0.webvtt\n#EXTINF:2.0,\nfr-1.webvtt\n#EXT-X-ENDLIST\n".utf8))
            f.server.setFile(
                "master.m3u8",
                Array(
                    """
                    #EXTM3U
                    #EXT-X-MEDIA:TYPE=SUBTITLES,GROUP-ID="subs",NAME="Français",LANGUAGE="fr",URI="fr.m3u8"
                    #EXT-X-MEDIA:TYPE=CLOSED-CAPTIONS,GROUP-ID="cc",NAME="CC",INSTREAM-ID="CC1"
                    #EXT-X-STREAM-INF:BANDWIDTH=100000,SUBTITLES="subs",CLOSED-CAPTIONS="cc"
                    v.m3u8

                    """.utf8))
            let summary = try await HLSDownloader(manager: f.manager).download(
                from: f.server.url("/files/master.m3u8"), to: f.directory.appendingPathComponent("show"),
                options: HLSOptions(renditions: true))
            #expect(summary.outputs.map(\.file.lastPathComponent) == ["show.ts", "show.subtitles-fr.vtt"])
            #expect(f.contents("show.ts") == video)
            let subtitles = try String(contentsOf: f.file("show.subtitles-fr.vtt"), encoding: .utf8)
            #expect(
                subtitles
                    == "WEBVTT\nX-TIMESTAMP-MAP=MPEGTS:126000,LOCAL:00:00:00.000\n\n00:00:00.500 --> 00:00:02.500\nBonjour\n\n00:00:03.000 --> 00:00:03.900\nAu revoir\n\n"
            )
            #expect(summary.outputs[1].segments == 2 && summary.outputs[1].duration == 4)
            #expect(f.listing() == ["show.subtitles-fr.vtt", "show.ts"])
        }
    }
}
