import Crypto
import Foundation
import Haul
import HaulTestSupport
import Testing

/// A fault server, a manager with quick retries, and a fresh temporary directory.
struct Fixture {
    let server: FaultServer
    let manager: DownloadManager
    let directory: URL
    /// The journal, for fixtures made with `journal: true`.
    let journal: Journal?
    let configuration: DownloadManager.Configuration

    static func testConfiguration() -> DownloadManager.Configuration {
        var configuration = DownloadManager.Configuration()
        configuration.retry = RetryPolicy(maxRetries: 3, baseDelay: .milliseconds(5), maxDelay: .milliseconds(50))
        // No test waits for a timeout unless it sets one itself: a request held (at a gate,
        // or stalled) while a test goes on must not time out and be sent again however slow
        // the machine. On a loaded machine a transfer can go unscheduled for longer than
        // any short timeout, and a test that counts requests or events would then see a
        // retry. A real hang is caught by the tests' time limit.
        configuration.connectTimeout = .seconds(120)
        configuration.idleTimeout = .seconds(600)
        // One connection per download unless a test asks for segments, so request counts
        // stay exact.
        configuration.segmentedConnections = 1
        return configuration
    }

    /// Runs `body` with a fixture, shutting everything down afterwards.
    static func with(
        journal useJournal: Bool = false,
        serverHost: String = "127.0.0.1",
        _ configure: (inout DownloadManager.Configuration) -> Void = { _ in },
        _ body: (Fixture) async throws -> Void
    ) async throws {
        var configuration = testConfiguration()
        configure(&configuration)
        let server = try await FaultServer.start(host: serverHost)
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("haul-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let journal = try useJournal ? Journal(path: directory.path + "-journal/journal.sqlite") : nil
        let fixture = Fixture(
            server: server, manager: DownloadManager(configuration: configuration, journal: journal, eventLoopGroup: TestResources.group, threadPool: TestResources.pool),
            directory: directory, journal: journal, configuration: configuration)
        do {
            try await body(fixture)
        } catch {
            await fixture.close()
            throw error
        }
        await fixture.close()
    }

    func close() async {
        await manager.shutdown()
        try? await server.shutdown()
        try? FileManager.default.removeItem(at: directory)
        try? FileManager.default.removeItem(atPath: directory.path + "-journal")
    }

    /// Another manager on the same journal, as a later process would make.
    func makeManager(_ configure: (inout DownloadManager.Configuration) -> Void = { _ in }) -> DownloadManager {
        var configuration = self.configuration
        configure(&configuration)
        return DownloadManager(configuration: configuration, journal: journal, eventLoopGroup: TestResources.group, threadPool: TestResources.pool)
    }

    /// Registers `count` random bytes under `/files/<name>` and returns them.
    @discardableResult
    func serve(
        _ name: String, count: Int, seed: UInt64 = 1, etag: ServedFile.ETag = .automatic,
        lastModified: ServedFile.LastModified = .automatic
    ) -> [UInt8] {
        let bytes = FaultServer.randomBytes(count: count, seed: seed)
        server.setFile(name, bytes, etag: etag, lastModified: lastModified)
        return bytes
    }

    func file(_ name: String) -> URL { directory.appendingPathComponent(name) }

    func request(
        _ pathAndQuery: String, to name: String? = nil, id: DownloadID? = nil, priority: DownloadPriority = .normal,
        expectedSize: Int64? = nil, checksum: Checksum? = nil
    ) -> DownloadRequest {
        DownloadRequest(
            url: server.url(pathAndQuery), destination: .directory(directory, name: name), id: id,
            priority: priority, expectedSize: expectedSize, checksum: checksum)
    }

    func contents(_ name: String) -> [UInt8]? {
        FileManager.default.contents(atPath: file(name).path).map { [UInt8]($0) }
    }

    /// The names in the directory, sorted.
    func listing() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).sorted()
    }
}

/// The SHA-256 of `bytes` in hex, `nil` for `nil`. Tests compare file contents by digest:
/// a failed `#expect` describes both sides, and describing two arrays of megabytes takes
/// longer than a suite's time limit.
func sha256<Bytes: DataProtocol>(_ bytes: Bytes?) -> String? {
    bytes.map { SHA256.hash(data: $0).map { String(format: "%02x", $0) }.joined() }
}

/// Where a resumed request starts: `N` of its `Range: bytes=N-`, 0 without a range.
///
/// After a connection that ends in the middle of a body (a reset, an expired URL's close),
/// the partial holds what had reached the file, which may be less than the server sent:
/// AsyncHTTPClient drops the body parts it has read but not yet handed to Haul when the
/// connection ends, and it holds some back whenever the connection serves a request made on
/// another event loop, or while the file is being prepared (all of a small body can be lost
/// so, when the whole response and the close arrive in one read). Tests of such cases check
/// that the next request starts exactly where the partial stood, within what the server
/// sent, not at the byte the server stopped.
func rangeStart(_ request: RecordedRequest?) -> Int? {
    guard let request else { return nil }
    guard let range = request.header("Range") else { return 0 }
    guard range.hasPrefix("bytes="), range.hasSuffix("-") else { return nil }
    return Int(range.dropFirst("bytes=".count).dropLast())
}

/// The first byte and the last (inclusive, `nil` when open-ended) a request asked for:
/// `(0, nil)` without a `Range` header, `nil` for a range that is not one `bytes=S-[E]`.
func rangeBounds(_ request: RecordedRequest) -> (start: Int, end: Int?)? {
    guard let range = request.header("Range") else { return (0, nil) }
    guard range.hasPrefix("bytes=") else { return nil }
    let parts = range.dropFirst("bytes=".count).split(separator: "-", omittingEmptySubsequences: false)
    guard parts.count == 2, let start = Int(parts[0]) else { return nil }
    if parts[1].isEmpty { return (start, nil) }
    guard let end = Int(parts[1]) else { return nil }
    return (start, end)
}

/// Waits for the first event that `match` accepts; `nil` if the stream ends first.
@discardableResult
func firstEvent<T>(_ events: AsyncStream<DownloadEvent>, _ match: (DownloadEvent) -> T?) async -> T? {
    for await event in events {
        if let value = match(event) { return value }
    }
    return nil
}

/// Waits for the first progress event with bytes on disk.
func firstProgress(_ events: AsyncStream<DownloadEvent>) async {
    await firstEvent(events) { event -> Bool? in
        if case .progress(let progress) = event, progress.completedBytes > 0 { return true }
        return nil
    }
}

/// The error a download ended with, or `nil` if it completed.
func failure(of handle: DownloadHandle) async -> DownloadError? {
    do {
        _ = try await handle.result
        return nil
    } catch {
        return error
    }
}
