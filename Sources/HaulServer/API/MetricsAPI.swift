package import Hummingbird
import NIOCore

/// `GET /metrics`: the service's metrics in Prometheus' text format (``ServiceMetrics``),
/// behind the API's token: Prometheus sends it with its `authorization` setting.
@available(macOS 14, iOS 17, tvOS 17, *)
package struct MetricsAPI: Sendable {
    /// The path, which the access rules treat as the API's.
    package static let path = "/metrics"

    let core: ServiceCore

    package init(core: ServiceCore) {
        self.core = core
    }

    package func addRoutes<Context: RequestContext>(to router: Router<Context>) {
        router.get("metrics") { _, context in
            let text = await self.core.renderMetrics()
            context.logger.debug("metrics scraped", metadata: ["scrape": "\(self.core.metrics.scrapeCount)"])
            return Self.response(text)
        }
    }

    /// A response carrying `text` in Prometheus' text exposition format, version 0.0.4.
    package static func response(_ text: [UInt8]) -> Response {
        Response(
            status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: text)))
    }
}
