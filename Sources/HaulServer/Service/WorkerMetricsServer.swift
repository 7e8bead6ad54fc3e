import Foundation
package import HaulPostgres
import HTTPTypes
package import Hummingbird
package import Logging
import NIOCore
import NIOPosix
package import ServiceLifecycle

/// `haul worker --metrics-listen ADDR`: `GET /metrics` with the worker's metrics
/// (``ServiceMetrics``), on loopback unless a token is set (`$HAUL_TOKEN`); with a token,
/// a scrape must send it (`Authorization: Bearer TOKEN`, Prometheus' `authorization`).
@available(macOS 14, iOS 17, tvOS 17, *)
package enum WorkerMetricsServer {
    /// Why the endpoint cannot start.
    package struct Refusal: Error, CustomStringConvertible, Sendable {
        package var description: String
    }

    /// The HTTP server, as a service to run beside the worker. `ready` hears the address
    /// it listens on.
    package static func make(
        worker: QueueWorker, metrics: ServiceMetrics, host: String, port: Int, token: String?,
        eventLoopGroup: any EventLoopGroup, logger: Logger, ready: @escaping @Sendable (String) -> Void
    ) throws(Refusal) -> some Service {
        guard AccessRules.mayListen(on: host, operatorToken: token != nil) else {
            throw Refusal(
                description:
                    "--metrics-listen: refusing to listen on \(host), which is not a loopback address, without a token: set $\(ServiceFiles.tokenVariable)"
            )
        }
        let router = Router(context: BasicRequestContext.self)
        router.get("metrics") { request, _ -> Response in
            if let token {
                let presented = request.headers[.authorization] ?? ""
                guard AccessRules.constantTimeEquals(presented, "Bearer \(token)") else {
                    return Response(
                        status: .unauthorized, headers: [.wwwAuthenticate: "Bearer"],
                        body: ResponseBody(byteBuffer: ByteBuffer(string: "a token is needed\n")))
                }
            }
            let statistics = await worker.statistics()
            var snapshot = ServiceMetrics.Snapshot()
            snapshot.progress = statistics.progress
            snapshot.receivedBytes = statistics.receivedBytes
            snapshot.leases = (statistics.leasesHeld, statistics.leasesLost, statistics.leasesRescued)
            return MetricsAPI.response(metrics.render(snapshot))
        }
        return Application(
            router: router,
            configuration: ApplicationConfiguration(address: .hostname(host, port: port), serverName: nil),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? port
                ready("\(host.contains(":") ? "[\(host)]" : host):\(port)")
            },
            eventLoopGroupProvider: .shared(eventLoopGroup),
            logger: logger)
    }
}
