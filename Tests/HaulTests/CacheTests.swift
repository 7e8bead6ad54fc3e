import Foundation
import Haul
import HaulTestSupport
import Testing

/// The manager's cache against the fault server: what is answered from memory, from disk,
/// after a 304 or from the network, and which requests reach the server.
@Suite("Cache")
struct CacheTests {
    /// A fixture whose manager has a memory cache and a disk cache in the fixture's directory.
    static func withCache(
        _ configure: @escaping (inout DownloadManager.Configuration) -> Void = { _ in },
        _ body: (Fixture, URL) async throws -> Void
    ) async throws {
        let cacheDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-cache-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: cacheDirectory) }
        try await Fixture.with({ configuration in
            configuration.cache = ResponseCache.Configuration(directory: cacheDirectory, memoryCostLimit: 8 << 20)
            configure(&configuration)
        }) { f in try await body(f, cacheDirectory) }
    }

    static func memory(_ f: Fixture, _ pathAndQuery: String, headers: [(name: String, value: String)] = [])
        -> DownloadRequest
    {
        DownloadRequest(url: f.server.url(pathAndQuery), destination: .memory(limit: 1 << 20), headers: headers)
    }

    /// Downloads `request` and returns its result.
    static func get(_ f: Fixture, _ request: DownloadRequest, manager: DownloadManager? = nil) async throws
        -> DownloadResult
    {
        try await (manager ?? f.manager).download(request).result
    }

    /// The error `download(_:)` throws for `request`, if it throws one.
    static func refusal(of request: DownloadRequest, by manager: DownloadManager) async -> DownloadError? {
        do {
            _ = try await manager.download(request)
            return nil
        } catch {
            return error
        }
    }

    // MARK: - Fresh responses

    @Test func aFreshResponseAnswersFromMemoryWithNoRequest() async throws {
        try await Self.withCache { f, _ in
            // Given a response fresh for an hour
            let bytes = f.serve("fresh", count: 20_000)
            let path = "/files/fresh?cache_control=max-age%3D3600"
            let first = try await Self.get(f, Self.memory(f, path))
            // When it is asked for again
            let second = try await Self.get(f, Self.memory(f, path))
            // Then the memory tier answers, and the server saw one request
            #expect(first.source == .network)
            #expect(second.source == .memory)
            #expect(second.data == Data(bytes))
            #expect(second.bytesTransferred == 0)
            #expect(f.server.requests(path: "/files/fresh").count == 1)
        }
    }

    @Test func aFreshResponseAnswersFromDiskInTheNextManager() async throws {
        try await Self.withCache { f, _ in
            let bytes = f.serve("restart", count: 30_000)
            let path = "/files/restart?expires=3600"
            #expect(try await Self.get(f, Self.memory(f, path)).source == .network)
            // A new manager on the same directory, as after a restart of the app
            let later = f.makeManager()
            let again = try await Self.get(f, Self.memory(f, path), manager: later)
            await later.shutdown()
            #expect(again.source == .disk)
            #expect(again.data == Data(bytes))
            #expect(f.server.requests(path: "/files/restart").count == 1)
        }
    }

    @Test func aFileIsWrittenFromTheCacheWithNoRequest() async throws {
        try await Self.withCache { f, _ in
            let bytes = f.serve("saved", count: 100_000)
            let request = f.request("/files/saved?cache_control=max-age%3D3600", to: "saved")
            #expect(try await Self.get(f, request).source == .network)
            try FileManager.default.removeItem(at: f.file("saved"))
            let again = try await Self.get(f, request)
            #expect(again.source == .disk)
            #expect(again.fileURL == f.file("saved"))
            #expect(sha256(f.contents("saved")) == sha256(bytes))
            #expect(f.server.requests(path: "/files/saved").count == 1)
            // Nothing is left beside the file (no partial, no sidecar)
            #expect(f.listing() == ["saved"])
        }
    }

    // MARK: - Revalidation

    @Test func aStaleResponseIsRevalidatedAnd304AnswersFromTheCache() async throws {
        try await Self.withCache { f, _ in
            let bytes = f.serve("stale", count: 20_000)
            let path = "/files/stale?cache_control=max-age%3D0"
            #expect(try await Self.get(f, Self.memory(f, path)).source == .network)
            let again = try await Self.get(f, Self.memory(f, path))
            #expect(again.source == .revalidated)
            #expect(again.data == Data(bytes))
            let requests = f.server.requests(path: "/files/stale")
            #expect(requests.count == 2)
            #expect(requests.last?.header("If-None-Match") == f.server.etag(forFile: "stale"))
            #expect(f.server.bytesServed(path: "/files/stale") == 20_000)
        }
    }

    @Test func aLastModifiedOnlyResponseIsRevalidatedWithIfModifiedSince() async throws {
        try await Self.withCache { f, _ in
            let bytes = f.serve("lm", count: 5_000, etag: .none)
            let path = "/files/lm?cache_control=no-cache"
            #expect(try await Self.get(f, Self.memory(f, path)).source == .network)
            let again = try await Self.get(f, Self.memory(f, path))
            #expect(again.source == .revalidated)
            #expect(again.data == Data(bytes))
            let last = try #require(f.server.requests(path: "/files/lm").last)
            #expect(last.header("If-Modified-Since") == f.server.lastModified(forFile: "lm"))
            #expect(last.header("If-None-Match") == nil)
        }
    }

    @Test func aChangedBodyReplacesTheStoredOne() async throws {
        try await Self.withCache { f, _ in
            f.serve("changes", count: 8_000, seed: 1)
            let path = "/files/changes?cache_control=max-age%3D0"
            _ = try await Self.get(f, Self.memory(f, path))
            // The body changes on the server (a new ETag)
            let changed = f.serve("changes", count: 9_000, seed: 2)
            let second = try await Self.get(f, Self.memory(f, path))
            #expect(second.source == .network)
            #expect(second.data == Data(changed))
            // And the new one is what is revalidated next
            let third = try await Self.get(f, Self.memory(f, path))
            #expect(third.source == .revalidated)
            #expect(third.data == Data(changed))
            #expect(f.server.requests(path: "/files/changes").last?.header("If-None-Match") == f.server.etag(forFile: "changes"))
        }
    }

    @Test func noCacheIsRevalidatedEvenWhileFresh() async throws {
        try await Self.withCache { f, _ in
            f.serve("nc", count: 1_000)
            let path = "/files/nc?cache_control=no-cache,max-age%3D3600"
            _ = try await Self.get(f, Self.memory(f, path))
            #expect(try await Self.get(f, Self.memory(f, path)).source == .revalidated)
            #expect(f.server.requests(path: "/files/nc").count == 2)
        }
    }

    @Test func noStoreIsNeverStored() async throws {
        try await Self.withCache { f, directory in
            f.serve("ns", count: 1_000)
            let path = "/files/ns?cache_control=no-store"
            _ = try await Self.get(f, Self.memory(f, path))
            #expect(try await Self.get(f, Self.memory(f, path)).source == .network)
            #expect(f.server.requests(path: "/files/ns").count == 2)
            #expect(f.server.requests(path: "/files/ns").last?.header("If-None-Match") == nil)
            let entries = try FileManager.default.contentsOfDirectory(atPath: directory.path)
            #expect(entries.filter { $0.hasSuffix(".entry") }.isEmpty)
        }
    }

    // MARK: - Age and clocks

    /// A server whose clock is an hour behind: by RFC 9111's age rule, its response is an
    /// hour old on arrival (apparent age), so a max-age of 60 s is stale at once.
    @Test func aServerClockBehindMakesTheResponseStale() async throws {
        try await Self.withCache { f, _ in
            f.serve("behind", count: 1_000)
            let path = "/files/behind?cache_control=max-age%3D60&date_skew=-3600"
            _ = try await Self.get(f, Self.memory(f, path))
            #expect(try await Self.get(f, Self.memory(f, path)).source == .revalidated)
        }
    }

    /// A server whose clock is an hour ahead does not make a 60 s response fresh for an
    /// hour more: the apparent age is 0 and the lifetime is still 60 s (checked by the
    /// rules' table); within those 60 s it answers from memory.
    @Test func aServerClockAheadStillAnswersWithinMaxAge() async throws {
        try await Self.withCache { f, _ in
            f.serve("ahead", count: 1_000)
            let path = "/files/ahead?cache_control=max-age%3D60&date_skew=3600"
            _ = try await Self.get(f, Self.memory(f, path))
            #expect(try await Self.get(f, Self.memory(f, path)).source == .memory)
        }
    }

    @Test func anAgeOverMaxAgeIsStaleOnArrival() async throws {
        try await Self.withCache { f, _ in
            f.serve("aged", count: 1_000)
            let path = "/files/aged?cache_control=max-age%3D600&age=900"
            _ = try await Self.get(f, Self.memory(f, path))
            #expect(try await Self.get(f, Self.memory(f, path)).source == .revalidated)
        }
    }

    // MARK: - Vary, credentials, policies

    @Test func varyKeepsEachVariantToItsRequestHeaders() async throws {
        try await Self.withCache { f, _ in
            f.serve("v", count: 1_000)
            let path = "/files/v?cache_control=max-age%3D3600&vary=Accept-Language"
            let english = [(name: "Accept-Language", value: "en")]
            _ = try await Self.get(f, Self.memory(f, path, headers: english))
            #expect(try await Self.get(f, Self.memory(f, path, headers: english)).source == .memory)
            let french = try await Self.get(f, Self.memory(f, path, headers: [("Accept-Language", "fr")]))
            #expect(french.source == .network)
            #expect(f.server.requests(path: "/files/v").count == 2)
        }
    }

    @Test func varyStarIsNeverServed() async throws {
        try await Self.withCache { f, _ in
            f.serve("vs", count: 1_000)
            let path = "/files/vs?cache_control=max-age%3D3600&vary=*"
            _ = try await Self.get(f, Self.memory(f, path))
            #expect(try await Self.get(f, Self.memory(f, path)).source == .network)
        }
    }

    @Test func aResponseToCredentialsIsStoredOnlyWhenItSaysSo() async throws {
        try await Self.withCache { f, _ in
            f.serve("auth", count: 1_000)
            let token = [(name: "Authorization", value: "Bearer t")]
            let plain = "/files/auth?cache_control=max-age%3D3600"
            _ = try await Self.get(f, Self.memory(f, plain, headers: token))
            #expect(try await Self.get(f, Self.memory(f, plain, headers: token)).source == .network)
            let shared = "/files/auth?cache_control=public,max-age%3D3600"
            _ = try await Self.get(f, Self.memory(f, shared, headers: token))
            #expect(try await Self.get(f, Self.memory(f, shared, headers: token)).source == .memory)
            #expect(f.server.requests(path: "/files/auth").count == 3)
        }
    }

    @Test func staleWhileRevalidateAnswersAtOnceAndRevalidatesBehind() async throws {
        try await Self.withCache { f, _ in
            let bytes = f.serve("swr", count: 4_000)
            let path = "/files/swr?cache_control=max-age%3D0,stale-while-revalidate%3D3600"
            _ = try await Self.get(f, Self.memory(f, path))
            let stale = try await Self.get(f, Self.memory(f, path))
            #expect(stale.source == .memory)
            #expect(stale.data == Data(bytes))
            // The revalidation goes out behind the answer
            await f.server.waitForRequests(count: 2, path: "/files/swr")
            #expect(f.server.requests(path: "/files/swr").last?.header("If-None-Match") == f.server.etag(forFile: "swr"))
        }
    }

    @Test func everyPolicyDoesWhatItSays() async throws {
        try await Self.withCache { f, _ in
            f.serve("p", count: 1_000)
            let path = "/files/p?cache_control=max-age%3D0"
            // Nothing stored: returnCacheDataDontLoad fails and asks nothing
            var dontLoad = Self.memory(f, path)
            dontLoad.cachePolicy = .returnCacheDataDontLoad
            let missing = await Self.refusal(of: dontLoad, by: f.manager)
            #expect(missing?.code == .notCached)
            #expect(f.server.requests(path: "/files/p").isEmpty)
            // Stored but stale: returnCacheDataElseLoad and returnCacheDataDontLoad answer as it is
            _ = try await Self.get(f, Self.memory(f, path))
            var elseLoad = Self.memory(f, path)
            elseLoad.cachePolicy = .returnCacheDataElseLoad
            #expect(try await Self.get(f, elseLoad).source == .memory)
            #expect(try await Self.get(f, dontLoad).source == .memory)
            #expect(f.server.requests(path: "/files/p").count == 1)
            // reloadIgnoringCache asks unconditionally
            var reload = Self.memory(f, path)
            reload.cachePolicy = .reloadIgnoringCache
            #expect(try await Self.get(f, reload).source == .network)
            #expect(f.server.requests(path: "/files/p").last?.header("If-None-Match") == nil)
        }
    }

    @Test func withoutACacheDontLoadFailsAndNothingIsAsked() async throws {
        try await Fixture.with { f in
            f.serve("none", count: 100)
            var request = DownloadRequest(url: f.server.url("/files/none"), destination: .memory(limit: 1000))
            request.cachePolicy = .returnCacheDataDontLoad
            let error = await Self.refusal(of: request, by: f.manager)
            #expect(error?.code == .notCached)
            #expect(f.server.requests().isEmpty)
        }
    }

    @Test func aCompletedEventSaysWhereTheAnswerCameFrom() async throws {
        try await Self.withCache { f, _ in
            f.serve("ev", count: 1_000)
            let path = "/files/ev?cache_control=max-age%3D3600"
            _ = try await Self.get(f, Self.memory(f, path))
            let handle = try await f.manager.download(Self.memory(f, path))
            var sources: [DownloadResult.Source] = []
            for await event in handle.events {
                if case .completed(let result) = event { sources.append(result.source) }
            }
            #expect(sources == [.memory])
        }
    }
}
