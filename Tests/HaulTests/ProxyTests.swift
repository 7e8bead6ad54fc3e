import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// Downloads through a real forward proxy, tinyproxy, started by each test on a free port:
/// its own log proves what went through it (`http` URLs as absolute-form requests, `https`
/// ones through `CONNECT`).
@Suite(
    "Proxies (tinyproxy)",
    .enabled(if: TinyProxy.isAvailable, "tinyproxy is not installed: run .ci/run or apt-get install tinyproxy"),
    .timeLimit(.minutes(4)))
struct ProxyTests {
    /// A file's path whose responses trickle at 256 KiB/s until the gate `split` opens:
    /// splitting pays at once (see `SplitRule`).
    static let trickling = "/files/big.bin?gate=split&gate_after=0&gate_rate=\(256 << 10)"

    static let credentials = TinyProxy.Credentials(user: "alice", password: "proxy-s3cret")

    @Test func httpGoesThroughTheProxy() async throws {
        try await TinyProxy.with { proxy in
            let server = try DownloadManager.ProxyServer(url: proxy.url())
            try await Fixture.with({ $0.proxy = .all(server) }) { f in
                // Given a file on the origin, and a manager whose proxy is tinyproxy
                let bytes = f.serve("p.bin", count: 200_000)

                // When it is downloaded
                let result = try await f.manager.download(
                    DownloadRequest(url: f.server.url("/files/p.bin"), destination: .directory(f.directory))
                ).result

                // Then the bytes are right, and the proxy was asked for the URL in absolute form
                #expect(sha256(f.contents("p.bin")) == sha256(bytes))
                #expect(result.byteCount == 200_000)
                #expect(
                    proxy.requests() == ["GET http://127.0.0.1:\(f.server.port)/files/p.bin HTTP/1.1"], "\(proxy.log())")
            }
        }
    }

    @Test(
        .enabled(if: NginxServer.isAvailable, "nginx is not installed: run .ci/run or apt-get install nginx"),
        .enabled(if: TestCertificates.openssl != nil, "openssl is not installed: apt-get install openssl"))
    func httpsGoesThroughTheProxyWithConnect() async throws {
        try await TestCertificates.with { certificates in
            try await NginxServer.with(tls: certificates.serverTLS(http2: false)) { nginx in
                try await TinyProxy.with { proxy in
                    // Given a file behind TLS, and a manager trusting its authority, through the proxy
                    let bytes = FaultServer.randomBytes(count: 300_000, seed: 31)
                    try nginx.write(bytes, at: "/s.bin", modified: Date())
                    var configuration = Fixture.testConfiguration()
                    configuration.tls.additionalTrustRoots = [certificates.authority]
                    configuration.proxy = .all(try DownloadManager.ProxyServer(url: proxy.url()))
                    let manager = DownloadManager(configuration: configuration, eventLoopGroup: TestResources.group, threadPool: TestResources.pool)

                    // When it is downloaded
                    let result = try await manager.download(
                        DownloadRequest(url: nginx.url("/s.bin"), destination: .memory(limit: 1 << 20))
                    ).result
                    await manager.shutdown()

                    // Then the proxy tunnelled to nginx, which served it over TLS
                    #expect(sha256(result.data) == sha256(bytes))
                    #expect(proxy.requests() == ["CONNECT 127.0.0.1:\(nginx.port) HTTP/1.1"], "\(proxy.log())")
                    let entry = try await nginx.logEntry { $0.path == "/s.bin" }
                    #expect(entry.status == 200)
                }
            }
        }
    }

    @Test func noProxyBypassesTheProxy() async throws {
        try await TinyProxy.with { proxy in
            let server = try DownloadManager.ProxyServer(url: proxy.url())
            try await Fixture.with({ $0.proxy = .all(server, except: ["127.0.0.1"]) }) { f in
                let bytes = f.serve("d.bin", count: 10_000)
                _ = try await f.manager.download(
                    DownloadRequest(url: f.server.url("/files/d.bin"), destination: .directory(f.directory))
                ).result
                #expect(sha256(f.contents("d.bin")) == sha256(bytes))
                #expect(f.server.requests(path: "/files/d.bin").count == 1)
                #expect(proxy.requests().isEmpty, "\(proxy.log())")
            }
        }
    }

    @Test func segmentsGoThroughTheProxyToo() async throws {
        try await TinyProxy.with { proxy in
            let server = try DownloadManager.ProxyServer(url: proxy.url())
            try await Fixture.with({
                $0.proxy = .all(server)
                $0.segmentedConnections = 3
                $0.segmentationThreshold = 1 << 20
            }) { f in
                // Given a file large enough to be split across connections, whose responses
                // trickle (so that splitting pays) until the test has seen three
                let bytes = f.serve("big.bin", count: 16 << 20)

                // When it is downloaded
                let handle = try await f.manager.download(
                    DownloadRequest(url: f.server.url(Self.trickling), destination: .directory(f.directory)))
                await f.server.waitForRequests(count: 3, path: "/files/big.bin")
                f.server.release("split")
                _ = try await handle.result

                // Then ranges were asked for, and every request went through the proxy
                #expect(sha256(f.contents("big.bin")) == sha256(bytes))
                let requests = f.server.requests(path: "/files/big.bin")
                #expect(requests.filter { $0.header("Range") != nil }.count >= 2)
                let forwarded = proxy.requests().filter {
                    $0 == "GET http://127.0.0.1:\(f.server.port)\(Self.trickling) HTTP/1.1"
                }
                #expect(forwarded.count == requests.count, "\(proxy.log())")
            }
        }
    }

    @Test func syncFetchesTheManifestAndItsFilesThroughTheProxy() async throws {
        try await TinyProxy.with { proxy in
            let server = try DownloadManager.ProxyServer(url: proxy.url())
            let netrc = try Netrc(parsing: "machine 127.0.0.1 login sync password sync-secret\n")
            try await Fixture.with(journal: true, {
                $0.proxy = .all(server)
                $0.netrc = netrc
            }) { base in
                // Given a published tree, and a manager with a proxy and netrc credentials
                let f = SyncFixture(base: base)
                try f.publish(["a.txt": SyncFixture.content("a"), "b/c.txt": SyncFixture.content("c", size: 50_000)])

                // When the tree is synced
                let summary = try await f.sync()

                // Then the manifest and the files came through the proxy, with the credentials
                #expect(summary.matchesManifest)
                let requests = f.server.requests()
                #expect(requests.contains { $0.path == f.manifestPath })
                #expect(f.fileRequests().count == 2)
                let basic = "Basic " + Data("sync:sync-secret".utf8).base64EncodedString()
                #expect(requests.allSatisfy { $0.header("Authorization") == basic })
                // (Every request the server saw came through the proxy, in absolute form.)
                let forwarded = proxy.requests()
                #expect(forwarded.count == requests.count, "\(proxy.log())")
                #expect(
                    forwarded.allSatisfy { $0.hasPrefix("GET http://127.0.0.1:\(f.server.port)/") }, "\(proxy.log())")
            }
        }
    }

    @Test func credentialsGoToTheProxyOnly() async throws {
        try await TinyProxy.with(credentials: Self.credentials) { proxy in
            // Given a proxy that asks for credentials
            let withCredentials = try DownloadManager.ProxyServer(url: proxy.url(credentials: Self.credentials))
            let without = try DownloadManager.ProxyServer(url: proxy.url())
            try await Fixture.with({ $0.proxy = .all(without) }) { f in
                f.serve("c.bin", count: 1_000)

                // When a download goes through it without them, it fails naming the proxy problem
                let error = await #expect(throws: DownloadError.self) {
                    try await f.manager.download(
                        DownloadRequest(url: f.server.url("/files/c.bin"), destination: .directory(f.directory))
                    ).result
                }
                #expect(error?.code == .proxy)
                #expect(error?.message.contains("407") == true)
                #expect(f.server.requests().isEmpty)

                // And with them it works, and the origin never sees them
                let manager = DownloadManager(
                    configuration: {
                        var configuration = f.configuration
                        configuration.proxy = .all(withCredentials)
                        return configuration
                    }(), eventLoopGroup: TestResources.group, threadPool: TestResources.pool)
                _ = try await manager.download(
                    DownloadRequest(url: f.server.url("/files/c.bin"), destination: .directory(f.directory))
                ).result
                await manager.shutdown()
                let sent = try #require(f.server.requests(path: "/files/c.bin").first)
                #expect(sent.header("Proxy-Authorization") == nil)
                #expect(sent.header("Authorization") == nil)
            }
        }
    }

    @Test func commandLineTakesTheEnvironmentAndRedactsTheProxyPassword() async throws {
        try await TinyProxy.with(credentials: Self.credentials) { proxy in
            try await Fixture.with { f in
                let bytes = f.serve("e.bin", count: 20_000)
                let journal = f.directory.appendingPathComponent("journal.sqlite").path
                let out = f.directory.appendingPathComponent("out")
                let url = f.server.url("/files/e.bin").absoluteString
                var environment = Haul.environment
                environment["http_proxy"] = proxy.url(credentials: Self.credentials)

                // When haul get runs with http_proxy set, with --json for every event
                let run = try await Haul.run(
                    ["get", url, "-d", out.path, "--journal", journal, "--json"], environment: environment)

                // Then it went through the proxy, and the password is nowhere in the output
                #expect(run.status == 0, "\(run.stderr)")
                #expect(sha256(FileManager.default.contents(atPath: out.appendingPathComponent("e.bin").path)) == sha256(bytes))
                #expect(proxy.requests().count == 1, "\(proxy.log())")
                #expect(!(run.stdout + run.stderr).contains(Self.credentials.password))

                // And --no-proxy overrides the environment: nothing more reaches the proxy
                let direct = try await Haul.run(
                    ["get", url, "-o", "again.bin", "-d", out.path, "--journal", journal, "--no-proxy", "127.0.0.1"],
                    environment: environment)
                #expect(direct.status == 0, "\(direct.stderr)")
                #expect(proxy.requests().count == 1, "\(proxy.log())")

                // And a wrong password fails, still without the password (tinyproxy answers
                // a plain GET with 401 rather than 407, so the message cannot name the proxy;
                // squid's 407 is tested in SquidProxyTests)
                let wrong = try await Haul.run(
                    [
                        "get", url, "-o", "wrong.bin", "-d", out.path, "--journal", journal, "--retries", "0",
                        "--proxy", proxy.url(credentials: .init(user: "alice", password: "wrong-s3cret")),
                    ], environment: environment)
                #expect(wrong.status != 0)
                #expect((wrong.stdout + wrong.stderr).contains("401"), "\(wrong.stdout)\(wrong.stderr)")
                #expect(!(wrong.stdout + wrong.stderr).contains("wrong-s3cret"))
            }
        }
    }

    @Test func theServiceTakesTheSameOptions() async throws {
        try await TinyProxy.with { proxy in
            try await CLIFixture.with { f, journal in
                // Given haul serve started with a proxy and a User-Agent
                let bytes = f.serve("s.bin", count: 30_000)
                let service = try HaulProcess([
                    "serve", "--listen", "127.0.0.1:0", "--journal", journal, "-d", f.directory.path,
                    "--proxy", proxy.url(), "--user-agent", "haul-test/1",
                ])
                _ = try #require(await service.line { $0.contains("listening on http://") })

                // When haul get goes through the service
                let url = f.server.url("/files/s.bin").absoluteString
                let get = try await Haul.run(["get", "--journal", journal, "-d", f.directory.path, url])
                // And again with network options of its own
                let refused = try await Haul.run([
                    "get", "--journal", journal, "-d", f.directory.path, url, "--user-agent", "mine",
                ])
                service.send(SIGTERM)
                _ = await service.wait()

                // Then the service downloaded through the proxy with its User-Agent, and the
                // client's own network options were refused rather than ignored
                #expect(get.status == 0, "\(get.stderr)")
                #expect(sha256(f.contents("s.bin")) == sha256(bytes))
                #expect(
                    proxy.requests() == ["GET http://127.0.0.1:\(f.server.port)/files/s.bin HTTP/1.1"], "\(proxy.log())")
                #expect(f.server.requests(path: "/files/s.bin").first?.header("User-Agent") == "haul-test/1")
                #expect(refused.status == 2)
                #expect(refused.stderr.contains("--user-agent would be ignored"), "\(refused.stderr)")
            }
        }
    }

    @Test func commandLineRefusesAMalformedProxy() async throws {
        let run = try await Haul.run(["get", "http://127.0.0.1:1/x", "--proxy", "socks5://u:pw-secret@proxy:1080"])
        #expect(run.status == 2)
        #expect(run.stderr.contains("socks5"))
        #expect(!run.stderr.contains("pw-secret"))
    }
}
