import Foundation
@testable import Haul
import HaulServer
import Testing

/// aria2's JSON-RPC rules as plain values: messages, GIDs, states, error codes, options,
/// list windows, queue moves and status fields, without a socket.
@Suite("aria2 rules")
struct Aria2RulesTests {
    static func parse(_ text: String) -> Aria2Envelope { Aria2Envelope.parse(Array(text.utf8)) }

    // MARK: - Messages

    @Test func aCallIsParsedWithItsIDMethodAndParams() {
        #expect(
            Self.parse(#"{"jsonrpc":"2.0","id":"q1","method":"aria2.tellStatus","params":["token:x","abc"]}"#)
                == .single(.success(Aria2Request(id: "q1", method: "aria2.tellStatus", params: ["token:x", "abc"]))))
        // An integer ID stays an integer; jsonrpc and params may be absent
        #expect(
            Self.parse(#"{"id":7,"method":"aria2.getVersion"}"#)
                == .single(.success(Aria2Request(id: .int(7), method: "aria2.getVersion"))))
    }

    @Test func malformedBodiesGetJSONRPCsCodes() {
        // Given aria2's answers to the same bodies (checked against aria2c 1.36)
        #expect(Self.parse("{\"id\":1,") == .single(.failure(Aria2Reply(id: .null, outcome: .failure(.parseError)))))
        #expect(
            Self.parse(#"{"jsonrpc":"2.0","method":"aria2.getVersion"}"#)
                == .single(.failure(Aria2Reply(id: .null, outcome: .failure(.invalidRequest)))))
        #expect(
            Self.parse(#"{"id":4,"params":[]}"#) == .single(.failure(Aria2Reply(id: .int(4), outcome: .failure(.invalidRequest)))))
        #expect(
            Self.parse(#"{"id":4,"method":"m","params":{"a":1}}"#)
                == .single(.failure(Aria2Reply(id: .int(4), outcome: .failure(.invalidParams)))))
        // A batch leaves out what is not an object; an empty batch answers []
        #expect(Self.parse("[]") == .batch([]))
        #expect(Self.parse(#"[1, {"id":1,"method":"m"}]"#) == .batch([.success(Aria2Request(id: .int(1), method: "m"))]))
    }

    @Test func repliesAreWrittenAsAria2WritesThem() {
        let ok = Aria2Reply(id: "1", outcome: .success(["gid": "2089b05ecca3d829"]))
        #expect(ok.value.json == #"{"id":"1","jsonrpc":"2.0","result":{"gid":"2089b05ecca3d829"}}"#)
        #expect(ok.httpStatus == 200)
        let failed = Aria2Reply(id: .int(2), outcome: .failure(.noSuchMethod("aria2.nope")))
        #expect(failed.value.json == #"{"error":{"code":1,"message":"No such method: aria2.nope"},"id":2,"jsonrpc":"2.0"}"#)
        #expect(failed.httpStatus == 400)
        #expect(Aria2Reply(id: .null, outcome: .failure(.parseError)).httpStatus == 500)
        // Strings are escaped; control characters as \u00XX
        #expect(JSONValue.string("a\"b\\c\n\u{1}é").json == #""a\"b\\c\n\u0001é""#)
        #expect(JSONValue.double(3).json == "3")
        let notification = Aria2Notification(.start, Aria2GID(DownloadID("x")))
        #expect(
            notification.value.json
                == #"{"jsonrpc":"2.0","method":"aria2.onDownloadStart","params":[{"gid":"\#(Aria2GID(DownloadID("x")).hex)"}]}"#)
    }

    // MARK: - GIDs

    @Test func aGIDIsTheFirstEightBytesOfTheIDsSHA256() {
        // SHA-256("abc") = ba7816bf8f01cfea414140de5dae2223…
        #expect(Aria2GID(DownloadID("abc")).hex == "ba7816bf8f01cfea")
        // The same ID gives the same GID every time (across restarts)
        #expect(Aria2GID(DownloadID("https://example.com/a")) == Aria2GID(DownloadID("https://example.com/a")))
        #expect(Aria2GID(DownloadID("https://example.com/a")).hex.count == 16)
    }

    @Test func gidsAreFoundWholeOrByAUniquePrefix() {
        var index = Aria2GIDIndex()
        let abc = index.insert("abc")  // ba7816bf…
        let ids = (0..<300).map { DownloadID("file-\($0)") }
        for id in ids { index.insert(id) }
        #expect(index.lookup(abc.hex) == .success("abc"))
        #expect(index.lookup(abc.hex.uppercased()) == .success("abc"))
        // The shortest prefix no other GID shares finds it
        let unique = (1...16).map { String(abc.hex.prefix($0)) }.first { prefix in
            ids.allSatisfy { !Aria2GID($0).hex.hasPrefix(prefix) }
        }!
        #expect(index.lookup(unique) == .success("abc"))
        // A prefix several share, an unknown GID, and text that is no GID get aria2's errors
        let shared = Dictionary(grouping: ids.map { Aria2GID($0).hex }, by: { $0.prefix(1) }).first { $0.value.count > 1 }!.key
        #expect(index.lookup(String(shared)) == .failure(Aria2Error("GID \(shared) is not unique")))
        let missing = (0..<4096).lazy.map { String(format: "%03x", $0) }.first { prefix in
            index.lookup(prefix) == .failure(Aria2Error("GID \(prefix) is not found"))
        }
        #expect(missing != nil)
        #expect(index.lookup("xyz") == .failure(Aria2Error("Invalid GID xyz")))
        #expect(index.lookup("") == .failure(Aria2Error("Invalid GID ")))
        #expect(index.lookup(String(repeating: "a", count: 17)) == .failure(Aria2Error("Invalid GID \(String(repeating: "a", count: 17))")))
        index.remove("abc")
        #expect(index.lookup(abc.hex) == .failure(Aria2Error("GID \(abc.hex) is not found")))
    }

    // MARK: - States and error codes

    @Test func haulStatesMapToAria2Statuses() {
        let expected: [JobState: Aria2Status] = [
            .running: .active, .queued: .waiting, .waiting: .waiting, .paused: .paused, .completed: .complete,
            .failed: .error, .cancelled: .removed,
        ]
        for state in JobState.allCases {
            #expect(Aria2Status(state) == expected[state])
            #expect(Aria2Status(state).states.contains(state))
        }
        #expect(Aria2Status.allCases.filter(\.isStopped) == [.error, .complete, .removed])
    }

    @Test func errorCodesMapToAria2ExitStatuses() {
        func number(_ code: String?, _ message: String? = nil) -> Int { Aria2ExitStatus.number(code: code, message: message) }
        #expect(number(nil) == 0)
        #expect(number("httpStatus", "HTTP 404 Not Found from http://x/y") == 3)
        #expect(number("httpStatus", "HTTP 401 Unauthorized from http://x/y") == 24)
        #expect(number("httpStatus", "HTTP 407 Proxy Authentication Required from http://x/y") == 24)
        #expect(number("httpStatus", "HTTP 503 Service Unavailable from http://x/y") == 29)
        #expect(number("httpStatus", "HTTP 500 Internal Server Error from http://x/y") == 22)
        #expect(number("timeout") == 2)
        #expect(number("network", "connection refused") == 6)
        #expect(number("network", "cannot resolve host example.invalid") == 19)
        #expect(number("diskFull") == 9)
        #expect(number("duplicate") == 11)
        #expect(number("runningElsewhere") == 11)
        #expect(number("fileSystem") == 17)
        #expect(number("tooManyRedirects") == 23)
        #expect(number("redirectLoop") == 23)
        #expect(number("protocolViolation") == 22)
        #expect(number("insecureRedirect") == 22)
        #expect(number("credentialsRequired") == 24)
        #expect(number("checksumMismatch") == 32)
        #expect(number("sizeMismatch") == 8)
        #expect(number("invalidRequest") == 28)
        #expect(number("cancelled") == 31)
        #expect(number("tls") == 1)
        #expect(number("somethingNew") == 1)
    }

    // MARK: - Options

    @Test func knownOptionsAreCheckedAndWrittenAsAria2WritesThem() throws {
        let options = try Aria2Options.parse(
            [
                "max-download-limit": "1M", "max-overall-download-limit": "512K", "split": "5", "pause": "true",
                "dir": "/tmp/x", "out": "a.iso", "checksum": .string("sha-256=" + String(repeating: "ab", count: 32)),
                "header": ["X-A: 1", "X-B:2"], "max-tries": "9", "user-agent": "ua/1",
            ], index: 1
        ).get()
        #expect(options["max-download-limit"] == "1048576")
        #expect(options["max-overall-download-limit"] == "524288")
        #expect(options["split"] == "5")
        #expect(options.values["header"] == ["X-A: 1", "X-B:2"])
        // Known options Haul does not act on are kept as given
        #expect(options["max-tries"] == "9")
        #expect(options["user-agent"] == "ua/1")
        // One header line is a list of one
        #expect(try Aria2Options.parse(["header": "X-C: 3"], index: 1).get().values["header"] == ["X-C: 3"])
        #expect(Aria2Options.header("X-B:2")! == ("X-B", "2"))
    }

    @Test func badValuesAndUnknownOptionsGetAria2sOptionError() {
        let problem = "We encountered a problem while processing the option"
        for (name, value): (String, JSONValue) in [
            ("max-download-limit", "fast"), ("max-concurrent-downloads", "0"), ("split", "17"), ("pause", "yes"),
            ("checksum", "sha-256"), ("header", "no colon"), ("dir", ""), ("max-connection-per-server", "x"),
            ("max-tries", .int(3)),
        ] {
            guard case .failure(let error) = Aria2Options.parse(.object([name: value]), index: 1) else {
                Issue.record("\(name)=\(value.json) was accepted")
                continue
            }
            #expect(error.code == 1)
            #expect(error.message.hasPrefix("\(problem) '--\(name)'."))
        }
        // aria2's hooks run a program: never set over RPC
        for name in ["on-download-complete", "on-download-error", "on-download-start", "on-bt-download-complete"] {
            guard case .failure(let error) = Aria2Options.parse(.object([name: "/bin/sh"]), index: 1) else {
                Issue.record("\(name) was accepted")
                continue
            }
            #expect(error.message.contains("set only by whoever starts haul serve"))
        }
        guard case .failure(let unknown) = Aria2Options.parse(["no-such-option": "1"], index: 1) else {
            Issue.record("an unknown option was accepted")
            return
        }
        #expect(unknown.message.hasPrefix("\(problem) '--no-such-option'."))
        #expect(Aria2Options.parse("text", index: 2) == .failure(.wrongType(2)))
        #expect(Aria2Options.size("0") == 0)
        #expect(Aria2Options.size("10k") == 10_240)
        #expect(Aria2Options.size("-1") == nil)
        #expect(Aria2Options.size("M") == nil)
    }

    // MARK: - Lists and positions

    @Test func listWindowsFollowAria2sOffsetAndNum() {
        // From the front
        #expect(Aria2Window(offset: 0, num: 10, total: 3) == Aria2Window(start: 0, count: 3, reversed: false))
        #expect(Aria2Window(offset: 2, num: 10, total: 3) == Aria2Window(start: 2, count: 1, reversed: false))
        #expect(Aria2Window(offset: 5, num: 10, total: 3).count == 0)
        #expect(Aria2Window(offset: 1, num: 0, total: 3).count == 0)
        // From the back, last first: -1 is the last element
        #expect(Aria2Window(offset: -1, num: 2, total: 5) == Aria2Window(start: 3, count: 2, reversed: true))
        #expect(Aria2Window(offset: -1, num: 10, total: 5) == Aria2Window(start: 0, count: 5, reversed: true))
        #expect(Aria2Window(offset: -3, num: 1, total: 5) == Aria2Window(start: 2, count: 1, reversed: true))
        #expect(Aria2Window(offset: -6, num: 1, total: 5).count == 0)
    }

    @Test func positionsAreClampedAsAria2ClampsThem() {
        #expect(Aria2PositionOrigin.set.target(pos: 0, current: 3, count: 5) == 0)
        #expect(Aria2PositionOrigin.set.target(pos: 9, current: 0, count: 5) == 4)
        #expect(Aria2PositionOrigin.current.target(pos: -2, current: 3, count: 5) == 1)
        #expect(Aria2PositionOrigin.current.target(pos: -9, current: 3, count: 5) == 0)
        #expect(Aria2PositionOrigin.end.target(pos: 0, current: 0, count: 5) == 4)
        #expect(Aria2PositionOrigin.end.target(pos: -1, current: 0, count: 5) == 3)
        #expect(Aria2PositionOrigin(rawValue: "POS_BAD") == nil)
    }

    @Test func aMoveIsMadeWithPriorities() {
        // Given a queue of normal downloads, the last moved to the front passes the first
        #expect(Aria2QueueMove.priority(queue: [.normal, .normal, .normal], current: 2, target: 0) == .high)
        // The first moved to the end falls behind the last
        #expect(Aria2QueueMove.priority(queue: [.normal, .normal, .normal], current: 0, target: 2) == .low)
        // Ahead of a very high one it cannot go higher than very high
        #expect(Aria2QueueMove.priority(queue: [.veryHigh, .low], current: 1, target: 0) == .veryHigh)
        // Staying put changes nothing; a move never lowers what moves up
        #expect(Aria2QueueMove.priority(queue: [.high, .normal], current: 1, target: 1) == .normal)
        #expect(Aria2QueueMove.priority(queue: [.low, .high], current: 1, target: 0) == .high)
    }

    // MARK: - Status fields

    static func view(_ state: JobState, bytes: Int64, total: Int64?, error: (String, String)? = nil) -> DownloadView {
        var view = DownloadView(
            JobSnapshot(
                id: "http://h/f.iso", url: "http://h/f.iso", state: state, priority: 2, bytes: bytes, totalBytes: total,
                bytesPerSecond: 1_000, destination: "/d/f.iso", attempts: 0, errorCode: error?.0, error: error?.1,
                createdAt: Date(), updatedAt: Date(), finishedAt: nil))
        view.connections = 2
        return view
    }

    @Test func statusHasAria2sKeysWithNumbersAsStrings() throws {
        let active = Aria2Fields.status(Self.view(.running, bytes: 3 << 20, total: 10 << 20), uris: ["http://h/f.iso", "http://m/f.iso"])
        guard case .object(let fields) = active else { throw Aria2TestFailure("not an object") }
        #expect(
            Set(fields.keys) == [
                "gid", "status", "totalLength", "completedLength", "uploadLength", "downloadSpeed", "uploadSpeed",
                "connections", "pieceLength", "numPieces", "dir", "files", "bitfield",
            ])
        #expect(fields["status"] == "active")
        #expect(fields["totalLength"] == "10485760")
        #expect(fields["connections"] == "2")
        #expect(fields["downloadSpeed"] == "1000")
        #expect(fields["numPieces"] == "10")
        #expect(fields["bitfield"] == "e000")
        #expect(fields["dir"] == "/d")
        #expect(
            fields["files"] == [
                [
                    "index": "1", "path": "/d/f.iso", "length": "10485760", "completedLength": "3145728", "selected": "true",
                    "uris": [["uri": "http://h/f.iso", "status": "used"], ["uri": "http://m/f.iso", "status": "waiting"]],
                ]
            ])
        // Only the keys asked for
        #expect(
            Aria2Fields.status(Self.view(.paused, bytes: 0, total: nil), uris: ["u"], keys: ["gid", "status", "nope"])
                == ["gid": .string(Aria2GID("http://h/f.iso").hex), "status": "paused"])
    }

    @Test func stoppedDownloadsCarryTheirErrorCode() throws {
        let failed = Aria2Fields.status(
            Self.view(.failed, bytes: 0, total: nil, error: ("httpStatus", "HTTP 404 Not Found from http://h/f.iso")),
            uris: ["http://h/f.iso"], keys: ["status", "errorCode", "errorMessage", "connections", "downloadSpeed"])
        #expect(
            failed == [
                "status": "error", "errorCode": "3", "errorMessage": "HTTP 404 Not Found from http://h/f.iso",
                "connections": "0", "downloadSpeed": "0",
            ])
        let complete = Aria2Fields.status(
            Self.view(.completed, bytes: 5, total: 5), uris: ["u"], keys: ["status", "errorCode", "bitfield"])
        #expect(complete == ["status": "complete", "errorCode": "0", "bitfield": "80"])
        let removed = Aria2Fields.status(Self.view(.cancelled, bytes: 0, total: nil), uris: ["u"], keys: ["status", "errorCode"])
        #expect(removed == ["status": "removed", "errorCode": "31"])
        // Waiting and paused downloads have none
        let waiting = Aria2Fields.status(Self.view(.queued, bytes: 0, total: nil), uris: ["u"])
        guard case .object(let fields) = waiting else { throw Aria2TestFailure("not an object") }
        #expect(fields["errorCode"] == nil)
        #expect(fields["bitfield"] == nil)
    }

    @Test func notificationsFollowTheManagersEventsAsAria2Notifies() {
        var tracker = Aria2Notifier.Tracker()
        let a = DownloadID("a")
        let b = DownloadID("b")
        // A running download is notified as it starts, pauses, starts again and stops
        #expect(tracker.notification(for: .queued, of: a) == nil)
        #expect(tracker.notification(for: .started, of: a) == .start)
        #expect(tracker.notification(for: .progress(DownloadProgress(completedBytes: 1, totalBytes: 2)), of: a) == nil)
        #expect(tracker.notification(for: .paused, of: a) == .pause)
        #expect(tracker.notification(for: .started, of: a) == .start)
        #expect(tracker.notification(for: .cancelled(.userRequested), of: a) == .stop)
        // One that only waited is paused and removed without a word, as aria2 does
        #expect(tracker.notification(for: .queued, of: b) == nil)
        #expect(tracker.notification(for: .paused, of: b) == nil)
        #expect(tracker.notification(for: .cancelled(.userRequested), of: b) == nil)
        // A shutdown is not a stop; completions and errors are always told
        #expect(tracker.notification(for: .started, of: b) == .start)
        #expect(tracker.notification(for: .cancelled(.shutdown), of: b) == nil)
        #expect(tracker.notification(for: .failed(DownloadError(.httpStatus, "404")), of: b) == .error)
    }

    @Test func rpcOriginsAreListedExactly() {
        let rules = AccessRules(
            token: "t", allowedHosts: ["127.0.0.1:6800"], rpcOrigins: ["https://AriaNg.example/", "chrome-extension://abc"])
        #expect(rules.checkRPC(host: "127.0.0.1:6800", origin: nil) == .allow)
        #expect(rules.checkRPC(host: "127.0.0.1:6800", origin: "http://127.0.0.1:6800") == .allow)
        #expect(rules.checkRPC(host: "127.0.0.1:6800", origin: "https://ariang.example") == .allow)
        #expect(rules.checkRPC(host: "127.0.0.1:6800", origin: "chrome-extension://abc") == .allow)
        #expect(rules.corsOrigin("https://ariang.example") == "https://ariang.example")
        #expect(rules.corsOrigin("http://evil.example") == nil)
        if case .allow = rules.checkRPC(host: "127.0.0.1:6800", origin: "http://evil.example") {
            Issue.record("a page of another site may call")
        }
        // The Host rule holds for listed origins too
        if case .allow = rules.checkRPC(host: "evil.example:6800", origin: "https://ariang.example") {
            Issue.record("a rebound host name was accepted")
        }
        #expect(AccessRules.normalizedOrigin("https://x.example/path") == nil)
        #expect(AccessRules.normalizedOrigin("x.example") == nil)
    }
}

struct Aria2TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
