import Foundation
import HaulTestSupport
import Testing

/// `haul` killed with SIGKILL at random moments, and resumed each time.
@Suite("Crash recovery (SIGKILL)")
struct KillTests {
    static let size = 256 << 20
    /// 16 MiB/s: the whole file takes about sixteen seconds when nothing interrupts it.
    /// The server sends a tenth of that every 100 ms; what is in flight when `haul` is
    /// killed (at most one such burst, in socket buffers) is what a kill costs.
    static let rate = 16 << 20

    @Test(.timeLimit(.minutes(5)))
    func survivesTenKillsAndServesAtMostTenPercentExtra() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = FaultServer.randomBytes(count: Self.size, seed: 42)
            f.server.setFile("huge", bytes, etag: .custom("huge-v1"))
            let url = f.server.url("/files/huge?rate=\(Self.rate)").absoluteString

            try await Self.killRepeatedly(url: url, fixture: f, journal: journal, kills: 10) { _ in }

            let final = try await Haul.run(["resume", "--journal", journal, "--quiet"])
            #expect(final.status == 0, "\(final.stderr)")
            let result = try #require(f.contents("huge"))
            #expect(result.count == bytes.count)
            #expect(result == bytes, "the file differs from what the server sent")
            let served = f.server.bytesServed(path: "/files/huge")
            print("kill test: served \(served) bytes for \(Self.size) (\(Double(served) / Double(Self.size))x)")
            #expect(Double(served) <= Double(Self.size) * 1.1, "served \(served) bytes for a \(Self.size)-byte file")
            #expect(f.listing() == ["huge"])
        }
    }

    @Test(.timeLimit(.minutes(5)))
    func aFileThatChangesBetweenKillsIsNeverSpliced() async throws {
        try await CLIFixture.with { f, journal in
            let old = FaultServer.randomBytes(count: Self.size, seed: 1)
            let new = FaultServer.randomBytes(count: Self.size, seed: 2)
            f.server.setFile("huge", old, etag: .custom("huge-v1"))
            let url = f.server.url("/files/huge?rate=\(Self.rate)").absoluteString

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

    /// The same with a segmented download over four connections: every segment resumes
    /// from the sidecar (written every 100 ms, fsynced at each checkpoint).
    @Test(.timeLimit(.minutes(5)))
    func aSegmentedDownloadSurvivesKills() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = FaultServer.randomBytes(count: Self.size, seed: 43)
            f.server.setFile("huge", bytes, etag: .custom("huge-v1"))
            let url = f.server.url("/files/huge?rate=\(Self.rate / 4)").absoluteString

            try await Self.killRepeatedly(url: url, fixture: f, journal: journal, kills: 6, connections: 4) { _ in }

            let final = try await Haul.run(["resume", "--journal", journal, "--quiet", "-x", "4"])
            #expect(final.status == 0, "\(final.stderr)")
            let result = try #require(f.contents("huge"))
            #expect(result == bytes, "the file differs from what the server sent")
            let served = f.server.bytesServed(path: "/files/huge")
            print("segmented kill test: served \(served) bytes for \(Self.size) (\(Double(served) / Double(Self.size))x)")
            #expect(Double(served) <= Double(Self.size) * 1.25, "served \(served) bytes for a \(Self.size)-byte file")
            #expect(f.listing() == ["huge"])
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
