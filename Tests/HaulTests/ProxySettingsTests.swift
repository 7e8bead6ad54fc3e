import Foundation
import Testing

@testable import Haul

/// The proxy rules as plain values: proxy URLs, the environment's precedence, and
/// `no_proxy` matching, all without a socket.
@Suite("Proxy settings")
struct ProxySettingsTests {
    typealias Settings = DownloadManager.ProxySettings
    typealias Server = DownloadManager.ProxyServer

    // MARK: - Proxy URLs

    @Test func proxyURLsReadAsCurlReadsThem() throws {
        let full = try Server(url: "http://proxy.example:3128")
        #expect(full.host == "proxy.example" && full.port == 3128 && full.username == nil)
        // No scheme: http; no port: 1080
        let bare = try Server(url: "proxy.example")
        #expect(bare.host == "proxy.example" && bare.port == 1080)
        let v6 = try Server(url: "http://[::1]:8080/")
        #expect(v6.host == "::1" && v6.port == 8080)
        #expect(v6.description == "http://[::1]:8080")
        #expect(full.kind == .http && bare.kind == .http)
    }

    @Test(arguments: [
        ("socks5h://127.0.0.1:1080", Server.Kind.socks5h, "127.0.0.1", 1080),
        ("SOCKS5H://tunnel.example", .socks5h, "tunnel.example", 1080),
        ("socks5://[::1]:9050", .socks5, "::1", 9050),
    ])
    func socksProxyURLsReadAsCurlReadsThem(text: String, kind: Server.Kind, host: String, port: Int) throws {
        let proxy = try Server(url: text)
        #expect(proxy.kind == kind && proxy.kind.isSOCKS)
        #expect(proxy.host == host && proxy.port == port)
        #expect(proxy.description.hasPrefix("\(kind.rawValue)://"))
    }

    @Test func aSOCKSProxyWithCredentialsIsRefusedWithoutThePassword() {
        let error = #expect(throws: DownloadError.self) { try Server(url: "socks5h://bob:pw-secret@127.0.0.1:1080") }
        #expect(error?.code == .invalidConfiguration)
        #expect(error?.message.contains("user name and password") == true)
        #expect(error?.message.contains("pw-secret") == false)
    }

    @Test func theEnvironmentCanNameASOCKSProxy() throws {
        let settings = try Settings.fromEnvironment(["ALL_PROXY": "socks5h://127.0.0.1:1080", "no_proxy": "intra.example"])
        #expect(settings.proxy(for: URL(string: "https://example.com/")!)?.kind == .socks5h)
        #expect(settings.proxy(for: URL(string: "http://example.com/")!)?.kind == .socks5h)
        #expect(settings.proxy(for: URL(string: "http://intra.example/")!) == nil)
    }

    @Test func proxyCredentialsAreDecodedAndNeverShown() throws {
        let proxy = try Server(url: "http://al%40ice:p%3Ass-secret@proxy.example:3128")
        #expect(proxy.username == "al@ice")
        #expect(proxy.password == "p:ss-secret")
        #expect(proxy.description == "http://al@ice:***@proxy.example:3128")
        #expect(!"\(proxy)".contains("secret"))
        #expect(!String(reflecting: proxy).contains("secret"))
        var dumped = ""
        dump(proxy, to: &dumped)
        #expect(!dumped.contains("secret"))
        #expect(dumped.contains("al@ice"))
    }

    @Test(arguments: [
        "https://proxy.example:443", "socks4://proxy.example:1080", "http://", "http://proxy.example:0",
        "http://proxy.example:99999", "http://proxy.example:3128/path", "http://user:pw-secret@:3128",
    ])
    func malformedProxyURLsAreRefusedWithoutTheirPassword(text: String) {
        let error = #expect(throws: DownloadError.self) { try Server(url: text) }
        #expect(error?.code == .invalidConfiguration)
        #expect(error?.message.contains("pw-secret") == false)
    }

    // MARK: - The environment

    @Test func environmentPrecedenceIsCurls() throws {
        // Given every variable
        let environment = [
            "http_proxy": "http://lower-http:1", "HTTP_PROXY": "http://upper-http:2",
            "https_proxy": "http://lower-https:3", "HTTPS_PROXY": "http://upper-https:4",
            "all_proxy": "http://lower-all:5", "ALL_PROXY": "http://upper-all:6",
            "no_proxy": "lower.example", "NO_PROXY": "upper.example",
        ]
        // Then the lower-case names win
        let settings = try Settings.fromEnvironment(environment)
        #expect(settings.httpProxy?.host == "lower-http")
        #expect(settings.httpsProxy?.host == "lower-https")
        #expect(settings.noProxy == ["lower.example"])
    }

    @Test func upperCaseHTTPProxyIsIgnoredAsCurlDoes() throws {
        // HTTP_PROXY can be set by a request's Proxy: header in a CGI program (httpoxy)
        let settings = try Settings.fromEnvironment(["HTTP_PROXY": "http://attacker:1"])
        #expect(settings.httpProxy == nil)
        #expect(settings.proxy(for: URL(string: "http://example.com/")!) == nil)
    }

    @Test func upperCaseNamesServeWhenLowerCaseAreUnset() throws {
        let settings = try Settings.fromEnvironment([
            "HTTPS_PROXY": "http://upper-https:4", "ALL_PROXY": "http://upper-all:6", "NO_PROXY": "a.example, b.example",
        ])
        #expect(settings.httpsProxy?.host == "upper-https")
        #expect(settings.httpProxy?.host == "upper-all")
        #expect(settings.noProxy == ["a.example", "b.example"])
    }

    @Test func allProxyFillsInForEachScheme() throws {
        let settings = try Settings.fromEnvironment(["all_proxy": "http://all:5", "https_proxy": "http://tls:3"])
        #expect(settings.proxy(for: URL(string: "http://example.com/")!)?.host == "all")
        #expect(settings.proxy(for: URL(string: "https://example.com/")!)?.host == "tls")
    }

    @Test func emptyVariablesCountAsUnset() throws {
        let settings = try Settings.fromEnvironment(["https_proxy": "", "HTTPS_PROXY": "http://upper:4", "no_proxy": ""])
        #expect(settings.httpsProxy?.host == "upper")
        #expect(settings.noProxy.isEmpty)
    }

    @Test func malformedVariableIsNamedWithoutItsPassword() {
        let error = #expect(throws: DownloadError.self) {
            try Settings.fromEnvironment(["https_proxy": "ftp://u:pw-secret@proxy:21"])
        }
        #expect(error?.code == .invalidConfiguration)
        #expect(error?.message.hasPrefix("https_proxy:") == true)
        #expect(error?.message.contains("pw-secret") == false)
    }

    @Test func nothingSetMeansDirect() throws {
        #expect(try Settings.fromEnvironment([:]) == .direct)
        #expect(Settings.direct.proxy(for: URL(string: "https://example.com/")!) == nil)
    }

    // MARK: - no_proxy

    /// Whether a request to `url` bypasses a proxy under `noProxy`.
    func bypasses(_ url: String, _ noProxy: String) throws -> Bool {
        let settings = Settings.all(try Server(url: "http://proxy:3128"), except: Settings.parseList(noProxy))
        return settings.proxy(for: URL(string: url)!) == nil
    }

    @Test func hostSuffixesMatchWholeLabels() throws {
        #expect(try bypasses("https://example.com/a", "example.com"))
        #expect(try bypasses("https://www.example.com/a", "example.com"))
        #expect(try bypasses("https://www.example.com/a", ".example.com"))
        #expect(try bypasses("https://WWW.Example.COM/a", "example.com"))
        #expect(try !bypasses("https://notexample.com/a", "example.com"))
        #expect(try !bypasses("https://example.com.evil.org/a", "example.com"))
        // A leading dot still matches the name itself, as in curl
        #expect(try bypasses("https://example.com/a", ".example.com"))
    }

    @Test func starMatchesEverythingAlone() throws {
        #expect(try bypasses("https://anything.example/", "*"))
        #expect(try bypasses("http://10.1.2.3/", "other.example, *"))
        // Not a glob: "*.example.com" reads as ".example.com"
        #expect(try bypasses("https://a.example.com/", "*.example.com"))
        #expect(try !bypasses("https://a.example.org/", "*.example.com"))
    }

    @Test func addressesAndRangesMatchLiteralAddresses() throws {
        #expect(try bypasses("http://127.0.0.1:8080/", "127.0.0.1"))
        #expect(try bypasses("http://10.20.30.40/", "10.0.0.0/8"))
        #expect(try !bypasses("http://11.0.0.1/", "10.0.0.0/8"))
        #expect(try bypasses("http://192.168.1.77/", "192.168.1.0/24"))
        #expect(try bypasses("http://[::1]:8080/", "::1"))
        #expect(try bypasses("http://[::1]:8080/", "[::1]"))
        #expect(try bypasses("http://[0:0::1]/", "::1"))  // compared as addresses, not text
        #expect(try bypasses("http://[fd00::5]/", "fd00::/8"))
        #expect(try !bypasses("http://[fe80::5]/", "fd00::/8"))
        // Names are not resolved to match an address
        #expect(try !bypasses("http://localhost/", "127.0.0.1"))
    }

    @Test func portsNarrowAnEntry() throws {
        #expect(try bypasses("http://example.com:8080/", "example.com:8080"))
        #expect(try !bypasses("http://example.com:9090/", "example.com:8080"))
        #expect(try bypasses("http://example.com/", "example.com:80"))
        #expect(try bypasses("https://example.com/", "example.com:443"))
        #expect(try bypasses("http://127.0.0.1:5000/", "127.0.0.1:5000"))
        #expect(try !bypasses("http://127.0.0.1:5001/", "127.0.0.1:5000"))
        #expect(try bypasses("http://[::1]:8080/", "[::1]:8080"))
        #expect(try !bypasses("http://[::1]:8081/", "[::1]:8080"))
    }

    @Test func listsSplitOnCommasAndSpaces() throws {
        #expect(Settings.parseList(" a.example ,b.example  c.example,,") == ["a.example", "b.example", "c.example"])
        #expect(try bypasses("https://c.example/", "a.example, b.example c.example"))
        // Junk entries match nothing
        #expect(try !bypasses("https://example.com/", ":, [, 10.0.0.0/99, ."))
    }

    @Test func schemesChooseTheirProxy() throws {
        let settings = Settings(
            httpProxy: try Server(url: "http://plain:1"), httpsProxy: try Server(url: "http://secure:2"))
        #expect(settings.proxy(for: URL(string: "http://example.com/")!)?.host == "plain")
        #expect(settings.proxy(for: URL(string: "https://example.com/")!)?.host == "secure")
        #expect(Settings(httpProxy: try Server(url: "http://plain:1")).proxy(for: URL(string: "https://e.com/")!) == nil)
    }
}
