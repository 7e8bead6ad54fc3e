import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// `-4` / `-6`: names are resolved to addresses of the forced family only, and a literal
/// address of the other family is refused.
@Suite("Address family", .timeLimit(.minutes(4)))
struct AddressFamilyTests {
    @Test func resolverKeepsToTheFamily() throws {
        #expect(try AddressResolver.resolve("localhost", family: .ipv4) == "127.0.0.1")
        #expect(try AddressResolver.resolve("127.0.0.1", family: .ipv4) == "127.0.0.1")
        #expect(try AddressResolver.resolve("[::1]", family: .ipv6) == "::1")
        #expect(try AddressResolver.resolve("example.invalid", family: .any) == "example.invalid")
        let error = #expect(throws: DownloadError.self) { try AddressResolver.resolve("127.0.0.1", family: .ipv6) }
        #expect(error?.code == .invalidConfiguration)
        #expect(error?.message.contains("IPv4 address") == true)
    }

    @Test func routesFollowTheProxyAndTheFamily() async throws {
        let proxy = try DownloadManager.ProxyServer(url: "http://127.0.0.1:3128")
        var configuration = Fixture.testConfiguration()
        configuration.proxy = .all(proxy, except: ["direct.example"])
        let proxiedManager = DownloadManager(configuration: configuration, eventLoopGroup: TestResources.group, threadPool: TestResources.pool)
        configuration.proxy = .direct
        configuration.addressFamily = .ipv4
        let forcedManager = DownloadManager(configuration: configuration, eventLoopGroup: TestResources.group, threadPool: TestResources.pool)
        let (proxied, forced) = (await proxiedManager.clients, await forcedManager.clients)
        let routes = try await [
            proxied.route(for: URL(string: "https://example.com/a")!),
            proxied.route(for: URL(string: "https://direct.example/a")!),
            forced.route(for: URL(string: "http://localhost:8080/a")!),
            forced.route(for: URL(string: "http://127.0.0.1:8080/a")!),
        ]
        await proxiedManager.shutdown()
        await forcedManager.shutdown()
        #expect(
            routes == [
                .proxy(proxy, address: nil), .direct, .pinned(host: "localhost", address: "127.0.0.1"), .direct,
            ])
    }

    @Test func aSOCKS5ProxyIsGivenAddressesAndASOCKS5hProxyNames() async throws {
        let socks5 = try DownloadManager.ProxyServer(url: "socks5://localhost:1080")
        let socks5h = try DownloadManager.ProxyServer(url: "socks5h://localhost:1080")
        var configuration = Fixture.testConfiguration()
        configuration.addressFamily = .ipv4
        configuration.proxy = .all(socks5)
        let resolving = DownloadManager(configuration: configuration, eventLoopGroup: TestResources.group, threadPool: TestResources.pool)
        configuration.proxy = .all(socks5h)
        let naming = DownloadManager(configuration: configuration, eventLoopGroup: TestResources.group, threadPool: TestResources.pool)
        let (here, there) = (await resolving.clients, await naming.clients)
        let routes = try await [
            here.route(for: URL(string: "http://localhost:8080/a")!),
            here.route(for: URL(string: "http://10.0.0.1:8080/a")!),
            there.route(for: URL(string: "http://localhost:8080/a")!),
        ]
        await resolving.shutdown()
        await naming.shutdown()
        #expect(
            routes == [
                // socks5: the name resolved here (in the forced family), the proxy's too
                .proxy(socks5, address: "127.0.0.1", origin: .init(host: "localhost", address: "127.0.0.1")),
                // an address needs no resolving
                .proxy(socks5, address: "127.0.0.1"),
                // socks5h: the name goes to the proxy as it is
                .proxy(socks5h, address: "127.0.0.1"),
            ])
    }

    @Test func ipv4ReachesAnIPv4OnlyServerByName() async throws {
        try await Fixture.with({ $0.addressFamily = .ipv4 }) { f in
            // Given a server listening on 127.0.0.1 only, named "localhost"
            let bytes = f.serve("four.bin", count: 3_000)
            let url = URL(string: "http://localhost:\(f.server.port)/files/four.bin")!

            // When downloaded over IPv4 only
            let result = try await f.manager.download(
                DownloadRequest(url: url, destination: .memory(limit: 10_000))
            ).result

            // Then it arrives, with the name in the Host header
            #expect(sha256(result.data) == sha256(bytes))
            #expect(f.server.requests(path: "/files/four.bin").first?.header("Host") == "localhost:\(f.server.port)")
        }
    }

    @Test func ipv6DoesNotFallBackToIPv4() async throws {
        try await Fixture.with({ $0.addressFamily = .ipv6 }) { f in
            // Given the same IPv4-only server
            f.serve("six.bin", count: 3_000)
            let byName = URL(string: "http://localhost:\(f.server.port)/files/six.bin")!

            // When asked for over IPv6 only, by name and by IPv4 address
            let handle = try await f.manager.download(DownloadRequest(url: byName, destination: .memory(limit: 10_000)))
            let error = await #expect(throws: DownloadError.self) { try await handle.result }
            let literal = try await f.manager.download(
                DownloadRequest(url: f.server.url("/files/six.bin"), destination: .memory(limit: 10_000)))
            let literalError = await #expect(throws: DownloadError.self) { try await literal.result }

            // Then neither reaches it: the name has no IPv6 address here, or [::1] refuses
            #expect(error?.code == .network, "\(error?.message ?? "")")
            #expect(literalError?.code == .invalidConfiguration)
            #expect(literalError?.message.contains("-6") == true)
            #expect(f.server.requests().isEmpty)
        }
    }

    @Test func ipv6ReachesAnIPv6Server() async throws {
        guard let server = try? await FaultServer.start(host: "::1") else { return }  // no IPv6 loopback here
        var configuration = Fixture.testConfiguration()
        configuration.addressFamily = .ipv6
        let manager = DownloadManager(configuration: configuration, eventLoopGroup: TestResources.group, threadPool: TestResources.pool)
        let bytes = FaultServer.randomBytes(count: 2_000, seed: 61)
        server.setFile("v6.bin", bytes)
        let url = URL(string: "http://[::1]:\(server.port)/files/v6.bin")!
        let result: Result<DownloadResult, any Error>
        do {
            result = .success(try await manager.download(DownloadRequest(url: url, destination: .memory(limit: 10_000))).result)
        } catch {
            result = .failure(error)
        }
        await manager.shutdown()
        try await server.shutdown()
        #expect(sha256(try result.get().data) == sha256(bytes))
    }

    @Test func commandLineRefusesBothFamilies() async throws {
        let run = try await Haul.run(["get", "http://127.0.0.1:1/x", "-4", "-6"])
        #expect(run.status == 2)
        #expect(run.stderr.contains("-4 and -6"))
    }

    /// `haul worker` takes the network options too, checked before it reaches the queue.
    @Test func workerTakesTheNetworkOptions() async throws {
        let run = try await Haul.run(["worker", "--queue", "postgres://haul@127.0.0.1:1/haul", "-4", "-6"])
        #expect(run.status == 2)
        #expect(run.stderr.contains("-4 and -6"))
        let proxy = try await Haul.run(["worker", "--queue", "postgres://haul@127.0.0.1:1/haul", "--proxy", "bad url"])
        #expect(proxy.status == 2)
        #expect(proxy.stderr.contains("is not a proxy URL"))
    }
}
