import Foundation
import HaulTestSupport
import Testing

/// `haul` killed with SIGKILL at random moments, and resumed each time.
extension HeavyProcessTests {
@Suite("Crash recovery (SIGKILL)")
struct KillTests {
    static let size = 64 << 20
    /// 2 MiB/s per response: the server sends a tenth of that every 100 ms, so a kill finds
    /// at most one such burst per connection in flight, in socket buffers or in a batch not
    /// yet written (at most 25 ms old), and, over several connections, segment progress
    /// newer than the sidecar (saved after each partial batch). That is what a kill costs.
    static let rate = 2 << 20

    /// The torture of issue "Trust": 64 MiB over one connection (32 s unkilled), SIGKILLed
    /// ten times at random byte counts, then finished; the server sends at most 1.05× the
    /// file.
    @Test(.timeLimit(.minutes(3)))
    func tenKillsOverOneConnectionCostAtMostFivePercent() async throws {
        try await Self.torture(connections: 1, seed: 42, limit: 1.05)
    }

    /// The same over four connections (the default `-x 4`, 8 s unkilled): every segment
    /// resumes from the sidecar; the server sends at most 1.10× the file.
    @Test(.timeLimit(.minutes(3)))
    func tenKillsOverFourConnectionsCostAtMostTenPercent() async throws {
        try await Self.torture(connections: 4, seed: 43, limit: 1.10)
    }

    static func torture(connections: Int, seed: UInt64, limit: Double) async throws {
        try await CLIFixture.with { f, journal in
            let bytes = FaultServer.randomBytes(count: Self.size, seed: seed)
            f.server.setFile("huge", bytes, etag: .custom("huge-v1"))
            let url = f.server.url("/files/huge?rate=\(Self.rate)").absoluteString

            try await Self.killRepeatedly(url: url, fixture: f, journal: journal, kills: 10, connections: connections) { _ in }

            let final = try await Haul.run(["resume", "--journal", journal, "--quiet", "-x", "\(connections)"])
            #expect(final.status == 0, "\(final.stderr)")
            let result = try #require(f.contents("huge"))
            #expect(result.count == bytes.count)
            #expect(result == bytes, "the file differs from what the server sent")
            let served = f.server.bytesServed(path: "/files/huge")
            let ratio = Double(served) / Double(Self.size)
            print("kill test (-x \(connections)): served \(served) bytes for \(Self.size) (\(ratio)x)")
            #expect(ratio <= limit, "served \(served) bytes for a \(Self.size)-byte file (\(ratio)x, limit \(limit)x)")
            #expect(f.listing() == ["huge"])
        }
    }

    @Test(.timeLimit(.minutes(3)))
    func aFileThatChangesBetweenKillsIsNeverSpliced() async throws {
        try await CLIFixture.with { f, journal in
            let old = FaultServer.randomBytes(count: Self.size, seed: 1)
            let new = FaultServer.randomBytes(count: Self.size, seed: 2)
            f.server.setFile("huge", old, etag: .custom("huge-v1"))
            // Four times the torture's rate: this test is about content, not cost.
            let url = f.server.url("/files/huge?rate=\(4 * Self.rate)").absoluteString

            try await Self.killRepeatedly(url: url, fixture: f, journal: journal, kills: 6) { kill in
                // Halfway through the kills, the server publishes a new version.
                if kill == 3 { f.server.setFile("huge", new, etag: .custom("huge-v2")) }
            }

            let final = try await Haul.run(["resume", "--journal", journal, "--quiet"])
            #expect(final.status == 0, "\(final.stderr)")
            let result = try #require(f.contents("huge"))
            #expect(result == new, "the result must be the new file, whole")
        }
    }

    /// Runs `haul get` (then `haul resume`) and SIGKILLs it once its progress passes each
    /// of `kills` random byte counts.
    static func killRepeatedly(
        url: String, fixture f: Fixture, journal: String, kills: Int, connections: Int = 1,
        afterKill: (Int) -> Void
    ) async throws {
        var generator = SystemRandomNumberGenerator()
        let thresholds = (0..<kills).map { _ in Int.random(in: size / 20...(size * 19 / 20), using: &generator) }.sorted()
        for (index, threshold) in thresholds.enumerated() {
            let arguments =
                index == 0
                ? ["get", url, "-d", f.directory.path, "--json", "--journal", journal, "-x", "\(connections)"]
                : ["resume", "--json", "--journal", journal, "-x", "\(connections)"]
            let run = try await Haul.run(arguments) { line in
                guard line.contains("\"event\":\"progress\""), let bytes = Self.bytes(in: line) else { return nil }
                return bytes >= threshold ? SIGKILL : nil
            }
            // Killed (9), or it finished before reaching the threshold after a restart.
            #expect(run.status == 9 || run.status == 0, "kill \(index): exit \(run.status): \(run.stderr)")
            #expect(!FileManager.default.fileExists(atPath: f.file("huge").path) || run.status == 0)
            afterKill(index)
        }
    }

    static func bytes(in line: String) -> Int? {
        guard let range = line.range(of: "\"bytes\":") else { return nil }
        return Int(line[range.upperBound...].prefix { $0.isNumber })
    }
}
}
