extension FaultServer {
    /// A snapshot of a ``FaultServer``'s counters.
    ///
    /// Counters are cumulative since the server started or since the last
    /// ``FaultServer/resetStatistics()``; "current" values are live gauges.
    public struct Statistics: Sendable, Hashable {
        /// Requests whose head has been received.
        public var totalRequests: Int
        /// Response body bytes handed to the kernel (successful socket writes), over all paths.
        public var bodyBytesServed: Int
        /// Connections currently open.
        public var openConnections: Int
        /// The largest number of simultaneously open connections.
        public var maxOpenConnections: Int
        /// Requests currently in flight: from the request head being received until the
        /// response end is written or the connection closes. Requests blocked on a gate or
        /// stalled count as in flight.
        public var inFlightRequests: Int
        /// The largest number of simultaneously in-flight requests.
        public var maxInFlightRequests: Int
        /// TCP connections accepted.
        public var connectionsAccepted: Int

        /// Creates a statistics snapshot.
        public init(
            totalRequests: Int = 0,
            bodyBytesServed: Int = 0,
            openConnections: Int = 0,
            maxOpenConnections: Int = 0,
            inFlightRequests: Int = 0,
            maxInFlightRequests: Int = 0,
            connectionsAccepted: Int = 0
        ) {
            self.totalRequests = totalRequests
            self.bodyBytesServed = bodyBytesServed
            self.openConnections = openConnections
            self.maxOpenConnections = maxOpenConnections
            self.inFlightRequests = inFlightRequests
            self.maxInFlightRequests = maxInFlightRequests
            self.connectionsAccepted = connectionsAccepted
        }
    }
}
