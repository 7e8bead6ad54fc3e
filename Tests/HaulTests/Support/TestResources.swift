import Foundation
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

/// Runs CPU-bound test work (building and parsing a manifest of 100,000 entries, unoptimized)
/// on a thread of its own rather than on the concurrency pool, and waits for it without
/// holding a pool thread. The pool has as many threads as cores (two on CI); a test that
/// computes on them for half a minute starves every other test's tasks meanwhile, and
/// tests that wait on servers, retries and time limits then fail for want of a thread.
func onOwnThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try work() }) }.start()
    }
}
