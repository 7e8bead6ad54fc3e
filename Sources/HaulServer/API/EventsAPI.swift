import HTTPTypes
package import Hummingbird
import NIOCore
import ServiceLifecycle

/// `GET /api/v1/events`: the service's live events as Server-Sent Events (see
/// ``EventHub``). A client that reconnects with `Last-Event-ID` first gets what it missed,
/// or a `resync` event when that is no longer kept. `?types=` and `?states=` narrow what
/// it is sent (see ``EventFilter``). The stream ends when the service
/// stops, so a graceful shutdown never waits for it.
@available(macOS 14, iOS 17, tvOS 17, *)
package struct EventsAPI: Sendable {
    let core: ServiceCore
    /// The least time between two writes to a client: at most 100 writes a second, however
    /// many events there are, so that a burst of thousands of downloads costs neither side
    /// a wake-up per event. Events wait at most this long.
    static let writeInterval: Duration = .milliseconds(10)

    package init(core: ServiceCore) {
        self.core = core
    }

    package func addRoutes<Context: RequestContext>(to group: RouterGroup<Context>) {
        group.get("events") { request, _ in try await self.events(request) }
    }

    func events(_ request: Request) async throws -> Response {
        let lastID = request.headers[HTTPField.Name("Last-Event-ID")!].flatMap { UInt64($0) }
        let filter: EventFilter
        switch EventFilter.parse(types: request.uri.queryParameters["types"].map(String.init),
                                 states: request.uri.queryParameters["states"].map(String.init)) {
        case .success(let wanted): filter = wanted
        case .failure(let error): throw APIError.invalid(error.field, error.message)
        }
        let hub = core.hub
        return Response(
            status: .ok,
            headers: [
                .contentType: "text/event-stream", .cacheControl: "no-store",
                HTTPField.Name("X-Accel-Buffering")!: "no",
            ],
            body: ResponseBody { writer in
                let (replay, live, client) = await hub.subscribe(after: lastID, filter: filter)
                do {
                    // Reconnect after 2 s; then what was missed, in one write.
                    var first = ByteBuffer(string: "retry: 2000\n\n")
                    for frame in replay { first.writeImmutableBuffer(frame.bytes) }
                    try await writer.write(first)
                    // Whatever waits is written at once, and then what arrives in the next
                    // ``writeInterval``: a burst is one write.
                    try await withGracefulShutdownHandler {
                        while let frames = await live.next() {
                            try await writer.write(frames)
                            try? await Task.sleep(for: Self.writeInterval)
                        }
                    } onGracefulShutdown: {
                        live.finish()
                    }
                    await hub.unsubscribe(client)
                    try await writer.finish(nil)
                } catch {
                    await hub.unsubscribe(client)
                    throw error
                }
            })
    }
}
