import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// ``HLSPlan``: what a media playlist asks for, without sockets.
@Suite("HLS: plans")
struct HLSPlanTests {
    static let base = URL(string: "https://cdn.example/show/index.m3u8")!

    static func media(_ body: String, endList: Bool = true) throws -> HLSMediaPlaylist {
        let text = "#EXTM3U\n#EXT-X-TARGETDURATION:4\n" + body + (endList ? "#EXT-X-ENDLIST\n" : "")
        guard case .media(let media) = try HLSPlaylist.parse(text, url: base) else {
            Issue.record("not a media playlist")
            throw CancellationError()
        }
        return media
    }

    static func segments(_ range: Range<Int>, ext: String = "ts") -> String {
        range.map { "#EXTINF:4.0,\nseg\($0).\(ext)\n" }.joined()
    }

    @Test(arguments: [
        // (segments, expected container, extension)
        ("#EXTINF:4,\na.ts\n", HLSPlan.Container.transportStream, "ts"),
        ("#EXTINF:4,\na\n", .transportStream, "ts"),
        ("#EXT-X-MAP:URI=\"init.mp4\"\n#EXTINF:4,\na.m4s\n", .fragmentedMP4, "mp4"),
        ("#EXTINF:4,\na.aac\n", .packed, "aac"),
        ("#EXTINF:4,\na.vtt\n", .webVTT, "vtt"),
        ("#EXTINF:4,\na.webvtt\n", .webVTT, "vtt"),
    ])
    func containerAndExtension(body: String, container: HLSPlan.Container, ext: String) throws {
        let plan = try HLSPlan(Self.media(body), url: Self.base)
        #expect(plan.container == container && plan.fileExtension == ext)
    }

    @Test func byteRangesOfOneURLAreOneResource() throws {
        let plan = try HLSPlan(
            Self.media("#EXTINF:4,\n#EXT-X-BYTERANGE:100@0\nall.ts\n#EXTINF:4,\n#EXT-X-BYTERANGE:50\nall.ts\n#EXTINF:4,\nother.ts\n"),
            url: Self.base)
        #expect(plan.resources.map(\.url.lastPathComponent) == ["all.ts", "other.ts"])
        #expect(plan.parts.map(\.resource) == [0, 0, 1])
        #expect(plan.parts.map(\.range) == [HLSByteRange(offset: 0, length: 100), HLSByteRange(offset: 100, length: 50), nil])
        #expect(plan.segmentCount == 3 && plan.duration == 12)
        // Named by the URL's digest, with its extension: the same name in every run.
        #expect(plan.resources[0].fileName.hasSuffix(".ts") && plan.resources[0].fileName.count == 23)
        #expect(try HLSPlan(Self.media("#EXTINF:4,\nall.ts\n"), url: Self.base).resources[0] == plan.resources[0])
    }

    @Test func anInitSectionComesFirstAndWhereTheMapChanges() throws {
        let plan = try HLSPlan(
            Self.media(
                "#EXT-X-MAP:URI=\"init1.mp4\"\n#EXTINF:4,\na.m4s\n#EXTINF:4,\nb.m4s\n#EXT-X-DISCONTINUITY\n"
                    + "#EXT-X-MAP:URI=\"init2.mp4\"\n#EXTINF:4,\nc.m4s\n"), url: Self.base)
        let kinds = plan.parts.map { part -> String in
            switch part.kind {
            case .initialization: "init:" + plan.resources[part.resource].url.lastPathComponent
            case .segment(let sequence, _): "seg\(sequence)"
            }
        }
        #expect(kinds == ["init:init1.mp4", "seg0", "seg1", "init:init2.mp4", "seg2"])
    }

    @Test func keysAndIVs() throws {
        let plan = try HLSPlan(
            Self.media(
                "#EXT-X-MEDIA-SEQUENCE:7\n#EXT-X-KEY:METHOD=AES-128,URI=\"a.key\",IV=0x000102030405060708090a0b0c0d0e0f\n"
                    + "#EXTINF:4,\ns7.ts\n#EXT-X-KEY:METHOD=AES-128,URI=\"b.key\"\n#EXTINF:4,\ns8.ts\n"
                    + "#EXT-X-KEY:METHOD=NONE\n#EXTINF:4,\ns9.ts\n"), url: Self.base)
        #expect(plan.parts.map { $0.key?.url?.lastPathComponent } == ["a.key", "b.key", nil])
        #expect(plan.parts[0].iv == Array(0..<16))
        #expect(plan.parts[1].iv == [UInt8](repeating: 0, count: 15) + [8])
        #expect(plan.parts[2].iv == nil)
        #expect(plan.keys.map { $0.url?.lastPathComponent } == ["a.key", "b.key"])
    }

    @Test(arguments: [
        "#EXT-X-KEY:METHOD=SAMPLE-AES,URI=\"k\"",
        "#EXT-X-KEY:METHOD=SAMPLE-AES-CTR,URI=\"k\"",
        "#EXT-X-KEY:METHOD=AES-128,URI=\"skd://k\",KEYFORMAT=\"com.apple.streamingkeydelivery\"",
    ])
    func drmIsRefused(keyLine: String) throws {
        let media = try Self.media(keyLine + "\n" + Self.segments(0..<2))
        #expect {
            _ = try HLSPlan(media, url: Self.base)
        } throws: { error in
            (error as? DownloadError)?.code == .drmProtected
        }
    }

    @Test func aLivePlaylistGrowsAndCountsWhatItMissed() throws {
        var plan = try HLSPlan(Self.media(Self.segments(0..<3), endList: false), url: Self.base)
        #expect(!plan.isComplete && plan.segmentCount == 3 && plan.lastSequence == 2)
        // The same window again adds nothing.
        #expect(try plan.append(Self.media(Self.segments(0..<3), endList: false), url: Self.base) == 0)
        // The window slid by two: 3 and 4 are new.
        #expect(try plan.append(Self.media("#EXT-X-MEDIA-SEQUENCE:2\n" + Self.segments(2..<5), endList: false), url: Self.base) == 2)
        // It slid past 5 and 6 before it was read: they are missed, 7 and 8 added, and it ended.
        let later = try Self.media("#EXT-X-MEDIA-SEQUENCE:7\n" + Self.segments(7..<9))
        #expect(try plan.append(later, url: Self.base) == 2)
        #expect(plan.missedSegments == 2 && plan.isComplete && plan.segmentCount == 7)
        #expect(plan.parts.compactMap { if case .segment(let s, _) = $0.kind { s } else { nil } } == [0, 1, 2, 3, 4, 7, 8])
    }

    @Test(arguments: [(1.0, 1), (4.0, 1), (4.5, 2), (12.0, 3), (100.0, 5)])
    func aLimitCutsAfterTheSegmentThatReachesIt(limit: Double, segments: Int) throws {
        let plan = try HLSPlan(Self.media(Self.segments(0..<5)), url: Self.base, limit: limit)
        #expect(plan.segmentCount == segments)
        #expect(plan.reachedLimit == (segments < 5 || limit <= 20))
    }

    @Test func aFinishedPlaylistWithoutSegmentsIsInvalid() throws {
        #expect {
            _ = try HLSPlan(Self.media(""), url: Self.base)
        } throws: { error in
            (error as? DownloadError)?.code == .invalidManifest
        }
        // A live one may be empty until its first refresh.
        let live = try HLSPlan(Self.media("", endList: false), url: Self.base)
        #expect(live.segmentCount == 0 && !live.isComplete)
    }

    @Test func aPathGetsItsContainersExtensionUnlessItHasIt() throws {
        let ts = try HLSPlan(Self.media(Self.segments(0..<1)), url: Self.base)
        #expect(HLSDownloader.path("/v/show", for: ts) == "/v/show.ts")
        #expect(HLSDownloader.path("/v/show.TS", for: ts) == "/v/show.TS")
        #expect(HLSDownloader.path("/v/show.mp4", for: ts) == "/v/show.mp4.ts")
    }

    @Test(arguments: [
        (HLSPlan.Container.transportStream, [UInt8]([0x47, 0, 0]), true),
        (.transportStream, [0x00, 0x47], false),
        (.fragmentedMP4, [0, 0, 0, 24] + Array("moof".utf8), true),
        (.fragmentedMP4, [0, 0, 0, 4] + Array("moof".utf8), false),
        (.fragmentedMP4, [0, 0, 0, 24, 0, 1, 2, 3], false),
        (.packed, [1], true),
    ])
    func decryptedPartsAreCheckedByContainer(container: HLSPlan.Container, bytes: [UInt8], valid: Bool) {
        let part = HLSPlan.Part(kind: .segment(sequence: 0, duration: 1), resource: 0)
        #expect((HLSAssembly.check(Data(bytes), part: part, container: container) == nil) == valid)
        #expect(HLSAssembly.check(Data(), part: part, container: container) != nil)
    }
}

/// Segments behind faults of the fault server: each is retried like any download.
@Suite("HLS: segments through faults")
struct HLSFaultTests {
    @Test func failedAndCutSegmentsAreRetriedAndTheFileIsWhole() async throws {
        try await Fixture.with { f in
            // Transport stream packets in name only: what the file is checked for is a
            // sync byte at each segment's start, and the bytes are compared whole.
            let segments = (0..<4).map { index in [0x47] + FaultServer.randomBytes(count: 20_000 + index, seed: UInt64(index + 1)) }
            for (index, bytes) in segments.enumerated() { f.server.setFile("seg\(index).ts", bytes) }
            let uris = [
                "seg0.ts?fail=503&fail_times=1",  // answered 503 once
                "seg1.ts?reset_after=5000&reset_times=1",  // cut after 5,000 bytes once
                "seg2.ts",
                "seg3.ts",
            ]
            let playlist = "#EXTM3U\n#EXT-X-TARGETDURATION:2\n" + uris.map { "#EXTINF:2.0,\n\($0)\n" }.joined() + "#EXT-X-ENDLIST\n"
            f.server.setFile("show.m3u8", Array(playlist.utf8))
            let summary = try await HLSDownloader(manager: f.manager).download(
                from: f.server.url("/files/show.m3u8"), to: f.directory.appendingPathComponent("show"))
            #expect(summary.main.segments == 4 && summary.main.duration == 8)
            #expect(f.contents("show.ts") == segments.flatMap { $0 })
            #expect(f.server.requests(path: "/files/seg0.ts").count == 2)
            // The cut one was asked for again (from its start or where it was cut, as the
            // manager's checkpoints had it).
            #expect(f.server.requests(path: "/files/seg1.ts").count == 2)
            #expect(f.listing() == ["show.ts"])
        }
    }
}

/// ``HLSTally``: progress counted as the plan grows and resources arrive.
@Suite("HLS: progress tally")
struct HLSTallyTests {
    @Test func segmentsAndSecondsFollowThePlanAndTheResources() throws {
        // Two byte ranges of one URL (resource 0), then a segment of its own (resource 1).
        var plan = try HLSPlan(
            HLSPlanTests.media(
                "#EXTINF:2,\n#EXT-X-BYTERANGE:10@0\nall.ts\n#EXTINF:3,\n#EXT-X-BYTERANGE:10\nall.ts\n#EXTINF:4,\nb.ts\n",
                endList: false), url: HLSPlanTests.base)
        var progress = HLSProgress(file: URL(fileURLWithPath: "/x.ts"), segments: 0, duration: 0, isLive: true)
        var tally = HLSTally()
        tally.count(plan, into: &progress)
        #expect(progress.segments == 3 && progress.duration == 9 && progress.segmentsCompleted == 0)
        tally.fetched(0, into: &progress)
        #expect(progress.segmentsCompleted == 2 && progress.durationCompleted == 5)
        // Fetched twice counts once.
        tally.fetched(0, into: &progress)
        #expect(progress.segmentsCompleted == 2)
        // The live playlist grows by a segment of a resource not fetched yet.
        try plan.append(HLSPlanTests.media("#EXT-X-MEDIA-SEQUENCE:3\n#EXTINF:5,\nc.ts\n", endList: false), url: HLSPlanTests.base)
        tally.count(plan, into: &progress)
        #expect(progress.segments == 4 && progress.duration == 14 && progress.segmentsCompleted == 2)
        tally.fetched(2, into: &progress)
        tally.fetched(1, into: &progress)
        #expect(progress.segmentsCompleted == 4 && progress.durationCompleted == 14)
    }
}
