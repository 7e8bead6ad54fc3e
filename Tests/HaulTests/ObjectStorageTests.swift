import AsyncHTTPClient
import Crypto
import Foundation
import HaulTestSupport
import NIOCore
import NIOPosix
import Testing

@testable import Haul

extension HeavyProcessTests {
    /// Downloads into a real S3 server (SeaweedFS), through `haul get -o s3://…` and
    /// `-d s3://…/`: objects appear only complete, a killed upload resumes at the part it
    /// stood at, a cancelled one is aborted.
    @Suite(
        "Object storage destinations, against SeaweedFS",
        .enabled(if: SeaweedFS.isAvailable, "\(SeaweedFS.skipReason)"), .timeLimit(.minutes(3)))
    struct ObjectStorageTests {
        /// A signed GET of an object's bytes, or `nil` when it is not there.
        static func object(_ key: String, bucket: String, in server: SeaweedFS, client: S3Client) async throws -> [UInt8]? {
            let location = try S3Location(bucket: bucket, key: key)
            let url = try location.objectURL(endpoint: server.endpoint, region: "us-east-1")
            let reply = try await client.send("GET", url, headers: [], body: nil, what: "read \(key)", accepting: [404], limit: 64 << 20)
            return reply.status == .ok ? Array(reply.body.readableBytesView) : nil
        }

        static func makeBucket(_ name: String, client: S3Client, server: SeaweedFS) async throws {
            let url = try S3Location(bucket: name, key: "").bucketURL(endpoint: server.endpoint, region: "us-east-1")
            _ = try await client.send("PUT", url, headers: [], body: nil, what: "make \(name)", accepting: [409])
        }

        /// The staged files and sidecars left in the journal's staging directory.
        static func staged(_ journal: String) -> [String] {
            let staging = (journal as NSString).deletingLastPathComponent + "/staging"
            return (try? FileManager.default.contentsOfDirectory(atPath: staging)) ?? []
        }

        /// Expects the object at `key` in bucket `haul` to be `bytes`, with no unfinished
        /// upload to the key and nothing left staged beside `journal`.
        static func expectWhole(
            _ key: String, _ bytes: [UInt8], in server: SeaweedFS, client: S3Client, journal: String,
            sourceLocation: SourceLocation = #_sourceLocation
        ) async throws {
            #expect(try await object(key, bucket: "haul", in: server, client: client) == bytes, sourceLocation: sourceLocation)
            let location = try S3Location(bucket: "haul", key: key)
            #expect(try await client.pendingUploads(location).isEmpty, sourceLocation: sourceLocation)
            #expect(staged(journal).isEmpty, "\(staged(journal))", sourceLocation: sourceLocation)
        }

        /// Runs `body` with a fresh SeaweedFS that has a bucket `haul`, a ``PartRelay`` in
        /// front of it, and the environment that sends `haul`'s requests through the relay.
        static func withRelay(
            _ body: (SeaweedFS, S3Client, PartRelay, [String: String]) async throws -> Void
        ) async throws {
            try await SeaweedFS.with { server, client in
                try await makeBucket("haul", client: client, server: server)
                let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
                let relay = try await PartRelay.start(to: server.port, group: group)
                var environment = server.environment
                environment["AWS_ENDPOINT_URL"] = "http://127.0.0.1:\(relay.port)"
                do {
                    try await body(server, client, relay, environment)
                } catch {
                    await relay.stop()
                    try? await group.shutdownGracefully()
                    throw error
                }
                await relay.stop()
                try? await group.shutdownGracefully()
            }
        }

        /// The part numbers the upload's sidecar in the journal's staging directory records,
        /// once they are `expected` (or after 60 seconds, or once `process` has ended).
        /// Where the second segment starts decides which parts are whole before the stalls.
        /// It divides what is left when the second connection is ready; on a loaded machine
        /// the first response would have gone further by then. The first response sends
        /// 1 MB and then trickles until the second segment's request arrives
        /// (``releaseOnceSplit(_:path:)``), so the second segment starts at about 20.5 MB
        /// however busy the machine is: parts 1, 2 and 4 are whole, 3 and 5 are not.
        static let heldUntilSplit = "gate=split&gate_after=1000000"

        /// Lets the first response go on at full speed once the second segment has asked for
        /// its range.
        static func releaseOnceSplit(_ server: FaultServer, path: String) async {
            await server.waitForRequests(count: 2, path: path)
            server.release("split")
        }

        static func recordedParts(_ expected: Set<Int>, journal: String, while process: HaulProcess) async -> Set<Int> {
            let staging = (journal as NSString).deletingLastPathComponent + "/staging"
            var recorded: Set<Int> = []
            let deadline = ContinuousClock.now + .seconds(60)
            while recorded != expected, ContinuousClock.now < deadline, process.isRunning {
                let sidecar = (try? FileManager.default.contentsOfDirectory(atPath: staging))?
                    .first { $0.hasSuffix(".haul-upload") }
                if let sidecar, let record = ObjectUpload.load(staging + "/" + sidecar) {
                    recorded = Set(record.parts.map(\.number))
                }
                await Task.yield()
            }
            return recorded
        }

        @Test func smallFilesArePutWholeUnderTheirKeysAndAPrefix() async throws {
            try await SeaweedFS.with { server, client in
                try await Self.makeBucket("haul", client: client, server: server)
                try await CLIFixture.with { f, journal in
                    let one = f.serve("one.bin", count: 16_384, seed: 1)
                    let run = try await Haul.run(
                        ["get", "-q", "--journal", journal, "-o", "s3://haul/single/one.bin", f.server.url("/files/one.bin").absoluteString],
                        environment: server.environment)
                    #expect(run.status == 0, "\(run.stderr)")
                    #expect(try await Self.object("single/one.bin", bucket: "haul", in: server, client: client) == one)
                    // The store kept the SHA-256 Haul sent with the body (and checked it).
                    let url = try S3Location(bucket: "haul", key: "single/one.bin")
                        .objectURL(endpoint: server.endpoint, region: "us-east-1")
                    let head = try await client.send(
                        "HEAD", url, headers: [("x-amz-checksum-mode", "ENABLED")], body: nil, what: "look up")
                    #expect(head.headers.first(name: "x-amz-checksum-sha256") == Data(SHA256.hash(data: one)).base64EncodedString())

                    // A key with a space and a non-ASCII letter, shown as it is.
                    let two = f.serve("two.bin", count: 5_000, seed: 2)
                    let spaced = try await Haul.run(
                        ["get", "--journal", journal, "-o", "s3://haul/with space/é.bin", f.server.url("/files/two.bin").absoluteString],
                        environment: server.environment)
                    #expect(spaced.status == 0, "\(spaced.stderr)")
                    #expect(spaced.stdout.contains("s3://haul/with space/é.bin"), "\(spaced.stdout)")
                    #expect(try await Self.object("with space/é.bin", bucket: "haul", in: server, client: client) == two)

                    var files: [String: [UInt8]] = [:]
                    for index in 0..<12 { files["m\(index).bin"] = f.serve("m\(index).bin", count: 1_000 + index, seed: UInt64(index)) }
                    let list = files.keys.sorted().map { f.server.url("/files/\($0)").absoluteString }.joined(separator: "\n")
                    let many = try await Haul.run(
                        ["get", "-q", "--journal", journal, "-d", "s3://haul/many", "-i", "-"], input: Data(list.utf8),
                        environment: server.environment)
                    #expect(many.status == 0, "\(many.stderr)")
                    for (name, bytes) in files {
                        #expect(try await Self.object("many/\(name)", bucket: "haul", in: server, client: client) == bytes)
                    }
                    #expect(Self.staged(journal).isEmpty, "nothing is left staged: \(Self.staged(journal))")
                    let staging = (journal as NSString).deletingLastPathComponent + "/staging"
                    let mode = try FileManager.default.attributesOfItem(atPath: staging)[.posixPermissions] as? Int
                    #expect(mode == 0o700, "the staging directory is the owner's only")
                    let jobs = try await Haul.jobs(journal, all: true)
                    let destinations = Set(jobs.compactMap { $0["destination"] as? String })
                    #expect(destinations.contains("s3://haul/single/one.bin"))
                    #expect(destinations.contains("s3://haul/many/m3.bin"))
                    #expect(destinations.contains("s3://haul/with space/é.bin"))
                }
            }
        }

        /// HLS streams into objects: `-o s3://bucket/key` (the container's extension added)
        /// and `-d s3://bucket/prefix/` (named after the playlist), assembled in the
        /// staging directory and uploaded; renditions, which go beside a file, are refused.
        @Test func aStreamIsAssembledThenPutIntoItsObject() async throws {
            try await SeaweedFS.with { server, client in
                try await Self.makeBucket("haul", client: client, server: server)
                try await CLIFixture.with { f, journal in
                    let show = HLSJobTests.serveStream(f.server, name: "show", count: 5)
                    let clip = HLSJobTests.serveStream(f.server, name: "clip", count: 3)
                    let keyed = try await Haul.run(
                        ["get", "-q", "--journal", journal, "-o", "s3://haul/shows/film", f.server.url("/files/show.m3u8").absoluteString],
                        environment: server.environment)
                    #expect(keyed.status == 0, "\(keyed.stderr)")
                    #expect(try await Self.object("shows/film.ts", bucket: "haul", in: server, client: client) == show)
                    let prefixed = try await Haul.run(
                        ["get", "-q", "--journal", journal, "-d", "s3://haul/clips/", f.server.url("/files/clip.m3u8").absoluteString],
                        environment: server.environment)
                    #expect(prefixed.status == 0, "\(prefixed.stderr)")
                    try await Self.expectWhole("clips/clip.ts", clip, in: server, client: client, journal: journal)
                    let jobs = try await Haul.jobs(journal, all: true)
                    #expect(Set(jobs.compactMap { $0["destination"] as? String }) == ["s3://haul/shows/film.ts", "s3://haul/clips/clip.ts"])
                    #expect(HLSJobTests.segmentRequests(f.server, name: "show", count: 5) == Array(repeating: 1, count: 5))
                    let renditions = try await Haul.run(
                        ["get", "--journal", journal, "-o", "s3://haul/x", f.server.url("/files/show.m3u8").absoluteString, "--hls-renditions"],
                        environment: server.environment)
                    #expect(renditions.status == 2 && renditions.stderr.contains("--hls-renditions"), "\(renditions.stderr)")
                }
            }
        }

        @Test func aCompletedObjectIsRevalidatedNotFetchedAgainUntilItChanges() async throws {
            try await SeaweedFS.with { server, client in
                try await Self.makeBucket("haul", client: client, server: server)
                try await CLIFixture.with { f, journal in
                    let bytes = f.serve("again.bin", count: 40_000, seed: 7, etag: .custom("v1"))
                    let arguments = [
                        "get", "-q", "--journal", journal, "-o", "s3://haul/again/again.bin",
                        f.server.url("/files/again.bin").absoluteString,
                    ]
                    let first = try await Haul.run(arguments, environment: server.environment)
                    #expect(first.status == 0, "\(first.stderr)")
                    #expect(try await Self.object("again/again.bin", bucket: "haul", in: server, client: client) == bytes)

                    // Given the same download again, with the object still in the store
                    f.server.resetStatistics()
                    let second = try await Haul.run(arguments, environment: server.environment)
                    // Then it is one conditional request, answered without a body
                    #expect(second.status == 0, "\(second.stderr)")
                    let asked = f.server.requests(path: "/files/again.bin")
                    #expect(asked.count == 1)
                    #expect(asked.first?.header("If-None-Match") == "\"v1\"")
                    #expect(f.server.statistics.bodyBytesServed == 0)
                    #expect(try await Self.object("again/again.bin", bucket: "haul", in: server, client: client) == bytes)
                    #expect(Self.staged(journal).isEmpty, "\(Self.staged(journal))")

                    // When the object in the store was replaced since, it is downloaded again
                    let location = try S3Location(bucket: "haul", key: "again/again.bin")
                    let other = ByteBuffer(bytes: [UInt8](repeating: 1, count: 100))
                    _ = try await client.putObject(location, body: other, sha256: S3Client.sha256(of: other))
                    f.server.resetStatistics()
                    let replaced = try await Haul.run(arguments, environment: server.environment)
                    #expect(replaced.status == 0, "\(replaced.stderr)")
                    #expect(f.server.requests(path: "/files/again.bin").first?.header("If-None-Match") == nil)
                    #expect(f.server.statistics.bodyBytesServed == bytes.count)
                    #expect(try await Self.object("again/again.bin", bucket: "haul", in: server, client: client) == bytes)

                    // And when it was deleted, too
                    _ = try await client.send(
                        "DELETE", try location.objectURL(endpoint: server.endpoint, region: "us-east-1"), headers: [],
                        body: nil, what: "delete")
                    f.server.resetStatistics()
                    let deleted = try await Haul.run(arguments, environment: server.environment)
                    #expect(deleted.status == 0, "\(deleted.stderr)")
                    #expect(f.server.requests(path: "/files/again.bin").first?.header("If-None-Match") == nil)
                    #expect(try await Self.object("again/again.bin", bucket: "haul", in: server, client: client) == bytes)
                }
            }
        }

        @Test func aSecondGetOfTheSameObjectFollowsTheFirstAndStoresNothingAgain() async throws {
            try await SeaweedFS.with { server, client in
                try await Self.makeBucket("haul", client: client, server: server)
                try await CLIFixture.with { f, journal in
                    // Given a haul storing an object, its download held at the server
                    let bytes = f.serve("shared.bin", count: 30_000, seed: 3)
                    let arguments = [
                        "get", "--json", "--journal", journal, "-o", "s3://haul/shared.bin",
                        f.server.url("/files/shared.bin?gate=g").absoluteString,
                    ]
                    let first = try HaulProcess(arguments, environment: server.environment)
                    await f.server.waitForGateWaiters("g", count: 1)
                    // When a second haul is asked for the same object, and follows the first
                    let second = try HaulProcess(arguments, environment: server.environment)
                    _ = try #require(await second.line { $0.contains("\"event\":\"attached\"") })
                    f.server.release("g")
                    let firstRun = await first.wait()
                    let secondRun = await second.wait()
                    // Then it ends with the object the first one stored, not a download of its own
                    #expect(firstRun.status == 0, "\(firstRun.stderr)")
                    #expect(secondRun.status == 0, "\(secondRun.stderr)")
                    let completed = try #require(secondRun.stdout.split(separator: "\n").first { $0.contains("\"completed\"") })
                    #expect(completed.contains("\"transferred\":0"), "\(completed)")
                    #expect(completed.contains("s3://haul/shared.bin"), "\(completed)")
                    #expect(f.server.requests(path: "/files/shared.bin").count == 1)
                    #expect(try await Self.object("shared.bin", bucket: "haul", in: server, client: client) == bytes)
                }
            }
        }

        @Test func aKilledUploadResumesAtThePartItStoodAtAndTheObjectAppearsOnlyThen() async throws {
            try await Self.withRelay { server, client, relay, environment in
                try await CLIFixture.with { f, journal in
                    // Four parts of 8 MiB (the last 4.6 MiB); the third and fourth are held.
                    let bytes = f.serve("big.bin", count: 30_000_000, seed: 7)
                    relay.hold { $0 >= 3 }
                    let arguments = [
                        "get", "-q", "--journal", journal, "-o", "s3://haul/big.bin", f.server.url("/files/big.bin").absoluteString,
                    ]
                    let first = try HaulProcess(arguments, environment: environment)
                    // The upload stands still once parts 1 and 2 are in its record.
                    let recorded = await Self.recordedParts([1, 2], journal: journal, while: first)
                    #expect(recorded == [1, 2], "\(first.errorText)")
                    #expect(relay.held == [3, 4])
                    // Nothing at the key while the upload is unfinished.
                    #expect(try await Self.object("big.bin", bucket: "haul", in: server, client: client) == nil)
                    first.send(SIGKILL)
                    _ = await first.wait()

                    relay.hold { _ in false }
                    let before = relay.passed.count
                    let second = try await Haul.run(["resume", "-q", "--journal", journal], environment: environment)
                    #expect(second.status == 0, "\(second.stderr)")
                    // Only the parts the first run had not finished went again.
                    #expect(Array(relay.passed[before...]).sorted() == [3, 4])
                    try await Self.expectWhole("big.bin", bytes, in: server, client: client, journal: journal)
                }
            }
        }

        /// Segments become parts: a part goes up as soon as its bytes are in, while the rest
        /// of the download still runs; a kill then costs neither those parts nor the bytes
        /// downloaded.
        @Test func partsGoUpWhileTheDownloadRunsAndAKillKeepsThem() async throws {
            try await Self.withRelay { server, client, relay, environment in
                try await CLIFixture.with { f, journal in
                    // 40 MB in 8 MiB parts: 1 [0, 8.4M), 2 [8.4M, 16.8M), 3 [16.8M, 25.2M),
                    // 4 [25.2M, 33.6M), 5 [33.6M, 40M). Two segments, the first GET going on as
                    // [0, about 20.5M) and a range request for the rest (see `heldUntilSplit`),
                    // each stalled after 18 MB: parts 1, 2 and 4 are whole, 3 and 5 are not.
                    let bytes = f.serve("big.bin", count: 40_000_000, seed: 11)
                    relay.hold { _ in false }
                    // Named by its Content-Disposition, under a prefix: the resumed run (which
                    // sends no first request) stores under the same key.
                    let url = f.server.url(
                        "/files/big.bin?stall_after=18000000&stall_times=3&\(Self.heldUntilSplit)&disposition=attachment%3B%20filename%3D%22named.bin%22"
                    ).absoluteString
                    let arguments = [
                        "get", "-q", "--journal", journal, "-x", "2", "--timeout", "3600", "-d", "s3://haul/in/", url,
                    ]
                    let first = try HaulProcess(arguments, environment: environment)
                    await Self.releaseOnceSplit(f.server, path: "/files/big.bin")
                    let recorded = await Self.recordedParts([1, 2, 4], journal: journal, while: first)
                    #expect(recorded == [1, 2, 4], "\(first.errorText)")
                    #expect(relay.passed.sorted() == [1, 2, 4])
                    // The download stands still short of its end, and nothing is at the key.
                    #expect(first.isRunning)
                    #expect(try await Self.object("in/named.bin", bucket: "haul", in: server, client: client) == nil)
                    first.send(SIGKILL)
                    _ = await first.wait()

                    f.server.resetStatistics()
                    let second = try await Haul.run(["resume", "-q", "--journal", journal], environment: environment)
                    #expect(second.status == 0, "\(second.stderr)")
                    // Only the parts not yet sent went, and only the missing bytes were fetched.
                    #expect(relay.passed.count == 5)
                    #expect(Array(relay.passed.dropFirst(3)).sorted() == [3, 5])
                    #expect(f.server.bytesServed(path: "/files/big.bin") == 4_000_000)
                    try await Self.expectWhole("in/named.bin", bytes, in: server, client: client, journal: journal)
                }
            }
        }

        /// Parts sent belong to one version of the content: when it changes under a resumed
        /// download, they are abandoned with the staged bytes, and the object is the new one.
        @Test func partsOfAContentThatChangedAreNeverCompletedIntoTheObject() async throws {
            try await SeaweedFS.with { server, client in
                try await Self.makeBucket("haul", client: client, server: server)
                try await CLIFixture.with { f, journal in
                    // As above: parts 1, 2 and 4 go up, then the download stalls.
                    _ = f.serve("big.bin", count: 40_000_000, seed: 12)
                    let url = f.server.url("/files/big.bin?stall_after=18000000&stall_times=3&\(Self.heldUntilSplit)").absoluteString
                    let first = try HaulProcess(
                        ["get", "-q", "--journal", journal, "-x", "2", "--timeout", "3600", "-o", "s3://haul/v.bin", url],
                        environment: server.environment)
                    await Self.releaseOnceSplit(f.server, path: "/files/big.bin")
                    let recorded = await Self.recordedParts([1, 2, 4], journal: journal, while: first)
                    #expect(recorded == [1, 2, 4], "\(first.errorText)")
                    first.send(SIGKILL)
                    _ = await first.wait()

                    // A new version, of the same size, with a new ETag.
                    let changed = f.serve("big.bin", count: 40_000_000, seed: 13)
                    let second = try await Haul.run(["resume", "-q", "--journal", journal], environment: server.environment)
                    #expect(second.status == 0, "\(second.stderr)")
                    try await Self.expectWhole("v.bin", changed, in: server, client: client, journal: journal)
                }
            }
        }

        /// `haul serve --root s3://bucket/prefix/`: the service stores objects under its
        /// object roots with its own credentials, for the API and for `haul get` through it,
        /// and refuses a prefix outside them.
        @Test func aServiceStoresObjectsUnderItsObjectRootsOnly() async throws {
            try await SeaweedFS.with { server, client in
                try await Self.makeBucket("haul", client: client, server: server)
                try await CLIFixture.with { f, journal in
                    let big = f.serve("s.bin", count: 20_000_000, seed: 21)
                    let small = f.serve("t.bin", count: 3_000, seed: 22)
                    let directory = f.directory.path
                    let service = try HaulProcess(
                        [
                            "serve", "--listen", "127.0.0.1:0", "--journal", journal, "-d", directory, "--root", directory,
                            "--root", "s3://haul/in/",
                        ], environment: server.environment)
                    _ = try #require(await service.line { $0.contains("listening on http://") }, "\(service.errorText)")

                    // haul get goes through the service, in a shell with no AWS credentials.
                    var plain = Haul.environment
                    for name in plain.keys where name.hasPrefix("AWS_") { plain.removeValue(forKey: name) }
                    let get = try await Haul.run(
                        ["get", "--journal", journal, "-o", "s3://haul/in/x/s.bin", f.server.url("/files/s.bin").absoluteString],
                        environment: plain)
                    #expect(get.status == 0, "\(get.stderr)")
                    #expect(get.stdout.contains("s3://haul/in/x/s.bin"), "\(get.stdout)")
                    #expect(try await Self.object("in/x/s.bin", bucket: "haul", in: server, client: client) == big)
                    let prefix = try await Haul.run(
                        ["get", "-q", "--journal", journal, "-d", "s3://haul/in/", f.server.url("/files/t.bin").absoluteString],
                        environment: plain)
                    #expect(prefix.status == 0, "\(prefix.stderr)")
                    #expect(try await Self.object("in/t.bin", bucket: "haul", in: server, client: client) == small)

                    // Outside the object roots: refused, nothing stored.
                    let outside = try await Haul.run(
                        ["get", "--journal", journal, "-d", "s3://haul/out/", f.server.url("/files/t.bin").absoluteString],
                        environment: plain)
                    #expect(outside.status == 1)
                    #expect(outside.stderr.contains("outside the download roots"), "\(outside.stderr)")
                    #expect(try await Self.object("out/t.bin", bucket: "haul", in: server, client: client) == nil)

                    let jobs = try await Haul.jobs(journal, all: true)
                    #expect(Set(jobs.compactMap { $0["destination"] as? String }) == ["s3://haul/in/x/s.bin", "s3://haul/in/t.bin"])
                    service.send(SIGTERM)
                    #expect(await service.wait().status == 0)
                    #expect(Self.staged(journal).isEmpty, "\(Self.staged(journal))")
                }
            }
        }

        /// A busy store's `503 SlowDown` for a part is retried, and said as the download's
        /// retries are (a `retrying` event).
        @Test func aPartTheStoreRefusesAsBusyIsRetriedAndSaid() async throws {
            try await Self.withRelay { server, client, relay, environment in
                try await CLIFixture.with { f, journal in
                    let bytes = f.serve("busy.bin", count: 20_000_000, seed: 31)
                    relay.refuseOnce([2])
                    let run = try await Haul.run(
                        ["get", "--json", "--journal", journal, "-o", "s3://haul/busy.bin", f.server.url("/files/busy.bin").absoluteString],
                        environment: environment)
                    #expect(run.status == 0, "\(run.stderr)")
                    #expect(relay.refused == [2])
                    #expect(relay.passed.sorted() == [1, 2, 3])
                    let retries = run.stdout.split(separator: "\n").filter { $0.contains(#""event":"retrying""#) }
                    #expect(retries.count == 1, "\(run.stdout)")
                    #expect(retries.first?.contains("SlowDown") == true, "\(retries)")
                    #expect(try await Self.object("busy.bin", bucket: "haul", in: server, client: client) == bytes)
                }
            }
        }

        @Test func aCancelledUploadIsAbortedAndNothingAppears() async throws {
            try await Self.withRelay { server, client, relay, environment in
                try await CLIFixture.with { f, journal in
                    _ = f.serve("big.bin", count: 20_000_000, seed: 9)
                    relay.hold { $0 >= 2 }
                    let url = f.server.url("/files/big.bin").absoluteString
                    let first = try HaulProcess(
                        ["get", "-q", "--journal", journal, "-o", "s3://haul/gone.bin", url], environment: environment)
                    let location = try S3Location(bucket: "haul", key: "gone.bin")
                    var pending: [S3PendingUpload] = []
                    let deadline = ContinuousClock.now + .seconds(60)
                    while relay.held.isEmpty || pending.isEmpty, ContinuousClock.now < deadline, first.isRunning {
                        pending = try await client.pendingUploads(location)
                    }
                    #expect(pending.count == 1, "\(first.errorText)")
                    let jobs = try await Haul.jobs(journal)
                    let id = try #require(jobs.first?["id"] as? String)
                    let cancel = try await Haul.run(["cancel", "--journal", journal, id])
                    #expect(cancel.status == 0, "\(cancel.stderr)")
                    let ended = await first.wait()
                    #expect(ended.status != 0)
                    #expect(try await client.pendingUploads(location).isEmpty, "the upload is aborted")
                    #expect(try await Self.object("gone.bin", bucket: "haul", in: server, client: client) == nil)
                    #expect(Self.staged(journal).isEmpty, "\(Self.staged(journal))")
                }
            }
        }

        @Test func wrongCredentialsFailWithTheStoresWordsAndKeepTheDownload() async throws {
            try await SeaweedFS.with { server, client in
                try await Self.makeBucket("haul", client: client, server: server)
                try await CLIFixture.with { f, journal in
                    let bytes = f.serve("f.bin", count: 50_000, seed: 3)
                    var environment = server.environment
                    environment["AWS_SECRET_ACCESS_KEY"] = "wrong-secret"
                    let url = f.server.url("/files/f.bin").absoluteString
                    let run = try await Haul.run(
                        ["get", "--journal", journal, "-o", "s3://haul/f.bin", url], environment: environment)
                    #expect(run.status == 1)
                    #expect(run.stderr.contains("SignatureDoesNotMatch") || run.stdout.contains("SignatureDoesNotMatch"))
                    #expect(!(run.stdout + run.stderr).contains("wrong-secret"), "the secret is never printed")
                    #expect(f.server.requests(path: "/files/f.bin").count == 1)
                    // Put right, the same command finishes from the staged bytes: no second fetch of the body.
                    let again = try await Haul.run(
                        ["get", "-q", "--journal", journal, "-o", "s3://haul/f.bin", url], environment: server.environment)
                    #expect(again.status == 0, "\(again.stderr)")
                    #expect(try await Self.object("f.bin", bucket: "haul", in: server, client: client) == bytes)
                    #expect(f.server.requests(path: "/files/f.bin").count <= 2)

                    var reader = server.environment
                    reader["AWS_ACCESS_KEY_ID"] = "haul-test-reader"
                    let readOnly = try await Haul.run(
                        ["get", "--journal", journal, "-o", "s3://haul/denied.bin", url], environment: reader)
                    #expect(readOnly.status == 1)
                    #expect((readOnly.stdout + readOnly.stderr).contains("AccessDenied"), "\(readOnly.stderr)")

                    var missing = server.environment
                    missing.removeValue(forKey: "AWS_ACCESS_KEY_ID")
                    missing.removeValue(forKey: "AWS_SECRET_ACCESS_KEY")
                    let refused = try await Haul.run(
                        ["get", "--journal", journal, "-o", "s3://haul/g.bin", url], environment: missing)
                    #expect(refused.status == 2)
                    #expect(refused.stderr.contains("AWS_ACCESS_KEY_ID"), "\(refused.stderr)")
                    let bad = try await Haul.run(
                        ["get", "--journal", journal, "-o", "s3://Bad_Bucket/x", url], environment: server.environment)
                    #expect(bad.status == 2)
                    let two = try await Haul.run(
                        ["get", "--journal", journal, "-o", "s3://haul/x", url, url + "?2"], environment: server.environment)
                    #expect(two.status == 2, "one key takes one URL: \(two.stderr)")
                }
            }
        }
    }
}
