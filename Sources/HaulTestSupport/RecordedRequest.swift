/// A request as it arrived at a ``FaultServer`` (recorded when its head is received).
public struct RecordedRequest: Sendable {
    /// 0-based arrival position since the server started or since the last
    /// ``FaultServer/resetStatistics()``; equals the position in ``FaultServer/requests(path:)``
    /// when called without a path.
    public let index: Int
    /// 1-based number of the TCP connection the request arrived on (in the order the
    /// server accepted connections). Requests sharing a number reused one connection.
    public let connection: Int
    /// The request method, e.g. `"GET"` or `"HEAD"`.
    public let method: String
    /// The raw request target, e.g. `"/files/a?reset_after=10"`.
    public let uri: String
    /// The path of the request target without the query, e.g. `"/files/a"`
    /// (not percent-decoded).
    public let path: String
    /// Percent-decoded query parameters (for repeated names the last one wins).
    public let query: [String: String]
    /// The request headers in the order they were received, with their names as sent.
    public let headers: [(name: String, value: String)]

    /// Creates a recorded request.
    public init(
        index: Int,
        connection: Int,
        method: String,
        uri: String,
        path: String,
        query: [String: String],
        headers: [(name: String, value: String)]
    ) {
        self.index = index
        self.connection = connection
        self.method = method
        self.uri = uri
        self.path = path
        self.query = query
        self.headers = headers
    }

    /// The value of the first header called `name` (compared case-insensitively), if any.
    public func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return self.headers.first { $0.name.lowercased() == wanted }?.value
    }

    /// All values of headers called `name` (compared case-insensitively), in order.
    public func headerValues(_ name: String) -> [String] {
        let wanted = name.lowercased()
        return self.headers.filter { $0.name.lowercased() == wanted }.map(\.value)
    }
}
