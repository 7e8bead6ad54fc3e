package import Haul
package import Logging

/// Logs the end of every download a manager runs, for the operator of a service or worker
/// (a library logs nothing at `info` on its own; the service and the worker do): a
/// completion at `info` with its size, a failure at `notice` with its error code, a
/// cancellation at `info`, each with the download's `id`.
package enum DownloadLog {
    /// Logs `events` until they end, and counts them in `metrics`, if any.
    package static func record(
        _ events: AsyncStream<DownloadManager.Event>, to logger: Logger, metrics: ServiceMetrics? = nil
    ) async {
        for await event in events {
            // Counted before it is logged: a line in the log says the metrics have it.
            metrics?.count(event)
            log(event, to: logger)
        }
    }

    /// Logs `event`, if it is one that is logged.
    package static func log(_ event: DownloadManager.Event, to logger: Logger) {
        let id = Logger.MetadataValue.string(event.id.rawValue)
        switch event.event {
        case .started:
            logger.debug("download started", metadata: ["id": id])
        case .completed(let result):
            var metadata: Logger.Metadata = ["id": id, "bytes": "\(result.byteCount)"]
            if let path = result.savedAt { metadata["path"] = .string(path) }
            logger.info("download completed", metadata: metadata)
        case .failed(let error):
            logger.notice("download failed", metadata: ["id": id, "code": "\(error.code)", "error": .string(error.message)])
        case .cancelled(let reason):
            logger.info("download stopped", metadata: ["id": id, "reason": .string(reason.rawValue)])
        case .retrying(let attempt, let reason, _):
            logger.debug("download retrying", metadata: ["id": id, "attempt": "\(attempt)", "error": .string(reason.message)])
        default:
            break
        }
    }
}
