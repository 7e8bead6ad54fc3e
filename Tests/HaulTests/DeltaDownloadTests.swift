import Crypto
import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// Delta downloads (zsync) against a real nginx: the target built from an old version's
/// blocks with only the changed ones fetched, the destination's old file as a seed and kept
/// when the result does not match, a seeded partial resumed without a second scan, and
/// `haul get URL.zsync` from the command line. nginx's access log says what crossed the wire.
@Suite(
    "zsync: delta downloads against nginx",
    .enabled(if: NginxServer.isAvailable, "nginx is not installed: run .ci/run or apt-get install nginx"),
    .timeLimit(.minutes(4)))
struct DeltaDownloadTests {
    /// An old version and a new one: the new one has bytes inserted near its start, a
    /// stretch changed in its middle and a different end.
    static func versions(size: Int = 1_500_000) -> (old: [UInt8], new: [UInt8]) {
        let old = FaultServer.randomBytes(count: size, seed: 41)
        var new = Array(old[..<200_000]) + FaultServer.randomBytes(count: 777, seed: 42) + Array(old[200_000...])
        new.replaceSubrange(700_000..<709_000, with: FaultServer.randomBytes(count: 9000, seed: 43))
        new.replaceSubrange((new.count - 5000)..., with: FaultServer.randomBytes(count: 3000, seed: 44))
        return (old, new)
    }

    /// The control file of `target`, as `haul manifest --zsync` and zsyncmake write it.
    static func control(of target: [UInt8], urls: [String] = ["t.bin"]) -> ZsyncControl {
        target.withUnsafeBytes {
            ZsyncControl.describing(
                $0, blockSize: 2048, sequenceMatches: 2, rsumBytes: 3, checksumBytes: 5, filename: "t.bin",
                modificationTime: nil, urls: urls, sha256: true)
        }
    }

    /// The `.deltaPrepared` report of download `id`, if one comes before it ends.
    static func report(_ events: AsyncStream<DownloadManager.Event>, id: DownloadID) -> Task<DeltaReport?, Never> {
        Task {
            var report: DeltaReport?
            for await event in events where event.id == id {
                if case .deltaPrepared(let prepared) = event.event { report = prepared }
                if event.event.isTerminal { break }
            }
            return report
        }
    }

    /// The body bytes nginx sent for `path` in `206` answers, once they reach `expected`
    /// (nginx logs a request just after its last byte), or what it had sent after 10 seconds.
    static func bytesServed(_ nginx: NginxServer, path: String, reaching expected: Int) async throws -> Int {
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            let served = try nginx.accessLog().filter { $0.path == path && $0.status == 206 }
                .reduce(0) { $0 + $1.bodyBytesSent }
            if served >= expected || ContinuousClock.now > deadline { return served }
            await Task.yield()
        }
    }

    /// Whether `served` body bytes are the missing ones and no more than the headers of the
    /// parts of multipart answers (nginx's are about 100 bytes).
    static func isMissingBytesAlone(_ served: Int, _ report: DeltaReport) -> Bool {
        served >= Int(report.missingBytes) && served <= Int(report.missingBytes) + 200 * report.missingRanges
    }

    @Test func anOldVersionGivesItsBlocksAndOnlyTheChangedOnesAreFetched() async throws {
        try await NginxFixture.with { f in
            // Given a new version served with its control file, and the old version on disk
            let (old, new) = Self.versions()
            try f.nginx.write(new, at: "/z/t.bin", modified: f.modified)
            let seed = f.file("old.bin")
            try Data(old).write(to: seed)
            var delta = try DeltaSource(
                controlFile: Self.control(of: new).encoded(), at: f.nginx.url("/z/t.bin.zsync"))
            delta.seeds = [seed]
            #expect(delta.targetURLs == [f.nginx.url("/z/t.bin")])
            let request = DownloadRequest(delta: delta, destination: .file(f.file("t.bin")))
            let report = Self.report(f.manager.events(includingProgress: false), id: request.id)

            // When it is downloaded
            let result = try await f.manager.download(request).result

            // Then the file is the new version, and what was fetched is what the seed lacked:
            // a few blocks around each change, in range requests
            #expect(f.contents("t.bin") == new ? true : false)
            #expect(result.byteCount == Int64(new.count))
            let prepared = try #require(await report.value)
            #expect(prepared.length == Int64(new.count))
            #expect(prepared.reusedBytes + prepared.missingBytes == prepared.length)
            #expect(prepared.missingBytes > 12_000 && prepared.missingBytes < 40_000, "\(prepared)")
            #expect(prepared.scannedBytes == Int64(old.count))
            let served = try await Self.bytesServed(f.nginx, path: "/z/t.bin", reaching: Int(prepared.missingBytes))
            #expect(Self.isMissingBytesAlone(served, prepared))
            #expect(try f.nginx.accessLog().filter { $0.path == "/z/t.bin" }.allSatisfy { $0.status == 206 })
            #expect(f.listing() == ["old.bin", "t.bin"])
        }
    }

    @Test func theOldFileAtTheDestinationIsTheSeedAndStaysWhenTheResultDoesNotMatch() async throws {
        try await NginxFixture.with { f in
            // Given the old version at the destination, and a control file whose digest is
            // not the new version's (a control file older than the file it describes)
            let (old, new) = Self.versions()
            try f.nginx.write(new, at: "/z/t.bin", modified: f.modified)
            try Data(old).write(to: f.file("t.bin"))
            var control = Self.control(of: new)
            control.sha256 = Checksum(.sha256, digest: Array(SHA256.hash(data: Data("another".utf8))))
            let delta = try DeltaSource(controlFile: control.encoded(), at: f.nginx.url("/z/t.bin.zsync"))
            let request = DownloadRequest(delta: delta, destination: .file(f.file("t.bin")))
            let report = Self.report(f.manager.events(includingProgress: false), id: request.id)

            // When it is downloaded
            let error = await #expect(throws: DownloadError.self) { try await f.manager.download(request).result }

            // Then it fails on the digest, having reused the old file's blocks, and the old
            // file is untouched, with no partial left
            #expect(error?.code == .checksumMismatch)
            #expect(error?.message.contains("control file") == true, "\(String(describing: error))")
            #expect(try #require(await report.value).reusedBytes > 1_000_000)
            #expect(f.contents("t.bin") == old ? true : false)
            #expect(f.listing() == ["t.bin"])
        }
    }

    @Test func aSeededPartialResumesWithoutASecondScan() async throws {
        try await NginxFixture.with { f in
            // Given a delta download that seeded its partial, then failed: the server did not
            // have the target yet
            let (old, new) = Self.versions()
            let seed = f.file("old.bin")
            try Data(old).write(to: seed)
            var delta = try DeltaSource(
                controlFile: Self.control(of: new).encoded(), at: f.nginx.url("/z/t.bin.zsync"))
            delta.seeds = [seed]
            let request = DownloadRequest(delta: delta, destination: .file(f.file("t.bin")))
            let first = Self.report(f.manager.events(includingProgress: false), id: request.id)
            let error = await #expect(throws: DownloadError.self) { try await f.manager.download(request).result }
            #expect(error?.statusCode == 404)
            let seeded = try #require(await first.value)
            #expect(f.listing() == ["old.bin", "t.bin.haul-meta", "t.bin.haul-partial"])

            // When the target is there and the download runs again, without its seed
            try FileManager.default.removeItem(at: seed)
            try f.nginx.write(new, at: "/z/t.bin", modified: f.modified)
            let second = Self.report(f.manager.events(includingProgress: false), id: request.id)
            _ = try await f.manager.download(request).result

            // Then it resumed the partial as recorded: no scan, only the missing bytes fetched
            #expect(await second.value == nil)
            #expect(f.contents("t.bin") == new ? true : false)
            let served = try await Self.bytesServed(f.nginx, path: "/z/t.bin", reaching: Int(seeded.missingBytes))
            #expect(Self.isMissingBytesAlone(served, seeded))
            #expect(f.listing() == ["t.bin"])
        }
    }

    /// A new version with `count` small changes spread over it: as many missing ranges.
    static func scattered(_ old: [UInt8], count: Int) -> [UInt8] {
        var new = old
        let step = old.count / (count + 1)
        for index in 1...count {
            new.replaceSubrange((index * step)..<(index * step + 40), with: FaultServer.randomBytes(count: 40, seed: UInt64(100 + index)))
        }
        return new
    }

    /// Downloads `new` from `path` with `old` as the seed; returns the report.
    static func deltaDownload(_ f: NginxFixture, old: [UInt8], new: [UInt8], path: String) async throws -> DeltaReport {
        try f.nginx.write(new, at: path, modified: f.modified)
        let seed = f.file("old.bin")
        try Data(old).write(to: seed)
        var delta = try DeltaSource(controlFile: Self.control(of: new).encoded(), at: f.nginx.url(path + ".zsync"))
        delta.seeds = [seed]
        let request = DownloadRequest(delta: delta, destination: .file(f.file("t.bin")))
        let report = Self.report(f.manager.events(includingProgress: false), id: request.id)
        _ = try await f.manager.download(request).result
        #expect(f.contents("t.bin") == new ? true : false)
        return try #require(await report.value)
    }

    @Test func scatteredRangesGoSeveralToARequestAndComeBackAsMultipartParts() async throws {
        try await NginxFixture.with { f in
            // Given a new version with 120 small changes far apart
            let old = FaultServer.randomBytes(count: 2_000_000, seed: 45)
            let new = Self.scattered(old, count: 120)

            // When it is built from the old one
            let report = try await Self.deltaDownload(f, old: old, new: new, path: "/z/t.bin")

            // Then the missing ranges went in far fewer requests than there are ranges, each
            // answered with the ranges asked for (multipart/byteranges: the parts' headers
            // are sent too, so nginx counts a little more than the bytes)
            #expect(report.missingRanges >= 120)
            let served = try await Self.bytesServed(f.nginx, path: "/z/t.bin", reaching: Int(report.missingBytes))
            let requests = try f.nginx.accessLog().filter { $0.path == "/z/t.bin" }
            #expect(requests.count <= report.missingRanges / 16, "\(requests.count) requests")
            #expect(requests.allSatisfy { $0.status == 206 })
            #expect(requests.contains { $0.range?.contains(",") == true })
            #expect(Self.isMissingBytesAlone(served, report))
        }
    }

    @Test func aServerThatTakesOneRangeIsUsedFromItsWholeAnswerThenAskedOneRangeAtATime() async throws {
        try await NginxFixture.with(directives: "location /one/ { max_ranges 1; }") { f in
            // Given a server that answers a request for several ranges with the whole file
            let old = FaultServer.randomBytes(count: 2_000_000, seed: 46)
            let new = Self.scattered(old, count: 40)

            // When the new version is built from the old one
            let report = try await Self.deltaDownload(f, old: old, new: new, path: "/one/t.bin")

            // Then the whole answers were used, not refused, and every request after them
            // asked for one range
            let requests = try f.nginx.accessLog().filter { $0.path == "/one/t.bin" }
            let whole = requests.filter { $0.status == 200 }
            #expect(!whole.isEmpty)
            #expect(requests.filter { $0.status == 206 }.allSatisfy { $0.range?.contains(",") == false })
            #expect(report.missingRanges >= 40)
        }
    }

    @Test func haulManifestWritesControlFilesThatHaulGetAndZsyncmakeAgreeOn() async throws {
        try await NginxFixture.with { f in
            // Given a published directory with a new version, and the old version here
            let (old, new) = Self.versions()
            try f.nginx.write(new, at: "/pub/t.bin", modified: f.modified)
            let published = f.nginx.root.appendingPathComponent("pub")
            let seed = f.file("old.bin")
            try Data(old).write(to: seed)
            let journal = f.directory.appendingPathComponent("journal.db").path

            // When the publisher writes its manifest with control files, twice
            let manifest = f.directory.appendingPathComponent("manifest.xml")
            for _ in 0..<2 {
                let run = try await Haul.run(["manifest", published.path, "--zsync", "-o", manifest.path])
                #expect(run.status == 0, "\(run.stderr)")
            }

            // Then the control file is beside the file, named by its entry, not listed as a file
            let written = try Data(contentsOf: published.appendingPathComponent("t.bin.zsync"))
            let text = try String(contentsOf: manifest, encoding: .utf8)
            #expect(text.contains(#"path="t.bin""#) && !text.contains(#"path="t.bin.zsync""#))
            #expect(text.contains(#"zsync="t.bin.zsync""#))
            let control = try ZsyncControl.parse(Array(written))
            #expect(control.sha256 != nil && control.filename == "t.bin" && control.urls == ["t.bin"])

            // And, apart from its SHA-256, it is what zsyncmake 0.6.2 writes for the file
            let zsyncmake = "/usr/bin/zsyncmake"
            if FileManager.default.isExecutableFile(atPath: zsyncmake) {
                let reference = f.directory.appendingPathComponent("reference.zsync")
                let made = try await ChildProcess.run(
                    zsyncmake, arguments: ["-u", "t.bin", "-o", reference.path, published.appendingPathComponent("t.bin").path],
                    environment: ProcessInfo.processInfo.environment, timeLimit: .seconds(60), mergingErrors: true)
                #expect(made.termination.code == 0)
                var withoutSHA256 = control
                withoutSHA256.sha256 = nil
                #expect(withoutSHA256.encoded() == Array(try Data(contentsOf: reference)))
            } else {
                print("skipped: comparing with zsyncmake needs Debian's zsync package (.ci/run installs it)")
            }

            // And haul get builds the file from the old version with it
            let out = f.directory.appendingPathComponent("out")
            let run = try await Haul.run([
                "get", f.nginx.url("/pub/t.bin.zsync").absoluteString, "--seed", seed.path, "-d", out.path,
                "--journal", journal,
            ])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(FileManager.default.contents(atPath: out.path + "/t.bin").map(Array.init) == new ? true : false)
        }
    }

    /// Resumed by the same command, or by `haul resume` from the journal alone (which
    /// keeps the control file: its address is not asked again).
    @Test(arguments: [false, true])
    func aDeltaDownloadKilledAfterItsScanResumesWithoutScanningAgain(fromTheJournal: Bool) async throws {
        // (Ranges served at 16 KiB/s: the fetch is still running when the kill comes.)
        try await NginxFixture.with(directives: "location /slowr/ { limit_rate 16k; }") { f in
            // Given a delta download whose process is killed (SIGKILL) as soon as it says
            // its seed was scanned
            let (old, new) = Self.versions()
            try f.nginx.write(new, at: "/slowr/t.bin", modified: f.modified)
            try f.nginx.write(Self.control(of: new).encoded(), at: "/slowr/t.bin.zsync", modified: f.modified)
            let seed = f.file("old.bin")
            try Data(old).write(to: seed)
            let out = f.directory.appendingPathComponent("out")
            let arguments = [
                "get", f.nginx.url("/slowr/t.bin.zsync").absoluteString, "--seed", seed.path, "-d", out.path, "--json",
                "--journal", f.directory.appendingPathComponent("journal.db").path,
            ]
            let killed = try await Haul.run(arguments) { line in line.contains("\"deltaPrepared\"") ? SIGKILL : nil }
            #expect(killed.status != 0, "\(killed.status): \(killed.stderr)")
            let report = try #require(
                killed.stdout.split(separator: "\n").compactMap {
                    try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
                }.first { $0["event"] as? String == "deltaPrepared" })
            let missing = try #require(report["missing"] as? Int)

            // When the same command runs again, or haul resume does, with the control
            // file gone from the server
            let again: Haul.Run
            if fromTheJournal {
                try FileManager.default.removeItem(at: f.nginx.root.appendingPathComponent("slowr/t.bin.zsync"))
                again = try await Haul.run([
                    "resume", "--json", "--journal", f.directory.appendingPathComponent("journal.db").path,
                ])
            } else {
                again = try await Haul.run(arguments)
            }

            // Then it resumes the seeded partial: no second scan, and the file is right,
            // with the missing bytes served once (twice at most, for what was in flight
            // when the first process died)
            #expect(again.status == 0, "\(again.stderr)")
            #expect(!again.stdout.contains("\"deltaPrepared\""))
            #expect(FileManager.default.contents(atPath: out.path + "/t.bin").map(Array.init) == new ? true : false)
            let served = try await Self.bytesServed(f.nginx, path: "/slowr/t.bin", reaching: missing)
            #expect(served >= missing && served <= 2 * missing + 200 * 40, "\(served) bytes for \(missing) missing")
        }
    }

    @Test(arguments: [false, true])
    func haulSyncUpdatesAChangedFileByDeltaWhenTheManifestNamesItsControlFile(atomic: Bool) async throws {
        try await NginxFixture.with { f in
            // Given a directory in step with a published one whose manifest names control files
            let (old, new) = Self.versions()
            let published = f.nginx.root.appendingPathComponent("pub")
            try f.nginx.write(old, at: "/pub/t.bin", modified: f.modified)
            try f.nginx.write(Array("unchanged".utf8), at: "/pub/u.txt", modified: f.modified)
            // (The manifest beside the published directory, with absolute URLs.)
            let manifest = f.nginx.root.appendingPathComponent("manifest.xml")
            let local = f.directory.appendingPathComponent("mirror")
            let journal = f.directory.appendingPathComponent("journal.db").path
            func publish() async throws {
                let run = try await Haul.run([
                    "manifest", published.path, "--zsync", "--base-url", f.nginx.url("/pub").absoluteString, "-o",
                    manifest.path,
                ])
                #expect(run.status == 0, "\(run.stderr)")
            }
            func sync() async throws -> [String: Any] {
                let run = try await Haul.run(
                    ["sync", f.nginx.url("/manifest.xml").absoluteString, local.path, "--json", "--journal", journal]
                        + (atomic ? ["--atomic"] : []))
                #expect(run.status == 0, "\(run.stderr)")
                let events = run.stdout.split(separator: "\n").compactMap {
                    try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
                }
                return try #require(events.last { $0["event"] as? String == "summary" })
            }
            try await publish()
            #expect((try await sync())["reusedBytes"] as? Int == 0)

            // When the file changes a little, is published again, and the directory synced
            try f.nginx.write(new, at: "/pub/t.bin", modified: f.modified.addingTimeInterval(60))
            try await publish()
            let summary = try await sync()

            // Then the file is the new version, built mostly from the old one
            #expect(FileManager.default.contents(atPath: local.path + "/t.bin").map(Array.init) == new ? true : false)
            #expect(!FileManager.default.fileExists(atPath: local.path + "/t.bin.zsync"))
            let reused = try #require(summary["reusedBytes"] as? Int)
            let transferred = try #require(summary["transferredBytes"] as? Int)
            #expect(reused > 1_400_000, "\(summary)")
            #expect(transferred < 60_000, "\(summary)")
            #expect(summary["updated"] as? Int == 1)
        }
    }

    /// How a new version differs from the old one, for the interop cases.
    enum Change: String, CaseIterable, CustomTestStringConvertible {
        case nothing, everything, deletion, movedRange, repeatedBlock, shortLastBlock

        var testDescription: String { rawValue }

        /// The old version and the new one.
        var versions: (old: [UInt8], new: [UInt8]) {
            let old = FaultServer.randomBytes(count: 600_000, seed: 91)
            switch self {
            case .nothing:
                return (old, old)
            case .everything:
                return (old, FaultServer.randomBytes(count: 600_000, seed: 92))
            case .deletion:
                // 5,000 bytes gone: everything after them moves.
                return (old, Array(old[..<100_000] + old[105_000...]))
            case .movedRange:
                return (old, Array(old[300_000..<400_000] + old[..<300_000] + old[400_000...]))
            case .repeatedBlock:
                // Its first four blocks twice over: found once, written twice.
                return (old, Array(old[..<8192] + old))
            case .shortLastBlock:
                return (old, Array(old[..<599_001]) + FaultServer.randomBytes(count: 10, seed: 93))
            }
        }
    }

    /// Haul rebuilds a file from the control file Debian's zsyncmake wrote for it, whatever
    /// changed, fetching what the old version lacks and nothing else.
    @Test(arguments: Change.allCases)
    func haulRebuildsAFileFromZsyncmakesControlFile(change: Change) async throws {
        let zsyncmake = "/usr/bin/zsyncmake"
        guard FileManager.default.isExecutableFile(atPath: zsyncmake) else {
            print("skipped: needs zsyncmake (Debian's zsync package; .ci/run installs it)")
            return
        }
        try await NginxFixture.with { f in
            // Given a new version with zsyncmake's control file beside it, and the old version
            let (old, new) = change.versions
            try f.nginx.write(new, at: "/m/t.bin", modified: f.modified)
            let served = f.nginx.root.appendingPathComponent("m/t.bin")
            let made = try await ChildProcess.run(
                zsyncmake, arguments: ["-u", "t.bin", "-o", served.path + ".zsync", served.path],
                environment: ProcessInfo.processInfo.environment, timeLimit: .seconds(60), mergingErrors: true)
            #expect(made.termination.code == 0, "\(String(decoding: made.output, as: UTF8.self))")
            let control = try Data(contentsOf: URL(fileURLWithPath: served.path + ".zsync"))
            let seed = f.file("old.bin")
            try Data(old).write(to: seed)
            var delta = try DeltaSource(controlFile: control, at: f.nginx.url("/m/t.bin.zsync"))
            delta.seeds = [seed]
            let request = DownloadRequest(delta: delta, destination: .file(f.file("t.bin")))
            let report = Self.report(f.manager.events(includingProgress: false), id: request.id)

            // When it is built
            _ = try await f.manager.download(request).result

            // Then it is the new version, and the bytes served are the ones missing
            #expect(f.contents("t.bin") == new ? true : false)
            let prepared = try #require(await report.value)
            let served206 = try await Self.bytesServed(f.nginx, path: "/m/t.bin", reaching: Int(prepared.missingBytes))
            #expect(Self.isMissingBytesAlone(served206, prepared), "\(served206) served, \(prepared)")
            switch change {
            case .nothing:
                #expect(prepared.missingBytes == 0)
                #expect(try f.nginx.accessLog().filter { $0.path == "/m/t.bin" }.isEmpty)
            case .everything:
                #expect(prepared.reusedBytes < 4096, "\(prepared)")
            case .deletion, .movedRange, .shortLastBlock:
                // A block or two around each edit.
                #expect(prepared.missingBytes <= 3 * 2048, "\(prepared)")
            case .repeatedBlock:
                #expect(prepared.missingBytes == 0, "\(prepared)")
            }
        }
    }

    /// A control file with several `URL`s: each is a source, spread over the connections.
    @Test func theControlFilesURLsAreMirrors() async throws {
        try await NginxFixture.with { f in
            let old = FaultServer.randomBytes(count: 2_000_000, seed: 94)
            let new = Self.scattered(old, count: 40)
            try f.nginx.write(new, at: "/a/t.bin", modified: f.modified)
            try f.nginx.write(new, at: "/b/t.bin", modified: f.modified)
            let seed = f.file("old.bin")
            try Data(old).write(to: seed)
            // (A relative URL and an absolute one.)
            let control = Self.control(of: new, urls: ["t.bin", f.nginx.url("/b/t.bin").absoluteString])
            var delta = try DeltaSource(controlFile: control.encoded(), at: f.nginx.url("/a/t.bin.zsync"))
            delta.seeds = [seed]
            #expect(delta.targetURLs == [f.nginx.url("/a/t.bin"), f.nginx.url("/b/t.bin")])
            var request = DownloadRequest(delta: delta, destination: .file(f.file("t.bin")))
            request.connections = 4
            #expect(request.mirrors == [f.nginx.url("/b/t.bin")])

            _ = try await f.manager.download(request).result

            #expect(f.contents("t.bin") == new ? true : false)
            let log = try f.nginx.accessLog()
            #expect(log.contains { $0.path == "/a/t.bin" } && log.contains { $0.path == "/b/t.bin" }, "\(log)")
        }
    }

    @Test func aControlFileWithOnlyACompressedTargetIsRefusedByName() throws {
        let text = "zsync: 0.6.2\nFilename: t.bin\nBlocksize: 2048\nLength: 0\nZ-URL: t.bin.gz\nSHA-1: \(String(repeating: "0", count: 40))\n\n"
        let error = #expect(throws: DownloadError.self) {
            try DeltaSource(controlFile: Array(text.utf8), at: URL(string: "http://127.0.0.1/t.bin.zsync")!)
        }
        #expect(error?.code == .invalidManifest)
        #expect(error?.message.contains("Z-URL") == true)
    }

    @Test func haulGetBuildsTheTargetOfAControlURL() async throws {
        try await NginxFixture.with { f in
            // Given a new version with its control file on the server, and the old one here
            let (old, new) = Self.versions()
            try f.nginx.write(new, at: "/z/t.bin", modified: f.modified)
            try f.nginx.write(Self.control(of: new).encoded(), at: "/z/t.bin.zsync", modified: f.modified)
            let seed = f.file("old.bin")
            try Data(old).write(to: seed)
            let out = f.directory.appendingPathComponent("out")
            let journal = f.directory.appendingPathComponent("journal.db").path

            // When haul gets the control file's URL with the old version as a seed
            let run = try await Haul.run([
                "get", f.nginx.url("/z/t.bin.zsync").absoluteString, "--seed", seed.path, "-d", out.path, "--json",
                "--journal", journal,
            ])

            // Then the target is there under the control file's name, and the events say
            // what was reused
            #expect(run.status == 0, "\(run.stderr)")
            #expect(FileManager.default.contents(atPath: out.path + "/t.bin").map(Array.init) == new ? true : false)
            let events = run.stdout.split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
            let prepared = try #require(events.first { $0["event"] as? String == "deltaPrepared" })
            #expect((prepared["reused"] as? Int ?? 0) > 1_000_000)
            #expect((prepared["length"] as? Int) == new.count)

            // And a seed without a URL that could be a control file is a usage error
            let list = f.file("list.txt")
            try Data((f.nginx.url("/z/t.bin").absoluteString + "\n").utf8).write(to: list)
            let misuse = try await Haul.run(["get", "-i", list.path, "--seed", seed.path, "--journal", journal])
            #expect(misuse.status == 2)
            #expect(misuse.stderr.contains("--seed is for delta downloads"))
        }
    }

    /// A URL that does not end in `.zsync` but answers with a control file is recognised by
    /// its content once downloaded: the control file is kept, and its target is built from
    /// the old version at the destination, fetching only what changed. Run again, it
    /// fetches nothing of the target.
    @Test func aControlFileIsRecognisedByItsContent() async throws {
        try await NginxFixture.with { f in
            // Given a control file served as "latest", its target beside it, and the old
            // version where the target goes
            let (old, new) = Self.versions()
            let control = Array(Self.control(of: new).encoded())
            try f.nginx.write(new, at: "/z/t.bin", modified: f.modified)
            try f.nginx.write(control, at: "/z/latest", modified: f.modified)
            let out = f.directory.appendingPathComponent("out")
            try FileManager.default.createDirectory(at: out, withIntermediateDirectories: true)
            try Data(old).write(to: out.appendingPathComponent("t.bin"))
            let journal = f.directory.appendingPathComponent("journal.db").path
            let arguments = ["get", f.nginx.url("/z/latest").absoluteString, "-d", out.path, "--json", "--journal", journal]

            // When haul gets its URL
            let run = try await Haul.run(arguments)

            // Then the control file is there as it was served, and so is its target, built
            // from the old version with only the changed blocks fetched
            #expect(run.status == 0, "\(run.stderr)")
            #expect(FileManager.default.contents(atPath: out.path + "/latest").map(Array.init) == control)
            #expect(FileManager.default.contents(atPath: out.path + "/t.bin").map(Array.init) == new ? true : false, "\(run.stderr)")
            let events = run.stdout.split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
            let prepared = try #require(events.first { $0["event"] as? String == "deltaPrepared" })
            let missing = try #require(prepared["missing"] as? Int, "\(prepared)")
            #expect((prepared["reused"] as? Int ?? 0) > 1_000_000 && missing > 0)
            let served = try await Self.bytesServed(f.nginx, path: "/z/t.bin", reaching: missing)
            #expect(served >= missing && served < missing + 200 * (prepared["ranges"] as? Int ?? 1), "\(served)")
            #expect(try f.nginx.accessLog().filter { $0.path == "/z/t.bin" }.allSatisfy { $0.status == 206 })

            // And the same command again finds the target whole in the file it built
            let requestsBefore = try f.nginx.accessLog().filter { $0.path == "/z/t.bin" }.count
            let again = try await Haul.run(arguments)
            #expect(again.status == 0, "\(again.stderr)")
            #expect(FileManager.default.contents(atPath: out.path + "/t.bin").map(Array.init) == new ? true : false)
            #expect(try f.nginx.accessLog().filter { $0.path == "/z/t.bin" }.count == requestsBefore)
        }
    }
}

/// Delta downloads over HTTPS, with HTTP/2 offered, from nginx and Apache (`mod_http2`,
/// which answers several ranges its own way): the scattered ranges go several to a request
/// there too, and the file is right.
@Suite(
    "zsync: delta downloads over HTTPS and HTTP/2",
    .enabled(if: NginxServer.isAvailable, "nginx is not installed: run .ci/run or apt-get install nginx"),
    .enabled(if: ApacheServer.isAvailable, "Apache is not installed: run .ci/run or apt-get install apache2"),
    .enabled(if: TestCertificates.openssl != nil, "openssl is not installed: apt-get install openssl"),
    .timeLimit(.minutes(4)))
struct DeltaOverHTTPSTests {
    @Test(arguments: HTTP2Server.allCases)
    func scatteredRangesComeSeveralToAStreamOverHTTP2(server: HTTP2Server) async throws {
        try await server.with(directives: "") { certificates, origin in
            // Given a new version with 60 small changes far apart, over HTTPS
            let old = FaultServer.randomBytes(count: 2_000_000, seed: 47)
            let new = DeltaDownloadTests.scattered(old, count: 60)
            try origin.write(new, at: "/d/t.bin", modified: HTTP2Tests.anHourAgo)
            let seed = certificates.directory.appendingPathComponent("old.bin")
            try Data(old).write(to: seed)
            let out = certificates.directory.appendingPathComponent("out")
            try FileManager.default.createDirectory(at: out, withIntermediateDirectories: true)
            var delta = try DeltaSource(
                controlFile: DeltaDownloadTests.control(of: new).encoded(), at: origin.url("/d/t.bin.zsync"))
            delta.seeds = [seed]
            let manager = DownloadManager(
                configuration: HTTP2Tests.configuration(certificates), eventLoopGroup: TestResources.group,
                threadPool: TestResources.pool)

            // When it is built from the old one
            var failure: (any Error)?
            do {
                _ = try await manager.download(
                    DownloadRequest(delta: delta, destination: .file(out.appendingPathComponent("t.bin")))
                ).result
            } catch {
                failure = error
            }
            await manager.shutdown()

            // Then it is right, every request went over HTTP/2, and far fewer requests than
            // missing ranges were made
            if let failure { throw failure }
            #expect(FileManager.default.contents(atPath: out.path + "/t.bin").map(Array.init) == new ? true : false)
            let requests = try await HTTP2Tests.logEntries(of: origin, atLeast: 1) { $0.path == "/d/t.bin" }
            #expect(requests.allSatisfy { $0.protocol == "HTTP/2.0" }, "\(requests)")
            #expect(requests.count <= 60 / 8, "\(requests.count) requests")
        }
    }
}
