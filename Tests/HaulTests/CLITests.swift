import Foundation
import HaulTestSupport
import Testing

/// End-to-end tests of the built `haul` binary against the fault server.
@Suite("haul get (CLI)")
struct CLITests {
    @Test func downloadsAndReportsOneLinePerStateChange() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("cli.bin", count: 200_000)
            let run = try await Haul.run(["get", f.server.url("/files/cli.bin").absoluteString, "-d", f.directory.path])
            #expect(run.status == 0)
            #expect(f.contents("cli.bin") == bytes)
            #expect(run.stdout.contains("started \(f.server.url("/files/cli.bin").absoluteString)"))
            #expect(run.stdout.contains("completed"))
            #expect(run.stdout.contains("1 completed, 0 failed"))
            #expect(run.stderr.isEmpty)
        }
    }

    @Test func jsonModePrintsOneEventObjectPerLine() async throws {
        try await Fixture.with { f in
            f.serve("j.bin", count: 100_000)
            let url = f.server.url("/files/j.bin").absoluteString
            let run = try await Haul.run(["get", url, "-d", f.directory.path, "--json"])
            #expect(run.status == 0)
            let objects = try run.stdout.split(separator: "\n").map { line in
                try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            }
            let kinds = objects.compactMap { $0["event"] as? String }
            #expect(kinds.first == "queued")
            #expect(kinds.contains("started"))
            #expect(kinds.last == "summary")
            let completed = try #require(objects.first { $0["event"] as? String == "completed" })
            #expect(completed["id"] as? String == url)
            #expect(completed["bytes"] as? Int == 100_000)
            #expect(completed["path"] as? String == f.file("j.bin").path)
            #expect(objects.allSatisfy { $0["time"] is String })
        }
    }

    @Test func failuresExitNonZeroWithOneLinePerFailure() async throws {
        try await Fixture.with { f in
            f.serve("ok", count: 10)
            let missing = f.server.url("/status/404").absoluteString
            let run = try await Haul.run([
                "get", f.server.url("/files/ok").absoluteString, missing, "-d", f.directory.path, "--retries", "0",
            ])
            #expect(run.status == 1)
            let lines = run.stderr.split(separator: "\n")
            #expect(lines.count == 1)
            #expect(lines.first?.hasPrefix("haul: failed: \(missing): HTTP 404") == true)
            #expect(f.listing() == ["ok"])
        }
    }

    @Test(arguments: [
        ["get", "ftp://example.com/file"],
        ["get", "http://127.0.0.1:1/a", "http://127.0.0.1:1/b", "-o", "one"],
        ["get", "http://127.0.0.1:1/a", "--checksum", "sha-256=xyz"],
        ["get", "http://127.0.0.1:1/a", "--header", "no colon"],
        ["get"],
    ])
    func badInputIsAUsageError(arguments: [String]) async throws {
        let run = try await Haul.run(arguments)
        #expect(run.status == 2)
        #expect(!run.stderr.isEmpty)
    }

    @Test func inputFileWithOptionLines() async throws {
        try await Fixture.with { f in
            let a = f.serve("a", count: 1000, seed: 1)
            let b = f.serve("b", count: 2000, seed: 2)
            let digest = TransferTests.digest(b, .sha256)
            let list = """
                # a comment, then a blank line

                \(f.server.url("/files/a").absoluteString)
                  out=first.dat
                \(f.server.url("/files/b").absoluteString)
                \tchecksum=sha-256=\(digest)
                """
            let input = f.directory.appendingPathComponent("list.txt")
            try list.write(to: input, atomically: true, encoding: .utf8)
            let out = f.directory.appendingPathComponent("out")
            let run = try await Haul.run(["get", "-i", input.path, "-d", out.path, "--quiet"])
            #expect(run.status == 0)
            #expect(run.stdout.isEmpty)
            #expect(FileManager.default.contents(atPath: out.appendingPathComponent("first.dat").path) == Data(a))
            #expect(FileManager.default.contents(atPath: out.appendingPathComponent("b").path) == Data(b))

            try (list + "\n  colour=blue\n").write(to: input, atomically: true, encoding: .utf8)
            let bad = try await Haul.run(["get", "-i", input.path, "-d", out.path])
            #expect(bad.status == 2)
            #expect(bad.stderr.contains("list.txt"))
        }
    }

    @Test func wrongChecksumFailsAndLeavesNoFile() async throws {
        try await Fixture.with { f in
            f.serve("w", count: 1000)
            let run = try await Haul.run([
                "get", f.server.url("/files/w").absoluteString, "-d", f.directory.path,
                "--checksum", "md5=" + String(repeating: "0", count: 32),
            ])
            #expect(run.status == 1)
            #expect(run.stderr.contains("md5 check failed"))
            #expect(f.listing().isEmpty)
        }
    }

    @Test func interruptKeepsThePartialAndTheSameCommandResumes() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("big", count: 2_000_000)
            let url = f.server.url("/files/big?stall_after=500000&stall_times=1").absoluteString
            let arguments = ["get", url, "-d", f.directory.path, "--json"]
            // Interrupt once bytes are on disk.
            let first = try await Haul.run(arguments) { line in
                line.contains("\"event\":\"progress\"") ? SIGINT : nil
            }
            #expect(first.status == 130)
            #expect(first.stderr.contains("interrupted"))
            let partial = f.file("big.haul-partial").path
            let kept = try #require(try FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int)
            #expect(kept > 0)
            #expect(!FileManager.default.fileExists(atPath: f.file("big").path))

            let second = try await Haul.run(arguments)
            #expect(second.status == 0)
            #expect(f.contents("big") == bytes)
            #expect(f.server.requests(path: "/files/big").last?.header("Range") == "bytes=\(kept)-")
            #expect(f.listing() == ["big"])
        }
    }
}

/// Runs the `haul` executable built next to the test bundle.
enum Haul {
    struct Run {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    static var executable: URL {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("haul")
    }

    /// Runs `haul` with `arguments`. `signal` sees each stdout line and may return a signal
    /// to send to the process (once).
    static func run(_ arguments: [String], signal: (@Sendable (String) -> Int32?)? = nil) async throws -> Run {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        process.standardInput = FileHandle.nullDevice
        let collector = OutputCollector(signal: signal)
        stdout.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if let signal = collector.append(data) { kill(process.processIdentifier, signal) }
        }
        let errors = OutputCollector(signal: nil)
        stderr.fileHandleForReading.readabilityHandler = { handle in _ = errors.append(handle.availableData) }
        let status: Int32 = try await withCheckedThrowingContinuation { continuation in
            process.terminationHandler = { process in continuation.resume(returning: process.terminationStatus) }
            do { try process.run() } catch { continuation.resume(throwing: error) }
        }
        stdout.fileHandleForReading.readabilityHandler = nil
        stderr.fileHandleForReading.readabilityHandler = nil
        _ = collector.append(stdout.fileHandleForReading.readDataToEndOfFile())
        _ = errors.append(stderr.fileHandleForReading.readDataToEndOfFile())
        return Run(status: status, stdout: collector.text, stderr: errors.text)
    }
}

/// Collects a process's output; thread-safe because readability handlers run anywhere.
final class OutputCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    private var signalled = false
    private let signal: (@Sendable (String) -> Int32?)?

    init(signal: (@Sendable (String) -> Int32?)?) { self.signal = signal }

    /// Appends output; returns a signal to send when a complete line asks for one.
    func append(_ chunk: Data) -> Int32? {
        lock.lock()
        defer { lock.unlock() }
        let before = data.count
        data.append(chunk)
        guard let signal, !signalled else { return nil }
        let start = data[..<before].lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? 0
        for line in data[start...].split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true) {
            if let number = signal(String(decoding: line, as: UTF8.self)) {
                signalled = true
                return number
            }
        }
        return nil
    }

    var text: String {
        lock.lock()
        defer { lock.unlock() }
        return String(decoding: data, as: UTF8.self)
    }
}
