import NIOConcurrencyHelpers

/// A database call that did not answer within its deadline (see ``answering(within:_:)``).
package struct NoAnswer: Error, CustomStringConvertible {
    var limit: Duration
    package var description: String { "the database did not answer within \(limit)" }
}

/// Runs `body` and waits for it at most `limit`: past that, cancels it and throws
/// ``NoAnswer`` without waiting for it to end.
///
/// Every call the shared queue makes goes through this, and so do the service's reads of
/// it (`ClusterCore.within`). PostgresNIO can lose a query issued while the server closes
/// its connections (a database restart): it never answers, neither with rows nor with an
/// error, and anything waiting behind it (the store's ordered writes, a completion, an
/// admission, the service's cluster monitor) would wait forever. A deadline
/// turns that into an error the caller already handles: a write is given up, a
/// completion sent again, an admission tried at the next signal.
package func answering<T: Sendable>(
    within limit: Duration, _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let waiter = NIOLockedValueBox<CheckedContinuation<T, any Error>?>(nil)
    let work = NIOLockedValueBox<Task<Void, Never>?>(nil)
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { continuation in
            waiter.withLockedValue { $0 = continuation }
            let timer = Task {
                do { try await Task.sleep(for: limit) } catch { return }
                guard let continuation = waiter.withLockedValue({ $0.take() }) else { return }
                work.withLockedValue { $0 }?.cancel()
                continuation.resume(throwing: NoAnswer(limit: limit))
            }
            let task = Task {
                let result: Result<T, any Error>
                do { result = .success(try await body()) } catch { result = .failure(error) }
                timer.cancel()
                waiter.withLockedValue { $0.take() }?.resume(with: result)
            }
            work.withLockedValue { $0 = task }
        }
    } onCancel: {
        work.withLockedValue { $0 }?.cancel()
    }
}
