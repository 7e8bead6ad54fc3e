import AsyncHTTPClient
import Foundation
import Haul
import NIOCore
import HaulTestSupport
import Testing

/// `--on-complete` and `--on-error`: a program of the operator's run after each download
/// ends, without a shell, with the download in `HAUL_*` variables.
@Suite("Completion hooks", .timeLimit(.minutes(4)))
struct CompletionHookTests {
    /// A hook that writes what it was given, one file per run named by its process ID,
    /// the fields separated by NUL (so that nothing a value holds can be mistaken for a
    /// separator); it prints a line and exits with `$HOOK_EXIT` (0 unless set).
    static func recordingHook(in directory: URL) async throws -> (program: String, records: URL) {
        let records = directory.appendingPathComponent("records")
        try FileManager.default.createDirectory(at: records, withIntermediateDirectories: true)
        let program = try await RefreshCommandCLITests.script(
            """
            printf '%s\\0' "$HAUL_ID" "$HAUL_URL" "$HAUL_PATH" "$HAUL_BYTES" "$HAUL_ERROR" "$HAUL_ERROR_CODE" > "\(records.path)/$$"
            echo "hook output for $HAUL_BYTES"
            exit ${HOOK_EXIT:-0}
            """, named: "hook", in: directory)
        return (program, records)
    }

    /// The runs recorded so far: each a dictionary of the `HAUL_*` values.
    static func runs(in records: URL) throws -> [[String: String]] {
        let names = ["HAUL_ID", "HAUL_URL", "HAUL_PATH", "HAUL_BYTES", "HAUL_ERROR", "HAUL_ERROR_CODE"]
        return try FileManager.default.contentsOfDirectory(atPath: records.path).map { file in
            let data = try Data(contentsOf: records.appendingPathComponent(file))
            let fields = data.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
            return Dictionary(uniqueKeysWithValues: zip(names, fields))
        }
    }

    @Test func aCompletedAndAFailedDownloadEachRunTheirHookWithTheSavedPathVerbatim() async throws {
        try await CLIFixture.with { f, journal in
            let tools = f.directory.appendingPathComponent("tools")
            try FileManager.default.createDirectory(at: tools, withIntermediateDirectories: true)
            let (hook, records) = try await Self.recordingHook(in: tools)
            let downloads = f.directory.appendingPathComponent("downloads")
            f.serve("c", count: 5_000)
            // A name a shell would run something for, with quotes and a new line.
            let name = "a $(touch PWNED) `touch PWNED2` \"q\" 'x';\nb.bin"
            let url = f.server.url("/files/c").absoluteString
            let get = try await Haul.run([
                "get", url, "-o", name, "-d", downloads.path, "--journal", journal, "--on-complete", hook,
                "--on-error", hook,
            ])
            #expect(get.status == 0, "\(get.stderr)")
            // It returned after its hook had run.
            let completed = try Self.runs(in: records)
            #expect(completed.count == 1)
            #expect(completed.first?["HAUL_ID"] == url)
            #expect(completed.first?["HAUL_URL"] == url)
            // Haul takes control characters out of a name (the new line); the rest stays,
            // and the hook is given the saved file's path exactly.
            let saved = try FileManager.default.contentsOfDirectory(atPath: downloads.path)
            #expect(saved == ["a $(touch PWNED) `touch PWNED2` \"q\" 'x';b.bin"])
            #expect(completed.first?["HAUL_PATH"] == downloads.appendingPathComponent(saved.first ?? "").path)
            #expect(completed.first?["HAUL_BYTES"] == "5000")
            #expect(completed.first?["HAUL_ERROR"] == "")
            for place in [downloads.path, tools.path, FileManager.default.currentDirectoryPath] {
                #expect(!FileManager.default.fileExists(atPath: "\(place)/PWNED"))
                #expect(!FileManager.default.fileExists(atPath: "\(place)/PWNED2"))
            }
            // A successful hook says nothing on haul get's standard error.
            #expect(!get.stderr.contains("hook"), "\(get.stderr)")

            let missing = f.server.url("/files/missing").absoluteString
            let failed = try await Haul.run([
                "get", missing, "-d", downloads.path, "--journal", journal, "--on-complete", hook, "--on-error", hook,
            ])
            #expect(failed.status == 1)
            let error = try #require(try Self.runs(in: records).first { $0["HAUL_ID"] == missing })
            #expect(error["HAUL_URL"] == missing)
            #expect(error["HAUL_PATH"] == "")
            #expect(error["HAUL_BYTES"] == "")
            #expect(error["HAUL_ERROR_CODE"] == "httpStatus")
            #expect(error["HAUL_ERROR"]?.contains("404") == true)
        }
    }

    @Test func aHookThatFailsOrRunsOutOfTimeIsLoggedWithItsStatusAndOutput() async throws {
        try await CLIFixture.with { f, journal in
            let tools = f.directory.appendingPathComponent("tools")
            try FileManager.default.createDirectory(at: tools, withIntermediateDirectories: true)
            let (hook, _) = try await Self.recordingHook(in: tools)
            f.serve("c", count: 700)
            var environment = Haul.environment
            environment["HOOK_EXIT"] = "3"
            let failing = try await Haul.run(
                [
                    "get", f.server.url("/files/c?n=1").absoluteString, "-d", f.directory.path, "--journal", journal,
                    "--on-complete", hook,
                ], environment: environment)
            #expect(failing.status == 0, "a hook's failure is not the download's: \(failing.stderr)")
            #expect(failing.stderr.contains("hook failed"), "\(failing.stderr)")
            #expect(failing.stderr.contains("status: 3"))
            #expect(failing.stderr.contains("output: hook output for 700"))

            // A hook that never ends is killed at its limit, and haul does not wait longer.
            let stuck = try await RefreshCommandCLITests.script("echo waiting; exec tail -f /dev/null", named: "stuck", in: tools)
            let slow = try await Haul.run([
                "get", f.server.url("/files/c?n=2").absoluteString, "-d", f.directory.path, "--journal", journal,
                "--on-complete", stuck, "--hook-timeout", "1",
            ])
            #expect(slow.status == 0, "\(slow.stderr)")
            #expect(slow.stderr.contains("hook ran out of time and was killed"), "\(slow.stderr)")
            #expect(slow.stderr.contains("output: waiting"))
        }
    }

    @Test func hooksAreRefusedWhereTheyWouldNotRun() async throws {
        try await CLIFixture.with { f, journal in
            let url = f.server.url("/files/c").absoluteString
            let queued = try await Haul.run([
                "get", "--queue", "postgres://haul@127.0.0.1:1/haul", url, "--on-complete", "/bin/true",
            ])
            #expect(queued.status != 0)
            #expect(queued.stderr.contains("give them to 'haul worker'"), "\(queued.stderr)")
            let absent = try await Haul.run(["get", url, "--journal", journal, "--on-error", "/nonexistent/hook"])
            #expect(absent.status != 0)
            #expect(absent.stderr.contains("--on-error: /nonexistent/hook is not an executable file"), "\(absent.stderr)")
            #expect(f.server.requests(path: "/files/c").isEmpty)
        }
    }

    @Test func theServiceRunsItsHooksAndTheAPICannotSetThem() async throws {
        try await CLIFixture.with { f, journal in
            let tools = f.directory.appendingPathComponent("tools")
            try FileManager.default.createDirectory(at: tools, withIntermediateDirectories: true)
            let (hook, records) = try await Self.recordingHook(in: tools)
            f.serve("s", count: 3_000)
            let service = try await HeavyProcessTests.ServiceProcessTests.Service.start(
                journal: journal, directory: f.directory.path, arguments: ["--on-complete", hook])
            let url = f.server.url("/files/s").absoluteString
            // Through the service, hooks of the CLI's own are refused: they would never run.
            let refused = try await Haul.run(
                ["get", "--journal", journal, "-d", f.directory.path, url, "--on-complete", hook])
            #expect(refused.status != 0)
            #expect(refused.stderr.contains("give them to 'haul serve'"), "\(refused.stderr)")
            // Nor does aria2's RPC take a program to run (the API has no field for one at all).
            let token = try String(contentsOfFile: journal + "-serve.token", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            var call = HTTPClientRequest(url: "http://\(service.address)/jsonrpc")
            call.method = .POST
            call.headers.add(name: "Content-Type", value: "application/json")
            call.body = .bytes(
                ByteBuffer(
                    string: """
                        {"jsonrpc":"2.0","id":"1","method":"aria2.addUri","params":["token:\(token)",["\(url)?rpc=1"],
                         {"on-download-complete":"\(hook)"}]}
                        """))
            let answer = try await HTTPClient.shared.execute(call, timeout: .seconds(10))
            let text = String(buffer: try await answer.body.collect(upTo: 1 << 16))
            #expect(text.contains("set only by whoever starts haul serve"), "\(text)")
            let get = try await Haul.run(["get", "--journal", journal, "-d", f.directory.path, url])
            #expect(get.status == 0, "\(get.stderr)")
            // The service waits for its hooks before it exits.
            #expect(await service.stop() == 0)
            let runs = try Self.runs(in: records)
            #expect(runs.count == 1)
            #expect(runs.first?["HAUL_URL"] == url)
            #expect(runs.first?["HAUL_BYTES"] == "3000")
            #expect(runs.first?["HAUL_PATH"] == f.directory.appendingPathComponent("s").path)
        }
    }
}
