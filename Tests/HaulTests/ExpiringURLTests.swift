import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// Signed URLs that expire in the middle of a download, against the fault server: refreshed
/// and resumed, followed again through their redirect, or failing as expired with the
/// partial kept.
@Suite("Expiring URLs", .timeLimit(.minutes(4)))
struct ExpiringURLTests {
    /// The URLs a refresher was asked about, and the fresh one it gives: the same object
    /// under token `b`.
    final class Refresher: Sendable {
        let asked = Locked<[URL]>([])

        func refresh(_ expired: URL) -> URL {
            asked.withLock { $0.append(expired) }
            var components = URLComponents(url: expired, resolvingAgainstBaseURL: false)!
            components.queryItems = [URLQueryItem(name: "token", value: "b")]
            return components.url!
        }
    }

    @Test func anExpiredURLIsRefreshedAndTheDownloadResumesWhereItStood() async throws {
        let refresher = Refresher()
        try await Fixture.with({ $0.refreshURL = { expired, _ in refresher.refresh(expired) } }) { f in
            // Given a signed URL that expires after 300,000 of its 1,000,000 bytes
            let bytes = f.serve("f", count: 1_000_000)
            let handle = try await f.manager.download(f.request("/files/f?token=a&expire_after=300000", to: "f"))

            // When it is downloaded
            let result = try await handle.result

            // Then the refresher was asked once, about the expired URL, and the fresh URL
            // was asked for the rest only (from where the partial stood: see `rangeStart`),
            // with the validator of the first response
            #expect(sha256(f.contents("f")) == sha256(bytes))
            #expect(refresher.asked.withLock { $0 } == [f.server.url("/files/f?token=a&expire_after=300000")])
            let requests = f.server.requests(path: "/files/f")
            let fresh = requests.filter { $0.query["token"] == "b" }
            #expect(fresh.count == 1)
            let start = try #require(rangeStart(fresh.first))
            #expect((0...300_000).contains(start))
            if start > 0 { #expect(fresh.first?.header("If-Range") == f.server.etag(forFile: "f")) }
            #expect(result.bytesTransferred == 1_000_000)
            // (what the first response sent past the partial, and the 403's short body)
            #expect(f.server.bytesServed(path: "/files/f") < 1_000_000 + (300_000 - start) + 1_000)
            #expect(f.listing() == ["f"])
        }
    }

    @Test func withoutAWayToRefreshItFailsAsExpiredAndAFreshURLResumesThePartial() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("f", count: 1_000_000)
            // Given a signed URL that expires mid-download, and no way to refresh it
            let handle = try await f.manager.download(f.request("/files/f?token=a&expire_after=300000", to: "f"))

            // Then the download fails as expired, saying how to give a fresh URL, and keeps its partial
            let error = try #require(await failure(of: handle))
            #expect(error.code == .urlExpired)
            #expect(error.statusCode == 403)
            #expect(error.message.contains("--refresh-command"))
            // (all that had reached the file: see `rangeStart`)
            let kept = try #require(f.contents("f.haul-partial")?.count)
            #expect((0...300_000).contains(kept))

            // When the download is added again under a fresh signature of the same object
            let again = try await f.manager.download(f.request("/files/f?token=b", to: "f")).result

            // Then it resumes from the partial: only the rest is asked for
            #expect(again.bytesTransferred == Int64(1_000_000 - kept))
            #expect(sha256(f.contents("f")) == sha256(bytes))
            #expect(rangeStart(f.server.requests(path: "/files/f").last) == kept)
        }
    }

    @Test func aRedirectToASignedURLThatExpiredIsFollowedAgainWithoutAsking() async throws {
        try await Fixture.with { f in
            // Given a release URL that redirects to a signed URL (a fresh one each time),
            // the first of which expires after 300,000 bytes
            let bytes = f.serve("f", count: 1_000_000)
            let result = try await f.manager.download(f.request("/sign/f?expire_after=300000", to: "f")).result

            // Then the retry went through the redirect again, to a fresh signature, and
            // asked for the rest only (from where the partial stood: see `rangeStart`)
            #expect(sha256(f.contents("f")) == sha256(bytes))
            let requests = f.server.requests(path: "/files/f")
            #expect(requests.map { $0.query["token"] } == ["t1", "t2"])
            #expect((0...300_000).contains(try #require(rangeStart(requests.last))))
            #expect(result.bytesTransferred == 1_000_000)
        }
    }

    @Test func theSegmentsOfASegmentedDownloadMoveToTheFreshURLWhereTheyStood() async throws {
        let refresher = Refresher()
        try await Fixture.with({
            $0.segmentedConnections = 4
            $0.maxConnectionsPerHost = 8
            // Stalled segments end at the idle timeout and are retried (stalling again after
            // 1,000,000 more bytes) until their URL has expired.
            $0.idleTimeout = .seconds(1)
            $0.refreshURL = { expired, _ in refresher.refresh(expired) }
        }) { f in
            // Given a large file whose every response stalls after 1,000,000 bytes
            let size = 24 << 20
            let bytes = f.serve("big", count: size)
            let handle = try await f.manager.download(f.request("/files/big?token=a&stall_after=1000000", to: "big"))
            // When its four segments have each written their first 1,000,000 bytes, and the URL expires
            await firstEvent(handle.events) { event -> Bool? in
                if case .progress(let progress) = event, progress.completedBytes >= 4_000_000 { return true }
                return nil
            }
            f.server.expire(token: "a")
            let result = try await handle.result

            // Then it completed from segments on the fresh URL, each resuming where its
            // segment stood, with the first response's validator
            #expect(sha256(f.contents("big")) == sha256(bytes))
            #expect(result.byteCount == Int64(size))
            #expect(refresher.asked.withLock { $0.count } == 1)
            let fresh = f.server.requests(path: "/files/big").filter { $0.query["token"] == "b" }
            let starts = fresh.compactMap { $0.header("Range").flatMap { Int($0.dropFirst("bytes=".count).prefix { $0 != "-" }) } }
            #expect(starts.count == fresh.count)
            #expect(starts.count >= 4)
            // No segment started over: every segment had bytes on disk (each wrote its first
            // 1,000,000 before the URL expired), so none of the fresh requests starts where a
            // segment began. (Where each stood depends on the machine's speed: stalls end at
            // the idle timeout and are resumed, and a connection that finishes takes half of
            // the largest range left.)
            for segmentStart in [0, 6 << 20, 12 << 20, 18 << 20] {
                #expect(!starts.contains(segmentStart), "a segment started over at \(segmentStart): \(starts)")
            }
            #expect(fresh.allSatisfy { $0.header("If-Range") == f.server.etag(forFile: "big") })
            #expect(f.listing() == ["big"])
        }
    }

    @Test func aRefresherThatFailsEndsTheDownloadAsExpiredSayingWhy() async throws {
        struct NoURL: Error, CustomStringConvertible {
            var description: String { "the API is down" }
        }
        try await Fixture.with({ $0.refreshURL = { _, _ in throw NoURL() } }) { f in
            f.serve("f", count: 1_000_000)
            let handle = try await f.manager.download(f.request("/files/f?token=a&expire_after=300000", to: "f"))
            let error = try #require(await failure(of: handle))
            #expect(error.code == .urlExpired)
            #expect(error.message.contains("the API is down"))
            #expect(f.contents("f.haul-partial")?.count == 300_000)
        }
    }

    @Test func theFreshURLIsKeptInTheJournalForTheNextRun() async throws {
        let refresher = Refresher()
        try await Fixture.with(journal: true, { $0.refreshURL = { expired, _ in refresher.refresh(expired) } }) { f in
            f.serve("f", count: 500_000)
            let request = f.request("/files/f?token=a&expire_after=100000", to: "f")
            _ = try await f.manager.download(request).result
            await f.manager.flushJournal()
            // The URL stays the download's identity; where it is fetched from now is kept
            let record = try #require(try f.journal!.record(request.id))
            #expect(record.url == request.url.absoluteString)
            #expect(record.location == f.server.url("/files/f?token=b").absoluteString)
            #expect(try record.request().location == f.server.url("/files/f?token=b"))
        }
    }
}

