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
