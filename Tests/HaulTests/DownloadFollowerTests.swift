import Foundation
import Haul
import Testing

@testable import HaulServer

/// The CLI's side of the event stream as plain values: parsing Server-Sent Events, and
/// following downloads to their ends (``DownloadFollower``). No sockets.
@Suite("Following downloads over the event stream")
struct DownloadFollowerTests {
    // MARK: - Parsing

    @Test func eventStreamsParseTheSameHoweverTheyAreSplit() {
        // Given a stream with a preamble, CRLF lines, a comment, two data lines, an event
        // without an id, and an unfinished last event
        let stream = Array(
            ("retry: 1000\n\n: a comment\nid: 7\nevent: download\ndata: {\"id\":\"a\"}\n\n"
                + "id: 8\r\nevent: stats\r\ndata: one\r\ndata: two\r\n\r\n"
                + "event: resync\ndata:{}\n\nid: 9\nevent: progress\ndata: x").utf8)
        let expected = [
            ServiceEvent(id: 7, kind: "download", data: Data(#"{"id":"a"}"#.utf8)),
            ServiceEvent(id: 8, kind: "stats", data: Data("one\ntwo".utf8)),
            ServiceEvent(id: nil, kind: "resync", data: Data("{}".utf8)),
        ]
        // Then every split into chunks, whole or byte by byte, gives the same events
        for size in [stream.count, 1, 2, 3, 5, 8, 13] {
            var parser = EventStreamParser()
            var events: [ServiceEvent] = []
            var start = 0
            while start < stream.count {
                let end = min(start + size, stream.count)
                events += parser.feed(stream[start..<end])
                start = end
            }
            #expect(events == expected, "chunks of \(size)")
            // And the unfinished event completes with its blank line
            #expect(parser.feed(Array("\n\n".utf8)) == [ServiceEvent(id: 9, kind: "progress", data: Data("x".utf8))])
        }
    }

    /// The brief read by hand is the brief `JSONDecoder` reads, whatever is in the
    /// strings and however they are escaped; what it cannot read is left to the decoder.
    @Test(arguments: [
        "plain.bin", "quotes \"and\" \\backslashes\\ /slashes/", "line\nbreaks\r\tand\u{01}controls\u{1F}",
        "ünïcödé 名前 🎉", "",
    ])
    func aBriefIsReadAsTheDecoderReadsIt(name: String) throws {
        var view = Self.view("id \(name)", .failed, error: name.isEmpty ? nil : "HTTP 404: \(name)")
        view.name = name
        view.destination = "/tmp/\(name)"
        view.bytes = 123_456_789_012
        let decoder = JSONDecoder()
        // As the service writes it, as JSONEncoder writes it (escaped slashes), and with
        // every non-ASCII character escaped, surrogate pairs included
        let written = [
            Data(EventJSON.download(view).utf8), try JSONEncoder().encode(view),
            Data(Self.asciiOnly(EventJSON.download(view)).utf8),
        ]
        for json in written {
            let expected = try decoder.decode(DownloadFollower.Brief.self, from: json)
            #expect(DownloadFollower.Brief(json: json) == expected, "\(String(decoding: json, as: UTF8.self))")
            #expect(expected == DownloadFollower.Brief(view))
        }
        // What it cannot read, it leaves to the decoder
        for odd in [
            #"{"id":"a","state":"queued","name":"n","destination":"/d","bytes":1,"extra":{"nested":true}}"#,
            #"{"id":"a","state":"queued","name":"n","destination":"/d","bytes":1.5}"#,
            #"{"id":"a","state":"nonsense","name":"n","destination":"/d","bytes":1}"#,
            #"{"id":"a","state":"queued","name":"n","destination":"/d"}"#,
            #"{"id":"a","state":"queued","name":"n\x","destination":"/d","bytes":1}"#,
            #"{"id":"a","state":"queued","name":"n","destination":"/d","bytes":1"#,
            #"{"id":"a","state":"queued","name":"n","destination":"/d","bytes":1} trailing"#,
        ] {
            #expect(DownloadFollower.Brief(json: Data(odd.utf8)) == nil, "\(odd)")
        }
        #expect(
            DownloadFollower.Brief(json: Data(#" { "id" : "a" , "state":"paused","name":"n","destination":"/d","bytes":-1,"error":null } "#.utf8))
                == DownloadFollower.Brief(id: "a", state: .paused, name: "n", destination: "/d", bytes: -1, error: nil))
    }

    /// `text` with every non-ASCII scalar written as `\\uXXXX` (a pair beyond the BMP).
    static func asciiOnly(_ text: String) -> String {
        var out = ""
        for unit in text.utf16 {
            if unit < 0x80 { out.unicodeScalars.append(UnicodeScalar(UInt8(unit))) } else { out += String(format: "\\u%04X", unit) }
        }
        return out
    }

    // MARK: - Following

    @Test func eachDownloadEndsOnceAndStatesAreSaidOncePerChange() {
        var follower = DownloadFollower(ids: ["a", "b", "c"])
        var said: [DownloadFollower.Output] = []
        said += follower.take(event(1, Self.view("a", .queued)))
        said += follower.take(event(2, Self.view("a", .running)))
        said += follower.take(event(3, Self.view("a", .running)))  // the same state again: not said
        said += follower.take(event(4, Self.view("x", .running)))  // not followed
        said += follower.take(event(5, Self.view("a", .completed)))
        said += follower.take(event(6, Self.view("a", .completed)))  // ended already
        said += follower.take(event(7, Self.view("b", .failed, error: "HTTP 404")))
        #expect(!follower.isDone)
        said += follower.take(ServiceEvent(id: 8, kind: "removed", data: Data(#"{"id":"c"}"#.utf8)))

        #expect(follower.isDone)
        #expect(follower.failures == 2)
        #expect(follower.lastEventID == 8)
        #expect(
            said == [
                .state(Self.brief("a", .queued)), .state(Self.brief("a", .running)), .saved(Self.brief("a", .completed)),
                .failed(id: "b", message: "HTTP 404"), .removed(id: "c"),
            ])
    }

    @Test func aResyncAsksForThePendingDownloadsAndTakesWhatItFinds() {
        var follower = DownloadFollower(ids: ["a", "b", "c"])
        _ = follower.take(event(1, Self.view("a", .completed)))

        // The service lost what this client missed: look up the two still pending
        #expect(follower.take(ServiceEvent(id: 90, kind: "resync", data: Data("{}".utf8))) == [.lookUp(["b", "c"])])
        #expect(follower.lastEventID == 90)
        #expect(follower.take(Self.view("b", .completed)) == [.saved(Self.brief("b", .completed))])
        #expect(follower.takeMissing("c") == [.removed(id: "c")])
        #expect(follower.takeMissing("c").isEmpty)
        #expect(follower.isDone)
        #expect(follower.failures == 1)
    }

    @Test func progressIsPassedOnOnlyForFollowedDownloads() {
        var follower = DownloadFollower(ids: ["a"])
        let progress = ProgressView(id: "a", bytes: 10, totalBytes: 100, bytesPerSecond: 5, connections: 1)
        let other = ProgressView(id: "z", bytes: 10, totalBytes: 100, bytesPerSecond: 5, connections: 1)
        #expect(follower.take(ServiceEvent(id: 1, kind: "progress", data: Self.json(progress))) == [.progress(progress)])
        #expect(follower.take(ServiceEvent(id: 2, kind: "progress", data: Self.json(other))).isEmpty)
        #expect(follower.take(ServiceEvent(id: 3, kind: "progress", data: Data("not json".utf8))).isEmpty)
        #expect(follower.take(ServiceEvent(id: 4, kind: "stats", data: Data("{}".utf8))).isEmpty)
    }

    // MARK: - Helpers

    func event(_ id: UInt64, _ view: DownloadView) -> ServiceEvent {
        ServiceEvent(id: id, kind: "download", data: Self.json(view))
    }

    static func json(_ value: some Encodable) -> Data {
        try! ServiceJSON.encoder.encode(value)
    }

    static func brief(_ id: String, _ state: JobState) -> DownloadFollower.Brief {
        DownloadFollower.Brief(Self.view(id, state))
    }

    static func view(_ id: String, _ state: JobState, error: String? = nil) -> DownloadView {
        let date = Date(timeIntervalSince1970: 1_790_000_000)
        return DownloadView(
            JobSnapshot(
                id: DownloadID(id), url: "http://127.0.0.1/\(id)", state: state, priority: 0, bytes: 0, totalBytes: nil,
                bytesPerSecond: 0, destination: "/tmp/\(id)", attempts: 0, errorCode: nil, error: error, createdAt: date,
                updatedAt: date, finishedAt: nil))
    }
}
