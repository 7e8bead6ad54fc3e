import Crypto
import Foundation
import HaulTestSupport
import Testing
import _CryptoExtras

@testable import Haul

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Debian's `ffmpeg`, which makes the streams these tests download and is the reference
/// they are compared with.
enum FFmpeg {
    static let executable: String? = ["/usr/bin/ffmpeg", "/usr/local/bin/ffmpeg"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    static var isAvailable: Bool { executable != nil }

    /// Runs ffmpeg with `arguments` in `directory`; fails the test with its output if it fails.
    static func run(_ arguments: [String], in directory: URL) async throws {
        let executable = try #require(executable)
        var environment = ProcessInfo.processInfo.environment
        environment["PWD"] = directory.path
        let run = try await ChildProcess.run(
            "/bin/sh", arguments: ["-c", "cd \"$0\" && exec \"$@\"", directory.path, executable, "-nostdin", "-v", "error", "-y"] + arguments,
            environment: environment, timeLimit: .seconds(120), mergingErrors: true)
        try #require(run.termination.code == 0, "ffmpeg \(arguments.joined(separator: " ")): \(String(decoding: run.output, as: UTF8.self))")
    }

    /// The decoded frames of `source` (a file or a URL), as `stream hash` lines of
    /// `ffmpeg -f framemd5`: what two files hold for a player, whatever their packaging
    /// and timestamps.
    static func frames(of source: String, in directory: URL) async throws -> [String] {
        let output = directory.appendingPathComponent("frames-\(UUID().uuidString).md5")
        defer { try? FileManager.default.removeItem(at: output) }
        try await run(["-i", source, "-f", "framemd5", output.path], in: directory)
        return try String(contentsOf: output, encoding: .utf8).split(separator: "\n").compactMap { line in
            guard !line.hasPrefix("#") else { return nil }
            let fields = line.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            return fields.count >= 6 ? "\(fields[0]) \(fields[5])" : nil
        }
    }

    /// A test picture and tone of `seconds`, cut into one-second segments of a VOD
    /// playlist `index.m3u8` in `directory` (MPEG-TS unless `extra` says otherwise).
    static func makeStream(in directory: URL, seconds: Int = 6, size: String = "160x120", extra: [String] = []) async throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try await run(
            [
                "-f", "lavfi", "-i", "testsrc=size=\(size):rate=25", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100",
                "-t", "\(seconds)", "-c:v", "libx264", "-preset", "ultrafast", "-g", "25", "-c:a", "aac", "-f", "hls",
                "-hls_time", "1", "-hls_playlist_type", "vod",
            ] + extra + ["index.m3u8"], in: directory)
    }
}

/// Streams made with ffmpeg and served by nginx, downloaded by ``HLSDownloader`` and by
/// `haul get`, and compared with ffmpeg's own download of the same playlist
/// (`ffmpeg -i URL -c copy`) frame by decoded frame.
@Suite(
    "HLS: streams from ffmpeg on nginx",
    .enabled(if: NginxServer.isAvailable, "nginx is not installed: run .ci/run or apt-get install nginx"),
    .enabled(if: FFmpeg.isAvailable, "ffmpeg is not installed: run .ci/run or apt-get install ffmpeg"),
    .timeLimit(.minutes(3)))
struct HLSStreamTests {
    /// A fresh directory, nginx serving its `root`, and a manager, for `body`.
    static func with(
        _ body: (NginxServer, DownloadManager, URL) async throws -> Void
    ) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-hls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = Fixture.testConfiguration()
        configuration.segmentedConnections = 4
        let manager = DownloadManager(
            configuration: configuration, eventLoopGroup: TestResources.group, threadPool: TestResources.pool)
        do {
            try await NginxServer.with { nginx in try await body(nginx, manager, directory) }
        } catch {
            await manager.shutdown()
            throw error
        }
        await manager.shutdown()
    }

    /// Expects `file` to hold the same decoded frames as ffmpeg's download of `url`.
    static func expectSameFrames(_ file: URL, as url: URL, extension ext: String, in directory: URL) async throws {
        let reference = directory.appendingPathComponent("reference-\(UUID().uuidString).\(ext)")
        try await FFmpeg.run(["-i", url.absoluteString, "-c", "copy", reference.path], in: directory)
        let expected = try await FFmpeg.frames(of: reference.path, in: directory)
        let got = try await FFmpeg.frames(of: file.path, in: directory)
        #expect(expected.count >= 50)
        #expect(got == expected)
    }

    /// The paths nginx logged, in order (after a request made once `body`'s have ended).
    static func loggedPaths(_ nginx: NginxServer, manager: DownloadManager) async throws -> [String] {
        _ = try await CacheInteropTests.entries(nginx, "", manager: manager)
        return try nginx.accessLog().filter { $0.status < 400 }.map(\.path)
    }

    @Test func aTransportStreamIsTheSameFramesAsFFmpegsDownload() async throws {
        try await Self.with { nginx, manager, directory in
            try await FFmpeg.makeStream(in: nginx.root.appendingPathComponent("vod"))
            let url = nginx.url("/vod/index.m3u8")
            let events = Locked<[HLSEvent]>([])
            let summary = try await HLSDownloader(manager: manager).download(
                from: url, to: directory.appendingPathComponent("show")) { event in events.withLock { $0.append(event) } }
            let file = directory.appendingPathComponent("show.ts")
            #expect(summary.main.file == file)
            #expect(summary.main.segments == 6 && abs(summary.main.duration - 6) < 0.01)
            let bytes = try Data(contentsOf: file)
            #expect(Int64(bytes.count) == summary.main.byteCount && bytes.first == 0x47)
            #expect(!FileManager.default.fileExists(atPath: file.path + ".haul-hls"))
            // Each segment was fetched once.
            let segments = try await Self.loggedPaths(nginx, manager: manager).filter { $0.hasSuffix(".ts") }
            #expect(segments.count == 6 && Set(segments).count == 6)
            try await Self.expectSameFrames(file, as: url, extension: "ts", in: directory)
            // Progress counted segments and seconds up to the whole playlist.
            let last = try #require(events.withLock { $0 }.compactMap { event -> HLSProgress? in
                if case .progress(let progress) = event { progress } else { nil }
            }.last)
            #expect(last.segmentsCompleted == 6 && last.segments == 6 && abs(last.durationCompleted - 6) < 0.01)
        }
    }

    @Test func fragmentedMP4SegmentsFollowTheirInitSection() async throws {
        try await Self.with { nginx, manager, directory in
            try await FFmpeg.makeStream(
                in: nginx.root.appendingPathComponent("fmp4"),
                extra: ["-hls_segment_type", "fmp4", "-hls_fmp4_init_filename", "init.mp4"])
            let url = nginx.url("/fmp4/index.m3u8")
            let summary = try await HLSDownloader(manager: manager).download(
                from: url, to: directory.appendingPathComponent("show"))
            #expect(summary.main.file.lastPathComponent == "show.mp4")
            let bytes = try Data(contentsOf: summary.main.file)
            #expect(bytes[4..<8] == Data("ftyp".utf8))
            try await Self.expectSameFrames(summary.main.file, as: url, extension: "mp4", in: directory)
        }
    }

    @Test func byteRangesOfOneFileFetchTheFileOnce() async throws {
        try await Self.with { nginx, manager, directory in
            try await FFmpeg.makeStream(in: nginx.root.appendingPathComponent("single"), extra: ["-hls_flags", "single_file"])
            let url = nginx.url("/single/index.m3u8")
            let text = try String(contentsOf: nginx.root.appendingPathComponent("single/index.m3u8"), encoding: .utf8)
            #expect(text.contains("#EXT-X-BYTERANGE"))
            let summary = try await HLSDownloader(manager: manager).download(
                from: url, to: directory.appendingPathComponent("show.ts"))
            #expect(summary.main.file.lastPathComponent == "show.ts" && summary.main.segments == 6)
            let fetched = try await Self.loggedPaths(nginx, manager: manager).filter { $0 == "/single/index.ts" }
            #expect(fetched.count == 1)
            try await Self.expectSameFrames(summary.main.file, as: url, extension: "ts", in: directory)
        }
    }

    @Test func aes128FromFFmpegIsDecrypted() async throws {
        try await Self.with { nginx, manager, directory in
            let folder = nginx.root.appendingPathComponent("aes")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            try Data((0..<16).map { UInt8($0 * 7 + 3) }).write(to: folder.appendingPathComponent("key.bin"))
            try "key.bin\n\(folder.appendingPathComponent("key.bin").path)\n".write(
                to: folder.appendingPathComponent("keyinfo"), atomically: true, encoding: .utf8)
            try await FFmpeg.makeStream(in: folder, extra: ["-hls_key_info_file", "keyinfo"])
            let url = nginx.url("/aes/index.m3u8")
            #expect(try String(contentsOf: folder.appendingPathComponent("index.m3u8"), encoding: .utf8).contains("METHOD=AES-128"))
            let summary = try await HLSDownloader(manager: manager).download(
                from: url, to: directory.appendingPathComponent("show"))
            try await Self.expectSameFrames(summary.main.file, as: url, extension: "ts", in: directory)
        }
    }

    @Test func keysRotateWithGivenAndDerivedIVs() async throws {
        try await Self.with { nginx, manager, directory in
            // Plain segments, encrypted here: the first three with key A and an explicit IV,
            // the rest with key B and the IV of their media sequence number (from 7).
            let folder = nginx.root.appendingPathComponent("rotate")
            try await FFmpeg.makeStream(in: folder)
            let keyA = (0..<16).map { UInt8($0) }
            let keyB = (0..<16).map { UInt8(255 - $0) }
            let explicitIV = (0..<16).map { UInt8(0xA0 + $0) }
            try Data(keyA).write(to: folder.appendingPathComponent("a.key"))
            try Data(keyB).write(to: folder.appendingPathComponent("b.key"))
            var playlist = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:1\n#EXT-X-MEDIA-SEQUENCE:7\n#EXT-X-PLAYLIST-TYPE:VOD\n"
            for index in 0..<6 {
                let name = String(format: "index%d.ts", index)
                let plain = try Data(contentsOf: folder.appendingPathComponent(name))
                let key = index < 3 ? keyA : keyB
                var iv = explicitIV
                if index < 3 {
                    if index == 0 { playlist += "#EXT-X-KEY:METHOD=AES-128,URI=\"a.key\",IV=0x\(Hex.lowercase(explicitIV))\n" }
                } else {
                    if index == 3 { playlist += "#EXT-X-KEY:METHOD=AES-128,URI=\"b.key\"\n" }
                    iv = [UInt8](repeating: 0, count: 15) + [UInt8(7 + index)]
                }
                let sealed = try AES._CBC.encrypt(plain, using: SymmetricKey(data: key), iv: AES._CBC.IV(ivBytes: iv))
                try sealed.write(to: folder.appendingPathComponent("enc\(index).ts"))
                playlist += "#EXTINF:1.000000,\nenc\(index).ts\n"
            }
            playlist += "#EXT-X-ENDLIST\n"
            try playlist.write(to: folder.appendingPathComponent("enc.m3u8"), atomically: true, encoding: .utf8)
            let summary = try await HLSDownloader(manager: manager).download(
                from: nginx.url("/rotate/enc.m3u8"), to: directory.appendingPathComponent("show"))
            let keys = try await Self.loggedPaths(nginx, manager: manager).filter { $0.hasSuffix(".key") }
            #expect(keys.sorted() == ["/rotate/a.key", "/rotate/b.key"])
            // The same frames as the plain stream, and as ffmpeg's download of the encrypted one.
            let plainFrames = try await FFmpeg.frames(of: nginx.url("/rotate/index.m3u8").absoluteString, in: directory)
            #expect(try await FFmpeg.frames(of: summary.main.file.path, in: directory) == plainFrames)
            try await Self.expectSameFrames(summary.main.file, as: nginx.url("/rotate/enc.m3u8"), extension: "ts", in: directory)
        }
    }

    @Test func aWrongKeyFailsAndLeavesNoFile() async throws {
        try await Self.with { nginx, manager, directory in
            let folder = nginx.root.appendingPathComponent("wrong")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            try Data(repeating: 1, count: 16).write(to: folder.appendingPathComponent("key.bin"))
            try "key.bin\n\(folder.appendingPathComponent("key.bin").path)\n".write(
                to: folder.appendingPathComponent("keyinfo"), atomically: true, encoding: .utf8)
            try await FFmpeg.makeStream(in: folder, extra: ["-hls_key_info_file", "keyinfo"])
            // The server now hands out another key.
            try Data(repeating: 2, count: 16).write(to: folder.appendingPathComponent("key.bin"))
            let target = directory.appendingPathComponent("show.ts")
            await #expect(throws: DownloadError.self) {
                _ = try await HLSDownloader(manager: manager).download(from: nginx.url("/wrong/index.m3u8"), to: target)
            }
            #expect(!FileManager.default.fileExists(atPath: target.path))
            #expect(!FileManager.default.fileExists(atPath: target.path + ".haul-partial"))
        }
    }

    @Test(arguments: [
        "#EXT-X-KEY:METHOD=SAMPLE-AES,URI=\"key.bin\"",
        "#EXT-X-KEY:METHOD=AES-128,URI=\"skd://asset\",KEYFORMAT=\"com.apple.streamingkeydelivery\",KEYFORMATVERSIONS=\"1\"",
    ])
    func drmIsRefusedBeforeAnySegment(keyLine: String) async throws {
        try await Self.with { nginx, manager, directory in
            let folder = nginx.root.appendingPathComponent("drm")
            try await FFmpeg.makeStream(in: folder)
            let playlist = "#EXTM3U\n#EXT-X-TARGETDURATION:1\n\(keyLine)\n"
                + (0..<6).map { "#EXTINF:1.0,\nindex\($0).ts\n" }.joined() + "#EXT-X-ENDLIST\n"
            try playlist.write(to: folder.appendingPathComponent("drm.m3u8"), atomically: true, encoding: .utf8)
            let error = await #expect(throws: DownloadError.self) {
                _ = try await HLSDownloader(manager: manager).download(
                    from: nginx.url("/drm/drm.m3u8"), to: directory.appendingPathComponent("show"))
            }
            #expect(error?.code == .drmProtected)
            #expect(error?.message.contains("DRM") == true)
            let fetched = try await Self.loggedPaths(nginx, manager: manager).filter { $0.hasPrefix("/drm/") }
            #expect(fetched == ["/drm/drm.m3u8"])
            #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("show.ts.haul-hls").path))
        }
    }

    @Test func aMasterPlaylistsVariantAndAudioRendition() async throws {
        try await Self.with { nginx, manager, directory in
            let folder = nginx.root.appendingPathComponent("master")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            try await FFmpeg.run(
                [
                    "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100",
                    "-t", "4", "-filter_complex",
                    "[0:v]split=3[v1][v2][v3];[v1]scale=320:240[a1];[v2]scale=160:120[a2];[v3]scale=480:360[a3]",
                    "-map", "[a1]", "-map", "[a2]", "-map", "[a3]", "-map", "1:a", "-c:v", "libx264", "-preset", "ultrafast",
                    "-g", "25", "-b:v:0", "600k", "-b:v:1", "200k", "-b:v:2", "1000k", "-c:a", "aac", "-b:a", "64k", "-f", "hls",
                    "-hls_time", "1", "-hls_playlist_type", "vod", "-master_pl_name", "master.m3u8", "-var_stream_map",
                    "v:0,agroup:aud v:1,agroup:aud v:2,agroup:aud a:0,agroup:aud,default:yes,language:en,name:english",
                    "-hls_segment_filename", "v%v/seg%03d.ts", "v%v/index.m3u8",
                ], in: folder)
            let url = nginx.url("/master/master.m3u8")
            // The best variant (480x360), with its audio rendition beside it.
            let best = try await HLSDownloader(manager: manager).download(
                from: url, to: directory.appendingPathComponent("best"), options: HLSOptions(renditions: true))
            #expect(best.outputs.count == 2)
            try await Self.expectSameFrames(best.main.file, as: nginx.url("/master/v2/index.m3u8"), extension: "ts", in: directory)
            let audio = best.outputs[1]
            #expect(audio.file.lastPathComponent == "best.audio-en.ts")
            #expect(audio.kind == .rendition(type: "AUDIO", name: "audio_3", language: "en"))
            try await Self.expectSameFrames(audio.file, as: nginx.url("/master/venglish/index.m3u8"), extension: "ts", in: directory)
            // The smallest, by resolution and as the worst; only the variant's segments.
            for choice in [HLSVariantChoice.resolution(width: 160, height: 120), .worst, .bandwidth(300_000)] {
                let small = try await HLSDownloader(manager: manager).download(
                    from: url, to: directory.appendingPathComponent("small-\(choice)"), options: HLSOptions(variant: choice))
                #expect(small.outputs.count == 1)
                try await Self.expectSameFrames(small.main.file, as: nginx.url("/master/v1/index.m3u8"), extension: "ts", in: directory)
            }
            let error = await #expect(throws: DownloadError.self) {
                _ = try await HLSDownloader(manager: manager).download(
                    from: url, to: directory.appendingPathComponent("none"),
                    options: HLSOptions(variant: .resolution(width: 100, height: 100)))
            }
            #expect(error?.code == .invalidManifest && error?.message.contains("160x120") == true)
        }
    }

    /// Subtitles cut by ffmpeg into WebVTT segments (one empty, none repeating a header's
    /// cues) become one WebVTT file whose cues are the source's, as ffmpeg decodes both;
    /// `ffmpeg -i PLAYLIST -c copy` itself writes the segments end to end, a `WEBVTT`
    /// header in the middle of its file at each segment.
    @Test func aSubtitleRenditionFromFFmpegIsOneWebVTTFile() async throws {
        try await Self.with { nginx, manager, directory in
            let folder = nginx.root.appendingPathComponent("subs")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let srt = """
                1
                00:00:00,500 --> 00:00:01,500
                First line

                2
                00:00:01,800 --> 00:00:03,200
                Spanning a boundary

                3
                00:00:04,100 --> 00:00:05,000
                Last line

                """
            try srt.write(to: folder.appendingPathComponent("subs.srt"), atomically: true, encoding: .utf8)
            try await FFmpeg.run(
                [
                    "-f", "lavfi", "-i", "testsrc=size=160x120:rate=25", "-i", "subs.srt", "-t", "6", "-map", "0:v", "-map", "1:s",
                    "-c:v", "libx264", "-preset", "ultrafast", "-g", "25", "-c:s", "webvtt", "-f", "hls", "-hls_time", "1",
                    "-hls_playlist_type", "vod", "-var_stream_map", "v:0,s:0,sgroup:subs", "-master_pl_name", "ffmpeg.m3u8",
                    "out_%v.m3u8",
                ], in: folder)
            // This ffmpeg's master playlist names the subtitles only: the variant is added.
            let master = """
                #EXTM3U
                #EXT-X-MEDIA:TYPE=SUBTITLES,GROUP-ID="subs",NAME="English",LANGUAGE="en",URI="out_0_vtt.m3u8"
                #EXT-X-STREAM-INF:BANDWIDTH=300000,RESOLUTION=160x120,SUBTITLES="subs"
                out_0.m3u8

                """
            try master.write(to: folder.appendingPathComponent("master.m3u8"), atomically: true, encoding: .utf8)
            let summary = try await HLSDownloader(manager: manager).download(
                from: nginx.url("/subs/master.m3u8"), to: directory.appendingPathComponent("show"),
                options: HLSOptions(renditions: true))
            #expect(summary.outputs.map(\.file.lastPathComponent) == ["show.ts", "show.subtitles-en.vtt"])
            try await Self.expectSameFrames(summary.main.file, as: nginx.url("/subs/out_0.m3u8"), extension: "ts", in: directory)
            func cues(_ source: String) async throws -> String {
                let output = directory.appendingPathComponent("cues-\(UUID().uuidString).vtt")
                try await FFmpeg.run(["-i", source, "-f", "webvtt", output.path], in: directory)
                return try String(contentsOf: output, encoding: .utf8)
            }
            let saved = summary.outputs[1].file
            #expect(try String(contentsOf: saved, encoding: .utf8).components(separatedBy: "WEBVTT").count == 2)
            let expected = try await cues(folder.appendingPathComponent("subs.srt").path)
            #expect(expected.contains("Spanning a boundary"))
            #expect(try await cues(saved.path) == expected)
        }
    }

    @Test func aLivePlaylistIsRecordedUntilItEnds() async throws {
        try await Self.with { nginx, manager, directory in
            let folder = nginx.root.appendingPathComponent("live")
            try await FFmpeg.makeStream(in: folder, seconds: 6)
            let segments = (0..<6).map { "#EXTINF:1.000000,\nindex\($0).ts\n" }
            let head = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:1\n#EXT-X-MEDIA-SEQUENCE:0\n"
            let live = folder.appendingPathComponent("live.m3u8")
            try (head + segments[0..<3].joined()).write(to: live, atomically: true, encoding: .utf8)
            let (started, startedContinuation) = AsyncStream.makeStream(of: HLSProgress.self)
            let recording = Task {
                try await HLSDownloader(manager: manager).download(
                    from: nginx.url("/live/live.m3u8"), to: directory.appendingPathComponent("live")
                ) { event in
                    if case .started(let progress) = event { startedContinuation.yield(progress) }
                }
            }
            var iterator = started.makeAsyncIterator()
            let first = try #require(await iterator.next())
            #expect(first.isLive && first.segments == 3)
            // The playlist grows by three segments, and ends.
            try (head + segments.joined() + "#EXT-X-ENDLIST\n").write(to: live, atomically: true, encoding: .utf8)
            let summary = try await recording.value
            #expect(summary.main.segments == 6 && summary.main.missedSegments == 0)
            try await Self.expectSameFrames(summary.main.file, as: nginx.url("/live/index.m3u8"), extension: "ts", in: directory)
        }
    }

    @Test func aStopEndsALiveRecordingWithItsFileWritten() async throws {
        try await Self.with { nginx, manager, directory in
            let folder = nginx.root.appendingPathComponent("endless")
            try await FFmpeg.makeStream(in: folder, seconds: 3)
            // A live playlist that never ends.
            let playlist = "#EXTM3U\n#EXT-X-TARGETDURATION:1\n" + (0..<3).map { "#EXTINF:1.000000,\nindex\($0).ts\n" }.joined()
            try playlist.write(to: folder.appendingPathComponent("live.m3u8"), atomically: true, encoding: .utf8)
            let stop = HLSRecordingStop()
            let summary = try await HLSDownloader(manager: manager).download(
                from: nginx.url("/endless/live.m3u8"), to: directory.appendingPathComponent("live"), until: stop
            ) { event in
                if case .started(let progress) = event, progress.isLive { stop.finish() }
            }
            #expect(stop.isFinished && summary.main.segments == 3)
            try await Self.expectSameFrames(summary.main.file, as: nginx.url("/endless/index.m3u8"), extension: "ts", in: directory)
        }
    }

    @Test func aLiveRecordingStartedAgainGoesOnFromItsList() async throws {
        try await Self.with { nginx, manager, directory in
            let folder = nginx.root.appendingPathComponent("restart")
            try await FFmpeg.makeStream(in: folder, seconds: 6)
            let live = folder.appendingPathComponent("live.m3u8")
            func window(_ range: Range<Int>, ended: Bool) throws {
                let text = "#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXT-X-MEDIA-SEQUENCE:\(range.lowerBound)\n"
                    + range.map { "#EXTINF:1.000000,\nindex\($0).ts\n" }.joined() + (ended ? "#EXT-X-ENDLIST\n" : "")
                try text.write(to: live, atomically: true, encoding: .utf8)
            }
            try window(0..<3, ended: false)
            let target = directory.appendingPathComponent("live")
            // The first run is stopped (cancelled) once it has read the playlist.
            let (started, startedContinuation) = AsyncStream.makeStream(of: Void.self)
            let first = Task {
                try await HLSDownloader(manager: manager).download(from: nginx.url("/restart/live.m3u8"), to: target) { event in
                    if case .started = event { startedContinuation.yield() }
                }
            }
            var iterator = started.makeAsyncIterator()
            _ = await iterator.next()
            first.cancel()
            #expect(await (try? first.value) == nil)
            #expect(FileManager.default.fileExists(atPath: target.path + ".ts.haul-hls/plan.json"))
            // Meanwhile segments 0 and 1 left the playlist, and it ended after 5.
            try window(2..<6, ended: true)
            let summary = try await HLSDownloader(manager: manager).download(from: nginx.url("/restart/live.m3u8"), to: target)
            #expect(summary.main.segments == 6 && summary.main.missedSegments == 0)
            try await Self.expectSameFrames(summary.main.file, as: nginx.url("/restart/index.m3u8"), extension: "ts", in: directory)
        }
    }

    @Test func aDurationLimitCutsTheRecording() async throws {
        try await Self.with { nginx, manager, directory in
            try await FFmpeg.makeStream(in: nginx.root.appendingPathComponent("cut"))
            let summary = try await HLSDownloader(manager: manager).download(
                from: nginx.url("/cut/index.m3u8"), to: directory.appendingPathComponent("cut"),
                options: HLSOptions(maxDuration: .milliseconds(2500)))
            #expect(summary.main.segments == 3 && abs(summary.main.duration - 3) < 0.01)
            let fetched = try await Self.loggedPaths(nginx, manager: manager).filter { $0.hasSuffix(".ts") }
            #expect(fetched.sorted() == ["/cut/index0.ts", "/cut/index1.ts", "/cut/index2.ts"])
        }
    }

    @Test func aManagerWithAJournalKeepsNoRowsForSegments() async throws {
        try await Self.with { nginx, _, directory in
            try await FFmpeg.makeStream(in: nginx.root.appendingPathComponent("journaled"), seconds: 3)
            let journal = try Journal(path: directory.appendingPathComponent("journal.sqlite").path)
            let manager = DownloadManager(
                configuration: Fixture.testConfiguration(), journal: journal, eventLoopGroup: TestResources.group,
                threadPool: TestResources.pool)
            let summary = try await HLSDownloader(manager: manager).download(
                from: nginx.url("/journaled/index.m3u8"), to: directory.appendingPathComponent("show"))
            await manager.shutdown()
            #expect(summary.main.segments == 3)
            // The staged segments are gone with their directory; no row names them.
            #expect(try journal.jobs().isEmpty)
        }
    }

    @Test func notAPlaylistIsAnInvalidManifest() async throws {
        try await Self.with { nginx, manager, directory in
            try nginx.write(Array("<html>no</html>".utf8), at: "/page.m3u8", modified: Date())
            let error = await #expect(throws: DownloadError.self) {
                _ = try await HLSDownloader(manager: manager).download(
                    from: nginx.url("/page.m3u8"), to: directory.appendingPathComponent("x"))
            }
            #expect(error?.code == .invalidManifest && error?.message.contains("#EXTM3U") == true)
        }
    }
}

/// `haul get URL.m3u8`: a stream into one file, resumed after a kill with no segment
/// fetched twice.
@Suite(
    "HLS: haul get",
    .enabled(if: NginxServer.isAvailable, "nginx is not installed: run .ci/run or apt-get install nginx"),
    .enabled(if: FFmpeg.isAvailable, "ffmpeg is not installed: run .ci/run or apt-get install ffmpeg"),
    .timeLimit(.minutes(3)))
struct HLSCommandTests {
    @Test func aKillResumesAtTheSegmentsMissing() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-hls-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try await NginxServer.with { nginx in
            // nginx's /slow/ serves requests without Range at 256 KiB/s: one at a time
            // (-j 1), 30 segments take seconds, and the kill comes after the third.
            try await FFmpeg.makeStream(in: nginx.root.appendingPathComponent("slow/vod"), seconds: 30, size: "320x240")
            // The same files at full speed, for ffmpeg's reference.
            try FileManager.default.copyItem(
                at: nginx.root.appendingPathComponent("slow/vod"), to: nginx.root.appendingPathComponent("vod-reference"))
            let url = nginx.url("/slow/vod/index.m3u8").absoluteString
            let journal = directory.appendingPathComponent("journal.sqlite").path
            let arguments = ["get", url, "-d", directory.path, "-j", "1", "--json", "--journal", journal]
            let first = try await Haul.run(arguments) { line in
                line.contains("\"event\":\"progress\"") && line.contains("\"segmentsCompleted\":3,") ? SIGKILL : nil
            }
            #expect(first.status == SIGKILL)
            let file = directory.appendingPathComponent("index.ts")
            #expect(!FileManager.default.fileExists(atPath: file.path))
            // The segments staged when the kill came (complete and renamed into place; one
            // nginx had sent whole may still have been on its way to disk, and is not).
            let text = try String(contentsOf: nginx.root.appendingPathComponent("slow/vod/index.m3u8"), encoding: .utf8)
            guard case .media(let media) = try HLSPlaylist.parse(text, url: URL(string: url)!) else {
                Issue.record("not a media playlist")
                return
            }
            let staging = file.path + ".haul-hls/"
            let stagedBefore = Set(
                try HLSPlan(media, url: URL(string: url)!).resources
                    .filter { FileManager.default.fileExists(atPath: staging + $0.fileName) }.map(\.url.path))
            #expect(stagedBefore.count >= 3 && stagedBefore.count < 30)
            let before = try nginx.accessLog()

            let second = try await Haul.run(["get", url, "-d", directory.path, "--journal", journal])
            #expect(second.status == 0, "\(second.stderr)")
            let segmentsAfter = try nginx.accessLog().dropFirst(before.count).filter { $0.path.hasSuffix(".ts") }
            // No staged segment was asked for again, and each of the others arrived whole once.
            #expect(segmentsAfter.allSatisfy { !stagedBefore.contains($0.path) })
            let whole = segmentsAfter.filter { $0.completed && $0.status == 200 }.map(\.path)
            #expect(Set(whole).count == whole.count)
            let frames = try await FFmpeg.frames(of: file.path, in: directory)
            let reference = try await FFmpeg.frames(of: nginx.url("/vod-reference/index.m3u8").absoluteString, in: directory)
            #expect(frames == reference)
            #expect(!FileManager.default.fileExists(atPath: file.path + ".haul-hls"))
        }
    }

    @Test func aDownloadThatTurnsOutToBeAPlaylistIsFollowedToItsStream() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-hls-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try await NginxServer.with { nginx in
            let folder = nginx.root.appendingPathComponent("vod")
            try await FFmpeg.makeStream(in: folder, seconds: 3)
            // The same playlist at a URL that does not say what it is.
            try FileManager.default.copyItem(
                at: folder.appendingPathComponent("index.m3u8"), to: folder.appendingPathComponent("watch"))
            let journal = directory.appendingPathComponent("journal.sqlite").path
            let run = try await Haul.run(["get", nginx.url("/vod/watch").absoluteString, "-d", directory.path, "--journal", journal])
            #expect(run.status == 0, "\(run.stderr)")
            // The playlist is kept, and its stream is beside it.
            #expect(FileManager.default.fileExists(atPath: directory.appendingPathComponent("watch").path))
            let stream = directory.appendingPathComponent("watch.ts")
            let frames = try await FFmpeg.frames(of: stream.path, in: directory)
            let reference = try await FFmpeg.frames(of: nginx.url("/vod/index.m3u8").absoluteString, in: directory)
            #expect(frames == reference)
        }
    }

    @Test func ctrlCEndsALiveRecordingAndWritesItsFile() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-hls-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try await NginxServer.with { nginx in
            let folder = nginx.root.appendingPathComponent("endless")
            try await FFmpeg.makeStream(in: folder, seconds: 3)
            let playlist = "#EXTM3U\n#EXT-X-TARGETDURATION:1\n" + (0..<3).map { "#EXTINF:1.000000,\nindex\($0).ts\n" }.joined()
            try playlist.write(to: folder.appendingPathComponent("live.m3u8"), atomically: true, encoding: .utf8)
            let journal = directory.appendingPathComponent("journal.sqlite").path
            let run = try await Haul.run(
                ["get", nginx.url("/endless/live.m3u8").absoluteString, "-d", directory.path, "--json", "--journal", journal]
            ) { line in
                line.contains("\"event\":\"started\"") ? SIGINT : nil
            }
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stderr.contains("ending the live recording here"))
            #expect(run.stdout.contains("\"event\":\"completed\""))
            let frames = try await FFmpeg.frames(of: directory.appendingPathComponent("live.ts").path, in: directory)
            #expect(frames == (try await FFmpeg.frames(of: nginx.url("/endless/index.m3u8").absoluteString, in: directory)))
        }
    }

    @Test func variantsAreListed() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-hls-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try await NginxServer.with { nginx in
            let master = "#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=730400,RESOLUTION=320x240,CODECS=\"avc1.f4000d\"\nv0/index.m3u8\n"
                + "#EXT-X-STREAM-INF:BANDWIDTH=1170400,RESOLUTION=480x360,FRAME-RATE=25\nv2/index.m3u8\n"
            try nginx.write(Array(master.utf8), at: "/m/master.m3u8", modified: Date())
            let journal = directory.appendingPathComponent("journal.sqlite").path
            let url = nginx.url("/m/master.m3u8").absoluteString
            let run = try await Haul.run(["get", url, "--hls-variant", "list", "-d", directory.path, "--journal", journal])
            #expect(run.status == 0, "\(run.stderr)")
            let lines = run.stdout.split(separator: "\n").map(String.init)
            #expect(lines.count == 2)
            #expect(lines[0].hasPrefix("320x240") && lines[0].contains("730400 b/s") && lines[0].contains("avc1.f4000d"))
            #expect(lines[1].hasPrefix("480x360") && lines[1].contains("25 fps") && lines[1].hasSuffix("/m/v2/index.m3u8"))
            let json = try await Haul.run(["get", url, "--hls-variant", "list", "--json", "-d", directory.path, "--journal", journal])
            #expect(json.stdout.split(separator: "\n").count == 2 && json.stdout.contains("\"resolution\":\"480x360\""))
            // Nothing was downloaded.
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).allSatisfy { $0.hasPrefix("journal") })
        }
    }

    @Test func streamOptionsAreChecked() async throws {
        for (arguments, message) in [
            (["get", "http://127.0.0.1:1/a.m3u8", "--hls-variant", "huge"], "--hls-variant 'huge'"),
            (["get", "http://127.0.0.1:1/a.m3u8", "--hls-duration", "0"], "--hls-duration"),
            (["get", "http://127.0.0.1:1/a.m3u8", "--hls-duration", "1e300"], "--hls-duration"),
            (["get", "-i", "/dev/null", "--hls-renditions"], "are for HLS playlists"),
            (["get", "http://127.0.0.1:1/a.m3u8", "http://127.0.0.1:1/b.m3u8", "-o", "x"], "-o can only be used with a single URL"),
            (["get", "http://127.0.0.1:1/a/index.m3u8", "http://127.0.0.1:1/b/index.m3u8"], "would both be saved as index"),
        ] {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-hls-usage-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: directory) }
            let journal = directory.appendingPathComponent("journal.sqlite").path
            let run = try await Haul.run(arguments + ["--journal", journal])
            #expect(run.status == 2, "\(arguments)")
            #expect(!FileManager.default.fileExists(atPath: journal))
            #expect(run.stderr.contains(message), "\(run.stderr)")
        }
    }
}
