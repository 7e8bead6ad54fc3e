import AsyncHTTPClient
import Foundation
@testable import Haul
import HaulTestSupport
import Testing

@testable import HaulServer

/// `GET /metrics`: the service's metrics in Prometheus' text format, behind its token, as
/// a real Prometheus scrapes them.
@Suite("Metrics")
struct MetricsTests {
    @Test func theTextFormatHasEveryMetricWithPrometheusNamesAndNoURL() async throws {
        let metrics = ServiceMetrics()
        let url = URL(string: "https://example.com/secret-name.iso?sig=abc")!
        let failure = DownloadManager.Event(
            id: DownloadID(url.absoluteString), url: url,
            event: .failed(DownloadError(.httpStatus, "HTTP 404 from \(url.absoluteString)", statusCode: 404)))
        metrics.count(failure)
        metrics.count(
            DownloadManager.Event(
                id: DownloadID(url.absoluteString), url: url,
                event: .retrying(attempt: 1, reason: DownloadError(.timeout, "no data"), delay: .seconds(1))))
        metrics.journalWrote(in: .microseconds(700))
        var snapshot = ServiceMetrics.Snapshot()
        snapshot.progress.queued = 3
        snapshot.progress.running = 2
        snapshot.progress.bytesPerSecond = 1_500
        snapshot.receivedBytes = 4_096
        snapshot.streamClients = 1
        let text = String(decoding: metrics.render(snapshot), as: UTF8.self)
        for line in [
            "haul_downloads_completed_total 0", "haul_downloads_failed_total{code=\"httpStatus\"} 1",
            "haul_retries_total{cause=\"timeout\"} 1", "haul_downloads{state=\"queued\"} 3.0",
            "haul_downloads{state=\"running\"} 2.0", "haul_queue_depth 3.0", "haul_download_speed_bytes_per_second 1500.0",
            "haul_received_bytes_total 4096", "haul_event_stream_clients 1.0",
            "haul_journal_write_duration_seconds_bucket{le=\"0.001\"} 1", "haul_journal_write_duration_seconds_count 1",
        ] {
            #expect(text.contains(line + "\n"), "no '\(line)' in:\n\(text)")
        }
        #expect(!text.contains("example.com") && !text.contains("secret-name"))
        #expect(!text.contains("haul_worker_leases"), "a service has no leases")
        // A total read lower than the last (between two runs of a worker) never lowers a counter.
        snapshot.receivedBytes = 100
        #expect(String(decoding: metrics.render(snapshot), as: UTF8.self).contains("haul_received_bytes_total 4096\n"))
        snapshot.receivedBytes = 5_000
        #expect(String(decoding: metrics.render(snapshot), as: UTF8.self).contains("haul_received_bytes_total 5000\n"))
    }
}

extension HeavyProcessTests {
    @Suite(
        "A real Prometheus scrapes the service",
        .enabled(if: PrometheusServer.isAvailable, "prometheus is not installed: run .ci/run or apt-get install prometheus"),
        .timeLimit(.minutes(4)))
    struct PrometheusScrapeTests {
        @Test func prometheusReadsTheServicesCountsWithItsToken() async throws {
            try await CLIFixture.with { f, journal in
                let directory = f.directory.path
                f.serve("p", count: 40_000)
                // (at debug level the service logs each scrape, numbered: the event the test waits for)
                let service = try await ServiceProcessTests.Service.start(
                    journal: journal, directory: directory, arguments: ["--log-level", "debug"])
                let url = f.server.url("/files/p").absoluteString
                let get = try await Haul.run(["get", "--journal", journal, "-d", directory, url])
                #expect(get.status == 0, "\(get.stderr)")
                let missing = try await Haul.run(
                    ["get", "--journal", journal, "-d", directory, f.server.url("/files/none").absoluteString])
                #expect(missing.status == 1)

                // Without the token: refused.
                let anonymous = try await HTTPClient.shared.execute(
                    HTTPClientRequest(url: "http://\(service.address)/metrics"), timeout: .seconds(10))
                #expect(anonymous.status == .unauthorized)

                let token = try String(contentsOfFile: journal + "-serve.token", encoding: .utf8)
                    .trimmingCharacters(in: .whitespacesAndNewlines)
                let prometheus = try await PrometheusServer.start(scraping: service.address, token: token)
                // Two scrapes: the first one's samples are stored by the time of the second.
                let second = await service.process.errorLine { $0.contains("metrics scraped") && $0.contains("scrape: 2") }
                #expect(second != nil, "Prometheus did not scrape the service twice: \(service.process.errorText)")
                #expect(try await prometheus.query("up{job=\"haul\"}") == 1, "Prometheus could not scrape the service")
                #expect(try await prometheus.query("haul_downloads_completed_total") == 1)
                #expect(try await prometheus.query("haul_downloads_failed_total{code=\"httpStatus\"}") == 1)
                #expect(try await prometheus.query("haul_received_bytes_total") == 40_000)
                await prometheus.stop()
                #expect(await service.stop() == 0)
            }
        }
    }
}
