import AsyncHTTPClient
import Foundation
import HaulTestSupport
@testable import Haul
import NIOCore
import NIOPosix
import Testing

/// A request with a body (an upload to object storage) over `https` with HTTP/2 allowed,
/// against nginx storing what it is sent (`dav_methods PUT`): the body arrives whole, over
/// HTTP/2 and over HTTP/1.1 alike. The HTTP/2 path sends requests without a body only, so
/// such a request must go the HTTP/1.1 way; sent on it, its body would be lost.
@Suite(
    "Requests with a body over https",
    .enabled(if: NginxServer.isAvailable, "nginx is not installed: run .ci/run or apt-get install nginx"),
    .enabled(if: TestCertificates.openssl != nil, "openssl is not installed: apt-get install openssl"),
    .timeLimit(.minutes(4)))
struct HTTPClientsBodyTests {
    @Test(arguments: [false, true])
    func aPutArrivesWhole(serverOffersHTTP2: Bool) async throws {
        try await TestCertificates.with { certificates in
            try await NginxServer.with(
                tls: certificates.serverTLS(http2: serverOffersHTTP2),
                directives: "location /put/ { dav_methods PUT; create_full_put_path on; }"
            ) { nginx in
                // Given clients that offer HTTP/2, trusting the test authority
                var options = DownloadManager.TLSOptions()
                options.additionalTrustRoots = [certificates.authority]
                var base = HTTPClient.Configuration()
                base.tlsConfiguration = try DownloadManager.tlsConfiguration(options)
                let clients = HTTPClients(
                    base: base, proxies: .direct, family: .any, eventLoopGroup: TestResources.group,
                    threadPool: TestResources.pool, http2: true)
                let bytes = FaultServer.randomBytes(count: 300_000, seed: 91)

                // When 300 kB are PUT
                let request = try HTTPClient.Request(
                    url: nginx.url("/put/object.bin").absoluteString, method: .PUT,
                    body: .byteBuffer(ByteBuffer(bytes: bytes)))
                let receiver = CollectingReceiver { _ in 1 << 16 }
                let error = await clients.execute(request, receiver: receiver, logger: .init(label: "test"))
                await clients.shutdown()

                // Then nginx created the file, holding every byte
                #expect(error == nil, "\(String(describing: error))")
                let head = try receiver.collected().head
                #expect(head?.status.code == 201)
                let stored = FileManager.default.contents(atPath: nginx.root.appendingPathComponent("put/object.bin").path)
                #expect(stored.map { [UInt8]($0) } == bytes)
            }
        }
    }
}
