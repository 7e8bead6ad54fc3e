import Foundation
import Haul
import HaulTestSupport
import Testing

/// `haul get --cache DIR`: fresh entries saved with no request, stale ones revalidated, and
/// one directory shared by processes that run at once.
@Suite("Cache CLI")
struct CacheCLITests {
    /// The `completed` events of a `--json` run, by URL: where each answer came from.
    static func sources(_ run: Haul.Run) throws -> [String: String] {
        var sources: [String: String] = [:]
        for line in run.stdout.split(separator: "\n") {
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                object["event"] as? String == "completed", let id = object["id"] as? String,
                let from = object["from"] as? String
            else { continue }
            sources[id] = from
        }
        return sources
    }

    @Test func aSecondRunSavesFreshFilesFromTheCacheAndRevalidatesStaleOnes() async throws {
        try await CLIFixture.with { f, journal in
            let cache = f.directory.appendingPathComponent("cache").path
            let fresh = f.serve("fresh.bin", count: 50_000, seed: 1)
            let stale = f.serve("stale.bin", count: 50_000, seed: 2)
            let urls = [
                f.server.url("/files/fresh.bin?cache_control=max-age%3D3600").absoluteString,
                f.server.url("/files/stale.bin?cache_control=no-cache").absoluteString,
            ]
            let output = f.directory.appendingPathComponent("out").path
            let arguments = ["get"] + urls + ["-d", output, "--cache", cache, "--json", "--journal", journal]
            let first = try await Haul.run(arguments)
            #expect(first.status == 0, "\(first.stderr)")
            #expect(try Self.sources(first).values.sorted() == ["network", "network"])
            try FileManager.default.removeItem(atPath: output)

            let second = try await Haul.run(arguments)
            #expect(second.status == 0, "\(second.stderr)")
            #expect(try Self.sources(second) == [urls[0]: "disk", urls[1]: "revalidated"])
            #expect(FileManager.default.contents(atPath: output + "/fresh.bin") == Data(fresh))
            #expect(FileManager.default.contents(atPath: output + "/stale.bin") == Data(stale))
            #expect(f.server.requests(path: "/files/fresh.bin").count == 1)
            #expect(f.server.requests(path: "/files/stale.bin").count == 2)
            // The cache directory is its owner's only
            var info = stat()
            #expect(stat(cache, &info) == 0)
            #expect(info.st_mode & 0o077 == 0)
        }
    }

    /// Two processes fill one cache directory at once; a third, whose server is gone,
    /// saves every file from it, each one whole.
    @Test func twoProcessesShareOneCacheDirectory() async throws {
        try await CLIFixture.with { f, journal in
            let cache = f.directory.appendingPathComponent("cache").path
            var bodies: [String: [UInt8]] = [:]
            var urls: [String] = []
            for index in 0..<40 {
                let name = "shared-\(index).bin"
                bodies[name] = f.serve(name, count: 2_000 + index * 997, seed: UInt64(index + 1))
                urls.append(f.server.url("/files/\(name)?cache_control=max-age%3D3600").absoluteString)
            }
            func arguments(_ output: String, _ journal: String) -> [String] {
                ["get"] + urls + ["-d", f.directory.appendingPathComponent(output).path, "--cache", cache, "-q",
                    "--journal", journal]
            }
            let firstArguments = arguments("one", journal + "-1")
            let secondArguments = arguments("two", journal + "-2")
            async let one = Haul.run(firstArguments)
            async let two = Haul.run(secondArguments)
            let (first, second) = try await (one, two)
            #expect(first.status == 0, "\(first.stderr)")
            #expect(second.status == 0, "\(second.stderr)")

            // Every request from here on fails: only the cache can answer.
            var failing = arguments("three", journal + "-3")
            failing.append(contentsOf: ["--retries", "0"])
            try await f.server.shutdown()
            let third = try await Haul.run(failing)
            #expect(third.status == 0, "\(third.stderr)")
            for (name, body) in bodies {
                let saved = FileManager.default.contents(atPath: f.directory.appendingPathComponent("three/\(name)").path)
                #expect(saved == Data(body), "\(name)")
            }
        }
    }

    @Test func cacheOptionsAreChecked() async throws {
        let sizeWithoutCache = try await Haul.run(["get", "http://127.0.0.1:1/x", "--cache-size", "10M"])
        #expect(sizeWithoutCache.status == 2)
        #expect(sizeWithoutCache.stderr.contains("--cache-size 10M needs --cache DIR"))
        let tooSmall = try await Haul.run(["get", "http://127.0.0.1:1/x", "--cache", "/tmp/c", "--cache-size", "10K"])
        #expect(tooSmall.status == 2)
        #expect(tooSmall.stderr.contains("is not a size of at least 1 MiB"))
    }
}
