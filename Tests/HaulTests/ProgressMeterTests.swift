import Testing

@testable import Haul

/// The progress meter's rules on their own: the first chunk reports at once (unless it
/// completes the content), later ones at most every ``ProgressMeter/eventInterval``, and
/// bytes that came too soon are reported by a trailing event rather than left out until
/// more bytes come.
@Suite("Progress meter")
struct ProgressMeterTests {
    @Test func bytesThatComeTooSoonGetOneTrailingEvent() throws {
        let meter = ProgressMeter()
        meter.reset(completed: 0, total: 100)
        let start = ContinuousClock.now
        #expect(meter.add(10, at: start) == .now(DownloadProgress(completedBytes: 10, totalBytes: 100, bytesPerSecond: 0)))

        // Too soon: one trailing event is asked for, within the interval, and only once.
        guard case .later(let delay) = meter.add(20, at: start + .milliseconds(10)) else {
            Issue.record("no trailing event was asked for")
            return
        }
        #expect(delay > .zero && delay <= ProgressMeter.eventInterval)
        #expect(meter.add(5, at: start + .milliseconds(20)) == ProgressMeter.Report.none)

        // The trailing event reports every byte, once.
        let trailing = try #require(meter.flush(at: start + .milliseconds(100)))
        #expect(trailing.completedBytes == 35)
        #expect(trailing.bytesPerSecond > 0)
        #expect(meter.flush(at: start + .milliseconds(150)) == nil)

        // After the interval a chunk reports at once again.
        guard case .now(let progress) = meter.add(1, at: start + .milliseconds(300)) else {
            Issue.record("a chunk after the interval did not report")
            return
        }
        #expect(progress.completedBytes == 36)
    }

    /// A first chunk reports at once unless it completes the content: then the download's
    /// end, which follows, reports it (a small file gets one progress event, not two that
    /// say the same).
    @Test(arguments: [
        (total: Int64?.some(100), first: 10, reports: true),
        (total: Int64?.some(100), first: 100, reports: false),
        (total: Int64?.none, first: 100, reports: true),
        (total: Int64?.some(0), first: 0, reports: false),
    ])
    func aFirstChunkThatCompletesTheContentWaitsForTheEnd(total: Int64?, first: Int, reports: Bool) {
        let meter = ProgressMeter()
        meter.reset(completed: 0, total: total)
        let report = meter.add(first, at: .now)
        if reports {
            #expect(report == .now(DownloadProgress(completedBytes: Int64(first), totalBytes: total, bytesPerSecond: 0)))
        } else {
            #expect(report == ProgressMeter.Report.none)
            #expect(meter.snapshot().completedBytes == Int64(first))
        }
    }

    @Test func anEndedDownloadGetsNoTrailingEvent() {
        let meter = ProgressMeter()
        let start = ContinuousClock.now
        _ = meter.add(10, at: start)
        #expect(meter.add(10, at: start + .milliseconds(1)) != ProgressMeter.Report.none)
        meter.stop()
        #expect(meter.flush(at: start + .milliseconds(100)) == nil)
        #expect(meter.add(10, at: start + .milliseconds(2)) == ProgressMeter.Report.none)
    }

    @Test func aNewAttemptForgetsTheTrailingEvent() {
        let meter = ProgressMeter()
        let start = ContinuousClock.now
        _ = meter.add(10, at: start)
        _ = meter.add(10, at: start + .milliseconds(1))
        meter.reset(completed: 0, total: nil)
        // The old attempt's timer finds nothing to report.
        #expect(meter.flush(at: start + .milliseconds(100)) == nil)
    }
}
