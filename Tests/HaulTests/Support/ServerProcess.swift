import Foundation

import Haul

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A real server the tests start as a child process with a directory of its own (nginx,
/// Apache): stopped one way, and run around a test's body one way.
protocol ServerProcess: Sendable {
    /// The server's (master) process.
    var process: ChildProcess { get }
    /// Its configuration, content and logs, removed when it stops.
    var directory: URL { get }
}

extension ServerProcess {
    /// Lays out `directory` (its `subdirectories`, and `configuration` written to
    /// `configurationName`) and starts `executable` with `arguments`, its output going to
    /// `logs/stderr.log` there. Throws a description of what failed.
    static func spawn(
        _ executable: String, arguments: [String], in directory: URL, subdirectories: [String],
        configuration: String, configurationName: String
    ) throws -> ChildProcess {
        let files = FileManager.default
        for sub in subdirectories + ["logs"] {
            try files.createDirectory(at: directory.appendingPathComponent(sub), withIntermediateDirectories: true)
        }
        try configuration.write(
            to: directory.appendingPathComponent(configurationName), atomically: true, encoding: .utf8)
        let stderrPath = directory.appendingPathComponent("logs/stderr.log").path
        guard files.createFile(atPath: stderrPath, contents: nil), let stderr = FileHandle(forWritingAtPath: stderrPath)
        else { throw SpawnFailure("cannot create \(stderrPath)") }
        defer { try? stderr.close() }
        return try ChildProcess(
            executable: executable, arguments: arguments,
            standardOutput: .descriptor(stderr.fileDescriptor), standardError: .descriptor(stderr.fileDescriptor))
    }

    /// Stops the server (SIGTERM, then SIGKILL if it lingers for 5 seconds), waits for it
    /// to exit and removes its directory.
    func stop() async {
        let process = self.process
        if !process.hasExited {
            process.signal(SIGTERM)
            DispatchQueue.global().asyncAfter(deadline: .now() + 5) { process.signal(SIGKILL) }
        }
        _ = await process.wait()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Runs `body` with this started server, stopping it afterwards whatever happens.
    func serving<T>(_ body: (Self) async throws -> T) async throws -> T {
        do {
            let value = try await body(self)
            await stop()
            return value
        } catch {
            await stop()
            throw error
        }
    }
}

/// Why ``ServerProcess/spawn(_:arguments:in:subdirectories:configuration:configurationName:)``
/// could not start a server.
struct SpawnFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
