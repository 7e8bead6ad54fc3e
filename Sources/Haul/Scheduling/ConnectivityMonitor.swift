/// Whether the device has a usable network path, as the platform sees it.
public enum ConnectivityStatus: Sendable, Hashable {
    /// A path is available.
    case satisfied
    /// No path is available.
    case unsatisfied
}

/// A source of network path changes, for platforms that can tell more than a probe
/// (for example `NWPathMonitor` on Apple platforms).
///
/// When it reports ``ConnectivityStatus/satisfied``, the manager probes every host it is
/// waiting for at once, instead of at the next backoff step.
///
/// ```swift
/// struct PathMonitor: ConnectivityMonitor {
///     func statusUpdates() -> AsyncStream<ConnectivityStatus> {
///         AsyncStream { continuation in
///             let monitor = NWPathMonitor()
///             monitor.pathUpdateHandler = { continuation.yield($0.status == .satisfied ? .satisfied : .unsatisfied) }
///             monitor.start(queue: .global())
///             continuation.onTermination = { _ in monitor.cancel() }
///         }
///     }
/// }
/// ```
public protocol ConnectivityMonitor: Sendable {
    /// A stream of status changes; it may start with the current status.
    func statusUpdates() -> AsyncStream<ConnectivityStatus>
}
