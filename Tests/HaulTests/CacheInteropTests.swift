import Foundation
import Haul
import HaulTestSupport
import Testing

/// The cache against real servers' own caching headers: nginx's `expires`, `add_header
/// Cache-Control`, ETags and `if_modified_since`, and Apache's mod_expires and mod_headers.
/// Each server's access log says what reached it.
@Suite(
    "Cache interop",
    .enabled(if: NginxServer.isAvailable, "nginx is not installed: run .ci/run or apt-get install nginx"),
    .timeLimit(.minutes(3)))
struct CacheInteropTests {
    /// nginx locations with each caching setup.
    static let nginxDirectives = """
        location /expires/ { expires 1h; }
        location /revalidate/ { add_header Cache-Control "no-cache"; }
        location /lm/ { etag off; if_modified_since exact; add_header Cache-Control "max-age=0"; }
        """

    /// A manager with a cache in a fresh directory, for `body`, shut down afterwards.
    static func withManager(_ body: (DownloadManager) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-cache-interop-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = Fixture.testConfiguration()
        configuration.cache = ResponseCache.Configuration(directory: directory, memoryCostLimit: 4 << 20)
        let manager = DownloadManager(
            configuration: configuration, eventLoopGroup: TestResources.group, threadPool: TestResources.pool)
        do {
            try await body(manager)
        } catch {
            await manager.shutdown()
            throw error
        }
        await manager.shutdown()
    }

    static func get(_ manager: DownloadManager, _ url: URL) async throws -> DownloadResult {
        try await manager.download(DownloadRequest(url: url, destination: .memory(limit: 1 << 20))).result
    }

    /// The access log's entries for `path`, once the server has logged a request made after
    /// them (nginx runs one worker, which logs each request as it ends, in order).
    static func entries(_ nginx: NginxServer, _ path: String, manager: DownloadManager) async throws
        -> [NginxServer.LogEntry]
    {
        let sentinel = "/sentinel-\(UUID().uuidString).bin"
        try nginx.write([1, 2, 3], at: sentinel, modified: Date())
        var request = DownloadRequest(url: nginx.url(sentinel), destination: .memory(limit: 16))
        request.cachePolicy = .reloadIgnoringCache
        _ = try await manager.download(request).result
        _ = try await nginx.logEntry { $0.path == sentinel }
        return try nginx.accessLog().filter { $0.path == path }
    }

    @Test func nginxExpiresAnswersFromTheCache() async throws {
        try await NginxServer.with(directives: Self.nginxDirectives) { nginx in
            try await Self.withManager { manager in
                let bytes = FaultServer.randomBytes(count: 40_000, seed: 3)
                try nginx.write(bytes, at: "/expires/a.bin", modified: Date(timeIntervalSinceNow: -60))
                #expect(try await Self.get(manager, nginx.url("/expires/a.bin")).source == .network)
                let again = try await Self.get(manager, nginx.url("/expires/a.bin"))
                #expect(again.source == .memory)
                #expect(again.data == Data(bytes))
                #expect(try await Self.entries(nginx, "/expires/a.bin", manager: manager).count == 1)
            }
        }
    }

    @Test func nginxNoCacheIsRevalidatedWithItsETag() async throws {
        try await NginxServer.with(directives: Self.nginxDirectives) { nginx in
            try await Self.withManager { manager in
                let bytes = FaultServer.randomBytes(count: 40_000, seed: 4)
                try nginx.write(bytes, at: "/revalidate/b.bin", modified: Date(timeIntervalSinceNow: -60))
                _ = try await Self.get(manager, nginx.url("/revalidate/b.bin"))
                let again = try await Self.get(manager, nginx.url("/revalidate/b.bin"))
                #expect(again.source == .revalidated)
                #expect(again.data == Data(bytes))
                let entries = try await Self.entries(nginx, "/revalidate/b.bin", manager: manager)
                #expect(entries.map(\.status) == [200, 304])
                #expect(entries.last?.bodyBytesSent == 0)
                // A changed file is fetched whole, and stored in place of the old one
                let changed = FaultServer.randomBytes(count: 30_000, seed: 5)
                try nginx.write(changed, at: "/revalidate/b.bin", modified: Date(timeIntervalSinceNow: -10))
                let third = try await Self.get(manager, nginx.url("/revalidate/b.bin"))
                #expect(third.source == .network)
                #expect(third.data == Data(changed))
                #expect(try await Self.get(manager, nginx.url("/revalidate/b.bin")).data == Data(changed))
            }
        }
    }

    @Test func nginxLastModifiedAloneIsRevalidatedWithIfModifiedSince() async throws {
        try await NginxServer.with(directives: Self.nginxDirectives) { nginx in
            try await Self.withManager { manager in
                let bytes = FaultServer.randomBytes(count: 10_000, seed: 6)
                try nginx.write(bytes, at: "/lm/c.bin", modified: Date(timeIntervalSinceNow: -3600))
                _ = try await Self.get(manager, nginx.url("/lm/c.bin"))
                let again = try await Self.get(manager, nginx.url("/lm/c.bin"))
                #expect(again.source == .revalidated)
                #expect(try await Self.entries(nginx, "/lm/c.bin", manager: manager).map(\.status) == [200, 304])
            }
        }
    }

    /// No explicit lifetime: a tenth of the time since Last-Modified (ten days ago: a day).
    @Test func nginxPlainFileIsFreshByTheHeuristic() async throws {
        try await NginxServer.with { nginx in
            try await Self.withManager { manager in
                let bytes = FaultServer.randomBytes(count: 10_000, seed: 7)
                try nginx.write(bytes, at: "/plain/d.bin", modified: Date(timeIntervalSinceNow: -10 * 86_400))
                _ = try await Self.get(manager, nginx.url("/plain/d.bin"))
                #expect(try await Self.get(manager, nginx.url("/plain/d.bin")).source == .memory)
                #expect(try await Self.entries(nginx, "/plain/d.bin", manager: manager).count == 1)
            }
        }
    }

    @Test(.enabled(if: ApacheServer.isAvailable, "Apache is not installed: run .ci/run or apt-get install apache2"))
    func apacheExpiresAndNoCache() async throws {
        let modules = ApacheServer.modules
        let directives = """
            LoadModule headers_module \(modules)/mod_headers.so
            LoadModule expires_module \(modules)/mod_expires.so
            <Location /expires/>
                ExpiresActive On
                ExpiresDefault "access plus 1 hour"
            </Location>
            <Location /revalidate/>
                Header set Cache-Control "no-cache"
            </Location>
            """
        try await ApacheServer.with(directives: directives) { apache in
            try await Self.withManager { manager in
                let fresh = FaultServer.randomBytes(count: 20_000, seed: 8)
                try apache.write(fresh, at: "/expires/e.bin", modified: Date(timeIntervalSinceNow: -60))
                _ = try await Self.get(manager, apache.url("/expires/e.bin"))
                let cached = try await Self.get(manager, apache.url("/expires/e.bin"))
                #expect(cached.source == .memory)
                #expect(cached.data == Data(fresh))

                let checked = FaultServer.randomBytes(count: 20_000, seed: 9)
                try apache.write(checked, at: "/revalidate/f.bin", modified: Date(timeIntervalSinceNow: -60))
                _ = try await Self.get(manager, apache.url("/revalidate/f.bin"))
                let revalidated = try await Self.get(manager, apache.url("/revalidate/f.bin"))
                #expect(revalidated.source == .revalidated)
                #expect(revalidated.data == Data(checked))
                let entry = try await Self.firstEntry(in: apache.accessLog) {
                    $0.path == "/revalidate/f.bin" && $0.status == 304
                }
                #expect(entry?.bodyBytesSent == 0)
            }
        }
    }

    /// The first entry of `log` that `match` accepts, waiting up to 10 s for the server to
    /// write it (it logs a request after answering it); `nil` if none came.
    static func firstEntry(
        in log: () throws -> [NginxServer.LogEntry], where match: (NginxServer.LogEntry) -> Bool
    ) async throws -> NginxServer.LogEntry? {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if let entry = try log().first(where: match) { return entry }
            await Task.yield()
        }
        return nil
    }
}
