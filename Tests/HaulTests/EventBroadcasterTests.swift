import Testing

@testable import Haul

/// The manager's event fan-out, as a consumer that takes events in batches sees it.
@Suite("Event broadcaster")
struct EventBroadcasterTests {
    @Test func batchesHoldEveryEventInOrderUntilTaken() async {
        let broadcaster = EventBroadcaster<Int>()
        let batches = broadcaster.makeBatches { $0.isMultiple(of: 2) }

        // Events that arrive while the consumer is busy wait for it, in order, filtered
        for number in 0..<10 { broadcaster.yield(number) }
        #expect(await batches.next() == [0, 2, 4, 6, 8])

        // A consumer with nothing to take gets the next event
        async let next = batches.next()
        broadcaster.yield(12)
        #expect(await next == [12])

        // The terminal event passes any filter, and ends the subscription after it
        broadcaster.yield(13, terminal: true)
        #expect(await batches.next() == [13])
        #expect(await batches.next() == nil)

        // A subscription made after the end gets the terminal event, then ends
        let late = broadcaster.makeBatches()
        #expect(await late.next() == [13])
        #expect(await late.next() == nil)
    }

    @Test func aCancelledConsumerEndsItsSubscription() async {
        let broadcaster = EventBroadcaster<Int>()
        let batches = broadcaster.makeBatches()
        let consumer = Task { await batches.next() }
        consumer.cancel()
        #expect(await consumer.value == nil)
        broadcaster.yield(1)
        #expect(await batches.next() == nil)
    }
}
