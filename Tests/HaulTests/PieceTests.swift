import Crypto
import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// Piece checksums against the fault server: a mirror that corrupts one byte costs one
/// piece, not the file; a piece no source serves right fails the download; the pieces
/// checked are kept beside the partial.
@Suite("Piece checksums", .timeLimit(.minutes(1)))
struct PieceTests {
    static let pieceLength = 256 << 10

    static func pieces(of bytes: [UInt8]) throws -> PieceChecksums {
        let hashes = stride(from: 0, to: bytes.count, by: pieceLength).map { start in
            SHA256.hash(data: bytes[start..<min(bytes.count, start + pieceLength)]).map { String(format: "%02x", $0) }
                .joined()
        }
        return try PieceChecksums(.sha256, length: Int64(pieceLength), hashes: hashes)
    }

    @Test func aMirrorThatCorruptsOneByteCostsOnePieceNotTheFile() async throws {
        try await Fixture.with({
            $0.segmentedConnections = 2
            $0.maxConnectionsPerHost = 8
        }) { f in
            // Given 8 MiB at two addresses, the second of which flips one byte in the middle
            // of the file, with piece checksums and the whole file's
            let size = 8 << 20
            let bytes = f.serve("good", count: size)
            f.server.setFile("bad", bytes)
            let corrupt = size / 2 + 12_345
            var request = DownloadRequest(
                urls: [f.server.url("/files/good?rate=\(8 << 20)"), f.server.url("/files/bad?corrupt_at=\(corrupt)&rate=\(8 << 20)")],
                destination: .directory(f.directory, name: "f"),
                checksum: try Checksum(.sha256, hex: sha256(bytes)!))
            request.pieces = try Self.pieces(of: bytes)
            let dropped = MirrorTests.droppedSources(f.manager.events, id: request.id)

            // When it is downloaded
            let result = try await f.manager.download(request).result

            // Then it is whole, and the two sources served it once plus about one piece (and
            // what the first response sent before it was stopped, once its size was known:
            // at most a tenth of a second at 8 MiB/s)
            #expect(sha256(f.contents("f")) == sha256(bytes))
            #expect(result.byteCount == Int64(size))
            let served = f.server.bytesServed(path: "/files/good") + f.server.bytesServed(path: "/files/bad")
            #expect(served >= size)
            #expect(served <= size + 2 * Self.pieceLength + (8 << 20) / 10)
            // The bad piece was fetched again from the good source, the only request
            // for it there, and the corrupting one was demoted, not dropped (one bad piece)
            let piece = corrupt / Self.pieceLength
            let pieceStart = piece * Self.pieceLength
            let refetched = f.server.requests(path: "/files/good").filter {
                $0.header("Range")?.hasPrefix("bytes=\(pieceStart)-") == true
            }
            #expect(refetched.count == 1)
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
                url: f.server.url("/files/f?rate=\(2 << 20)"), destination: .directory(f.directory, name: "f"))
            request.pieces = try Self.pieces(of: bytes)
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
