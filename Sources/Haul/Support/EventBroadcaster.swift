import NIOConcurrencyHelpers

/// Fans events out to any number of `AsyncStream`s, each made fresh on request.
///
/// Yielding takes a lock but never hops to an actor, so the transfer's hot path can emit
/// progress without suspending. A broadcaster made with a `remember` rule keeps the
/// events that describe the current state, and a new stream receives them first, then
/// every later event: both happen under the lock, so nothing is lost or repeated in
/// between. After a terminal event, new streams receive that event and finish at once.
package final class EventBroadcaster<Element: Sendable>: Sendable {
    /// Updates the remembered events with a new one.
    package typealias Remember = @Sendable (_ remembered: inout [Element], _ event: Element) -> Void

    /// Decides which elements a stream receives; terminal elements always go through.
    package typealias Filter = @Sendable (Element) -> Bool

    private struct Subscriber {
        var continuation: AsyncStream<Element>.Continuation?
        var batches: EventBatches<Element>?
        var filter: Filter?

        func offer(_ element: Element) {
            if filter?(element) ?? true { deliver(element) }
        }

        /// Sends `element` whatever the filter says (the terminal element).
        func deliver(_ element: Element) {
            continuation?.yield(element)
            batches?.append(element)
        }

        func finish() {
            continuation?.finish()
            batches?.finish()
        }
    }

    private struct State {
        var continuations: [UInt64: Subscriber] = [:]
        var nextID: UInt64 = 0
        var remembered: [Element] = []
        var terminal: Element?
        var finished = false
    }

    private let state = NIOLockedValueBox(State())
    private let remember: Remember?

    /// Creates a broadcaster; with `remember`, new streams start with the events it keeps.
    package init(remembering remember: Remember? = nil) {
        self.remember = remember
    }

    /// A new stream that receives the remembered events, then every event yielded from
    /// now on; with `filter`, only those it accepts (and the terminal event).
    package func makeStream(filter: Filter? = nil) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self, bufferingPolicy: .unbounded)
        if let id = subscribe(Subscriber(continuation: continuation, filter: filter)) {
            continuation.onTermination = { [weak self] _ in self?.forget(id) }
        }
        return stream
    }

    /// A new subscription like ``makeStream(filter:)``, whose consumer takes the events in
    /// batches: all that arrived since it last asked (see ``EventBatches``).
    func makeBatches(filter: Filter? = nil) -> EventBatches<Element> {
        let batches = EventBatches<Element>()
        if let id = subscribe(Subscriber(batches: batches, filter: filter)) {
            batches.onCancel { [weak self] in self?.forget(id) }
        }
        return batches
    }

    /// Sends `subscriber` the remembered events and registers it, under the lock; returns
    /// its number, or `nil` (after sending it the terminal event and finishing it) when
    /// the broadcaster has finished.
    private func subscribe(_ subscriber: Subscriber) -> UInt64? {
        state.withLockedValue { state in
            if state.finished {
                if let terminal = state.terminal { subscriber.deliver(terminal) }
                subscriber.finish()
                return nil
            }
            for element in state.remembered { subscriber.offer(element) }
            let id = state.nextID
            state.nextID += 1
            state.continuations[id] = subscriber
            return id
        }
    }

    private func forget(_ id: UInt64) {
        state.withLockedValue { _ = $0.continuations.removeValue(forKey: id) }
    }

    /// Sends `element` to every stream; a terminal element also finishes them.
    ///
    /// Yields happen under the lock so that events from different threads keep one
    /// order; `finish()` happens outside it, because it runs `onTermination`.
    package func yield(_ element: Element, terminal: Bool = false) {
        let finishing = state.withLockedValue { state -> [Subscriber] in
            guard !state.finished else { return [] }
            guard terminal else {
                for subscriber in state.continuations.values { subscriber.offer(element) }
                remember?(&state.remembered, element)
                return []
            }
            for subscriber in state.continuations.values { subscriber.deliver(element) }
            state.terminal = element
            state.finished = true
            state.remembered = []
            defer { state.continuations = [:] }
            return Array(state.continuations.values)
        }
        for subscriber in finishing { subscriber.finish() }
    }

    /// Finishes every stream without a terminal element.
    package func finish() {
        let subscribers = state.withLockedValue { state in
            state.finished = true
            state.remembered = []
            defer { state.continuations = [:] }
            return Array(state.continuations.values)
        }
        for subscriber in subscribers { subscriber.finish() }
    }
}
