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
}
