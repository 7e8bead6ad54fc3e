import Foundation
import NIOHTTP1
import Testing

@testable import Haul

/// The speed limits' rules as a value (``RateSchedule``): buckets, debt, fair release and
/// changes, on a clock the test moves. No sockets, no sleeping.
@Suite("Rate schedule")
struct RateScheduleTests {
    let start = ContinuousClock.now

    func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }

    func part(_ id: UInt64, _ download: String, bytes: Int = 16_384, host: String = "h:80") -> RateSchedule.Part {
        RateSchedule.Part(id: id, download: DownloadID(download), host: host, bytes: bytes)
    }

    /// Feeds one download's parts as AsyncHTTPClient does (the next only once the last
    /// went), from `from` to `to` milliseconds, waking when the schedule says; returns the
    /// bytes released per download.
    func run(
        _ schedule: inout RateSchedule, downloads: [String], from: Int, to: Int, bytes: Int = 16_384
    ) -> [String: Int] {
        var released: [String: Int] = [:]
        var waitingOf: [UInt64: String] = [:]
        var nextID: UInt64 = 1_000
        var now = from
        func ask(_ download: String) -> Bool {
            nextID += 1
            if schedule.request(part(nextID, download, bytes: bytes), at: at(now)) {
                released[download, default: 0] += bytes
                return true
            }
            waitingOf[nextID] = download
            return false
        }
        // Each download asks until one of its parts has to wait.
        for download in downloads { while ask(download) {} }
        while now < to {
            let (ids, next) = schedule.release(at: at(now))
            for id in ids {
                guard let download = waitingOf.removeValue(forKey: id) else { continue }
                released[download, default: 0] += bytes
                while ask(download) {}
            }
            guard let next = next ?? (waitingOf.isEmpty ? nil : .milliseconds(1)) else { break }
            now += max(1, Int(next.components.attoseconds / 1_000_000_000_000_000) + Int(next.components.seconds) * 1_000)
        }
        return released
    }

    @Test func aSingleDownloadHoldsToItsLimitAfterABoundedBurst() {
        var schedule = RateSchedule()
        schedule.setLimit(1_000_000, for: DownloadID("a"), at: at(0))
        // The first quarter second's worth goes at once (the burst), then parts wait
        let first = schedule.request(part(1, "a", bytes: 250_000), at: at(0))
        let second = schedule.request(part(2, "a", bytes: 16_384), at: at(0))  // the bucket was not yet in debt
        let third = schedule.request(part(3, "a", bytes: 16_384), at: at(0))
        #expect(first && second && !third)
        let (none, next) = schedule.release(at: at(0))
        #expect(none.isEmpty)
        #expect(next == .nanoseconds(16_384_000))  // the 16,384 bytes of debt at 1 MB/s

        // Over 10 s, the bytes released are the limit's, to within a part
        var steady = RateSchedule()
        steady.setLimit(1_000_000, for: DownloadID("a"), at: at(0))
        let released = run(&steady, downloads: ["a"], from: 0, to: 10_000)
        let expected = 10 * 1_000_000 + 250_000  // the rate, plus the first burst
        #expect(abs(released["a", default: 0] - expected) <= 2 * 16_384)
    }

    @Test func anOverallLimitIsSharedEvenlyAndOneHeldBelowItsShareLeavesTheRest() {
        var schedule = RateSchedule()
        schedule.setOverall(4_000_000, at: at(0))
        // c is limited to 500 kB/s: a and b share the other 3.5 MB/s
        schedule.setLimit(500_000, for: DownloadID("c"), at: at(0))
        let released = run(&schedule, downloads: ["a", "b", "c"], from: 0, to: 10_000)
        let total = released.values.reduce(0, +)
        #expect(abs(total - (40_000_000 + 1_000_000)) <= 4 * 16_384)  // the rate and the first burst
        #expect(abs(released["c", default: 0] - 5_000_000) <= 200_000)
        // Even, but for the first burst, which went to whoever asked first
        #expect(abs(released["a", default: 0] - released["b", default: 0]) <= 1_000_000 + 2 * 16_384)
    }

    @Test func theSegmentsOfOneDownloadShareItsShare() {
        // a has 4 segments (4 parts in flight), b one: under an overall limit each gets half
        var schedule = RateSchedule()
        schedule.setOverall(2_000_000, at: at(0))
        var waitingOf: [UInt64: String] = [:]
        var released: [String: Int] = [:]
        var nextID: UInt64 = 0
        func ask(_ download: String, at now: Int) {
            nextID += 1
            if schedule.request(part(nextID, download), at: at(now)) {
                released[download, default: 0] += 16_384
                ask(download, at: now)
            } else {
                waitingOf[nextID] = download
            }
        }
        for download in ["a", "a", "a", "a", "b"] { ask(download, at: 0) }
        var now = 0
        while now < 10_000 {
            let (ids, next) = schedule.release(at: at(now))
            for id in ids {
                let download = waitingOf.removeValue(forKey: id)!
                released[download, default: 0] += 16_384
                ask(download, at: now)
            }
            now += max(1, Int((next ?? .milliseconds(1)).components.attoseconds / 1_000_000_000_000_000))
        }
        // Even, but for the first burst (500 kB), which went to a, first to ask
        let a = released["a", default: 0]
        let b = released["b", default: 0]
        #expect(abs(a - b) <= 500_000 + 4 * 16_384)
        #expect(abs(a + b - 20_500_000) <= 5 * 16_384)
    }

    @Test func aChangeAppliesToWhatWaits() {
        var schedule = RateSchedule()
        schedule.setLimit(10_000, for: DownloadID("a"), at: at(0))
        let first = schedule.request(part(1, "a", bytes: 131_072), at: at(0))  // twice the burst's floor
        let second = schedule.request(part(2, "a", bytes: 65_536), at: at(0))
        #expect(first && !second)
        // At 10 kB/s the debt of 64 KiB takes 6.5 s to repay, less the 0.1 s gone
        let slow = schedule.release(at: at(100))
        #expect(slow.next! > .seconds(6))
        // Raised to 10 MB/s, what remains of it is repaid in under 7 ms
        schedule.setLimit(10_000_000, for: DownloadID("a"), at: at(100))
        let (ids, next) = schedule.release(at: at(100))
        #expect(ids.isEmpty)
        #expect(next! < .milliseconds(7))
        let raised = schedule.release(at: at(107))
        #expect(raised.released == [2])
        // Lifted, nothing waits at all
        let third = schedule.request(part(3, "a", bytes: 65_536), at: at(107))
        #expect(!third)
        schedule.setLimit(nil, for: DownloadID("a"), at: at(107))
        let lifted = schedule.release(at: at(107))
        #expect(lifted.released == [3])
        #expect(!schedule.applies(to: DownloadID("a"), host: "h:80"))
    }

    @Test func perHostLimitsAreEachHostsOwn() {
        var schedule = RateSchedule()
        schedule.setPerHost(100_000, at: at(0))
        let first = schedule.request(part(1, "a", bytes: 131_072, host: "one:80"), at: at(0))
        let second = schedule.request(part(2, "b", bytes: 1_000, host: "one:80"), at: at(0))
        #expect(first && !second)
        // Another host has a full bucket of its own (but waits its turn behind what waits)
        let other = schedule.request(part(3, "c", bytes: 1_000, host: "two:80"), at: at(0))
        #expect(!other)
        let released = schedule.release(at: at(0))
        #expect(released.released == [3])
    }

    @Test func aDownloadThatEndsTakesItsWaitingPartsWithIt() {
        var schedule = RateSchedule()
        schedule.setOverall(100_000, at: at(0))
        let goes = schedule.request(part(1, "a", bytes: 131_072), at: at(0))
        let waits = schedule.request(part(2, "a"), at: at(0))
        let alsoWaits = schedule.request(part(3, "b"), at: at(0))
        #expect(goes && !waits && !alsoWaits)
        let dropped = schedule.forget(DownloadID("a"))
        #expect(dropped == [2])
        #expect(schedule.waiting.map(\.id) == [3])
    }

    @Test func aLowLimitIsFetchedInRequestsOfASixteenthOfASecond() {
        // 1/16 of a second's bytes, so that no read of the socket is more than that
        #expect(RateSchedule.pacedRequestSize(forLimit: 100 << 10) == 6_400)
        #expect(RateSchedule.pacedRequestSize(forLimit: 1 << 20) == 65_536)
        // at least 6 KiB, however low the limit
        #expect(RateSchedule.pacedRequestSize(forLimit: 10_000) == 6_144)
        #expect(RateSchedule.pacedRequestSize(forLimit: 1) == 6_144)
        // from 4 MiB/s up, one read (256 KiB) is a sixteenth of a second or less: no pacing
        #expect(RateSchedule.pacedRequestSize(forLimit: (4 << 20) - 16) == 262_143)
        #expect(RateSchedule.pacedRequestSize(forLimit: 4 << 20) == nil)
        #expect(RateSchedule.pacedRequestSize(forLimit: 100 << 20) == nil)
        // a paced download is one larger than a read, and than four requests
        #expect(RateSchedule.pacedDownloadThreshold(requestSize: 6_400) == 262_144)
        #expect(RateSchedule.pacedDownloadThreshold(requestSize: 200_000) == 800_000)
    }

    @Test func aResponseHeadIsChargedAtItsSizeOnTheWire() {
        let head = HTTPResponseHead(
            version: .http1_1, status: .partialContent,
            headers: ["Content-Length": "6400", "Content-Range": "bytes 0-6399/1048576"])
        let wire = "HTTP/1.1 206 Partial Content\r\nContent-Length: 6400\r\nContent-Range: bytes 0-6399/1048576\r\n\r\n"
        #expect(JobCore.encodedSize(of: head) == wire.utf8.count)
    }

    @Test func aDownloadExpectsItsShareOfTheLimitsItIsUnder() {
        var schedule = RateSchedule()
        #expect(schedule.expectedRate(of: DownloadID("a"), host: "h:80") == nil)
        schedule.setOverall(4 << 20, at: at(0))
        // alone, before it runs: the whole limit
        #expect(schedule.expectedRate(of: DownloadID("a"), host: "h:80") == 4 << 20)
        // 8 running: an eighth
        for index in 0..<8 { schedule.began(DownloadID("d\(index)"), host: index < 2 ? "h:80" : "g:80") }
        #expect(schedule.expectedRate(of: DownloadID("d0"), host: "h:80") == 512 << 10)
        // one about to start counts itself
        #expect(schedule.expectedRate(of: DownloadID("new"), host: "h:80") == (4 << 20) / 9)
        // a host's limit is shared by the downloads from that host only
        schedule.setPerHost(256 << 10, at: at(0))
        #expect(schedule.expectedRate(of: DownloadID("d0"), host: "h:80") == 128 << 10)
        #expect(schedule.expectedRate(of: DownloadID("d5"), host: "g:80") == 256 << 10 / 6)
        // its own limit, when lower
        schedule.setLimit(10_000, for: DownloadID("d5"), at: at(0))
        #expect(schedule.expectedRate(of: DownloadID("d5"), host: "g:80") == 10_000)
        // stopped transfers no longer share
        for index in 1..<8 { schedule.ended(DownloadID("d\(index)")) }
        schedule.setPerHost(nil, at: at(0))
        #expect(schedule.expectedRate(of: DownloadID("d0"), host: "h:80") == 4 << 20)
    }
}
