import CoreMetrics
import Foundation
package import Haul
import NIOConcurrencyHelpers
package import Prometheus

/// The metrics of a service or a worker, in Prometheus' text format (`GET /metrics`).
///
/// Recorded through swift-metrics with a factory of swift-prometheus over a registry of
/// this object's own (no global `MetricsSystem`, so that several services can run in one
/// process). Two kinds:
///
/// - **counted as downloads end** (``count(_:)`` hears the manager's events):
///   `haul_downloads_completed_total`, `haul_downloads_failed_total{code}`,
///   `haul_retries_total{cause}`;
/// - **read when scraped** (``render(_:)`` is given a ``Snapshot``): downloads by state,
///   queue depth, current speed, bytes received, event-stream clients, and a worker's
///   leases; and the journal's write latency, a histogram fed as writes happen.
///
/// Labels hold error codes and states only: never a URL or a file name.
package final class ServiceMetrics: Sendable {
    /// The registry the metrics live in.
    package let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory

    private let completed: CoreMetrics.Counter
    private let received: CoreMetrics.Counter
    private let downloads: [(state: String, gauge: CoreMetrics.Gauge)]
    private let queueDepth: CoreMetrics.Gauge
    private let speed: CoreMetrics.Gauge
    /// Clients following the event stream (`nil` for a worker's: it has none).
    private let streamClients: CoreMetrics.Gauge?
    /// The journal's write latency (`nil` for a worker's: it writes to PostgreSQL).
    private let journalWrites: CoreMetrics.Timer?
    /// A worker's leases (`nil` for a service's).
    private let leases: (held: CoreMetrics.Gauge, lost: CoreMetrics.Counter, rescued: CoreMetrics.Counter)?
    /// Counters by label value, made on first use.
    private let labelled = NIOLockedValueBox<[String: CoreMetrics.Counter]>([:])
    /// How many times the metrics were rendered (scraped).
    private let scrapes = NIOLockedValueBox(0)
    /// The totals the counters read when scraped were last brought to.
    private let reported = NIOLockedValueBox((received: Int64(0), lost: 0, rescued: 0))

    /// The states downloads are counted by (`haul_downloads{state}`).
    static let states = ["queued", "running", "paused", "waiting"]

    /// - Parameter worker: Whether this is a worker's (its lease metrics are added).
    package init(worker: Bool = false) {
        var factory = PrometheusMetricsFactory(registry: registry)
        // Journal writes take microseconds to milliseconds; the default buckets start at 5 ms.
        factory.durationHistogramBuckets["haul_journal_write_duration_seconds"] = [
            .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
            .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
            .milliseconds(500), .seconds(1),
        ]
        self.factory = factory
        completed = Counter(label: "haul_downloads_completed_total", factory: factory)
        received = Counter(label: "haul_received_bytes_total", factory: factory)
        downloads = Self.states.map { ($0, Gauge(label: "haul_downloads", dimensions: [("state", $0)], factory: factory)) }
        queueDepth = Gauge(label: "haul_queue_depth", factory: factory)
        speed = Gauge(label: "haul_download_speed_bytes_per_second", factory: factory)
        journalWrites = worker ? nil : Timer(label: "haul_journal_write_duration_seconds", factory: factory)
        leases =
            worker
            ? (
                Gauge(label: "haul_worker_leases", factory: factory),
                Counter(label: "haul_worker_leases_lost_total", factory: factory),
                Counter(label: "haul_worker_leases_rescued_total", factory: factory)
            ) : nil
        streamClients = worker ? nil : Gauge(label: "haul_event_stream_clients", factory: factory)
        // Present from the first scrape, at 0.
        streamClients?.record(0)
        leases?.held.record(0)
    }

    /// A counter with one label, made on first use (`code`, `cause`: error codes only).
    private func counter(_ name: String, _ label: String, _ value: String) -> CoreMetrics.Counter {
        let key = "\(name)\u{0}\(value)"
        let factory = self.factory
        return labelled.withLockedValue { counters in
            if let counter = counters[key] { return counter }
            let counter = Counter(label: name, dimensions: [(label, value)], factory: factory)
            counters[key] = counter
            return counter
        }
    }

    /// Counts a completion, a failure by its code or a retry by its cause.
    package func count(_ event: DownloadManager.Event) {
        switch event.event {
        case .completed:
            completed.increment()
        case .failed(let error):
            counter("haul_downloads_failed_total", "code", error.code.description).increment()
        case .retrying(_, let reason, _):
            counter("haul_retries_total", "cause", reason.code.description).increment()
        default:
            break
        }
    }

    /// Records that a journal write took `duration`.
    package func journalWrote(in duration: Duration) {
        let (seconds, attoseconds) = duration.components
        journalWrites?.recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }

    /// What is read when the metrics are scraped.
    package struct Snapshot: Sendable {
        /// The manager's progress: downloads by state, speed.
        package var progress = AggregateProgress()
        /// The bytes the manager's downloads have received so far.
        package var receivedBytes: Int64 = 0
        /// Clients following the event stream (a service).
        package var streamClients: Int?
        /// A worker's leases: held now, lost and rescued so far.
        package var leases: (held: Int, lost: Int, rescued: Int)?

        package init() {}
    }

    /// How many times ``render(_:)`` has run.
    package var scrapeCount: Int { scrapes.withLockedValue { $0 } }

    /// The metrics in Prometheus' text format, with `snapshot`'s values.
    package func render(_ snapshot: Snapshot) -> [UInt8] {
        scrapes.withLockedValue { $0 += 1 }
        let progress = snapshot.progress
        let counts = [progress.queued, progress.running, progress.paused, progress.waiting]
        for (index, (_, gauge)) in downloads.enumerated() { gauge.record(counts[index]) }
        queueDepth.record(progress.queued)
        speed.record(progress.bytesPerSecond)
        if let clients = snapshot.streamClients { streamClients?.record(clients) }
        if let held = snapshot.leases?.held { leases?.held.record(held) }
        // Totals that only grow, brought up to date (a total read lower than the last is
        // a moment between two runs of a worker, and skipped).
        let (bytes, lost, rescued) = reported.withLockedValue { last in
            let deltas = (
                max(0, snapshot.receivedBytes - last.received), max(0, (snapshot.leases?.lost ?? 0) - last.lost),
                max(0, (snapshot.leases?.rescued ?? 0) - last.rescued)
            )
            last = (
                max(last.received, snapshot.receivedBytes), max(last.lost, snapshot.leases?.lost ?? 0),
                max(last.rescued, snapshot.leases?.rescued ?? 0)
            )
            return deltas
        }
        // At 0 from the first scrape too: increment(by: 0) makes the series.
        received.increment(by: bytes)
        leases?.lost.increment(by: lost)
        leases?.rescued.increment(by: rescued)
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return buffer
    }
}
