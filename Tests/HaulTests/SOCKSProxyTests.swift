import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// Downloads through a real SOCKS5 server, Dante, started by each test on a free port: its
/// own log shows what each request gave it (a host name for `socks5h://`, an address for
/// `socks5://`).
@Suite(
    "SOCKS5 proxies (Dante)",
    .enabled(if: DanteProxy.isAvailable, "danted is not installed: run .ci/run or apt-get install dante-server"),
    .timeLimit(.minutes(4)))
struct SOCKSProxyTests {
    @Test func socks5hGivesTheProxyTheHostName() async throws {
        try await DanteProxy.with { proxy in
            let server = try DownloadManager.ProxyServer(url: proxy.url(scheme: "socks5h"))
            try await Fixture.with({ $0.proxy = .all(server) }) { f in
                // Given a file on the origin, named by a host name
                let bytes = f.serve("h.bin", count: 150_000)
                let url = URL(string: "http://localhost:\(f.server.port)/files/h.bin")!

                // When it is downloaded through a socks5h:// proxy
                let result = try await f.manager.download(DownloadRequest(url: url, destination: .directory(f.directory)))
                    .result

                // Then the bytes are right, and the proxy was given the name to resolve
                #expect(sha256(f.contents("h.bin")) == sha256(bytes))
                #expect(result.byteCount == 150_000)
                #expect(
                    proxy.requests() == [.init(addressType: 3, address: "localhost.\(f.server.port)")], "\(proxy.log())")
                #expect(f.server.requests(path: "/files/h.bin").first?.header("Host") == "localhost:\(f.server.port)")
            }
        }
    }

    @Test func socks5GivesTheProxyAnAddressResolvedHere() async throws {
        try await DanteProxy.with { proxy in
            let server = try DownloadManager.ProxyServer(url: proxy.url(scheme: "socks5"))
            // (IPv4: the origin listens on 127.0.0.1 only, and localhost may name ::1 first)
            try await Fixture.with({
                $0.proxy = .all(server)
                $0.addressFamily = .ipv4
            }) { f in
                let bytes = f.serve("a.bin", count: 40_000)
                let url = URL(string: "http://localhost:\(f.server.port)/files/a.bin")!

                let result = try await f.manager.download(DownloadRequest(url: url, destination: .memory(limit: 1 << 20)))
                    .result

                // The proxy got 127.0.0.1, not the name (on every connection: a loaded machine
                // may see a retry); the origin still saw the name
                #expect(sha256(result.data) == sha256(bytes))
                #expect(
                    Set(proxy.requests()) == [.init(addressType: 1, address: "127.0.0.1.\(f.server.port)")],
                    "\(proxy.log())")
                #expect(f.server.requests(path: "/files/a.bin").first?.header("Host") == "localhost:\(f.server.port)")
            }
        }
    }

    @Test(
        .enabled(if: NginxServer.isAvailable, "nginx is not installed: run .ci/run or apt-get install nginx"),
        .enabled(if: TestCertificates.openssl != nil, "openssl is not installed: apt-get install openssl"))
    func httpsGoesThroughTheProxyWithTLSEndToEnd() async throws {
        try await TestCertificates.with { certificates in
            try await NginxServer.with(tls: certificates.serverTLS(http2: false)) { nginx in
                try await DanteProxy.with { proxy in
                    let bytes = FaultServer.randomBytes(count: 300_000, seed: 41)
                    try nginx.write(bytes, at: "/t.bin", modified: Date())
                    var configuration = Fixture.testConfiguration()
                    configuration.tls.additionalTrustRoots = [certificates.authority]
                    configuration.proxy = .all(try DownloadManager.ProxyServer(url: proxy.url()))
                    let manager = DownloadManager(
                        configuration: configuration, eventLoopGroup: TestResources.group, threadPool: TestResources.pool)

                    let result = try await manager.download(
                        DownloadRequest(url: nginx.url("/t.bin"), destination: .memory(limit: 1 << 20))
                    ).result
                    await manager.shutdown()

                    // The certificate was checked against the origin's name through the tunnel
                    #expect(sha256(result.data) == sha256(bytes))
                    #expect(proxy.requests().count == 1, "\(proxy.log())")
                }
            }
        }
    }

    @Test func aConnectionTheProxysRulesRefuseFailsWithoutRetries() async throws {
        try await Fixture.with { f in
            try await DanteProxy.with(blocking: f.server.port) { proxy in
                // Given a proxy whose rules refuse the origin's port, and 3 retries allowed
                f.serve("r.bin", count: 1_000)
                var configuration = Fixture.testConfiguration()
                configuration.proxy = .all(try DownloadManager.ProxyServer(url: proxy.url()))
                let manager = DownloadManager(
                    configuration: configuration, eventLoopGroup: TestResources.group, threadPool: TestResources.pool)

                // When a download is tried
                let handle = try await manager.download(
                    DownloadRequest(url: f.server.url("/files/r.bin"), destination: .memory(limit: 10_000)))
                let error = await #expect(throws: DownloadError.self) { try await handle.result }
                await manager.shutdown()

                // Then it fails at once with the proxy's refusal, asked once, and nothing
                // reached the origin
                #expect(error?.code == .proxy)
                #expect(error?.message.contains("rules do not allow") == true, "\(error?.message ?? "")")
                #expect(proxy.requests().count == 1, "\(proxy.log())")
                #expect(f.server.requests(path: "/files/r.bin").isEmpty)
            }
        }
    }

    @Test func aHostTheProxyCannotReachIsANetworkFailure() async throws {
        try await DanteProxy.with { proxy in
            // Given a port nothing listens on, behind the proxy
            let closed = try NginxServer.freePort()
            var configuration = Fixture.testConfiguration()
            configuration.retry = RetryPolicy(maxRetries: 1, baseDelay: .milliseconds(1), maxDelay: .milliseconds(1))
            configuration.proxy = .all(try DownloadManager.ProxyServer(url: proxy.url()))
            let manager = DownloadManager(
                configuration: configuration, eventLoopGroup: TestResources.group, threadPool: TestResources.pool)

            let handle = try await manager.download(
                DownloadRequest(
                    url: URL(string: "http://127.0.0.1:\(closed)/x.bin")!, destination: .memory(limit: 10_000)))
            let error = await #expect(throws: DownloadError.self) { try await handle.result }
            await manager.shutdown()

            // Then the proxy's "connection refused" reads as the origin's, and is retried
            #expect(error?.code == .network)
            #expect(error?.message.contains("refused the SOCKS proxy's connection") == true, "\(error?.message ?? "")")
            #expect(proxy.requests().count == 2, "\(proxy.log())")
        }
    }

    @Test func commandLineTakesASOCKSProxyFromTheEnvironment() async throws {
        try await DanteProxy.with { proxy in
            try await Fixture.with { f in
                let bytes = f.serve("c.bin", count: 20_000)
                let out = f.directory.appendingPathComponent("out")
                var environment = Haul.environment
                environment["ALL_PROXY"] = proxy.url()

                let run = try await Haul.run(
                    [
                        "get", "http://localhost:\(f.server.port)/files/c.bin", "-d", out.path, "--journal",
                        f.directory.appendingPathComponent("journal.sqlite").path,
                    ], environment: environment)

                #expect(run.status == 0, "\(run.stderr)")
                #expect(
                    sha256(FileManager.default.contents(atPath: out.appendingPathComponent("c.bin").path))
                        == sha256(bytes))
                #expect(proxy.requests() == [.init(addressType: 3, address: "localhost.\(f.server.port)")])
            }
        }
    }
}
