import Foundation

/// A minimal mutex-protected box used for all state that is shared between the
/// event loops serving connections and the test code driving a ``FaultServer``.
///
/// `NIOConcurrencyHelpers` is not a declared dependency of this target, so a tiny
/// `NSLock`-based equivalent of `NIOLockedValueBox` is used instead.
public final class Locked<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    /// A box holding `value`.
    public init(_ value: Value) {
        self.value = value
    }

    /// Runs `body` with exclusive access to the protected value.
    ///
    /// `body` must not block and must not call back into code that takes the same lock.
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        self.lock.lock()
        defer { self.lock.unlock() }
        return try body(&self.value)
    }
}
