import Foundation
import Haul
import NIOCore
import Testing

@testable import HaulServer

/// The service's rules as plain values: event replay, progress coalescing, access, and
/// the validation of a batch of downloads. No sockets.
@Suite("Service rules")
struct ServiceRulesTests {
    // MARK: - Event log

    @Test func aReconnectingClientGetsExactlyWhatItMissed() {
        // Given a log of 3 that has seen events 10...14
        var log = EventLog<String>(capacity: 3, firstID: 10)
        for event in ["a", "b", "c", "d", "e"] { log.append(event) }
        #expect(log.latestID == 14)

        // Then a client that saw 12 gets 13 and 14; one that saw 14 gets nothing
        guard case .events(let missed) = log.replay(after: 12) else {
            Issue.record("expected a replay")
            return
        }
        #expect(missed.map(\.id) == [13, 14])
        #expect(missed.map(\.event) == ["d", "e"])
        guard case .events(let none) = log.replay(after: 14) else {
            Issue.record("expected an empty replay")
            return
        }
        #expect(none.isEmpty)
        // The oldest kept is 12: a client that saw 11 can still be served from 12
        guard case .events(let fromOldest) = log.replay(after: 11) else {
            Issue.record("expected a replay from the oldest")
            return
        }
        #expect(fromOldest.map(\.id) == [12, 13, 14])
    }

    @Test func aGapTooOldOrANumberNeverIssuedMeansResync() {
        var log = EventLog<Int>(capacity: 2, firstID: 100)
        for event in 0..<5 { log.append(event) }  // 100...104; 103 and 104 kept
        guard case .resync(let latest) = log.replay(after: 101) else {
            Issue.record("a gap older than the log must resync")
            return
        }
        #expect(latest == 104)
        // A client of another run of the service, whose numbers this log never issued
        guard case .resync = log.replay(after: 5_000) else {
            Issue.record("a number from the future must resync")
            return
        }
    }

    // MARK: - Event mailbox

    @Test func aBurstOfFramesIsTakenInOneWriteInOrder() async {
        // Given 5,000 frames posted at once (a batch of 5,000 downloads queued)
        let mailbox = EventMailbox(byteLimit: EventHub.bufferLimit)
        for id in 1...5_000 {
            #expect(mailbox.post(EventHub.frame(id: UInt64(id), kind: "download", json: #"{"n":\#(id)}"#).bytes))
        }
        // Then one take has them all, in order, and the next waits for a new one
        let taken = await mailbox.next()
        var parser = EventStreamParser()
        let events = parser.feed(taken?.readableBytesView ?? ByteBuffer().readableBytesView)
        #expect(events.map(\.id) == (1...5_000).map { UInt64($0) })
        mailbox.post(EventHub.frame(id: 5_001, kind: "stats", json: "{}").bytes)
        #expect(parser.feed(await mailbox.next()?.readableBytesView ?? ByteBuffer().readableBytesView).map(\.kind) == ["stats"])
    }

    @Test func aWaitingTakeGetsTheNextFrameAndFinishEndsIt() async {
        let mailbox = EventMailbox(byteLimit: 1_000)
        let waiting = Task { await mailbox.next() }
        mailbox.post(ByteBuffer(string: "a"))
        #expect(await waiting.value.map { String(buffer: $0) } == "a")

        // What waits at finish is still taken, then the stream ends
        mailbox.post(ByteBuffer(string: "b"))
        mailbox.finish()
        #expect(!mailbox.post(ByteBuffer(string: "c")))
        #expect(await mailbox.next().map { String(buffer: $0) } == "b")
        #expect(await mailbox.next() == nil)
    }

    @Test func aClientTooFarBehindIsCutOff() async {
        let mailbox = EventMailbox(byteLimit: 1_000)
        #expect(mailbox.post(ByteBuffer(repeating: 1, count: 600)))
        #expect(mailbox.post(ByteBuffer(repeating: 2, count: 400)))
        // The frame that would put it over the limit ends it, and what waited is dropped
        #expect(!mailbox.post(ByteBuffer(repeating: 3, count: 1)))
        #expect(!mailbox.post(ByteBuffer(repeating: 4, count: 1)))
        #expect(await mailbox.next() == nil)
    }

    @Test func aCancelledTakeEnds() async {
        let mailbox = EventMailbox(byteLimit: 1_000)
        let waiting = Task { await mailbox.next() }
        waiting.cancel()
        #expect(await waiting.value == nil)
    }

    // MARK: - Progress throttle

    @Test func anEventFilterKeepsTheKindsAndStatesAskedFor() throws {
        let ends = try EventFilter.parse(types: "download,removed", states: "completed,failed,cancelled").get()
        #expect(ends.admits(kind: "download", state: .completed))
        #expect(ends.admits(kind: "download", state: .failed))
        #expect(!ends.admits(kind: "download", state: .queued))
        #expect(!ends.admits(kind: "download", state: .running))
        #expect(!ends.admits(kind: "progress", state: nil))
        #expect(!ends.admits(kind: "stats", state: nil))
        #expect(ends.admits(kind: "removed", state: nil))
        // A resync reaches every client: it says that what it missed is lost
        #expect(ends.admits(kind: "resync", state: nil))
        // States alone narrow the download events only
        let paused = try EventFilter.parse(types: nil, states: "paused").get()
        #expect(paused.admits(kind: "progress", state: nil))
        #expect(!paused.admits(kind: "download", state: .running))
        #expect(EventFilter.all.admits(kind: "download", state: .queued))
        // Unknown names are refused, naming the parameter
        #expect(throws: FieldError.self) { try EventFilter.parse(types: "download,gossip", states: nil).get() }
        #expect(throws: FieldError.self) { try EventFilter.parse(types: nil, states: "done").get() }
        #expect(throws: FieldError.self) { try EventFilter.parse(types: "", states: nil).get() }
        if case .failure(let error) = EventFilter.parse(types: nil, states: "done") { #expect(error.field == "states") }
    }

    @Test func progressIsCoalescedToTwiceASecondAndStatesFlushIt() {
        var throttle = ProgressThrottle<String, Int>(interval: .milliseconds(500))
        let start = ContinuousClock.now
        func due(_ milliseconds: Int) -> [String] {
            throttle.due(at: start + .milliseconds(milliseconds)).map { "\($0.key)=\($0.progress)" }.sorted()
        }

        // A first snapshot is held for an interval: a download that ends sooner sends none
        #expect(throttle.offer(1, for: "a", at: start) == nil)
        #expect(throttle.offer(2, for: "a", at: start + .milliseconds(100)) == nil)
        #expect(throttle.offer(9, for: "b", at: start + .milliseconds(200)) == nil)
        #expect(due(400).isEmpty)
        // The sweep sends the latest held snapshot once its interval has passed, per download
        #expect(due(500) == ["a=2"])
        #expect(due(600).isEmpty)
        #expect(due(700) == ["b=9"])
        // Within the interval a snapshot is held; after it, it goes out at once
        #expect(throttle.offer(3, for: "a", at: start + .milliseconds(800)) == nil)
        #expect(throttle.offer(4, for: "a", at: start + .milliseconds(900)) == nil)
        #expect(throttle.offer(5, for: "a", at: start + .milliseconds(1_000)) == 5)
        #expect(due(1_400).isEmpty)
        // A change of state drops what is held: its event carries the progress
        #expect(throttle.offer(6, for: "a", at: start + .milliseconds(1_100)) == nil)
        throttle.stateChanged("a")
        #expect(due(2_000) == [])
        #expect(throttle.count == 1)  // b still runs
        // At most one snapshot per interval: two sweeps never send one download twice in it
        #expect(throttle.offer(7, for: "c", at: start + .milliseconds(2_000)) == nil)
        #expect(due(2_500) == ["c=7"])
        #expect(throttle.offer(8, for: "c", at: start + .milliseconds(2_600)) == nil)
        #expect(due(2_900).isEmpty)
        #expect(due(3_000) == ["c=8"])
    }

    // MARK: - Access

    static let token = "s3cret-token-0123456789abcdef"
    static let rules = AccessRules(
        token: token, allowedHosts: AccessRules.hosts(listeningOn: "127.0.0.1", port: 6800))

    @Test func bearerTokenIsRequiredAndComparedExactly() {
        let rules = Self.rules
        #expect(
            rules.check(
                method: "POST", host: "127.0.0.1:6800", origin: nil, authorization: "Bearer \(Self.token)",
                sessionValid: false) == .allow)
        #expect(
            rules.check(
                method: "GET", host: "localhost:6800", origin: nil, authorization: "Bearer \(Self.token)x",
                sessionValid: false) == .reject(status: 401, code: "unauthorized", message: "wrong token"))
        guard
            case .reject(401, "unauthorized", _) = rules.check(
                method: "GET", host: "127.0.0.1:6800", origin: nil, authorization: nil, sessionValid: false)
        else {
            Issue.record("no credential must be 401")
            return
        }
        #expect(AccessRules.constantTimeEquals("abc", "abc"))
        #expect(!AccessRules.constantTimeEquals("abc", "abd"))
        #expect(!AccessRules.constantTimeEquals("abc", "abcd"))
        #expect(!AccessRules.constantTimeEquals("", "a"))
    }

    @Test func aRebindingHostIsRefusedEvenWithTheToken() {
        guard
            case .reject(403, "forbiddenHost", _) = Self.rules.check(
                method: "GET", host: "evil.example:6800", origin: nil, authorization: "Bearer \(Self.token)",
                sessionValid: false)
        else {
            Issue.record("a foreign Host must be refused")
            return
        }
        guard
            case .reject(403, "forbiddenHost", _) = Self.rules.check(
                method: "GET", host: nil, origin: nil, authorization: "Bearer \(Self.token)", sessionValid: false)
        else {
            Issue.record("a missing Host must be refused")
            return
        }
        #expect(
            Self.rules.check(
                method: "GET", host: "[::1]:6800", origin: nil, authorization: "Bearer \(Self.token)",
                sessionValid: false) == .allow)
    }

    @Test func cookieRequestsThatChangeStateNeedTheServicesOrigin() {
        let rules = Self.rules
        // Reads with the cookie need no Origin
        #expect(rules.check(method: "GET", host: "127.0.0.1:6800", origin: nil, authorization: nil, sessionValid: true) == .allow)
        // Changes need the service's own Origin
        #expect(
            rules.check(
                method: "PATCH", host: "127.0.0.1:6800", origin: "http://127.0.0.1:6800", authorization: nil,
                sessionValid: true) == .allow)
        for origin in [nil, "http://evil.example", "http://127.0.0.1:6801", "null"] {
            guard
                case .reject(403, "forbiddenOrigin", _) = rules.check(
                    method: "POST", host: "127.0.0.1:6800", origin: origin, authorization: nil, sessionValid: true)
            else {
                Issue.record("origin \(origin ?? "none") must be refused")
                continue
            }
        }
    }

    @Test func onlyLoopbackMayListenWithoutAnOperatorsToken() {
        for host in ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"] {
            #expect(AccessRules.mayListen(on: host, operatorToken: false), "\(host)")
        }
        for host in ["0.0.0.0", "192.168.1.5", "::", "example.com", "1127.0.0.1"] {
            #expect(!AccessRules.mayListen(on: host, operatorToken: false), "\(host)")
            #expect(AccessRules.mayListen(on: host, operatorToken: true), "\(host)")
        }
    }

    // MARK: - Download batches

    /// A root with a subdirectory, a directory outside it, and a link from inside to outside.
    static func withRoots(_ body: (_ root: String, _ outside: String, _ batch: DownloadBatch) throws -> Void) throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("haul-rules-\(UUID().uuidString)")
        let root = base.appendingPathComponent("root").path
        let outside = base.appendingPathComponent("outside").path
        try FileManager.default.createDirectory(atPath: root + "/sub", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: root + "/escape", withDestinationPath: outside)
        defer { try? FileManager.default.removeItem(at: base) }
        let batch = try DownloadBatch(roots: [root], defaultDirectory: root)
        try body(DownloadBatch.realPath(root)!, DownloadBatch.realPath(outside)!, batch)
    }

    @Test func theClientsAddBodyIsTheDownloadsItWasGiven() throws {
        struct Body: Decodable, Equatable { var downloads: [DownloadInput] }
        let inputs = [
            DownloadInput(url: "http://127.0.0.1:8080/a.bin"),
            DownloadInput(
                url: "https://example.com/q?a=1&b=\"2\"", directory: "/tmp/dïr/with \\ and /", name: "line\nbreak\u{01}.bin",
                priority: "high", checksum: "sha256=00ff", expectedSize: 1 << 40,
                headers: ["X-B": "tab\there", "X-A": "ünïcödé 🎉"], maxBytesPerSecond: 1_048_576, connections: 8,
                mirrors: ["https://mirror.example/q?a=1", "http://m2.example/\"x\""],
                pieces: .init(algorithm: "sha-1", length: 1 << 20, hashes: ["a94a8fe5ccb19ba61c4c0873d391e987982fbbd3"]),
                zsync: false, seeds: ["old \"v1\".bin", "/srv/ünï/v0.bin"],
                hls: .init(variant: "1280x\"720", renditions: true, duration: 90.5)),
            DownloadInput(url: "http://h/x.zsync", zsync: true, seeds: []),
            DownloadInput(url: "http://h/a.m3u8", hls: .init()),
            DownloadInput(url: "http://h/b.m3u8", hls: .init(enabled: false)),
            DownloadInput(url: "http://h/c.m3u8", hls: .init(variant: "worst")),
            DownloadInput(url: "http://h/", expectedSize: 0, headers: [:]),
        ]
        // Every field is written: one added to DownloadInput must be added to the body too
        #expect(Mirror(reflecting: inputs[1]).children.count == 14)
        #expect(Mirror(reflecting: inputs[1]).children.allSatisfy { "\($0.value)" != "nil" })
        let json = ServiceClient.addBody(inputs)
        #expect(try JSONDecoder().decode(Body.self, from: Data(json)) == Body(downloads: inputs))
        #expect(try JSONDecoder().decode(Body.self, from: Data(ServiceClient.addBody([]))) == Body(downloads: []))
    }

    @Test func aValidBatchBecomesRequests() throws {
        try Self.withRoots { root, _, batch in
            let requests = try batch.requests(for: [
                DownloadInput(url: "https://example.com/a.iso"),
                DownloadInput(
                    url: "http://example.com/b", directory: "sub", name: "b.bin", priority: "high",
                    checksum: "sha256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                    expectedSize: 4, headers: ["X-Token": "t"]),
            ])
            #expect(requests.count == 2)
            #expect(requests[0].destination == .directory(URL(fileURLWithPath: root, isDirectory: true), name: nil))
            #expect(
                requests[1].destination == .directory(URL(fileURLWithPath: root + "/sub", isDirectory: true), name: "b.bin"))
            #expect(requests[1].priority == .high)
            #expect(requests[1].checksum?.algorithm == .sha256)
            #expect(requests[1].expectedSize == 4)
            #expect(requests[1].headers.map(\.name) == ["X-Token"])
        }
    }

    @Test func urlsGiveADownloadItsMirrors() throws {
        try Self.withRoots { _, _, batch in
            // "urls" alone: the first names the download; with "url" too, "url" comes first
            let inputs = try JSONDecoder().decode(
                [DownloadInput].self,
                from: Data(
                    (#"[{"urls":["https://a.example/f","https://b.example/f"]},"#
                        + #"{"url":"https://a.example/g","urls":["https://a.example/g","https://c.example/g"]}]"#).utf8))
            let requests = try batch.requests(for: inputs)
            #expect(requests.map(\.url.absoluteString) == ["https://a.example/f", "https://a.example/g"])
            #expect(requests.map { $0.mirrors.map(\.absoluteString) } == [["https://b.example/f"], ["https://c.example/g"]])
            // Neither is an error that names the field
            #expect(throws: DecodingError.self) { try JSONDecoder().decode(DownloadInput.self, from: Data(#"{"name":"x"}"#.utf8)) }
        }
    }

    @Test(arguments: [
        (DownloadInput(url: "http://example.com/a", pieces: .init(algorithm: "sha-512", length: 1, hashes: ["00"])), "downloads[1].pieces.algorithm"),
        (DownloadInput(url: "http://example.com/a", pieces: .init(algorithm: "md5", length: 1, hashes: ["00"])), "downloads[1].pieces"),
        (DownloadInput(url: "http://example.com/a", expectedSize: 3, pieces: .init(algorithm: "md5", length: 1, hashes: [String(repeating: "0", count: 32)])), "downloads[1].pieces"),
        (DownloadInput(url: "http://example.com/a", mirrors: ["ftp://example.com/a"]), "downloads[1].urls[1]"),
        (DownloadInput(url: "http://example.com/a", mirrors: ["http://u:p@example.com/a"]), "downloads[1].urls[1]"),
        (DownloadInput(url: "ftp://example.com/a"), "downloads[1].url"),
        (DownloadInput(url: "not a url"), "downloads[1].url"),
        (DownloadInput(url: "http://example.com/a", directory: "/etc"), "downloads[1].directory"),
        (DownloadInput(url: "http://example.com/a", directory: "../outside"), "downloads[1].directory"),
        (DownloadInput(url: "http://example.com/a", directory: "escape"), "downloads[1].directory"),
        (DownloadInput(url: "http://example.com/a", directory: "missing"), "downloads[1].directory"),
        (DownloadInput(url: "http://example.com/a", name: "../x"), "downloads[1].name"),
        (DownloadInput(url: "http://example.com/a", priority: "urgent"), "downloads[1].priority"),
        (DownloadInput(url: "http://example.com/a", checksum: "md5=abc"), "downloads[1].checksum"),
        (DownloadInput(url: "http://example.com/a", expectedSize: -1), "downloads[1].expectedSize"),
        (DownloadInput(url: "http://example.com/a", headers: ["X": "a\r\nInjected: 1"]), "downloads[1].headers"),
    ])
    func oneBadFieldRejectsTheWholeBatchNamingIt(bad: DownloadInput, field: String) throws {
        try Self.withRoots { _, _, batch in
            let error = #expect(throws: FieldError.self) {
                try batch.requests(for: [DownloadInput(url: "http://example.com/good"), bad])
            }
            #expect(error?.field == field)
        }
    }

    @Test func rootsMustExistAndHoldTheDefaultDirectory() throws {
        try Self.withRoots { root, outside, _ in
            #expect(throws: FieldError.self) { try DownloadBatch(roots: [root + "/nope"], defaultDirectory: root) }
            #expect(throws: FieldError.self) { try DownloadBatch(roots: [root], defaultDirectory: outside) }
            #expect(throws: FieldError.self) {
                try DownloadBatch(roots: [root], defaultDirectory: root).requests(for: [])
            }
        }
    }

    /// Object roots: `"directory": "s3://bucket/prefix/…"` goes under a root's prefix, and
    /// nowhere else.
    @Test func anObjectDirectoryMustLieUnderAnObjectRoot() throws {
        try Self.withRoots { root, _, _ in
            let staging = URL(fileURLWithPath: root + "/staging", isDirectory: true)
            let batch = try DownloadBatch(
                roots: [root], defaultDirectory: root,
                objectRoots: [try S3Location(parsing: "s3://media/in/"), try S3Location(parsing: "s3://whole")],
                staging: staging)
            let requests = try batch.requests(for: [
                DownloadInput(url: "http://example.com/a.bin", directory: "s3://media/in"),
                DownloadInput(url: "http://example.com/b.bin", directory: "s3://media/in/2026/", name: "b.bin"),
                DownloadInput(url: "http://example.com/c.bin", directory: "s3://whole/any/where/"),
                DownloadInput(url: "http://example.com/d.bin", directory: "sub"),
            ])
            #expect(
                requests.map(\.destination) == [
                    .object(bucket: "media", key: "in/", staging: staging),
                    .object(bucket: "media", key: "in/2026/b.bin", staging: staging),
                    .object(bucket: "whole", key: "any/where/", staging: staging),
                    .directory(URL(fileURLWithPath: root + "/sub", isDirectory: true), name: nil),
                ])
            for outside in ["s3://media/", "s3://media/inside/", "s3://media/in/../x/", "s3://other/in/", "s3://Bad_Bucket/in/"] {
                let error = #expect(throws: FieldError.self) {
                    try batch.requests(for: [DownloadInput(url: "http://example.com/a", directory: outside)])
                }
                #expect(error?.field == "downloads[0].directory", "\(outside)")
            }
            // A service without object roots says how to get them.
            let plain = try DownloadBatch(roots: [root], defaultDirectory: root)
            let error = #expect(throws: FieldError.self) {
                try plain.requests(for: [DownloadInput(url: "http://example.com/a", directory: "s3://media/in/")])
            }
            #expect(error?.message.contains("--root s3://") == true)
            #expect(throws: FieldError.self) {
                try DownloadBatch(roots: [root], defaultDirectory: root, objectRoots: [try S3Location(parsing: "s3://media/in/")])
            }
        }
    }
}
