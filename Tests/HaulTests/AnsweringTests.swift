import NIOConcurrencyHelpers
import Testing

@testable import HaulPostgres
@testable import HaulServer

/// The deadline every call to the shared queue's database runs under: a call that never
/// answers (PostgresNIO can lose a query issued while the server closes its connections)
/// is given up, and whatever waits behind it goes on.
@Suite("Shared queue: a database call that never answers is given up")
struct AnsweringTests {
    /// A body that ignores cancellation and answers only when the test lets it.
    final class Gate: Sendable {
        private let waiting = NIOLockedValueBox<CheckedContinuation<Void, Never>?>(nil)
        private let opened = NIOLockedValueBox(false)

        func pass() async {
            await withCheckedContinuation { continuation in
                let now = opened.withLockedValue { opened in
                    if opened { return true }
                    waiting.withLockedValue { $0 = continuation }
                    return false
                }
                if now { continuation.resume() }
            }
        }

        func open() {
            let continuation = opened.withLockedValue { opened in
                opened = true
                return waiting.withLockedValue { $0.take() }
            }
            continuation?.resume()
        }
    }

    @Test("A call that never answers throws NoAnswer at its deadline, without waiting for the call to end")
    func neverAnswers() async throws {
        let gate = Gate()
        await #expect(throws: NoAnswer.self) {
            try await answering(within: .milliseconds(50)) {
                await gate.pass()
                return 1
            }
        }
        // The call is still held: only now is it let go.
        gate.open()
    }

    /// The service's cluster monitor read through a deadline that waited for the call it
    /// cancelled: after `pg_terminate_backend`, one lost query stopped its events for good.
    /// Against that deadline this test never returns (as `neverAnswers` would against one
    /// that waits).
    @Test("The service's reads of the queue are given up at their deadline too, with a message")
    func serviceReadsNeverWaitForever() async throws {
        let gate = Gate()
        let error = await #expect(throws: QueueError.self) {
            try await ClusterCore.within(.milliseconds(50)) {
                await gate.pass()
                return 1
            }
        }
        #expect(error?.message.contains("did not answer") == true)
        // The call is still held: only now is it let go.
        gate.open()
    }

    @Test("A call that answers gives its value or its error")
    func answers() async throws {
        #expect(try await answering(within: .seconds(60)) { 42 } == 42)
        struct Refused: Error {}
        await #expect(throws: Refused.self) {
            try await answering(within: .seconds(60)) { () async throws -> Int in throw Refused() }
        }
    }
}
