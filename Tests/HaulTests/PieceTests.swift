import Crypto
import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// Piece checksums against the fault server: a mirror that corrupts one byte costs one
/// piece, not the file; a piece no source serves right fails the download; the pieces
/// checked are kept beside the partial.
@Suite("Piece checksums", .timeLimit(.minutes(4)))
struct PieceTests {
    static let pieceLength = 256 << 10

    static func pieces(of bytes: [UInt8]) throws -> PieceChecksums {
        let hashes = stride(from: 0, to: bytes.count, by: pieceLength).map { start in
            SHA256.hash(data: bytes[start..<min(bytes.count, start + pieceLength)]).map { String(format: "%02x", $0) }
                .joined()
        }
        return try PieceChecksums(.sha256, length: Int64(pieceLength), hashes: hashes)
    }

    /// The messages of the bad pieces of download `id` (`retrying` events with
    /// `checksumMismatch`), until it ends.
    static func badPieces(_ events: AsyncStream<DownloadManager.Event>, id: DownloadID) -> Task<[String], Never> {
        Task {
            var bad: [String] = []
            for await event in events where event.id == id {
                if case .retrying(_, let reason, _) = event.event, reason.code == .checksumMismatch {
                    bad.append(reason.message)
                }
                if event.event.isTerminal { break }
            }
            return bad
        }
    }

    /// The bytes of `requests` asked within the pieces starting at `starts` (each
    /// `length` long): the ranges that start and end inside one of them.
    static func askedAgain(_ requests: [RecordedRequest], pieces starts: [Int], length: Int) -> Int {
        requests.compactMap { $0.header("Range") }.compactMap { range -> Int? in
            let bounds = range.dropFirst("bytes=".count).split(separator: "-").compactMap { Int($0) }
            guard bounds.count == 2 else { return nil }
            let inside = starts.contains { bounds[0] >= $0 && bounds[1] < $0 + length }
            return inside ? bounds[1] - bounds[0] + 1 : nil
        }.reduce(0, +)
    }

    @Test func aMirrorThatCorruptsOneByteCostsOnePieceNotTheFile() async throws {
        try await Fixture.with({
            $0.segmentedConnections = 2
            $0.maxConnectionsPerHost = 8
        }) { f in
            // Given 8 MiB at two addresses, the second of which flips a byte near the start of
            // each half (the two connections start there, one on each address: whichever
            // half it serves, it serves one bad byte), with piece checksums and the whole
            // file's
            let size = 8 << 20
            let bytes = f.serve("good", count: size)
            f.server.setFile("bad", bytes)
            let corrupt = [12_345, size / 2 + 12_345]
            var request = DownloadRequest(
                urls: [
                    f.server.url("/files/good?rate=\(8 << 20)"),
                    f.server.url("/files/bad?corrupt_at=\(corrupt.map(String.init).joined(separator: ","))&rate=\(8 << 20)"),
                ],
                destination: .directory(f.directory, name: "f"),
                checksum: try Checksum(.sha256, hex: sha256(bytes)!))
            request.pieces = try Self.pieces(of: bytes)
            let dropped = MirrorTests.droppedSources(f.manager.events, id: request.id)
            let badPieces = Self.badPieces(f.manager.events, id: request.id)

            // When it is downloaded
            let result = try await f.manager.download(request).result

            // Then it is whole, and what was asked again is the one bad piece, from the good
            // source: the corrupting one was demoted, not dropped (one bad piece)
            #expect(sha256(f.contents("f")) == sha256(bytes))
            #expect(result.byteCount == Int64(size))
            let bad = await badPieces.value
            #expect(bad.count == 1, "\(bad)")
            #expect(bad.first?.contains("/files/bad") == true)
            let starts = corrupt.map { ($0 / Self.pieceLength) * Self.pieceLength }
            #expect(Self.askedAgain(f.server.requests(path: "/files/good"), pieces: starts, length: Self.pieceLength) >= Self.pieceLength)
            #expect(await dropped.value.isEmpty)
            #expect(f.listing() == ["f"])
        }
    }

    @Test func aPieceNoSourceServesRightFailsTheDownload() async throws {
        try await Fixture.with { f in
            let size = 1 << 20
            let bytes = f.serve("bad", count: size)
            var request = DownloadRequest(
                url: f.server.url("/files/bad?corrupt_at=300000"), destination: .directory(f.directory, name: "f"))
            request.pieces = try Self.pieces(of: bytes)
            let error = try #require(await failure(of: f.manager.download(request)))
            #expect(error.code == .checksumMismatch)
            #expect(error.message.contains("piece 1 "))
            // Checked three times (fetched again twice), then given up
            let again = f.server.requests(path: "/files/bad").filter { $0.header("Range")?.hasPrefix("bytes=\(Self.pieceLength)-") == true }
            #expect(again.count == 2)
            #expect(!f.listing().contains("f"))
        }
    }

    @Test func theCheckedPiecesAreKeptBesideThePartialAndAResumeFinishesIt() async throws {
        try await Fixture.with(journal: true) { f in
            let size = 4 << 20
            let bytes = f.serve("f", count: size)
            var request = DownloadRequest(
                url: f.server.url("/files/f?gate=pieces&gate_after=\((1 << 20) + (64 << 10))&gate_rate=1"),
                destination: .directory(f.directory, name: "f"))
            request.pieces = try Self.pieces(of: bytes)
            // Every response sends a little more than a megabyte, then holds the rest until the
            // gate opens: the download cannot finish before the pause, however slow the machine
            let handle = try await f.manager.download(request)
            let events = handle.events
            // When it is paused after its first megabyte
            await firstEvent(events) { event -> Bool? in
                if case .progress(let progress) = event, progress.completedBytes >= 1 << 20 { return true }
                return nil
            }
            await handle.pause()
            await firstEvent(events) { event -> Bool? in if case .paused = event { true } else { nil } }
            let sidecar = try #require(PartialMetadata.load(from: f.file("f").path + ".haul-meta"))
            // Then the sidecar says which pieces were checked: at least the first
            let verified = PieceLedger.pieces(inBitfield: try #require(sidecar.verifiedPieces), count: 16)
            #expect(verified.contains(0))
            #expect(verified.count < 16)

            // And the download resumes, and completes whole, fetching only what was missing
            let asked = f.server.requests(path: "/files/f").count
            f.server.release("pieces")
            await handle.resume()
            _ = try await handle.result
            #expect(sha256(f.contents("f")) == sha256(bytes))
            // Every request after the pause asked for what was missing, past the first megabyte
            let after = f.server.requests(path: "/files/f").dropFirst(asked)
            #expect(!after.isEmpty)
            for request in after {
                let start = request.header("Range").flatMap { Int($0.dropFirst("bytes=".count).prefix { $0 != "-" }) }
                #expect((start ?? 0) >= 1 << 20, "\(request.header("Range") ?? "no range")")
            }
            // The journal keeps the pieces with the request
            await f.manager.flushJournal()
            #expect(try f.journal!.record(request.id)?.request().pieces == request.pieces)
        }
    }
}
