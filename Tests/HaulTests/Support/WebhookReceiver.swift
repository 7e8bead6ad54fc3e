import Foundation
import Hummingbird
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle

/// A webhook receiver for the tests: a real HTTP server on a free port of 127.0.0.1 that
/// keeps every `POST` it gets (headers and body) and answers `503` while told to refuse,
/// `204` otherwise. ``deliveries(atLeast:)`` waits for the count without polling.
@available(macOS 14, iOS 17, tvOS 17, *)
final class WebhookReceiver: Sendable {
    struct Delivery: Sendable {
        var eventID: String
        var attempt: String
        var signature: String
        var body: Data
        /// What the receiver answered.
        var accepted: Bool
    }

    private struct State {
        var deliveries: [Delivery] = []
        var refusals: Int
        var waiters: [(count: Int, continuation: CheckedContinuation<[Delivery], Never>)] = []
    }

    private let state: NIOLockedValueBox<State>
    private let task: Task<Void, any Error>
    let port: Int

    /// `http://127.0.0.1:PORT/hook`.
    var url: String { "http://127.0.0.1:\(port)/hook" }

    /// Starts a receiver that refuses the first `refusing` deliveries.
    static func start(refusing: Int = 0) async throws -> WebhookReceiver {
        let state = NIOLockedValueBox(State(refusals: refusing))
        let router = Router()
        router.post("hook") { request, _ -> Response in
            let body = try await request.body.collect(upTo: 1 << 20)
            let (accepted, ready) = state.withLockedValue { state -> (Bool, [(CheckedContinuation<[Delivery], Never>, [Delivery])]) in
                let accepted = state.refusals <= 0
                if !accepted { state.refusals -= 1 }
                state.deliveries.append(
                    Delivery(
                        eventID: request.headers[.init("X-Haul-Event-ID")!] ?? "",
                        attempt: request.headers[.init("X-Haul-Delivery-Attempt")!] ?? "",
                        signature: request.headers[.init("X-Haul-Signature-256")!] ?? "", body: Data(buffer: body),
                        accepted: accepted))
                let count = state.deliveries.count
                let ready = state.waiters.filter { $0.count <= count }.map { ($0.continuation, state.deliveries) }
                state.waiters.removeAll { $0.count <= count }
                return (accepted, ready)
            }
            for (continuation, deliveries) in ready { continuation.resume(returning: deliveries) }
            return Response(status: accepted ? .noContent : .serviceUnavailable)
        }
        let (ports, announce) = AsyncStream.makeStream(of: Int.self)
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in
                announce.yield(channel.localAddress?.port ?? 0)
                announce.finish()
            }, logger: Logger(label: "webhook-receiver", factory: { _ in SwiftLogNoOpLogHandler() }))
        let task = Task { try await app.runService() }
        var port = 0
        for await announced in ports { port = announced }
        return WebhookReceiver(state: state, task: task, port: port)
    }

    private init(state: NIOLockedValueBox<State>, task: Task<Void, any Error>, port: Int) {
        self.state = state
        self.task = task
        self.port = port
    }

    /// Refuses the next `count` deliveries (`Int.max`: all of them), or none.
    func refuse(_ count: Int) {
        state.withLockedValue { $0.refusals = count }
    }

    /// Once at least `count` deliveries have arrived, all of them.
    func deliveries(atLeast count: Int) async -> [Delivery] {
        await withCheckedContinuation { continuation in
            let ready = state.withLockedValue { state -> [Delivery]? in
                if state.deliveries.count >= count { return state.deliveries }
                state.waiters.append((count, continuation))
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    func stop() async {
        task.cancel()
        _ = try? await task.value
    }
}
