#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch

/// Turns SIGINT and SIGTERM into Swift concurrency.
///
/// The first signal is delivered on ``received`` so the command can stop gracefully; any
/// later one runs `onRepeat` right away (on the signal queue), for an impatient user who
/// presses Ctrl-C twice.
final class SignalHandler: @unchecked Sendable {
    /// The first signal caught, then nothing: the stream finishes on ``stop()``.
    let received: AsyncStream<Int32>

    // Mutable state is only touched on `queue`, a serial queue.
    private let queue = DispatchQueue(label: "haul.signals", target: .global())
    private let continuation: AsyncStream<Int32>.Continuation
    private let signals: [Int32]
    private var sources: [any DispatchSourceSignal] = []
    private var count = 0

    /// Starts catching `signals`; their default action is off until ``stop()``.
    init(catching signals: [Int32], onRepeat: @escaping @Sendable (Int32) -> Void) {
        (received, continuation) = AsyncStream.makeStream(of: Int32.self, bufferingPolicy: .bufferingNewest(1))
        self.signals = signals
        queue.sync {
            for number in signals {
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
                source.setEventHandler { [self] in
                    count += 1
                    if count == 1 {
                        continuation.yield(number)
                    } else {
                        onRepeat(number)
                    }
                }
                source.resume()
                sources.append(source)
            }
        }
    }

    /// Stops catching: the signals get their default action back.
    func stop() {
        queue.sync {
            for source in sources { source.cancel() }
            sources = []
            for number in signals { signal(number, SIG_DFL) }
        }
        continuation.finish()
    }
}
