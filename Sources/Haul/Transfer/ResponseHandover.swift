import NIOConcurrencyHelpers
import NIOCore

/// The first response of a download that is to be split, handed over to its segmented
/// transfer as the first segment's response rather than cut off after its head.
///
/// Cutting it cost a far link dearly: over HTTP/1.1 a stopped response closes its
/// connection, so every segment paid a new TCP and TLS handshake, and the connection that
/// had already come through its slow start was thrown away (issue 42: one 64 MiB file over
/// HTTPS at a 40 ms round trip took 0.72 s against curl's 0.32 s). Kept, the first segment
/// starts at once on that connection, and the others join it.
///
/// The request is started under way (``run(_:)``, ``HTTPClients/start(_:receiver:deadline:logger:)``),
/// since it outlives the exchange that sent it; its end completes on its event loop, and
/// takes no task of its own. Until a receiver is attached (``attach(_:)``, once the file is prepared)
/// the one body part that arrived waits here, and holds the response back: nothing more is
/// read until it is passed on. If nobody attaches (the transfer stopped first),
/// ``abandon()`` stops the request.
final class ResponseHandover: Sendable {
    /// How the exchange that sent the request goes on.
    enum Decision: Sendable {
        /// The head said the content is to be split: the response is now the segments'.
        case handedOver
        /// The request ended without being handed over, with the transport's error if any.
        case ended((any Error)?)
    }

    private struct State {
        var task: (any ResponseTask)?
        var receiver: (any ResponseReceiver)?
        /// A body part that came before the receiver, with the promise that holds the
        /// response back until it is passed on.
        var waiting: (ByteBuffer, EventLoopPromise<Void>)?
        var handedOver = false
        /// The request's end, once it came: its transport error, if any.
        var ending: (any Error)??
        /// Stops the request, once it is under way.
        var stop: (@Sendable () -> Void)?
        var decision: CheckedContinuation<Decision, Never>?
        var end: CheckedContinuation<(any Error)?, Never>?
        var abandoned = false
        var sent: ContinuousClock.Instant?
        var setup: Duration?
    }

    private let state = NIOLockedValueBox(State())

    /// What the request cost before its head came: from ``run(_:)`` to the hand-over.
    var setup: Duration? { state.withLockedValue { $0.setup } }

    /// Starts the request (`start`), and waits until the response is handed over or the
    /// request ends, with the transport's error if any. Cancelling the calling task stops
    /// the request.
    func run(_ start: () async -> HTTPClients.Started) async -> Decision {
        state.withLockedValue { $0.sent = .now }
        let request = await start()
        state.withLockedValue { $0.stop = request.cancel }
        request.end.whenComplete { result in
            switch result {
            case .success: self.ended(nil)
            case .failure(let error): self.ended(error)
            }
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let now = state.withLockedValue { state -> Decision? in
                    if state.handedOver { return .handedOver }
                    if let ending = state.ending { return .ended(ending) }
                    state.decision = continuation
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            request.cancel()
        }
    }

    /// The head said the content is to be split (called on the request's event loop): the
    /// response goes on for the segments.
    func handOver(_ task: any ResponseTask) {
        let now = ContinuousClock.now
        let decision = state.withLockedValue { state -> CheckedContinuation<Decision, Never>? in
            state.task = task
            state.handedOver = true
            state.setup = state.sent.map { now - $0 }
            defer { state.decision = nil }
            return state.decision
        }
        decision?.resume(returning: .handedOver)
    }

    /// A body part of the handed-over response (on its event loop): passed to the
    /// receiver, or kept until one is attached.
    func received(_ buffer: ByteBuffer, task: any ResponseTask) -> EventLoopFuture<Void> {
        enum Route {
            case receiver(any ResponseReceiver)
            case held(EventLoopPromise<Void>)
            case dropped
        }
        let route = state.withLockedValue { state -> Route in
            if let receiver = state.receiver { return .receiver(receiver) }
            if state.abandoned { return .dropped }
            let promise = task.eventLoop.makePromise(of: Void.self)
            state.waiting = (buffer, promise)
            return .held(promise)
        }
        switch route {
        case .receiver(let receiver): return receiver.receivedBodyPart(task: task, buffer)
        case .held(let promise): return promise.futureResult
        case .dropped:
            task.cancel()
            return task.eventLoop.makeSucceededVoidFuture()
        }
    }

    /// Attaches the segment's receiver: the part waiting (if any) is passed on, and the
    /// call returns when the request has ended, with the transport's error if any.
    /// Cancelling the calling task stops the request.
    func attach(_ receiver: some ResponseReceiver) async -> (any Error)? {
        let (waiting, task) = state.withLockedValue { state in
            state.receiver = receiver
            defer { state.waiting = nil }
            return (state.waiting, state.task)
        }
        if let (buffer, promise) = waiting, let task {
            task.eventLoop.execute {
                promise.completeWith(receiver.receivedBodyPart(task: task, buffer))
            }
        }
        let stop = state.withLockedValue { $0.stop }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ending = state.withLockedValue { state -> (any Error)?? in
                    if let ending = state.ending { return ending }
                    state.end = continuation
                    return nil
                }
                if let ending { continuation.resume(returning: ending) }
            }
        } onCancel: {
            stop?()
        }
    }

    /// Stops the request if nobody attached: the segmented transfer ended before it
    /// needed the response (it was cancelled, or failed to start).
    func abandon() {
        let (stop, waiting) = state.withLockedValue { state -> ((@Sendable () -> Void)?, EventLoopPromise<Void>?) in
            guard state.receiver == nil else { return (nil, nil) }
            state.abandoned = true
            defer { state.waiting = nil }
            return (state.stop, state.waiting?.1)
        }
        stop?()
        waiting?.succeed()
    }

    private func ended(_ error: (any Error)?) {
        let (decision, end) = state.withLockedValue { state in
            state.ending = .some(error)
            defer {
                state.decision = nil
                state.end = nil
            }
            return (state.decision, state.end)
        }
        decision?.resume(returning: .ended(error))
        end?.resume(returning: error)
    }
}
