import Foundation
import Haul
import NIOCore
import NIOPosix

/// The event loops and file I/O threads of the `haul` process, handed to every download
/// manager, worker and service it makes: one set of each per process.
enum ProcessResources {
    /// NIO's process-wide event loops (one per core), which the service's HTTP server and
    /// the clients of a service or a shared queue run on too.
    static var eventLoopGroup: any EventLoopGroup { MultiThreadedEventLoopGroup.singleton }
    /// The threads for blocking file work, as many as a manager would make for itself; they
    /// live as long as the process.
    static let threadPool = DownloadManager.makeFileIOPool()

    /// The subcommands that use the loops and the threads.
    static let commandsThatUseThem: Set<String> = ["get", "resume", "sync", "serve", "worker"]

    /// Starts the loops and the threads on a thread of its own when `arguments` (argv
    /// without the program's name, as ``HaulCommand/arguments(_:)`` puts them: a bare URL
    /// is a `get`) name a subcommand that uses them, so that they come up while the
    /// arguments are parsed and the journal is opened: each of their threads is started and
    /// waited for in turn, which the command would otherwise wait for after those steps.
    /// (Both are made once; a command that asks for them first waits for the start under
    /// way.)
    static func startEarly(for arguments: [String]) {
        guard let subcommand = arguments.first, commandsThatUseThem.contains(subcommand) else { return }
        Thread.detachNewThread {
            _ = eventLoopGroup
            _ = threadPool
        }
    }
}
