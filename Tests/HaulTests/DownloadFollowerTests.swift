import Foundation
import Haul
import Testing

@testable import HaulServer

/// The CLI's side of the event stream as plain values: parsing Server-Sent Events, and
/// following downloads to their ends (``DownloadFollower``). No sockets.
@Suite("Following downloads over the event stream")
struct DownloadFollowerTests {
    // MARK: - Parsing

    @Test func eventsAreSplitAcrossReadsWithTheirIDs() {
        var parser = EventStreamParser()
        let stream = "retry: 2000\n\nid: 7\nevent: download\ndata: {\"a\":1}\n\n: a comment\r\nid: 8\r\nevent: stats\r\ndata:{\"b\":\r\ndata: 2}\r\n\r\n"
        var events: [ServiceEvent] = []
        // Fed a few bytes at a time, as reads split it
        let bytes = Array(stream.utf8)
        for start in stride(from: 0, to: bytes.count, by: 5) {
            events += parser.feed(bytes[start..<min(start + 5, bytes.count)])
        }
        #expect(
            events == [
                ServiceEvent(id: 7, kind: "download", data: Data(#"{"a":1}"#.utf8)),
                ServiceEvent(id: 8, kind: "stats", data: Data("{\"b\":\n2}".utf8)),
            ])
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
