import Haul
import NIOCore
import NIOPosix

/// The event loops and file I/O threads the tests' managers share, handed in as an app
/// hands in its own: hundreds of managers run in one test process, and each making its own
/// would start thousands of threads. `ManagerServiceTests` covers managers that make their own.
enum TestResources {
    /// The test process's event loops (the fault servers run on them too).
    static var group: any EventLoopGroup { MultiThreadedEventLoopGroup.singleton }
    /// The test process's file I/O threads. More than one manager makes for itself: every
    /// suite runs at once and shares them, and a test's transfer whose file work waits
    /// behind other tests' fsyncs would see its idle timeout run out before its body is read
    /// (seen as a timeout instead of the expected error, under a full parallel run).
    static let pool: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: 32)
        pool.start()
        return pool
    }()
}
