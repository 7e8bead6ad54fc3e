import Foundation
import Testing

@testable import Haul

/// The rules of a download's sources, without sockets: which failures drop a source, that
/// the last one is never dropped, how connections are spread, and how a source's answers
/// are checked against the content.
@Suite("SourceSet")
struct SourceSetTests {
    let a = URL(string: "https://a.example/f")!
    let b = URL(string: "https://b.example/f")!
    let c = URL(string: "https://c.example/f")!

    static func status(_ code: Int) -> DownloadError { DownloadError(.httpStatus, "HTTP \(code)", statusCode: code) }

    /// A source that answered a request for several ranges with its whole content is asked
    /// for one range at a time; the others for as many as the download wants.
    @Test func aSourceThatAnsweredWholeIsAskedOneRangeAtATimeAndTheOthersStillAll() {
        var sources = SourceSet(urls: [a, b])
        let first = sources.assign(maximumPerSource: 2)!
        let second = sources.assign(maximumPerSource: 2)!
        #expect(sources.rangesPerRequest(first, asking: 128) == 128)
        #expect(sources.rangesPerRequest(second, asking: 128) == 128)
        sources.answeredWhole(first)
        #expect(sources.rangesPerRequest(first, asking: 128) == 1)
        #expect(sources.rangesPerRequest(second, asking: 128) == 128)
        #expect(sources.rangesPerRequest(second, asking: 1) == 1)
        // An assignment to a source no longer at its index learns nothing.
        sources.answeredWhole(SourceSet.Assignment(index: 1, url: c))
        #expect(sources.rangesPerRequest(second, asking: 128) == 128)
    }

    @Test func duplicatesAreKeptOnceAndTheFirstIsCurrent() {
        let sources = SourceSet(urls: [a, b, a, c])
        #expect(sources.sources.map(\.url) == [a, b, c])
        #expect(sources.current == a)
        #expect(sources.hasMirrors)
        #expect(!SourceSet(urls: [a]).hasMirrors)
    }

    @Test(arguments: [
        (DownloadError(.network, "refused", isConnectivity: true), true),
        (SourceSetTests.status(404), true),
        (SourceSetTests.status(503), true),
        (DownloadError(.timeout, "idle"), true),
        (DownloadError(.sizeMismatch, "other size"), true),
        (DownloadError(.tls, "bad certificate"), true),
        (DownloadError(.urlExpired, "expired"), true),
        (DownloadError(.diskFull, "full"), false),
        (DownloadError(.fileSystem, "cannot write"), false),
        (DownloadError(.checksumMismatch, "bad digest"), false),
        (DownloadError(.proxy, "proxy refused"), false),
        (DownloadError(.tooLarge, "over the limit"), false),
        (DownloadError(.cancelled, "cancelled"), false),
        // A request the mirror did not process (its HTTP/2 connection going away) is sent
        // again, not held against it
        (DownloadError(.network, "did not process the request", wasNotProcessed: true), false),
    ])
    func aFailureDropsTheSourceOnlyWhenItIsTheSourcesFault(error: DownloadError, drops: Bool) {
        var sources = SourceSet(urls: [a, b])
        let failure = sources.failed(error, at: a)
        if drops {
            #expect(failure == .dropped(a, reason: error, next: b))
            #expect(sources.current == b)
            #expect(sources.live.map(\.url) == [b])
        } else {
            #expect(failure == .kept)
            #expect(sources.current == a)
        }
    }

    @Test func theLastSourceIsNeverDropped() {
        var sources = SourceSet(urls: [a, b, c])
        #expect(sources.failed(Self.status(404), at: a) == .dropped(a, reason: Self.status(404), next: b))
        #expect(sources.failed(Self.status(500), at: b) == .dropped(b, reason: Self.status(500), next: c))
        // c is the last: its error is the download's, under the usual retries
        #expect(sources.failed(Self.status(500), at: c) == .kept)
        #expect(sources.current == c)
        // A source already dropped (a late answer) changes nothing
        #expect(sources.failed(Self.status(404), at: a) == .kept)
    }

    @Test func aRefreshedURLReplacesItsSourceAndBringsItBack() {
        var sources = SourceSet(urls: [a, b])
        _ = sources.failed(Self.status(403), at: a)
        let fresh = URL(string: "https://a.example/f?sig=2")!
        sources.replace(a, with: fresh)
        #expect(sources.current == fresh)
        #expect(sources.live.count == 2)
    }

    @Test func connectionsAreSpreadEvenlyWithinTheCapPerSource() {
        var sources = SourceSet(urls: [a, b, c])
        sources.beginSegments(from: a, validator: .etag("\"1\""), startedAt: a)
        let assigned = (0..<5).compactMap { _ in sources.assign(maximumPerSource: 2) }
        #expect(assigned.map(\.url) == [a, b, c, a, b])
        // Only the first source's validator is known before its answers
        #expect(assigned.map(\.validator) == [.etag("\"1\""), nil, nil, .etag("\"1\""), nil])
        #expect(sources.assign(maximumPerSource: 2)?.url == c)
        // Every source is at its cap
        #expect(sources.assign(maximumPerSource: 2) == nil)
        sources.release(assigned[1])
        #expect(sources.assign(maximumPerSource: 2)?.url == b)
    }

    @Test func segmentsStartFromTheSourceThatAnsweredAfterItsRedirects() {
        var sources = SourceSet(urls: [a, b])
        let location = URL(string: "https://cdn.example/f?sig=1")!
        // a redirected to `location`, which answered: it stands for a, and comes first
        sources.beginSegments(from: location, validator: .etag("\"1\""), startedAt: a)
        #expect(sources.sources.map(\.url) == [location, b])
        // After b was dropped in the first request, b stays dropped
        var other = SourceSet(urls: [a, b])
        _ = other.failed(Self.status(404), at: a)
        other.beginSegments(from: b, validator: .etag("\"2\""), startedAt: b)
        #expect(other.sources.map(\.url) == [b, a])
        #expect(other.live.map(\.url) == [b])
    }

    @Test func aMirrorsFirstValidatorIsLearnedAndAChangeDropsIt() {
        var sources = SourceSet(urls: [a, b])
        sources.beginSegments(from: a, validator: .etag("\"1\""), startedAt: a)
        _ = sources.assign(maximumPerSource: 4)
        let mirror = sources.assign(maximumPerSource: 4)!
        #expect(mirror.url == b)
        #expect(sources.saw(.etag("\"m\""), from: mirror) == .kept)
        // Its next connection sends the validator it showed
        #expect(sources.assign(maximumPerSource: 4)?.validator == .etag("\"1\""))  // (a: fewest, first)
        #expect(sources.assign(maximumPerSource: 4)?.validator == .etag("\"m\""))
        // The same validator again is fine; another one means its content changed
        #expect(sources.saw(.etag("\"m\""), from: mirror) == .kept)
        guard case .dropped(b, _, next: a) = sources.saw(.etag("\"n\""), from: mirror) else {
            Issue.record("a mirror whose validator changed should be dropped")
            return
        }
        #expect(sources.live.map(\.url) == [a])
    }

    @Test func aMirrorWithOtherContentIsDroppedButTheFirstSourceChangingRestarts() {
        var sources = SourceSet(urls: [a, b, c])
        sources.beginSegments(from: a, validator: .etag("\"1\""), startedAt: a)
        let first = sources.assign(maximumPerSource: 4)!
        let second = sources.assign(maximumPerSource: 4)!
        #expect(second.url == b)
        guard case .dropped(b, let reason, _) = sources.disagreed(second, reason: "its content is 5 bytes, not 6") else {
            Issue.record("a mirror with another size should be dropped")
            return
        }
        #expect(reason.code == .sizeMismatch)
        // The first source's content is the partial file's: when it changes, everything restarts
        #expect(sources.disagreed(first, reason: "changed") == .kept)
    }

    @Test func healthIsKeptAndRestoredButNeverDropsTheLastSource() {
        var sources = SourceSet(urls: [a, b, c])
        _ = sources.failed(Self.status(404), at: b)
        _ = sources.servedBadPiece(2)
        let health = try! #require(sources.health)
        #expect(health.map(\.url) == [a, b, c].map(\.absoluteString))
        #expect(health.map(\.droppedCode) == [nil, "httpStatus", nil])
        #expect(health.map(\.badPieces) == [0, 0, 1])

        var resumed = SourceSet(urls: [a, b, c])
        resumed.restore(health)
        #expect(resumed.live.map(\.url) == [a, c])
        #expect(resumed.sources[2].badPieces == 1)
        #expect(resumed.sources[1].dropped?.code == .httpStatus)

        // A sidecar that dropped every source but one that is no longer there keeps one
        var single = SourceSet(urls: [b])
        single.restore(health)
        #expect(single.live.map(\.url) == [b])
        #expect(SourceSet(urls: [a]).health == nil)
    }
}
