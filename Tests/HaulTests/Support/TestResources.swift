import Haul
import NIOCore
import NIOPosix

/// The event loops and file I/O threads the tests' managers share, handed in as an app
/// hands in its own: hundreds of managers run in one test process, and each making its own
/// would start thousands of threads. `ManagerServiceTests` covers managers that make their own.
enum TestResources {
    /// The test process's event loops (the fault servers run on them too).
    static var group: any EventLoopGroup { MultiThreadedEventLoopGroup.singleton }
    /// The test process's file I/O threads, as many as a manager would make for itself.
    static let pool = DownloadManager.makeFileIOPool()
}
