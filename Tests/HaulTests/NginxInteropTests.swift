import Foundation
import Haul
import HaulTestSupport
import Testing

/// Haul against a real nginx: plain downloads, resume with nginx's own validators, a file
/// that changes between pause and resume, and a 404. Every test starts its own nginx (see
/// ``NginxServer``) and checks nginx's access log for what actually crossed the wire.
@Suite(
    "nginx interop",
    .enabled(if: NginxServer.isAvailable, "nginx is not installed: run .ci/run or apt-get install nginx"),
    .timeLimit(.minutes(4)))
struct NginxInteropTests {
    @Test func plainDownloadRoundTripsByteForByte() async throws {
        try await NginxFixture.with { f in
            // Given an 8 MiB file served at full speed
            let size = 8 << 20
            let bytes = try f.serve("/files/plain.bin", count: size)

            // When it is downloaded
            let result = try await f.manager.download(f.request("/files/plain.bin")).result

            // Then it arrives whole, in one 200
            #expect(result.fileURL == f.file("plain.bin"))
            #expect(result.byteCount == Int64(size))
            #expect(sha256(f.contents("plain.bin")) == sha256(bytes))
            #expect(f.listing() == ["plain.bin"])
            let entry = try await f.nginx.logEntry { $0.path == "/files/plain.bin" }
            #expect(entry.status == 200)
            #expect(entry.range == nil)
            #expect(entry.bodyBytesSent == size)
            #expect(entry.completed)
        }
    }

    @Test func resumesWithNginxsStrongETag() async throws {
        try await NginxFixture.with { f in
            // Given a download of a slowly served file, paused after its first bytes
            let size = NginxFixture.pausedSize
            let bytes = try f.serve("/slow/etag.bin", count: size)
            let etag = NginxFixture.nginxETag(modified: f.modified, size: size)
            let (handle, kept) = try await f.startAndPause("/slow/etag.bin", name: "etag.bin", size: size)

            // When it is resumed
            await handle.resume()
            let result = try await handle.result

            // Then nginx sent only the rest, as a 206 validated by its ETag
            #expect(result.byteCount == Int64(size))
            #expect(sha256(f.contents("etag.bin")) == sha256(bytes))
            #expect(f.listing() == ["etag.bin"])
            let resumed = try await f.nginx.logEntry { $0.path == "/slow/etag.bin" && $0.range != nil }
            #expect(resumed.range == "bytes=\(kept)-")
            #expect(resumed.ifRange == etag)
            #expect(resumed.etag == etag)
            #expect(resumed.status == 206)
            #expect(resumed.contentRange == "bytes \(kept)-\(size - 1)/\(size)")
            #expect(resumed.bodyBytesSent == size - kept)
        }
    }

    @Test func resumesWithLastModifiedWhenNginxSendsNoETag() async throws {
        try await NginxFixture.with { f in
            // Given a paused download from a location with `etag off`
            let size = NginxFixture.pausedSize
            let bytes = try f.serve("/slow-lm/lm.bin", count: size)
            let lastModified = NginxFixture.httpDate(f.modified)
            let (handle, kept) = try await f.startAndPause("/slow-lm/lm.bin", name: "lm.bin", size: size)

            // When it is resumed
            await handle.resume()
            _ = try await handle.result

            // Then If-Range carried the Last-Modified date and nginx answered 206
            #expect(sha256(f.contents("lm.bin")) == sha256(bytes))
            let resumed = try await f.nginx.logEntry { $0.path == "/slow-lm/lm.bin" && $0.range != nil }
            #expect(resumed.etag == nil)
            #expect(resumed.lastModified == lastModified)
            #expect(resumed.range == "bytes=\(kept)-")
            #expect(resumed.ifRange == lastModified)
            #expect(resumed.status == 206)
            #expect(resumed.bodyBytesSent == size - kept)
        }
    }

    @Test func fileChangedBetweenPauseAndResumeIsDownloadedWhole() async throws {
        try await NginxFixture.with { f in
            // Given a paused download
            let size = NginxFixture.pausedSize
            try f.serve("/slow/changing.bin", count: size, seed: 1)
            let oldETag = NginxFixture.nginxETag(modified: f.modified, size: size)
            let (handle, kept) = try await f.startAndPause("/slow/changing.bin", name: "changing.bin", size: size)

            // When the file is rewritten, same size but a minute newer, and the download resumed
            let newModified = f.modified.addingTimeInterval(60)
            let newBytes = FaultServer.randomBytes(count: size, seed: 2)
            try f.nginx.write(newBytes, at: "/slow/changing.bin", modified: newModified)
            await handle.resume()
            _ = try await handle.result

            // Then If-Range no longer matched: nginx sent all the new content in a 200
            #expect(sha256(f.contents("changing.bin")) == sha256(newBytes))
            #expect(f.listing() == ["changing.bin"])
            let resumed = try await f.nginx.logEntry { $0.path == "/slow/changing.bin" && $0.range != nil }
            #expect(resumed.range == "bytes=\(kept)-")
            #expect(resumed.ifRange == oldETag)
            #expect(resumed.etag == NginxFixture.nginxETag(modified: newModified, size: size))
            #expect(resumed.status == 200)
            #expect(resumed.bodyBytesSent == size)
        }
    }

    @Test func missingFileIsATyped404AndLeavesNothing() async throws {
        try await NginxFixture.with { f in
            // When a file nginx does not have is requested
            let handle = try await f.manager.download(f.request("/files/missing.bin"))
            let error = try #require(await failure(of: handle))

            // Then the error says 404 and the directory stays empty
            #expect(error.code == .httpStatus)
            #expect(error.statusCode == 404)
            #expect(f.listing().isEmpty)
            let entry = try await f.nginx.logEntry { $0.path == "/files/missing.bin" }
            #expect(entry.status == 404)
        }
    }
}

/// An nginx, a manager and a fresh download directory.
struct NginxFixture {
    let nginx: NginxServer
    let manager: DownloadManager
    let directory: URL
    /// The modification date of served files: a whole second, an hour ago.
    let modified = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 - 3600).rounded(.down))

    /// Runs `body` with a fixture whose nginx has `directives` in its `server` block,
    /// shutting everything down afterwards.
    static func with(directives: String = "", _ body: (NginxFixture) async throws -> Void) async throws {
        try await NginxServer.with(directives: directives) { nginx in
            let directory = FileManager.default.temporaryDirectory
                .appendingPathComponent("haul-nginx-tests-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let fixture = NginxFixture(
                nginx: nginx, manager: DownloadManager(configuration: Fixture.testConfiguration(), eventLoopGroup: TestResources.group, threadPool: TestResources.pool), directory: directory)
            do {
                try await body(fixture)
            } catch {
                await fixture.close()
                throw error
            }
            await fixture.close()
        }
    }

    private func close() async {
        await manager.shutdown()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Puts `count` random bytes at `path` in nginx's root and returns them.
    @discardableResult
    func serve(_ path: String, count: Int, seed: UInt64 = 1) throws -> [UInt8] {
        let bytes = FaultServer.randomBytes(count: count, seed: seed)
        try nginx.write(bytes, at: path, modified: modified)
        return bytes
    }

    func request(_ path: String) -> DownloadRequest {
        DownloadRequest(url: nginx.url(path), destination: .directory(directory))
    }

    func file(_ name: String) -> URL { directory.appendingPathComponent(name) }

    func contents(_ name: String) -> [UInt8]? {
        FileManager.default.contents(atPath: file(name).path).map { [UInt8]($0) }
    }

    /// The names in the directory, sorted.
    func listing() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).sorted()
    }

    /// The size of a file a test pauses: at `/slow/`'s 256 KiB/s its first response lasts
    /// 128 s, so a pause that comes late on a loaded machine still finds it running (the
    /// resume, a range, is served at full speed).
    static let pausedSize = 32 << 20

    /// Starts downloading `path`, pauses it once the first bytes arrived and returns the
    /// handle with the size of the partial file it kept (more than 0, less than the whole).
    func startAndPause(_ path: String, name: String, size: Int) async throws -> (DownloadHandle, Int) {
        let handle = try await manager.download(request(path))
        let events = handle.events
        await firstEvent(events) { event -> Bool? in
            if case .progress(let progress) = event, progress.completedBytes > 0 { return true }
            return nil
        }
        await handle.pause()
        let paused = await firstEvent(events) { event -> Bool? in
            if case .paused = event { return true }
            if event.isTerminal { return false }
            return nil
        }
        try #require(paused == true, "the download ended instead of pausing")
        let partial = file(name + ".haul-partial").path
        let kept = try #require(try FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int)
        try #require(kept > 0 && kept < size, "paused with \(kept) of \(size) bytes")
        return (handle, kept)
    }

    /// nginx's strong ETag: `"<mtime in hex>-<size in hex>"`.
    static func nginxETag(modified: Date, size: Int) -> String {
        "\"\(String(Int(modified.timeIntervalSince1970), radix: 16))-\(String(size, radix: 16))\""
    }

    /// An IMF-fixdate, as nginx writes Last-Modified.
    static func httpDate(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }
}
