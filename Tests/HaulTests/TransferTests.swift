import Crypto
import Foundation
import Haul
import HaulTestSupport
import Testing

@testable import Haul

@Suite("Transfer")
struct TransferTests {
    @Test func downloadsAFileAndLeavesNoPartial() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("a.bin", count: 300_000)
            let handle = try await f.manager.download(f.request("/files/a.bin"))
            let result = try await handle.result
            #expect(result.fileURL == f.file("a.bin"))
            #expect(result.byteCount == 300_000)
            #expect(result.bytesTransferred == 300_000)
            #expect(sha256(f.contents("a.bin")) == sha256(bytes))
            #expect(f.listing() == ["a.bin"])
        }
    }

    @Test func fileDestinationAndChunkedBody() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("c", count: 200_000)
            let target = f.file("chosen.dat")
            let handle = try await f.manager.download(
                DownloadRequest(url: f.server.url("/files/c?chunked=1"), destination: .file(target)))
            _ = try await handle.result
            #expect(sha256(f.contents("chosen.dat")) == sha256(bytes))
        }
    }

    @Test func traversalInContentDispositionStaysInsideTheDirectory() async throws {
        try await Fixture.with { f in
            f.serve("t", count: 10)
            let disposition = "attachment;%20filename=%22../../escape.txt%22"
            let result = try await f.manager.download(f.request("/files/t?disposition=\(disposition)")).result
            #expect(result.fileURL == f.file("escape.txt"))
            #expect(f.listing() == ["escape.txt"])
            #expect(!FileManager.default.fileExists(atPath: f.directory.deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("escape.txt").path))
        }
    }

    @Test func clientErrorIsTypedNotRetriedAndNeverWritten() async throws {
        try await Fixture.with { f in
            let handle = try await f.manager.download(f.request("/status/404", to: "missing"))
            let error = try #require(await failure(of: handle))
            #expect(error.code == .httpStatus)
            #expect(error.statusCode == 404)
            #expect(error.message.contains("404"))
            #expect(f.server.statistics.totalRequests == 1)
            #expect(f.listing().isEmpty)
        }
    }

    @Test func serverErrorsAreRetriedHonouringRetryAfter() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("flaky", count: 50_000)
            let handle = try await f.manager.download(f.request("/files/flaky?fail=503&fail_times=2&retry_after=0"))
            let events = handle.events
            let result = try await handle.result
            #expect(result.byteCount == 50_000)
            #expect(sha256(f.contents("flaky")) == sha256(bytes))
            #expect(f.server.requests(path: "/files/flaky").count == 3)
            var retries: [Int] = []
            for await event in events {
                if case .retrying(let attempt, let reason, _) = event {
                    retries.append(attempt)
                    #expect(reason.statusCode == 503)
                }
            }
            #expect(retries == [1, 2])
        }
    }

    @Test func persistentServerErrorFailsAfterTheRetries() async throws {
        try await Fixture.with { f in
            f.serve("down", count: 10)
            let handle = try await f.manager.download(f.request("/files/down?fail=500"))
            let error = try #require(await failure(of: handle))
            #expect(error.statusCode == 500)
            #expect(f.server.requests(path: "/files/down").count == 4)  // 1 + 3 retries
            #expect(f.listing().isEmpty)
        }
    }

    @Test func tooManyRequestsIsRetried() async throws {
        try await Fixture.with { f in
            f.serve("busy", count: 10)
            _ = try await f.manager.download(f.request("/files/busy?fail=429&fail_times=1")).result
            #expect(f.server.requests(path: "/files/busy").count == 2)
        }
    }

    @Test func followsRedirectChains() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("target", count: 1000)
            let result = try await f.manager.download(f.request("/redirect/3?to=%2Ffiles%2Ftarget", to: "out")).result
            #expect(result.finalURL == f.server.url("/files/target"))
            #expect(sha256(f.contents("out")) == sha256(bytes))
        }
    }

    @Test func detectsRedirectLoopsAndLongChains() async throws {
        try await Fixture.with { f in
            f.serve("target", count: 10)
            let loop = try #require(await failure(of: try await f.manager.download(f.request("/loop/a", to: "x"))))
            #expect(loop.code == .redirectLoop)
            let long = try #require(
                await failure(of: try await f.manager.download(f.request("/redirect/11?to=%2Ffiles%2Ftarget", to: "y"))))
            #expect(long.code == .tooManyRedirects)
            #expect(f.listing().isEmpty)
        }
    }

    @Test(arguments: ["ftp://example.com/x", "file:///etc/passwd"])
    func aRedirectToAnotherSchemeFailsWithoutRetries(location: String) async throws {
        // (the fixture allows 3 retries: only a permanent error ends after one request)
        try await Fixture.with { f in
            let path = "/redirect/0?to=\(location.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)"
            let error = try #require(await failure(of: try await f.manager.download(f.request(path, to: "x"))))
            #expect(error.code == .unusableRedirect)
            #expect(error.message.contains("is not a scheme Haul downloads"))
            #expect(f.server.requests(path: "/redirect/0").count == 1)
            #expect(f.listing().isEmpty)
        }
    }

    @Test func resumesAfterResetsWithRangeAndIfRange() async throws {
        try await Fixture.with { f in
            let size = 4 << 20
            let bytes = f.serve("big", count: size)
            let etag = try #require(f.server.etag(forFile: "big"))
            _ = try await f.manager.download(f.request("/files/big?reset_after=1000000&reset_times=2&reset_fin=1")).result
            #expect(sha256(f.contents("big")) == sha256(bytes))
            let requests = f.server.requests(path: "/files/big")
            #expect(requests.count == 3)
            #expect(requests[0].header("Range") == nil)
            for request in requests.dropFirst() {
                let range = try #require(request.header("Range"))
                #expect(range.hasPrefix("bytes=") && range != "bytes=0-")
                #expect(request.header("If-Range") == etag)
            }
        }
    }

    /// A connection that drops after bytes arrived is a resume to make at once: no backoff,
    /// and no retry spent. With one retry allowed, a download cut five times completes,
    /// each retry announced without a delay (before, the second cut failed it).
    @Test func dropsAfterProgressAreResumedAtOnceWithoutSpendingRetries() async throws {
        try await Fixture.with({ $0.retry = RetryPolicy(maxRetries: 1, baseDelay: .milliseconds(5)) }) { f in
            let size = 4 << 20
            let bytes = f.serve("drops", count: size)
            let handle = try await f.manager.download(
                f.request("/files/drops?reset_after=300000&reset_times=5&reset_fin=1"))
            let events = handle.events
            let result = try await handle.result
            #expect(result.byteCount == Int64(size))
            #expect(sha256(f.contents("drops")) == sha256(bytes))
            #expect(f.server.requests(path: "/files/drops").count == 6)
            var delays: [Duration] = []
            for await event in events {
                if case .retrying(_, _, let delay) = event { delays.append(delay) }
            }
            #expect(delays == Array(repeating: .zero, count: 5))
        }
    }

    /// A reset costs only what had not reached the file: the next request asks for the rest,
    /// from exactly where the partial stood, and nothing else is served twice. (How much had
    /// reached the file when the connection ended depends on how far the disk was behind:
    /// the client drops what it had read but not yet handed over, see `rangeStart`. Workload 5
    /// of `Benchmarks/compare.sh` measures what a resume costs against a real server.)
    @Test func resumeAfterAResetAsksOnlyForTheRest() async throws {
        try await Fixture.with { f in
            let size = 16 << 20
            let sent = 6_000_000
            let bytes = f.serve("eff", count: size)
            let result = try await f.manager.download(
                f.request("/files/eff?reset_after=\(sent)&reset_times=1&reset_fin=1")
            ).result
            #expect(sha256(f.contents("eff")) == sha256(bytes))
            let requests = f.server.requests(path: "/files/eff")
            #expect(requests.count == 2)
            let start = try #require(rangeStart(requests.last))
            #expect((1...sent).contains(start))
            #expect(f.server.bytesServed(path: "/files/eff") == sent + size - start)
            #expect(result.bytesTransferred == Int64(size))
        }
    }

    @Test func survivesAbortiveResets() async throws {
        try await Fixture.with { f in
            let size = 2 << 20
            let bytes = f.serve("rst", count: size)
            // TCP RSTs may drop bytes still in flight; whatever arrived is resumed from.
            let result = try await f.manager.download(f.request("/files/rst?reset_after=700000&reset_times=2")).result
            #expect(result.byteCount == Int64(size))
            #expect(sha256(f.contents("rst")) == sha256(bytes))
            #expect(f.server.requests(path: "/files/rst").count == 3)
            #expect(f.server.bytesServed(path: "/files/rst") <= size + 2 * 700_000)
        }
    }

    @Test func lastModifiedIsTheValidatorWhenThereIsNoStrongETag() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("lm", count: 1 << 20)
            let lastModified = try #require(f.server.lastModified(forFile: "lm"))
            _ = try await f.manager.download(f.request("/files/lm?weak_etag=1&reset_after=300000&reset_times=1&reset_fin=1")).result
            #expect(sha256(f.contents("lm")) == sha256(bytes))
            let second = try #require(f.server.requests(path: "/files/lm").last)
            #expect(second.header("If-Range") == lastModified)
        }
    }

    @Test func withoutValidatorsARetryStartsFromZero() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("nv", count: 1 << 20, etag: .none, lastModified: .none)
            _ = try await f.manager.download(f.request("/files/nv?reset_after=300000&reset_times=1&reset_fin=1")).result
            #expect(sha256(f.contents("nv")) == sha256(bytes))
            let requests = f.server.requests(path: "/files/nv")
            #expect(requests.count == 2)
            #expect(requests.allSatisfy { $0.header("Range") == nil })
        }
    }

    @Test func blindResumeIsAnExplicitOptIn() async throws {
        try await Fixture.with({ $0.allowsBlindResume = true }) { f in
            let bytes = f.serve("blind", count: 1 << 20, etag: .none, lastModified: .none)
            _ = try await f.manager.download(f.request("/files/blind?reset_after=300000&reset_times=1&reset_fin=1")).result
            #expect(sha256(f.contents("blind")) == sha256(bytes))
            let second = try #require(f.server.requests(path: "/files/blind").last)
            #expect(second.header("Range") != nil)
            #expect(second.header("If-Range") == nil)
        }
    }

    @Test func serverIgnoringRangeMeansStartingOver() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("ir", count: 1 << 20)
            _ = try await f.manager.download(f.request("/files/ir?ignore_range=1&reset_after=300000&reset_times=1&reset_fin=1")).result
            #expect(sha256(f.contents("ir")) == sha256(bytes))
            #expect(f.server.requests(path: "/files/ir").last?.header("Range") != nil)
        }
    }

    @Test func changedContentIsDownloadedWholeNeverSpliced() async throws {
        try await Fixture.with { f in
            f.serve("v", count: 1 << 20, seed: 1)
            let handle = try await f.manager.download(f.request("/files/v?stall_after=400000&stall_times=1"))
            let events = handle.events
            await firstEvent(events) { event -> Bool? in
                if case .progress(let progress) = event, progress.completedBytes > 0 { return true }
                return nil
            }
            await handle.pause()
            let partial = f.file("v.haul-partial")
            #expect(FileManager.default.fileExists(atPath: partial.path))
            let newBytes = f.serve("v", count: 1 << 20, seed: 2)
            await handle.resume()
            _ = try await handle.result
            #expect(sha256(f.contents("v")) == sha256(newBytes))
            let last = try #require(f.server.requests(path: "/files/v").last)
            #expect(last.header("Range") != nil)  // asked to resume, got a 200 with the new content
        }
    }

    @Test func unsatisfiableRangeOnACompletePartialIsDone() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("done", count: 100_000)
            // A previous run wrote every byte but stopped before the rename.
            let url = f.server.url("/files/done")
            _ = FileManager.default.createFile(atPath: f.file("done.haul-partial").path, contents: Data(bytes))
            let etag = try #require(f.server.etag(forFile: "done"))
            try PartialMetadata(url: url.absoluteString, validator: .etag(etag), totalBytes: 100_000)
                .save(to: f.file("done.haul-meta").path)

            let result = try await f.manager.download(f.request("/files/done")).result
            #expect(result.byteCount == 100_000)
            #expect(sha256(f.contents("done")) == sha256(bytes))
            #expect(f.server.requests(path: "/files/done").first?.header("Range") == "bytes=100000-")
            #expect(f.server.bytesServed(path: "/files/done") == 0)
            #expect(f.listing() == ["done"])
        }
    }

    @Test func lyingContentLengthFailsWithoutADestination() async throws {
        // An idle timeout far beyond the run: the short body must end in a network error,
        // and the test must not race the idle timer. (Its body is read only once the head's
        // file work is done on the I/O pool every suite shares; under a full parallel run on
        // two cores that took over the default 10 s twice in CI, and the download then
        // failed with `timeout` instead.)
        try await Fixture.with({ $0.idleTimeout = .seconds(300) }) { f in
            f.serve("liar", count: 10_000)
            let handle = try await f.manager.download(f.request("/files/liar?lie_length=500"))
            let error = try #require(await failure(of: handle))
            #expect(error.code == .network)
            #expect(!FileManager.default.fileExists(atPath: f.file("liar").path))
        }
    }

    @Test func idleTimeoutRetriesAndResumes() async throws {
        // 3 s, not less: the body is read only once the head's file work is done on the
        // I/O pool, which every suite shares. One CI run with a 1 s timeout retried with
        // nothing to resume, most likely because no byte had been read by then.
        try await Fixture.with({ $0.idleTimeout = .seconds(3) }) { f in
            let bytes = f.serve("stall", count: 500_000)
            let handle = try await f.manager.download(f.request("/files/stall?stall_after=200000&stall_times=1"))
            let events = handle.events
            _ = try await handle.result
            #expect(sha256(f.contents("stall")) == sha256(bytes))
            let reason = await firstEvent(events) { event -> DownloadError? in
                if case .retrying(_, let reason, _) = event { return reason }
                return nil
            }
            #expect(reason?.code == .timeout)
            #expect(f.server.requests(path: "/files/stall").last?.header("Range") != nil)
        }
    }

    /// Bytes that arrive and are then followed by nothing reach the file and the progress
    /// at once, not when the idle timeout ends the response. The idle timeout is far beyond
    /// the time limit, so nothing here races it: without the batch timer the test hangs.
    @Test(.timeLimit(.minutes(4)))
    func aStalledResponsesBytesReachTheFileWhileItStalls() async throws {
        try await Fixture.with({ $0.idleTimeout = .seconds(600) }) { f in
            f.serve("held", count: 1 << 20)
            // 1,000 bytes, then nothing: one body part, sent once the events are watched.
            let handle = try await f.manager.download(f.request("/files/held?gate=held&stall_after=1000"))
            let events = handle.events
            f.server.release("held")
            let reached = await firstEvent(events) { event -> Int64? in
                switch event {
                case .progress(let progress) where progress.completedBytes > 0: progress.completedBytes
                case .retrying, .failed, .completed: -1
                default: nil
                }
            }
            #expect(reached == 1000)
            let length = try FileManager.default.attributesOfItem(atPath: f.file("held.haul-partial").path)[.size] as? Int
            #expect(length == 1000)
            // Still the first response, still stalled.
            #expect(f.server.requests(path: "/files/held").count == 1)
            #expect(f.server.statistics.inFlightRequests == 1)
            await handle.cancel()
        }
    }

    @Test(arguments: Checksum.Algorithm.allCases)
    func verifiesChecksums(algorithm: Checksum.Algorithm) async throws {
        try await Fixture.with { f in
            let bytes = f.serve("sum", count: 123_456)
            let good = try Checksum(algorithm, hex: Self.digest(bytes, algorithm))
            _ = try await f.manager.download(f.request("/files/sum", checksum: good)).result
            #expect(sha256(f.contents("sum")) == sha256(bytes))

            let bad = try Checksum(algorithm, hex: String(repeating: "0", count: good.hex.count))
            let error = try #require(await failure(of: try await f.manager.download(f.request("/files/sum", to: "bad", checksum: bad))))
            #expect(error.code == .checksumMismatch)
            #expect(error.message.contains(algorithm.rawValue))
            #expect(f.listing() == ["sum"])
        }
    }

    @Test func checksumIsRightAfterAResume() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("rs", count: 1 << 20)
            let checksum = try Checksum(.sha256, hex: Self.digest(bytes, .sha256))
            _ = try await f.manager.download(f.request("/files/rs?reset_after=400000&reset_times=1&reset_fin=1", checksum: checksum)).result
            #expect(sha256(f.contents("rs")) == sha256(bytes))
        }
    }

    @Test func wrongExpectedSizeFails() async throws {
        try await Fixture.with { f in
            f.serve("sz", count: 1000)
            let error = try #require(await failure(of: try await f.manager.download(f.request("/files/sz", expectedSize: 999))))
            #expect(error.code == .sizeMismatch)
            #expect(f.listing().isEmpty)
        }
    }

    @Test func downloadsIntoMemoryWithALimit() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("thumb", count: 20_000)
            let ok = try await f.manager.download(
                DownloadRequest(url: f.server.url("/files/thumb"), destination: .memory(limit: 64_000))).result
            #expect(ok.data.map { [UInt8]($0) } == bytes)
            #expect(ok.fileURL == nil)

            for query in ["", "?chunked=1"] {
                let tooBig = try await f.manager.download(
                    DownloadRequest(url: f.server.url("/files/thumb" + query), destination: .memory(limit: 10_000)))
                let error = try #require(await failure(of: tooBig))
                #expect(error.code == .tooLarge)
            }
            #expect(f.listing().isEmpty)
        }
    }

    @Test func refusedConnectionIsANetworkError() async throws {
        try await Fixture.with({ $0.retry.maxRetries = 1 }) { f in
            // A port bound and never listened on, held for the whole test: connecting is
            // refused, and no other test's server can be given the port meanwhile (a closed
            // server's port could be, and answered 404 once in CI).
            let bound = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            #expect(bound >= 0)
            defer { close(bound) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = 0
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let named = withUnsafeMutablePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                    bind(bound, socketAddress, length) == 0 && getsockname(bound, socketAddress, &length) == 0
                }
            }
            #expect(named)
            let port = Int(UInt16(bigEndian: address.sin_port))
            let handle = try await f.manager.download(
                DownloadRequest(url: URL(string: "http://127.0.0.1:\(port)/x")!, destination: .directory(f.directory)))
            let error = try #require(await failure(of: handle))
            #expect(error.code == .network)
            #expect(error.message.contains("connection refused"))
        }
    }

    @Test func invalidRequestsAreRejectedUpFront() async throws {
        try await Fixture.with { f in
            await #expect(throws: DownloadError.self) {
                try await f.manager.download(
                    DownloadRequest(url: URL(string: "ftp://example.com/x")!, destination: .directory(f.directory)))
            }
            await #expect(throws: DownloadError.self) {
                try await f.manager.download(
                    DownloadRequest(url: f.server.url("/files/x"), destination: .directory(f.file("nope"))))
            }
        }
    }

    /// The digest of `bytes`, from swift-crypto directly (independent of Haul's streaming
    /// and resume-aware hashing).
    static func digest(_ bytes: [UInt8], _ algorithm: Checksum.Algorithm) -> String {
        let digest: [UInt8] =
            switch algorithm {
            case .sha256: Array(SHA256.hash(data: bytes))
            case .sha1: Array(Insecure.SHA1.hash(data: bytes))
            case .md5: Array(Insecure.MD5.hash(data: bytes))
            }
        return digest.map { String(format: "%02x", $0) }.joined()
    }
}
