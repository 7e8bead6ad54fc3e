import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// One file from several addresses, against the fault server: a dead, a lying and a slow
/// mirror among good ones; failover of a single connection; a download that fails only
/// when no source is left; mirrors kept in the journal.
@Suite("Mirrors", .timeLimit(.minutes(4)))
struct MirrorTests {
    /// A URL nothing listens on: connections are refused.
    static let dead = URL(string: "http://127.0.0.1:1/files/f")!

    /// Collects the sources dropped for `id` until its download ends.
    static func droppedSources(_ events: AsyncStream<DownloadManager.Event>, id: DownloadID) -> Task<
        [(URL, DownloadError)], Never
    > {
        Task {
            var dropped: [(URL, DownloadError)] = []
            for await event in events where event.id == id {
                if case .sourceDropped(let url, let reason) = event.event { dropped.append((url, reason)) }
                if event.event.isTerminal { break }
            }
            return dropped
        }
    }

    @Test func aSmallFileComesFromTheFirstSourceThatWorks() async throws {
        try await Fixture.with { f in
            // Given a file whose first address refuses connections and whose second answers 404
            let bytes = f.serve("f", count: 100_000)
            let request = DownloadRequest(
                urls: [Self.dead, f.server.url("/files/missing"), f.server.url("/files/f")],
                destination: .directory(f.directory, name: "f"))
            let events = f.manager.events
            let dropped = Self.droppedSources(events, id: request.id)

            // When it is downloaded
            let result = try await f.manager.download(request).result

            // Then both bad sources were dropped, each with its reason, at once (no retries
            // spent on them), and the file came whole from the third
            #expect(sha256(f.contents("f")) == sha256(bytes))
            #expect(result.bytesTransferred == 100_000)
            let seen = await dropped.value
            #expect(seen.map(\.0) == [Self.dead, f.server.url("/files/missing")])
            #expect(seen.map(\.1.code) == [.network, .httpStatus])
            #expect(f.server.requests(path: "/files/missing").count == 1)
            #expect(f.listing() == ["f"])
        }
    }

    @Test func aMirrorKeepsTheDownloadGoingWhenTheFirstSourceFailsMidway() async throws {
        try await Fixture.with { f in
            // Given a first source that resets the connection after 300,000 bytes, every time,
            // and a mirror serving the same bytes with the same validator
            let bytes = f.serve("f", count: 1_000_000, etag: .custom("same"))
            f.server.setFile("g", bytes, etag: .custom("same"))
            let request = DownloadRequest(
                urls: [f.server.url("/files/f?reset_after=300000&reset_fin=1"), f.server.url("/files/g")],
                destination: .directory(f.directory, name: "f"))

            let result = try await f.manager.download(request).result

            // Then the mirror was asked for the rest only: the partial was kept (all that had
            // reached it: see `rangeStart`)
            #expect(sha256(f.contents("f")) == sha256(bytes))
            let mirror = f.server.requests(path: "/files/g")
            #expect(mirror.count == 1)
            let start = try #require(rangeStart(mirror.first))
            #expect((0...300_000).contains(start))
            #expect(f.server.bytesServed(path: "/files/g") == 1_000_000 - start)
            #expect(result.bytesTransferred == 1_000_000)
        }
    }

    @Test func segmentsAreSpreadAcrossMirrorsAndTheDeadAndLyingOnesAreDropped() async throws {
        try await Fixture.with({
            $0.segmentedConnections = 4
            $0.maxConnectionsPerHost = 8
        }) { f in
            // Given a large file at four addresses: the first (at 8 MiB/s a response), a dead
            // one, one serving a file one byte longer, and a slow one (2 MiB/s a response)
            let size = 16 << 20
            let bytes = f.serve("big", count: size)
            f.server.setFile("copy", bytes)
            f.serve("other", count: size + 1, seed: 2)
            let request = DownloadRequest(
                urls: [
                    f.server.url("/files/big?rate=\(8 << 20)"), Self.dead, f.server.url("/files/other"),
                    f.server.url("/files/copy?rate=\(2 << 20)"),
                ], destination: .directory(f.directory, name: "big"))
            let dropped = Self.droppedSources(f.manager.events, id: request.id)

            // When it is downloaded
            let result = try await f.manager.download(request).result

            // Then it is whole; the dead and the lying mirror were dropped, each after one try
            #expect(result.byteCount == Int64(size))
            #expect(sha256(f.contents("big")) == sha256(bytes))
            let seen = await dropped.value
            #expect(Set(seen.map(\.0.absoluteString)) == [Self.dead.absoluteString, f.server.url("/files/other").absoluteString])
            #expect(seen.first { $0.0 == f.server.url("/files/other") }?.1.message.contains("\(size + 1) bytes") == true)
            #expect(f.server.requests(path: "/files/other").count == 1)
            // The slow mirror served ranges of its own: with no validator until it had shown
            // one (at most one first request per connection), and its own after that
            let copy = f.server.requests(path: "/files/copy")
            #expect(!copy.isEmpty)
            #expect(copy.allSatisfy { $0.header("Range") != nil })
            #expect(copy.first?.header("If-Range") == nil)
            #expect(copy.filter { $0.header("If-Range") == nil }.count <= 4)
            for request in copy {
                #expect([nil, f.server.etag(forFile: "copy")].contains(request.header("If-Range")))
            }
            // Nothing was asked for twice: after the first request (whose headers chose the
            // segments), every range asked of each good source began at its own offset (a
            // range handed to a second connection, or fetched again from its start, repeats
            // one). Across the two a start may repeat: the end game asks one source for the
            // rest of a range the other holds, from where that one stands. What a request
            // had in flight when its tail was taken over depends on the socket buffers, so
            // the bytes served are only bounded.
            for path in ["/files/big", "/files/copy"] {
                let starts = f.server.requests(path: path).filter { $0.header("Range") != nil }.map {
                    rangeBounds($0)?.start
                }
                #expect(!starts.contains(nil))
                #expect(Set(starts).count == starts.count, "\(path): \(starts)")
            }
            let served = f.server.bytesServed(path: "/files/big") + f.server.bytesServed(path: "/files/copy")
            #expect(served < 2 * size)
        }
    }

    @Test func aMirrorThatStallsNearTheEndHasItsRestTakenOverByAnotherMirror() async throws {
        // (The idle timeout is far beyond the suite's time limit: a stalled range no other
        // connection takes over fails the test by hanging, not by a retry.)
        try await Fixture.with({
            $0.segmentedConnections = 2
            $0.maxConnectionsPerHost = 8
            $0.idleTimeout = .seconds(600)
            $0.segmentationThreshold = 1 << 20
        }) { f in
            // Given a file at two addresses, the second of which sends 64 KiB of each response
            // and then nothing more
            let size = 1 << 20
            let bytes = f.serve("big", count: size)
            f.server.setFile("copy", bytes)
            let request = DownloadRequest(
                urls: [f.server.url("/files/big"), f.server.url("/files/copy?stall_after=65536")],
                destination: .directory(f.directory, name: "big"))
            let dropped = Self.droppedSources(f.manager.events, id: request.id)

            // When it is downloaded
            let result = try await f.manager.download(request).result

            // Then it is whole, with nothing retried or dropped: the first address split the
            // stalled range until too little was left to split, then asked for the rest of
            // it from where the stalled response stood (at most 64 KiB in), and the stalled
            // request was stopped, not asked again
            #expect(result.byteCount == Int64(size))
            #expect(sha256(f.contents("big")) == sha256(bytes))
            #expect(await dropped.value.isEmpty)
            let stalled = f.server.requests(path: "/files/copy")
            try #require(stalled.count == 1)
            let stalledStart = try #require(rangeBounds(stalled[0])?.start)
            let starts = f.server.requests(path: "/files/big").compactMap { rangeBounds($0)?.start }
            #expect(starts.contains { (stalledStart...stalledStart + 65536).contains($0) }, "\(stalledStart): \(starts)")
            #expect(f.server.bytesServed(path: "/files/copy") <= 65536)
        }
    }

    @Test func theDownloadFailsOnlyWhenNoSourceIsLeft() async throws {
        try await Fixture.with { f in
            let request = DownloadRequest(
                urls: [f.server.url("/files/gone"), f.server.url("/files/missing")],
                destination: .directory(f.directory, name: "f"))
            let dropped = Self.droppedSources(f.manager.events, id: request.id)
            let handle = try await f.manager.download(request)

            // Then the first was dropped, and the download failed with the last one's error
            let error = try #require(await failure(of: handle))
            #expect(error.code == .httpStatus)
            #expect(error.statusCode == 404)
            #expect(error.message.contains("/files/missing"))
            #expect(await dropped.value.map(\.0) == [f.server.url("/files/gone")])
            #expect(f.listing().isEmpty)
        }
    }

    @Test func aMirrorWithUserInfoOrAnotherSchemeIsRefused() async throws {
        try await Fixture.with { f in
            for mirror in ["ftp://127.0.0.1/f", "http://user:secret@127.0.0.1/f"] {
                let request = DownloadRequest(
                    urls: [f.server.url("/files/f"), URL(string: mirror)!], destination: .directory(f.directory))
                let error = await #expect(throws: DownloadError.self) { _ = try await f.manager.download(request) }
                #expect(error?.code == .invalidRequest)
                #expect(error?.message.contains("secret") == false)
            }
        }
    }

    @Test func mirrorsAreKeptInTheJournal() async throws {
        try await Fixture.with(journal: true) { f in
            let bytes = f.serve("f", count: 10_000)
            let mirror = f.server.url("/files/f?from=mirror")
            let request = DownloadRequest(
                urls: [f.server.url("/files/f"), mirror], destination: .directory(f.directory, name: "f"))
            _ = try await f.manager.download(request).result
            #expect(sha256(f.contents("f")) == sha256(bytes))
            await f.manager.flushJournal()
            let record = try #require(try f.journal!.record(request.id))
            #expect(try record.request().mirrors == [mirror])
            #expect(try record.request().urls == [f.server.url("/files/f"), mirror])
        }
    }

    @Test func aResumedDownloadDoesNotAskAgainAMirrorItDropped() async throws {
        try await Fixture.with({
            $0.segmentedConnections = 2
            $0.maxConnectionsPerHost = 8
        }) { f in
            // Given a large file with a mirror that answers 404
            let size = 24 << 20
            let bytes = f.serve("big", count: size)
            let request = DownloadRequest(
                urls: [f.server.url("/files/big?rate=\(4 << 20)"), f.server.url("/files/missing")],
                destination: .directory(f.directory, name: "big"))
            let handle = try await f.manager.download(request)
            let events = handle.events
            // When it is paused once the mirror was dropped and bytes came, then resumed
            await firstEvent(events) { event -> Bool? in
                if case .progress(let progress) = event, progress.completedBytes >= 2 << 20 { return true }
                return nil
            }
            #expect(f.server.requests(path: "/files/missing").count == 1)
            await handle.pause()
            await firstEvent(events) { event -> Bool? in if case .paused = event { true } else { nil } }
            let sidecar = try #require(PartialMetadata.load(from: f.file("big").path + ".haul-meta"))
            #expect(sidecar.sources?.first { $0.url.hasSuffix("/files/missing") }?.droppedCode == "httpStatus")
            await handle.resume()
            _ = try await handle.result

            // Then the mirror was not asked again
            #expect(sha256(f.contents("big")) == sha256(bytes))
            #expect(f.server.requests(path: "/files/missing").count == 1)
        }
    }
}

