import Crypto
import Foundation
import HaulTestSupport
import NIOCore
import NIOPosix
import Testing

@testable import Haul

/// Segmented downloads: one file over several ranged connections, written at offsets.
@Suite("Segmented downloads", .timeLimit(.minutes(4)))
struct SegmentedTests {
    static let size = 24 << 20

    static func segmented(_ connections: Int = 4) -> (inout DownloadManager.Configuration) -> Void {
        { configuration in
            configuration.segmentedConnections = connections
            configuration.maxConnectionsPerHost = 8
        }
    }

    static func ranges(_ requests: [RecordedRequest]) -> [String] {
        requests.compactMap { $0.header("Range") }
    }

    @Test func aLargeFileIsSplitAcrossConnectionsAndVerified() async throws {
        try await Fixture.with(Self.segmented(4)) { f in
            let bytes = f.serve("big", count: Self.size)
            let digest = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()

            // Each response trickles at 256 KiB/s (the rest would take a minute: splitting
            // pays at once, however slow the machine) until the test has seen the first
            // response joined by the three others; then all come at full speed.
            let handle = try await f.manager.download(
                f.request(Self.trickling("big"), checksum: try Checksum(.sha256, hex: digest)))
            await f.server.waitForRequests(count: 4, path: "/files/big")
            f.server.release("split")
            let result = try await handle.result

            #expect(result.byteCount == Int64(Self.size))
            #expect(sha256(f.contents("big")) == sha256(bytes))
            #expect(f.listing() == ["big"])
            let requests = f.server.requests(path: "/files/big")
            // The first request learns the size and goes on as the first segment's (it is
            // not asked for again); then three ranged requests for the others (or more,
            // when a connection that finishes early takes half of another's range).
            #expect(requests.first?.header("Range") == nil)
            let ranged = requests.dropFirst()
            #expect(ranged.count >= 3)
            #expect(ranged.allSatisfy { $0.header("If-Range") == f.server.etag(forFile: "big") })
            #expect(Self.dividesTheRest(Self.ranges(Array(ranged)), 4), "\(Self.ranges(Array(ranged)))")
            #expect(!Self.ranges(Array(ranged)).contains { $0.hasPrefix("bytes=0-") })
            #expect(f.server.statistics.maxInFlightRequests >= 4)
            // Every byte crossed the wire once, plus what the first response had already sent
            // past its segment's end when it was cut there (on loopback, up to the socket
            // buffers).
            #expect(f.server.bytesServed(path: "/files/big") < Self.size + (12 << 20))
        }
    }

    /// A path on the fault server whose responses trickle at 256 KiB/s until the gate
    /// `split` opens: splitting pays at once (``SplitRule``), and the test opens it once it
    /// has seen the connections it expects.
    static func trickling(_ name: String) -> String {
        "/files/\(name)?gate=split&gate_after=0&gate_rate=\(256 << 10)"
    }

    /// Whether `n - 1` of `ranges` divide the rest of the 24 MiB content `n` ways, as it is
    /// divided when the other connections join the first response (which goes on with the
    /// first part, so its range is not asked for): adjacent, about equal (on 64 KiB
    /// boundaries), the last up to the end. (Ranges stolen later may come before the last
    /// of them is asked for, on a loaded machine: the order is not checked.)
    static func dividesTheRest(_ ranges: [String], _ n: Int) -> Bool {
        let parsed = Set(ranges).compactMap { range -> (Int, Int)? in
            let bounds = range.dropFirst("bytes=".count).split(separator: "-").compactMap { Int($0) }
            return bounds.count == 2 ? (bounds[0], bounds[1]) : nil
        }
        // (A chain of parts, each starting where the one before ends: a part stolen later
        // has half a part's length, and is not mistaken for one.)
        for first in parsed where first.0 > 0 {
            let length = first.1 - first.0
            var chain = [first]
            while chain.count < n - 1,
                let next = parsed.first(where: { $0.0 == chain[chain.count - 1].1 + 1 && abs($0.1 - $0.0 - length) <= 2 << 16 })
            {
                chain.append(next)
            }
            if chain.count == n - 1, chain[chain.count - 1].1 == size - 1 { return true }
        }
        return false
    }

    @Test func eightConnectionsAreEightAboveTheDefaultPerHostCap() async throws {
        // (the per-host cap left at its default, 6)
        try await Fixture.with({ $0.segmentedConnections = 8 }) { f in
            let bytes = f.serve("wide", count: Self.size)
            let handle = try await f.manager.download(f.request(Self.trickling("wide")))
            await f.server.waitForRequests(count: 8, path: "/files/wide")
            f.server.release("split")
            _ = try await handle.result
            #expect(sha256(f.contents("wide")) == sha256(bytes))
            let ranged = Array(f.server.requests(path: "/files/wide").dropFirst())
            #expect(Self.dividesTheRest(Self.ranges(ranged), 8), "\(Self.ranges(ranged))")
        }
    }

    @Test func aRequestsOwnConnectionsHoldAcrossAResumeFromTheJournal() async throws {
        try await Fixture.with(journal: true, { $0.segmentedConnections = 2 }) { f in
            // Given a large download asking for 8 connections of its own (the manager's
            // default is 2), stopped before it starts, as a process stops
            let bytes = f.serve("own", count: Self.size)
            var request = DownloadRequest(
                url: f.server.url("/files/own?gate=o&rate=\(1 << 20)"), destination: .directory(f.directory))
            request.connections = 8
            try await f.manager.enqueue([request])
            await f.server.waitForGateWaiters("o", count: 1)
            await f.manager.shutdown()

            // When the next process resumes it from the journal
            f.server.release("o")
            let later = f.makeManager()
            #expect(try await later.resumeUnfinished() == 1)
            await later.waitUntilIdle()
            await later.shutdown()

            // Then it used more than the manager's 2: with those, no more than 3 requests
            // are ever in flight (the first process's, still being answered, included).
            // (At 1 MiB/s a response, splitting pays at once. How the rest is divided is
            // not checked: on a loaded machine a part may be split again, or stolen, before
            // it is asked for.)
            #expect(sha256(f.contents("own")) == sha256(bytes))
            let ranged = f.server.requests(path: "/files/own").filter { $0.header("Range") != nil }
            #expect(f.server.statistics.maxInFlightRequests >= 4, "\(Self.ranges(ranged))")
            #expect(Set(Self.ranges(ranged)).count >= 7, "\(Self.ranges(ranged))")
        }
    }

    @Test func aPerHostCapThatWasSetClampsTheConnections() async throws {
        try await Fixture.with({
            $0.segmentedConnections = 8
            $0.maxConnectionsPerHost = 4
        }) { f in
            let bytes = f.serve("narrow", count: Self.size)
            let handle = try await f.manager.download(f.request(Self.trickling("narrow")))
            await f.server.waitForRequests(count: 4, path: "/files/narrow")
            f.server.release("split")
            _ = try await handle.result
            #expect(sha256(f.contents("narrow")) == sha256(bytes))
            let ranged = Array(f.server.requests(path: "/files/narrow").dropFirst())
            #expect(Self.dividesTheRest(Self.ranges(ranged), 4), "\(Self.ranges(ranged))")
        }
    }

    @Test(arguments: ["ignore_range=1", "no_validators=1"])
    func withoutRangesOrAValidatorOneConnectionIsUsed(knob: String) async throws {
        try await Fixture.with(Self.segmented(4)) { f in
            let bytes = f.serve("plain", count: Self.size)
            let result = try await f.manager.download(f.request("/files/plain?\(knob)")).result
            #expect(result.byteCount == Int64(Self.size))
            #expect(sha256(f.contents("plain")) == sha256(bytes))
            #expect(f.server.requests(path: "/files/plain").count == 1, "\(knob)")
        }
    }

    @Test func filesBelowTheThresholdUseOneConnection() async throws {
        try await Fixture.with(Self.segmented(4)) { f in
            f.serve("small", count: (16 << 20) - 1)
            _ = try await f.manager.download(f.request("/files/small")).result
            #expect(f.server.requests(path: "/files/small").count == 1)
        }
    }

    @Test func segmentsSurviveConnectionResets() async throws {
        try await Fixture.with(Self.segmented(4)) { f in
            let bytes = f.serve("flaky", count: Self.size)
            // Three responses are cut after 1 MB each (the first is the size probe).
            let result = try await f.manager.download(
                f.request("/files/flaky?reset_after=1000000&reset_times=4&reset_fin=1")
            ).result
            #expect(result.byteCount == Int64(Self.size))
            #expect(sha256(f.contents("flaky")) == sha256(bytes))
            #expect(f.server.bytesServed(path: "/files/flaky") < Self.size + (16 << 20))
        }
    }

    @Test func aPausedSegmentedDownloadResumesEachSegmentWhereItStood() async throws {
        let configure = Self.segmented(4)
        try await Fixture.with({ configure(&$0); $0.idleTimeout = .seconds(600) }) { f in
            let bytes = f.serve("slow", count: Self.size)
            // The first response (which goes on as the first segment's) and the three other
            // segments stall after 2 MiB each, so the pause (after 4 MiB in all) lands with
            // every segment unfinished; the requests after it are answered in full.
            let handle = try await f.manager.download(f.request("/files/slow?stall_after=\(2 << 20)&stall_times=4"))
            await firstEvent(handle.events) { event -> Bool? in
                if case .progress(let progress) = event, progress.completedBytes > 4 << 20 { return true }
                return nil
            }
            let events = handle.events
            await handle.pause()
            await firstEvent(events) { event -> Bool? in
                if case .paused = event { return true }
                return nil
            }

            // The sidecar lists what is missing, segment by segment.
            let metadata = try #require(PartialMetadata.load(from: f.file("slow.haul-meta").path))
            let missing = try #require(metadata.ranges(currentBoot: ProcessIdentity.bootID))
            #expect(missing.count == 4)
            let held = Int64(Self.size) - missing.reduce(0) { $0 + $1.1 - $1.0 }
            #expect(held > 4 << 20)
            let before = f.server.requests(path: "/files/slow").count

            await handle.resume()
            let result = try await handle.result

            #expect(result.byteCount == Int64(Self.size))
            #expect(sha256(f.contents("slow")) == sha256(bytes))
            let resumed = f.server.requests(path: "/files/slow").dropFirst(before)
            let starts = Set(resumed.compactMap { $0.header("Range") }.map { String($0.dropFirst(6).prefix { $0 != "-" }) })
            for range in missing { #expect(starts.contains(String(range.0)), "no request resumed at \(range.0)") }
        }
    }

    /// A segment whose response stalls has its bytes in the file, and its progress in the
    /// sidecar, at once: a kill now would lose none of them. (One connection resuming one
    /// range, so the first progress event covers every byte; the idle timeout is far beyond
    /// the suite's time limit, so nothing races it.)
    @Test func aStalledSegmentsBytesReachTheFileAndTheSidecarWhileItStalls() async throws {
        try await Fixture.with({ $0.segmentedConnections = 1; $0.idleTimeout = .seconds(600) }) { f in
            let total = 4 << 20
            let bytes = f.serve("held", count: total, etag: .custom("held-v1"))
            let url = f.server.url("/files/held?gate=held&stall_after=1000")
            // An earlier run left the first MiB and a sidecar saying the rest is missing.
            _ = FileManager.default.createFile(
                atPath: f.file("held.haul-partial").path, contents: Data(bytes[..<(1 << 20)]))
            try PartialMetadata(
                url: url.absoluteString, validator: .etag("\"held-v1\""), totalBytes: Int64(total),
                remaining: [[1 << 20, Int64(total)]]
            ).save(to: f.file("held.haul-meta").path)

            let handle = try await f.manager.download(f.request("/files/held?gate=held&stall_after=1000"))
            let events = handle.events
            f.server.release("held")
            let reached = await firstEvent(events) { event -> Int64? in
                switch event {
                case .progress(let progress) where progress.completedBytes > 1 << 20: progress.completedBytes
                case .retrying, .failed, .completed: -1
                default: nil
                }
            }
            let written: Int64 = (1 << 20) + 1000
            #expect(reached == written)
            let metadata = try #require(PartialMetadata.load(from: f.file("held.haul-meta").path))
            #expect(metadata.unsyncedRemaining == [[written, Int64(total)]])
            #expect(metadata.bootID == ProcessIdentity.bootID)
            #expect(metadata.ranges(currentBoot: ProcessIdentity.bootID)?.first?.0 == written)
            // Still the first ranged response, still stalled.
            let requests = f.server.requests(path: "/files/held")
            #expect(requests.map { $0.header("Range") } == ["bytes=1048576-4194303"])
            #expect(f.server.statistics.inFlightRequests == 1)
            await handle.cancel()
        }
    }

    /// Progress is rewritten in place after the sidecar's document; a later atomic save
    /// drops it, and a record that cannot be read leaves the document's word.
    @Test func progressRecordsAreRewrittenInPlaceAndReadBack() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-meta-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("f.haul-meta").path
        var metadata = PartialMetadata(
            url: "http://127.0.0.1/f", validator: .etag("\"v1\""), totalBytes: 100, remaining: [[0, 100]])
        let length = try metadata.save(to: path)

        metadata.bootID = "boot-a"
        metadata.unsyncedRemaining = [[10, 50], [60, 100]]
        #expect(try metadata.saveProgress(to: path, documentLength: length))
        metadata.unsyncedRemaining = [[20, 50]]
        #expect(try metadata.saveProgress(to: path, documentLength: length))
        let loaded = try #require(PartialMetadata.load(from: path))
        #expect(loaded.unsyncedRemaining == [[20, 50]])
        #expect(loaded.remaining == [[0, 100]])
        #expect(loaded.ranges(currentBoot: "boot-a")?.map { [$0.0, $0.1] } == [[20, 50]])
        #expect(loaded.ranges(currentBoot: "boot-b")?.map { [$0.0, $0.1] } == [[0, 100]])

        // A torn record is ignored.
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        try handle.seek(toOffset: UInt64(PartialMetadata.progressOffset(documentLength: length)) + 5)
        try handle.write(contentsOf: Data("\u{1}garbage".utf8))
        try handle.close()
        #expect(PartialMetadata.load(from: path)?.unsyncedRemaining == nil)

        // An atomic save replaces document and record.
        metadata.remaining = [[30, 50]]
        metadata.unsyncedRemaining = [[30, 50]]
        try metadata.save(to: path)
        #expect(PartialMetadata.load(from: path)?.unsyncedRemaining == [[30, 50]])
        #expect(PartialMetadata.load(from: path)?.remaining == [[30, 50]])
    }

    /// A delta download's record holds tens of thousands of ranges, written digit by digit:
    /// the sidecar is JSON any decoder reads, with every range, the largest offsets too, and
    /// a record too big for a page goes into the document.
    @Test func aSidecarWithThousandsOfRangesIsJSONThatReadsBack() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-meta-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("f.haul-meta").path
        let ranges: [[Int64]] = (0..<20_000).map { [Int64($0) * 4096, Int64($0) * 4096 + 100] } + [[0, Int64.max]]
        var metadata = PartialMetadata(url: "http://127.0.0.1/f \"quoted\"", validator: nil, totalBytes: Int64.max, remaining: ranges)
        metadata.bootID = "boot-a"
        metadata.unsyncedRemaining = Array(ranges.dropFirst(7))
        let length = try metadata.save(to: path)
        #expect(try metadata.saveProgress(to: path, documentLength: length) == false)
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let document = try JSONSerialization.jsonObject(with: data.prefix(length - 1)) as? [String: Any]
        #expect((document?["remaining"] as? [[Int64]])?.count == ranges.count)
        let loaded = try #require(PartialMetadata.load(from: path))
        #expect(loaded == metadata)

        // Empty lists stay lists; absent ones stay absent.
        var empty = PartialMetadata(url: "http://127.0.0.1/g", validator: .etag("\"v\""), totalBytes: 0, remaining: [])
        try empty.save(to: path)
        #expect(PartialMetadata.load(from: path) == empty)
        empty.remaining = nil
        try empty.save(to: path)
        #expect(PartialMetadata.load(from: path) == empty)
    }

    /// The first run cannot finish before the pause: its size probe and its four segments
    /// each stall after 2 MiB (and the idle timeout is far beyond the suite's time limit).
    /// The requests after the pause are answered in full.
    @Test func contentThatChangesWhilePausedIsDownloadedWholeAgain() async throws {
        let configure = Self.segmented(4)
        try await Fixture.with({ configure(&$0); $0.idleTimeout = .seconds(600) }) { f in
            f.serve("moving", count: Self.size, seed: 1)
            let handle = try await f.manager.download(f.request("/files/moving?stall_after=\(2 << 20)&stall_times=5"))
            await firstEvent(handle.events) { event -> Bool? in
                if case .progress(let progress) = event, progress.completedBytes > 4 << 20 { return true }
                return nil
            }
            await handle.pause()
            let newer = f.serve("moving", count: Self.size, seed: 2)
            await handle.resume()
            let result = try await handle.result
            #expect(result.byteCount == Int64(Self.size))
            #expect(sha256(f.contents("moving")) == sha256(newer))
            // After the pause the segments asked to go on (If-Range), and the new content
            // came whole instead.
            #expect(f.server.requests(path: "/files/moving").dropFirst(5).contains { $0.header("If-Range") != nil })
        }
    }
}

/// The range bookkeeping on its own.
@Suite("Segment table")
struct SegmentTableTests {
    /// Times for the table's clock, in milliseconds after an arbitrary start.
    static let start = ContinuousClock.now
    static func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }

    /// The checksum is computed as the file fills in from its start: segments written out
    /// of order are hashed only once everything before them is in, so the digest is the
    /// content's (hashing up to the furthest byte written would take the holes' zeros), and
    /// the whole file is hashed before the end is asked for.
    @Test func theChecksumFollowsTheFileAsItFillsInFromItsStart() async throws {
        let segment = Int(PrefixDigest.stride)
        let content = (0..<(3 * segment)).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("haul-prefix-\(UUID().uuidString)").path
        defer { unlink(path) }
        let file = try PartialFile(path: path)
        let table = SegmentTable(
            total: Int64(content.count), remaining: [(0, Int64(content.count))], connections: 2, minimumSplit: 1 << 20)
        let claims = (0..<2).compactMap { _ in table.claim(at: Self.at(0)) }.sorted { $0.start < $1.start }
        #expect(claims.count == 2 && claims.allSatisfy { $0.end - $0.start >= PrefixDigest.stride })
        let pool = NIOThreadPool(numberOfThreads: 2)
        pool.start()
        let prefix = PrefixDigest(.sha256, file: file, table: table, threadPool: pool)
        // The second segment first (the job can hash nothing), then the first.
        var hashed: [Int64] = []
        for claim in [claims[1], claims[0]] {
            let bytes = content[Int(claim.start)..<Int(claim.end)]
            try file.write(ByteBuffer(bytes: bytes), at: claim.start)
            _ = table.reserve(claim.index, bytes.count)
            table.wrote(claim.index, upTo: claim.end, at: Self.at(10))
            prefix.wrote(bytes.count)
            await prefix.settled()
            hashed.append(prefix.hashedBytes)
        }
        #expect(hashed == [0, Int64(content.count)])
        #expect(table.firstMissing() == Int64(content.count))
        let digest = try #require(await prefix.finish())
        #expect(digest.byteCount == Int64(content.count))
        #expect(digest.hex() == SHA256.hash(data: content).map { String(format: "%02x", $0) }.joined())
        try await pool.shutdownGracefully()
    }

    @Test func splitsIntoAlignedSegmentsAndStealsHalfOfTheLargest() {
        let table = SegmentTable(total: 64 << 20, remaining: [(0, 64 << 20)], connections: 4, minimumSplit: 1 << 20)
        let claims = (0..<4).compactMap { _ in table.claim(at: Self.at(0)) }
        #expect(claims.map(\.start).sorted() == [0, 16 << 20, 32 << 20, 48 << 20])
        #expect(claims.allSatisfy { $0.end - $0.start == 16 << 20 })

        // The first segment finishes; the others have written 1, 2 and 3 MiB.
        let first = claims.first { $0.start == 0 }!
        _ = table.reserve(first.index, 16 << 20)
        table.wrote(first.index, upTo: 16 << 20, at: Self.at(100))
        for (offset, claim) in claims.filter({ $0.start != 0 }).sorted(by: { $0.start < $1.start }).enumerated() {
            _ = table.reserve(claim.index, (offset + 1) << 20)
            table.wrote(claim.index, upTo: claim.start + Int64((offset + 1) << 20), at: Self.at(100))
        }
        // The idle connection takes the back half of the largest remaining range: 17..32 MiB
        // is 15 MiB left, from the segment at 16 MiB, split at 24.5 MiB.
        let stolen = try! #require(table.claim(at: Self.at(0)))
        #expect(stolen.start == (16 << 20) + (1 << 20) + (15 << 19))
        #expect(stolen.end == 32 << 20)
        // Its old owner now stops at the split.
        let owner = claims.first { $0.start == 16 << 20 }!
        let reservation = table.reserve(owner.index, 64 << 20)
        let (offset, allowed) = (reservation.offset, reservation.count)
        #expect(offset == 17 << 20)
        #expect(Int64(allowed) == stolen.start - (17 << 20))
        #expect(table.completed == (16 << 20) + (6 << 20))
    }

    /// How a request for several ranges ended, from its shares: a change wins (every
    /// share starts over), then the first failure, else done.
    @Test(arguments: [
        ([], "done"),
        (["done", "done"], "done"),
        (["done", "failed a", "failed b"], "failed a"),
        (["failed a", "changed x", "done", "changed y"], "changed x"),
    ] as [([String], String)])
    func aBatchEndsAsItsSharesSay(shares: [String], expected: String) {
        typealias Ending = TransferMachine.SegmentResponse.Ending
        func ending(_ text: String) -> Ending {
            let parts = text.split(separator: " ").map(String.init)
            switch parts[0] {
            case "changed": return .changed(parts[1])
            case "failed": return .failed(DownloadError(.network, parts[1]))
            default: return .done
            }
        }
        #expect(Ending.combining(shares.map(ending)) == ending(expected))
    }

    /// A request for several ranges takes further unclaimed segments whole, in order of
    /// their offsets, within a count and a byte budget, and none another claim holds.
    @Test func moreClaimsForOneRequestAreWholeUnclaimedSegmentsInOrder() {
        let ranges: [(Int64, Int64)] = [(0, 100), (1000, 1100), (2000, 2500), (3000, 3010), (4000, 4100), (5000, 9000)]
        let table = SegmentTable(total: 10_000, remaining: ranges, connections: 1, minimumSplit: 1 << 20)
        let first = table.claim(at: Self.at(0))!
        let other = table.claim(at: Self.at(0))!
        #expect((first.start, other.start) == (0, 1000))
        // At most three more, 700 bytes in all with the first's 100: 2000..<2500 and
        // 3000..<3010 fit, 4000..<4100 would not.
        let more = table.claimMore(after: first, for: nil, count: 3, bytes: 700, at: Self.at(0))
        #expect(more.map { [$0.start, $0.end] } == [[2000, 2500], [3000, 3010]])
        // Claimed: the next connection takes what is left, in order.
        #expect(table.claim(at: Self.at(0))?.start == 4000)
        #expect(table.claimMore(after: first, for: nil, count: 0, bytes: 1 << 20, at: Self.at(0)).isEmpty)
        #expect(table.claimMore(after: first, for: nil, count: 5, bytes: 1 << 20, at: Self.at(0)).map(\.start) == [5000])
    }

    /// An adopted first response holds the whole content; when the others join, what it
    /// has left is divided: it keeps the first part (and stops there), the others claim
    /// the rest in order, on 64 KiB boundaries. Too little left to divide: nothing changes.
    @Test func theFirstResponsesRestIsDividedWhenTheOthersJoin() {
        let table = SegmentTable(total: 64 << 20, remaining: [(0, 64 << 20)], connections: 1, minimumSplit: 1 << 20)
        let first = table.claim(at: Self.at(0))!
        #expect(first.start == 0 && first.end == 64 << 20)
        #expect(table.claim(at: Self.at(0)) != nil)  // (stealing works as before: undone below)
        let again = SegmentTable(total: 64 << 20, remaining: [(0, 64 << 20)], connections: 1, minimumSplit: 1 << 20)
        let adopted = again.claim(at: Self.at(0))!
        _ = again.reserve(adopted.index, 1 << 20)
        again.wrote(adopted.index, upTo: 1 << 20, at: Self.at(10))
        again.divide(adopted.index, into: 4)
        let others = (0..<3).compactMap { _ in again.claim(at: Self.at(10)) }
        // 63 MiB left, in four parts of 15.75 MiB (on 64 KiB boundaries)
        let quarter: Int64 = 63 << 18
        let starts: [Int64] = [(1 << 20) + quarter, (1 << 20) + 2 * quarter, (1 << 20) + 3 * quarter]
        #expect(others.map(\.start) == starts)
        #expect(others.last?.end == 64 << 20)
        #expect(zip(others, others.dropFirst()).allSatisfy { $0.end == $1.start })
        // The first response stops where the first of them starts.
        let reservation = again.reserve(adopted.index, 64 << 20)
        #expect(reservation.offset == 1 << 20)
        #expect(Int64(reservation.count) == others[0].start - (1 << 20))
        #expect(reservation.stops)

        // Less than two minimum splits left: not divided.
        let small = SegmentTable(total: 3 << 20, remaining: [(0, 3 << 20)], connections: 1, minimumSplit: 1 << 20)
        let whole = small.claim(at: Self.at(0))!
        _ = small.reserve(whole.index, (3 << 20) - (1 << 19))
        small.divide(whole.index, into: 4)
        #expect(small.remaining().count == 1)
        #expect(small.reserve(whole.index, 1 << 20).count == 1 << 19)
    }

    /// Two segments of 192 KiB across sources 0 and 1 (too small to split at 128 KiB), the
    /// second (source 1) 64 KiB into its request; the first is done.
    private func endGame() -> (SegmentTable, fast: SegmentTable.Claim, slow: SegmentTable.Claim) {
        let table = SegmentTable(total: 384 << 10, remaining: [(0, 384 << 10)], connections: 2, minimumSplit: 128 << 10)
        let fast = table.claim(at: Self.at(0))!
        let slow = table.claim(at: Self.at(0))!
        table.hold(fast.index, by: 0)
        table.hold(slow.index, by: 1)
        _ = table.reserve(fast.index, 192 << 10)
        table.wrote(fast.index, upTo: 192 << 10, at: Self.at(100))
        _ = table.reserve(slow.index, 64 << 10)
        return (table, fast, slow)
    }

    @Test func anIdleConnectionChasesTheRestOfAnotherSourcesRangeAndTakesItOverOnceAhead() throws {
        let (table, _, slow) = endGame()
        // Nothing to split: source 0 is not given work by stealing, nor by a chase unless asked
        #expect(table.claim(for: 0, at: Self.at(500)) == nil)
        let chase = try #require(table.claim(for: 0, chasing: true, at: Self.at(500)))
        #expect(chase.start == slow.start + (64 << 10))
        #expect(chase.end == slow.end)
        // No second chaser for the same range
        #expect(table.claim(for: 2, chasing: true, at: Self.at(500)) == nil)

        // While the chased connection takes 24 KiB more, the chaser's first 16 KiB are passed over
        #expect(table.reserve(slow.index, 24 << 10).count == 24 << 10)
        let behind = table.reserve(chase.index, 16 << 10)
        #expect(behind.count == 0)
        #expect(behind.skipped == 16 << 10)
        #expect(!behind.stops)
        #expect(behind.stopping == nil)
        // Its next 32 KiB get ahead: the 24 KiB not taken are written, and the chased one stops
        let ahead = table.reserve(chase.index, 32 << 10)
        #expect(ahead.offset == slow.start + (88 << 10))
        #expect(ahead.skipped == 8 << 10)
        #expect(ahead.count == 24 << 10)
        #expect(!ahead.stops)
        #expect(ahead.stopping == slow.index)
        #expect(table.reserve(slow.index, 16 << 10).count == 0)
        // Each byte belongs to one of them: the chased one's reserved bytes, then the chaser's
        table.wrote(slow.index, upTo: slow.start + (88 << 10), at: Self.at(100))
        #expect(table.isFinished(slow.index))
        #expect(table.remaining().map { [$0.0, $0.1] } == [[slow.start + (88 << 10), slow.end]])
        let rest = table.reserve(chase.index, 1 << 20)
        #expect(rest.offset == slow.start + (112 << 10))
        #expect(rest.count == 80 << 10)
        #expect(rest.stops)
        table.wrote(chase.index, upTo: slow.end, at: Self.at(100))
        #expect(table.isComplete)
        #expect(table.completed == 384 << 10)
    }

    @Test func aChaseLostToTheChasedConnectionStopsAndLeavesNothingOfItsOwn() throws {
        let (table, _, slow) = endGame()
        let chase = try #require(table.claim(for: 0, chasing: true, at: Self.at(500)))
        #expect(table.isWanted(chase.index))
        // The chased connection takes its last 128 KiB first: the chaser is to stop
        let last = table.reserve(slow.index, 128 << 10)
        #expect(last.count == 128 << 10)
        #expect(last.stopping == chase.index)
        #expect(!table.isWanted(chase.index))
        let late = table.reserve(chase.index, 16 << 10)
        #expect(late.count == 0)
        #expect(late.stops)
        table.wrote(slow.index, upTo: slow.end, at: Self.at(100))
        #expect(table.isComplete)
        #expect(table.remaining().isEmpty)
    }

    @Test func onlyAConnectionOnAnotherSourceIsChasedOnceAndNotForTooLittle() throws {
        let (table, _, slow) = endGame()
        // Not from its own source
        #expect(table.claim(for: 1, chasing: true, at: Self.at(500)) == nil)
        // Not for less than a quarter of the minimum split
        _ = table.reserve(slow.index, (128 << 10) - (16 << 10))
        #expect(table.claim(for: 0, chasing: true, at: Self.at(500)) == nil)
        // Nor a source the range is to avoid
        let other = SegmentTable(total: 1 << 20, remaining: [], connections: 1, minimumSplit: 128 << 10)
        other.reopen(0..<(128 << 10), avoiding: [0])
        other.reopen((512 << 10)..<(640 << 10), avoiding: [])
        let claim = other.claim(for: 1, at: Self.at(0))!
        // (source 2 fetches the other range in 50 ms)
        let measured = other.claim(for: 2, at: Self.at(0))!
        _ = other.reserve(measured.index, 128 << 10)
        other.wrote(measured.index, upTo: measured.end, at: Self.at(50))
        #expect(other.claim(for: 0, chasing: true, at: Self.at(500)) == nil)
        // (A request that has not received anything yet may be chased: it may never start.)
        let chase = try #require(other.claim(for: 2, chasing: true, at: Self.at(500)))
        #expect(chase.start == 0)
        // The chaser, once ahead, is not chased back by the connection it stopped
        let ahead = other.reserve(chase.index, 16 << 10)
        #expect(ahead.stopping == claim.index)
        #expect(other.reserve(claim.index, 16 << 10).stops)
        other.release(claim.index)
        #expect(other.claim(for: 1, chasing: true, at: Self.at(500)) == nil)
    }

    @Test func aChasedConnectionThatFailsLeavesItsUnwrittenBytesToBeClaimedAndTheChaserTheRest() throws {
        let (table, _, slow) = endGame()
        let chase = try #require(table.claim(for: 0, chasing: true, at: Self.at(500)))
        // The chaser has 32 KiB, behind, when the chased connection fails with 16 of its 96 KiB
        // written
        #expect(table.reserve(slow.index, 32 << 10).count == 32 << 10)
        #expect(table.reserve(chase.index, 32 << 10).count == 0)
        table.wrote(slow.index, upTo: slow.start + (16 << 10), at: Self.at(100))
        table.release(slow.index)
        // The chaser's next part is ahead of what was written: it takes the range from there
        let ahead = table.reserve(chase.index, 16 << 10)
        #expect(ahead.offset == slow.start + (96 << 10))
        #expect(ahead.count == 16 << 10)
        #expect(ahead.stopping == nil)
        // The bytes in between are claimed again, from what was written
        let again = try #require(table.claim(for: 1, at: Self.at(500)))
        #expect(again.index == slow.index)
        #expect(again.start == slow.start + (16 << 10))
        #expect(again.end == slow.start + (96 << 10))
    }

    @Test func aChaserThatFailsEndsItsChaseAndTheRangeCanBeChasedAgain() throws {
        let (table, _, slow) = endGame()
        let chase = try #require(table.claim(for: 0, chasing: true, at: Self.at(500)))
        table.release(chase.index)
        #expect(!table.isWanted(chase.index))
        #expect(table.remaining().map { [$0.0, $0.1] } == [[slow.start, slow.end]])
        let again = try #require(table.claim(for: 0, chasing: true, at: Self.at(600)))
        #expect(again.start == slow.start + (64 << 10))
    }

    /// A case of the end game's rule: the rest, what the chased connection delivered, what
    /// the chaser's source did (`nil`: never measured), and whether a chase pays.
    struct ChaseCase: Sendable, CustomTestStringConvertible {
        typealias Delivery = SegmentTable.EndGame.Delivery
        var name: String
        var rest: Int64
        var chased: Delivery
        var chaser: Delivery?
        var chases: Bool
        var testDescription: String { name }

        init(_ name: String, rest: Int64, chased: (Int64, Int), chaser: (Int64, Int)?, chases: Bool) {
            self.name = name
            self.rest = rest
            self.chased = Delivery(bytes: chased.0, elapsed: .milliseconds(chased.1))
            self.chaser = chaser.map { Delivery(bytes: $0.0, elapsed: .milliseconds($0.1)) }
            self.chases = chases
        }
    }

    static let chaseCases: [ChaseCase] = [
        ChaseCase("as fast", rest: 1 << 20, chased: (1 << 20, 1000), chaser: (1 << 20, 1000), chases: false),
        ChaseCase("1.43x is not enough", rest: 1 << 20, chased: (1 << 20, 1000), chaser: (1 << 20, 700), chases: false),
        ChaseCase("1.67x", rest: 1 << 20, chased: (1 << 20, 1000), chaser: (1 << 20, 600), chases: true),
        ChaseCase("a slow mirror", rest: 1 << 20, chased: (100 << 10, 1000), chaser: (4 << 20, 1000), chases: true),
        ChaseCase("chaser never measured", rest: 1 << 20, chased: (1 << 20, 1000), chaser: nil, chases: false),
        ChaseCase("nothing yet, just started", rest: 1 << 20, chased: (0, 100), chaser: (1 << 20, 1000), chases: false),
        ChaseCase("nothing for longer than the chaser needs", rest: 1 << 20, chased: (0, 1100), chaser: (1 << 20, 1000), chases: true),
        ChaseCase("nothing left", rest: 0, chased: (0, 5000), chaser: (1 << 20, 1000), chases: false),
    ]

    /// The end game's rule alone: chase only a connection measurably slower than the
    /// chaser's source has been.
    @Test(arguments: chaseCases)
    func aChaseIsWorthItOnlyAgainstAMeasurablySlowerConnection(_ rule: ChaseCase) {
        #expect(SegmentTable.EndGame.isWorthChasing(rest: rule.rest, chased: rule.chased, chaser: rule.chaser) == rule.chases)
    }

    @Test func twoSourcesAsFastAsEachOtherDoNotChase() {
        // Given two connections on two sources, one done at 1 MiB/s, the other at 0.75 MiB/s
        // with 512 KiB left
        let table = SegmentTable(total: 4 << 20, remaining: [(0, 4 << 20)], connections: 2, minimumSplit: 2 << 20)
        let first = table.claim(for: 0, at: Self.at(0))!
        let second = table.claim(for: 1, at: Self.at(0))!
        _ = table.reserve(first.index, 2 << 20)
        table.wrote(first.index, upTo: first.end, at: Self.at(2000))
        _ = table.reserve(second.index, 3 << 19)
        table.wrote(second.index, upTo: second.start + (3 << 19), at: Self.at(2000))
        // When the idle one looks for work at 2 s, the other's rest is not worth a chase
        #expect(table.claim(for: 0, chasing: true, at: Self.at(2000)) == nil)
        // But once the other has stalled long enough to be 1.5 times slower, it is
        #expect(table.claim(for: 0, chasing: true, at: Self.at(3100)) != nil)
    }

    @Test func releasedSegmentsAreClaimedAgainFromWhatWasWritten() {
        let table = SegmentTable(total: 8 << 20, remaining: [(0, 8 << 20)], connections: 2, minimumSplit: 1 << 20)
        let a = table.claim(at: Self.at(0))!
        _ = table.claim(at: Self.at(0))!
        _ = table.reserve(a.index, 3 << 20)
        table.wrote(a.index, upTo: 1 << 20, at: Self.at(100))
        table.release(a.index)
        let again = table.claim(at: Self.at(0))!
        #expect(again.index == a.index)
        #expect(again.start == 1 << 20)
        #expect(table.remaining().first! == (1 << 20, 8 << 20))
    }
}
