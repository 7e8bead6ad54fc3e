import Foundation
import HaulPostgres
import HaulServer
import HaulTestSupport
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import Haul

/// A stream as a job (``DownloadRequest/stream``): one journaled download that takes one
/// slot, resumed after a restart at the segments missing, and added through the service's
/// API, aria2's `addUri` and the shared queue's workers.
@Suite("HLS: a stream as a job", .timeLimit(.minutes(3)))
struct HLSJobTests {
    /// A media playlist `/files/NAME.m3u8` of `count` segments on the fault server (MPEG-TS
    /// in name: a sync byte, then random bytes), those from `gatedFrom` on held at gate
    /// `gate`; returns the bytes the stream's file must hold.
    @discardableResult
    static func serveStream(
        _ server: FaultServer, name: String = "show", count: Int = 8, gatedFrom: Int? = nil, gate: String = "hls"
    ) -> [UInt8] {
        var whole: [UInt8] = []
        var playlist = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXT-X-MEDIA-SEQUENCE:0\n"
        for index in 0..<count {
            let bytes = [0x47] + FaultServer.randomBytes(count: 6_000 + 97 * index, seed: UInt64(100 + index))
            server.setFile("\(name)-\(index).ts", bytes)
            whole += bytes
            let query = gatedFrom.map { index >= $0 ? "?gate=\(gate)" : "" } ?? ""
            playlist += "#EXTINF:2.000,\n\(name)-\(index).ts\(query)\n"
        }
        playlist += "#EXT-X-ENDLIST\n"
        server.setFile("\(name).m3u8", Array(playlist.utf8))
        return whole
    }

    /// How many times each segment of `serveStream` was asked for.
    static func segmentRequests(_ server: FaultServer, name: String = "show", count: Int = 8) -> [Int] {
        (0..<count).map { server.requests(path: "/files/\(name)-\($0).ts").count }
    }

    @Test func aStreamIsOneJournaledJobThatTakesOneSlot() async throws {
        // One slot: a stream whose segments each waited for a slot would wait on itself.
        try await Fixture.with(journal: true, { $0.maxConcurrentDownloads = 1 }) { f in
            let bytes = Self.serveStream(f.server, count: 12)
            var request = DownloadRequest(url: f.server.url("/files/show.m3u8"), destination: .directory(f.directory, name: nil))
            request.stream = HLSStream()
            let handle = try await f.manager.download(request)
            let result = try await handle.result
            await f.manager.flushJournal()
            #expect(result.fileURL == f.file("show.ts"))
            #expect(result.byteCount == Int64(bytes.count))
            #expect(f.contents("show.ts") == bytes)
            #expect(Self.segmentRequests(f.server, count: 12) == Array(repeating: 1, count: 12))
            // Nothing else in the directory: no staged segments, no partial files.
            #expect(f.listing() == ["show.ts"])
            // One row, completed, a stream, shown where its file is.
            let rows = try f.journal!.jobs()
            #expect(rows.count == 1)
            #expect(rows.first?.state == .completed && rows.first?.destination == f.file("show.ts").path)
            let row = try #require(try f.journal!.record(handle.id))
            #expect(row.stream != nil)
            #expect(try row.request().stream == HLSStream())
        }
    }

    @Test func aStreamJobRestartedGoesOnAtTheSegmentsMissing() async throws {
        try await Fixture.with(journal: true) { f in
            // Given a stream whose last four segments are held at the server's gate
            let bytes = Self.serveStream(f.server, count: 8, gatedFrom: 4)
            var request = DownloadRequest(url: f.server.url("/files/show.m3u8"), destination: .directory(f.directory, name: "film"))
            request.stream = HLSStream(variant: .worst)
            let handle = try await f.manager.download(request)
            // When the first four are in and the process stops (paused, then shut down)
            var gatedBytes = 0
            for index in 4..<8 { gatedBytes += 1 + 6_000 + 97 * index }
            let firstFour = Int64(bytes.count - gatedBytes)
            await firstEvent(handle.events) { event -> Bool? in
                if case .progress(let progress) = event, progress.completedBytes >= firstFour { return true }
                return nil
            }
            await f.server.waitForGateWaiters("hls", count: 4)
            await f.manager.pauseAll()
            await f.manager.shutdown()
            #expect(!FileManager.default.fileExists(atPath: f.file("film.ts").path))
            let row = try #require(try f.journal!.record(handle.id))
            #expect(row.state == .paused && row.stream == HLSStream(variant: .worst).encoded)

            // Then a later process resumes it from the journal, as a stream, and fetches
            // only the segments missing
            f.server.release("hls")
            let restarted = f.makeManager()
            #expect(try await restarted.resumeUnfinished() == 1)
            await restarted.waitUntilIdle()
            await restarted.shutdown()
            #expect(f.contents("film.ts") == bytes)
            let asked = Self.segmentRequests(f.server)
            #expect(asked[0..<4].allSatisfy { $0 == 1 }, "\(asked)")
            #expect(try f.journal!.job(handle.id)?.state == .completed)
            #expect(f.listing() == ["film.ts"])
        }
    }

    @Test func aCancelledStreamLeavesNothingStaged() async throws {
        try await Fixture.with(journal: true) { f in
            Self.serveStream(f.server, count: 6, gatedFrom: 3)
            var request = DownloadRequest(url: f.server.url("/files/show.m3u8"), destination: .directory(f.directory, name: nil))
            request.stream = HLSStream()
            let handle = try await f.manager.download(request)
            await f.server.waitForGateWaiters("hls", count: 3)
            await handle.cancel()
            await #expect(throws: DownloadError.self) { _ = try await handle.result }
            await f.manager.waitUntilIdle()
            f.server.release("hls")
            #expect(f.listing() == [])
        }
    }

    @Test func aStreamTakesNoMirrorsChecksumOrObject() async throws {
        try await Fixture.with { f in
            var request = DownloadRequest(
                url: f.server.url("/files/show.m3u8"), destination: .directory(f.directory, name: nil),
                checksum: try Checksum(parsing: "sha-256=" + String(repeating: "0", count: 64)))
            request.stream = HLSStream()
            let error = await #expect(throws: DownloadError.self) { _ = try await f.manager.download(request) }
            #expect(error?.code == .invalidRequest && error?.message.contains("segment by segment") == true)
            #expect(f.server.statistics.totalRequests == 0)
        }
    }

    @Test(arguments: [
        (#"{"variant": "1280x720", "renditions": true, "maxDuration": 90.5}"#, true),
        (#"{"variant": "best"}"#, true),
        (#"{"variant": "nope"}"#, false),
        (#"{"renditions": true}"#, false),
        (#"{"variant": "worst", "maxDuration": -1}"#, false),
        ("not json", false),
    ])
    func streamOptionsAreKeptAsTheJournalWritesThem(text: String, readable: Bool) throws {
        let read = HLSStream(encoded: text)
        #expect((read != nil) == readable)
        if let read { #expect(HLSStream(encoded: read.encoded) == read) }
    }

    // MARK: - The service

    @Test func theAPIAndAria2sAddUriTakeAPlaylistAsAStream() async throws {
        try await ServiceAPITests.with { client, f, _ in
            let show = Self.serveStream(f.server, name: "show", count: 5)
            let clip = Self.serveStream(f.server, name: "clip", count: 3)
            let kept = Array("#EXTM3U\n#EXT-X-ENDLIST\n".utf8)
            f.server.setFile("kept.m3u8", kept)
            // A playlist URL is a stream; "hls" names the options, or false keeps the playlist;
            // bad options are refused, naming the field.
            let body = """
                {"downloads": [
                  {"url": "\(f.server.url("/files/show.m3u8"))", "hls": {"variant": "worst", "duration": 600}},
                  {"url": "\(f.server.url("/files/kept.m3u8"))", "hls": false}
                ]}
                """
            let added = try await client.execute(
                uri: "/api/v1/downloads", method: .post, headers: ServiceAPITests.headers, body: ByteBuffer(string: body))
            #expect(added.status == .created, "\(String(buffer: added.body))")
            for (bad, field) in [
                (#"{"url": "\#(f.server.url("/files/a.m3u8"))", "hls": {"variant": "huge"}}"#, "downloads[0].hls.variant"),
                (#"{"url": "\#(f.server.url("/files/a.m3u8"))", "checksum": "md5=\#(String(repeating: "0", count: 32))"}"#, "downloads[0].checksum"),
            ] {
                let refused = try await client.execute(
                    uri: "/api/v1/downloads", method: .post, headers: ServiceAPITests.headers,
                    body: ByteBuffer(string: #"{"downloads": [\#(bad)]}"#))
                #expect(refused.status == .badRequest)
                #expect((try ServiceAPITests.json(refused)["error"] as? [String: Any])?["field"] as? String == field)
            }
            // aria2's addUri of a playlist URL
            let rpc = #"{"jsonrpc":"2.0","id":"t","method":"aria2.addUri","params":["token:\#(ServiceAPITests.token)",["\#(f.server.url("/files/clip.m3u8"))"]]}"#
            let answer = try await client.execute(
                uri: "/jsonrpc", method: .post, headers: ServiceAPITests.headers, body: ByteBuffer(string: rpc))
            let gid = try #require(try ServiceAPITests.json(answer)["result"] as? String, "\(String(buffer: answer.body))")
            await f.manager.waitUntilIdle()

            #expect(f.contents("show.ts") == show)
            #expect(f.contents("clip.ts") == clip)
            #expect(f.contents("kept.m3u8") == kept)
            // The API lists them completed, where their files are
            let list = try ServiceAPITests.json(
                try await client.execute(uri: "/api/v1/downloads?state=completed", method: .get, headers: ServiceAPITests.headers))
            let destinations = Set(((list["downloads"] as? [[String: Any]]) ?? []).compactMap { $0["destination"] as? String })
            #expect(destinations == [f.file("show.ts").path, f.file("clip.ts").path, f.file("kept.m3u8").path])
            // and aria2's tellStatus says complete, with the stream's file
            let status = #"{"jsonrpc":"2.0","id":"s","method":"aria2.tellStatus","params":["token:\#(ServiceAPITests.token)","\#(gid)"]}"#
            let told = try ServiceAPITests.json(
                try await client.execute(uri: "/jsonrpc", method: .post, headers: ServiceAPITests.headers, body: ByteBuffer(string: status)))
            let result = try #require(told["result"] as? [String: Any])
            #expect(result["status"] as? String == "complete")
            let files = (result["files"] as? [[String: Any]])?.compactMap { $0["path"] as? String }
            #expect(files == [f.file("clip.ts").path])
        }
    }
}

/// Streams queued on the shared queue (by the cluster API's rules and by `haul get
/// --queue`) are downloaded by a worker process.
@Suite(
    "HLS: a stream through the shared queue",
    .enabled(
        if: PostgresCluster.isAvailable,
        "PostgreSQL 15 is not installed (/usr/lib/postgresql/15/bin): run .ci/run or apt-get install postgresql"),
    .timeLimit(.minutes(3)))
struct HLSQueueTests {
    @Test func aWorkerDownloadsQueuedStreams() async throws {
        try await WorkerProcessTests.with { f in
            let show = HLSJobTests.serveStream(f.server, name: "show", count: 6)
            let clip = HLSJobTests.serveStream(f.server, name: "clip", count: 3)
            let requests = try ClusterBatch.requests(for: [
                DownloadInput(url: f.server.url("/files/show.m3u8").absoluteString, name: "film")
            ])
            #expect(requests.first?.stream == HLSStream())
            #expect(try await f.queue.enqueue(requests) == 1)
            let queued = try await Haul.run(
                ["get", "--queue", f.url, f.server.url("/files/clip.m3u8").absoluteString, "--hls-variant", "worst"])
            #expect(queued.status == 0, "\(queued.stderr)")
            let directory = try f.directory("out")
            let worker = try await f.startWorker(directory: directory)
            try await f.waitUntil(
                "the streams ended",
                sql: "SELECT count(*) FILTER (WHERE state IN ('completed', 'failed', 'retryable')) = 2 FROM haul_jobs")
            let ended = try await f.value(
                "SELECT string_agg(state || ': ' || coalesce(last_error, ''), ', ') FROM haul_jobs", as: String.self)
            #expect(ended == "completed: , completed: ")
            // A job is completed in the queue just before its file goes into place: the
            // worker's own end comes after.
            worker.process.send(SIGTERM)
            #expect(await worker.process.wait().status == 0)
            #expect(try Data(contentsOf: directory.appendingPathComponent("film.ts")) == Data(show))
            #expect(try Data(contentsOf: directory.appendingPathComponent("clip.ts")) == Data(clip))
            #expect(HLSJobTests.segmentRequests(f.server, count: 6) == Array(repeating: 1, count: 6))
            let listing = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
            #expect(listing == ["clip.ts", "film.ts"])
        }
    }
}
