/// A subscription to an ``EventBroadcaster`` whose consumer takes the events in batches:
/// every event that arrived since it last asked, in order.
///
/// The service's event hub takes the manager's events this way: it keeps them in order in
/// its own queue, so that it can hold them while the API makes a change and announce the
/// change first (see `EventHub.hold()`), and it takes a whole burst in one call, without
/// a suspension per event.
package final class EventBatches<Element: Sendable>: Sendable {
    private let inbox = TakeAllInbox<[Element]>(empty: [], isEmpty: \.isEmpty)

    init() {}

    /// Runs `body` when the consumer is cancelled (the broadcaster forgets it).
    func onCancel(_ body: @escaping @Sendable () -> Void) {
        inbox.onCancel(body)
    }

    /// Adds an event; wakes the consumer if it waits.
    func append(_ element: Element) {
        inbox.add { pending, _ in
            pending.append(element)
            return true
        }
    }

    /// Ends the subscription: the consumer gets what is pending, then `nil`.
    func finish() {
        inbox.finish()
    }

    /// Every event that arrived since the last call, waiting for one if there is none;
    /// `nil` once the subscription has ended and nothing is pending. Cancelling the caller
    /// ends the subscription.
    package func next() async -> [Element]? {
        await inbox.take()
    }
}
