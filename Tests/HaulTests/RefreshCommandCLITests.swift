import Foundation
import Haul
import HaulTestSupport
import Testing

/// `haul get --refresh-command PROGRAM`: a program of the user's gives fresh URLs for
/// expired ones, run without a shell.
@Suite("The refresh command", .timeLimit(.minutes(4)))
struct RefreshCommandCLITests {
    /// Writes an executable shell script into `directory`.
    ///
    /// The executable itself is written by `install`, a child process: were it written here,
    /// a process another test forks at that moment would hold it open for writing until its
    /// exec, and running it would fail with "Text file busy" (one CI run did).
    static func script(_ body: String, named name: String, in directory: URL) async throws -> String {
        let source = directory.appendingPathComponent(name + ".txt").path
        let path = directory.appendingPathComponent(name).path
        try Data(("#!/bin/sh\n" + body + "\n").utf8).write(to: URL(fileURLWithPath: source))
        let install = try ChildProcess(executable: "/usr/bin/install", arguments: ["-m", "755", source, path])
        let status = await install.wait().code
        guard status == 0 else { throw CocoaError(.fileWriteNoPermission) }
        return path
    }

    @Test func theProgramGetsTheExpiredURLVerbatimAndItsFirstLineIsTheFreshURL() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("f", count: 1_000_000)
            let scripts = f.directory.appendingPathComponent("bin")
            try FileManager.default.createDirectory(at: scripts, withIntermediateDirectories: true)
            let log = scripts.appendingPathComponent("asked").path
            // It records its arguments and $HAUL_ID, prints the fresh URL, then a line that is not used.
            let program = try await Self.script(
                #"printf '%s\n' "$#" "$@" "$HAUL_ID" > "$LOG"; printf '%s\nignored\n' "$FRESH""#, named: "refresh",
                in: scripts)
            let expired = f.server.url("/files/f?token=a&expire_after=300000").absoluteString
            let fresh = f.server.url("/files/f?token=b").absoluteString
            var environment = Haul.environment
            environment["LOG"] = log
            environment["FRESH"] = fresh

            let run = try await Haul.run(
                ["get", expired, "-d", f.directory.path, "-o", "f", "--journal", journal, "--refresh-command", program],
                environment: environment)

            #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
            #expect(sha256(f.contents("f")) == sha256(bytes))
            let asked = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map(String.init)
            #expect(asked == ["1", expired, expired])
            let requests = f.server.requests(path: "/files/f")
            #expect(requests.last?.query["token"] == "b")
            #expect((0...300_000).contains(try #require(rangeStart(requests.last))))
        }
    }

    @Test func aProgramThatFailsLeavesTheDownloadFailedAsExpiredWithItsPartial() async throws {
        try await CLIFixture.with { f, journal in
            f.serve("f", count: 1_000_000)
            let program = try await Self.script("echo 'no credentials' >&2; exit 3", named: "refresh", in: f.directory)
            let expired = f.server.url("/files/f?token=a&expire_after=300000").absoluteString
            let run = try await Haul.run(
                ["get", expired, "-d", f.directory.path, "-o", "f", "--journal", journal, "--refresh-command", program],
                environment: Haul.environment)
            #expect(run.status == 1)
            #expect((run.stdout + run.stderr).contains("exited with status 3"))
            #expect(run.stderr.contains("no credentials"))
            #expect(f.contents("f.haul-partial")?.count == 300_000)
        }
    }

    @Test func aProgramThatCannotRunIsRefusedBeforeAnythingStarts() async throws {
        let run = try await Haul.run(
            ["get", "http://127.0.0.1:1/a", "--refresh-command", "/nonexistent/refresh", "--journal", "/nonexistent/j"])
        #expect(run.status == 2)
        #expect(run.stderr.contains("--refresh-command: /nonexistent/refresh is not an executable file"))
    }
}
