import ArgumentParser
import Foundation
import Haul

/// The network options of every command that downloads (`get`, `resume`, `sync`) and of
/// `haul serve`: proxies, TLS, netrc, the User-Agent and the address family.
struct NetworkOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "Send every request through this proxy: http://[USER:PASSWORD@]HOST[:PORT] (HTTP, with CONNECT), socks5h://HOST[:PORT] (SOCKS5, host names resolved by the proxy, as for ssh -D) or socks5://HOST[:PORT] (SOCKS5, names resolved here); port 1080 when omitted; '' for none. A password here shows in the process list: prefer $https_proxy. (default: $http_proxy for http, $https_proxy or $HTTPS_PROXY for https, else $all_proxy or $ALL_PROXY)",
            valueName: "url"))
    var proxy: String?

    @Option(
        name: .customLong("proxy-user"),
        help: ArgumentHelp(
            "The user name and password for the HTTP proxy (Basic), in place of any in its URL. They go to the proxy only, never to a server, and are never printed; like a password in --proxy, they show in the process list: prefer the proxy URL in $https_proxy.",
            valueName: "user:password"))
    var proxyUser: String?

    @Option(
        name: .customLong("no-proxy"),
        help: ArgumentHelp(
            "Hosts to reach without the proxy, separated by commas: names (and the names under them), IP addresses or CIDR ranges, each with an optional :PORT, or * for all. (default: $no_proxy or $NO_PROXY)",
            valueName: "list"))
    var noProxy: String?

    @Option(
        name: .customLong("ca-certificate"),
        help: ArgumentHelp(
            "Trust the certificate authorities in this PEM file for https, besides the system's. Repeatable.",
            valueName: "file"))
    var caCertificates: [String] = []

    @Flag(
        name: .customLong("no-system-ca"),
        help: "Trust only the --ca-certificate files, not the system's certificate authorities.")
    var noSystemCA = false

    @Option(
        name: .customLong("certificate"),
        help: ArgumentHelp(
            "Present this PEM client certificate (then any intermediates) to https servers that ask for one.",
            valueName: "file"))
    var certificate: String?

    @Option(
        name: .customLong("private-key"),
        help: ArgumentHelp(
            "The unencrypted PEM private key of --certificate. (default: read from the --certificate file)",
            valueName: "file"))
    var privateKey: String?

    @Flag(
        help: "Do not check https servers' certificates (anyone on the path could read and change the downloads); warns on every run.")
    var insecure = false

    @Flag(help: "Send credentials from ~/.netrc (or $NETRC) to the hosts it lists, to the origin of each URL only.")
    var netrc = false

    @Option(
        name: .customLong("netrc-file"),
        help: ArgumentHelp("Like --netrc, with this netrc file.", valueName: "file"))
    var netrcFile: String?

    @Option(
        name: .customLong("user-agent"),
        help: ArgumentHelp("The User-Agent header to send. (default: Haul/0.1)", valueName: "text"))
    var userAgent: String?

    @Option(
        name: .customLong("refresh-command"),
        help: ArgumentHelp(
            "When a download's URL has expired (a signed URL answering 401, 403 or 410, or past the expiry in its query), run this program for a fresh one: without a shell, with the expired URL as its last argument and the download's ID in $HAUL_ID; the first line it prints is the new URL. The download resumes from its partial file. Given 60 seconds.",
            valueName: "program"))
    var refreshCommand: String?

    @Flag(name: .customShort("4"), help: "Connect over IPv4 only.")
    var ipv4 = false

    @Flag(name: .customShort("6"), help: "Connect over IPv6 only.")
    var ipv6 = false

    /// The options given on the command line, by name: a running service has its own.
    var given: [String] {
        var names: [String] = []
        if proxy != nil { names.append("--proxy") }
        if proxyUser != nil { names.append("--proxy-user") }
        if noProxy != nil { names.append("--no-proxy") }
        if !caCertificates.isEmpty { names.append("--ca-certificate") }
        if noSystemCA { names.append("--no-system-ca") }
        if certificate != nil { names.append("--certificate") }
        if privateKey != nil { names.append("--private-key") }
        if insecure { names.append("--insecure") }
        if netrc { names.append("--netrc") }
        if netrcFile != nil { names.append("--netrc-file") }
        if userAgent != nil { names.append("--user-agent") }
        if refreshCommand != nil { names.append("--refresh-command") }
        if ipv4 { names.append("-4") }
        if ipv6 { names.append("-6") }
        return names
    }

    /// Sets the network part of `configuration` from these options and `environment`:
    /// throws `ValidationError` (exit status 2) for bad values, and warns (on standard
    /// error, unless `warn` says otherwise) for `--insecure` and a netrc file others can
    /// read. Reads the netrc file.
    func apply(
        to configuration: inout DownloadManager.Configuration,
        environment: [String: String] = ProcessInfo.processInfo.environment,
        warn: (String) -> Void = { Console.err($0) }
    ) throws {
        configuration.proxy = try proxySettings(environment: environment)
        for file in caCertificates {
            guard !file.isEmpty else { throw ValidationError("--ca-certificate needs a file path.") }
            guard FileManager.default.isReadableFile(atPath: file) else {
                throw ValidationError("--ca-certificate: cannot read \(file).")
            }
        }
        configuration.tls.additionalTrustRoots = caCertificates
        if noSystemCA {
            guard !caCertificates.isEmpty else {
                throw ValidationError("--no-system-ca needs at least one --ca-certificate FILE to trust.")
            }
            configuration.tls.trustsSystemRoots = false
        }
        if let certificate {
            for (flag, file) in [("--certificate", certificate), ("--private-key", privateKey ?? certificate)] {
                guard !file.isEmpty else { throw ValidationError("\(flag) needs a file path.") }
                guard FileManager.default.isReadableFile(atPath: file) else {
                    throw ValidationError("\(flag): cannot read \(file).")
                }
            }
            configuration.tls.clientCertificate = .init(certificateFile: certificate, privateKeyFile: privateKey)
        } else if privateKey != nil {
            throw ValidationError("--private-key needs --certificate.")
        }
        if insecure {
            configuration.tls.verifiesCertificates = false
            warn(
                "haul: warning: --insecure: https certificates are not checked, so anyone on the path can read and change these downloads.\n"
            )
        }
        configuration.netrc = try loadNetrc(warn: warn)
        if let userAgent {
            guard !userAgent.isEmpty, !userAgent.contains(where: { $0 == "\r" || $0 == "\n" }) else {
                throw ValidationError("--user-agent needs a text of one line.")
            }
            configuration.userAgent = userAgent
        }
        if let refreshCommand {
            let command: RefreshCommand
            do {
                command = try RefreshCommand(program: refreshCommand, environment: environment)
            } catch {
                throw ValidationError("\(error)")
            }
            configuration.refreshURL = { expired, id in try await command.refresh(expired, id: id) }
        }
        switch (ipv4, ipv6) {
        case (true, true): throw ValidationError("-4 and -6 cannot be used together.")
        case (true, false): configuration.addressFamily = .ipv4
        case (false, true): configuration.addressFamily = .ipv6
        case (false, false): configuration.addressFamily = .any
        }
    }

    /// The proxies: the environment's as curl reads it, with `--proxy` and `--no-proxy`
    /// in place of theirs.
    func proxySettings(environment: [String: String]) throws -> DownloadManager.ProxySettings {
        var settings: DownloadManager.ProxySettings
        do {
            if let proxy {
                settings =
                    proxy.trimmingCharacters(in: .whitespaces).isEmpty
                    ? .direct : .all(try DownloadManager.ProxyServer(url: proxy))
                // The environment's no_proxy still applies, as in curl; its proxies do not.
                let exceptions = environment.filter { $0.key.lowercased() == "no_proxy" }
                settings.noProxy = try DownloadManager.ProxySettings.fromEnvironment(exceptions).noProxy
            } else {
                settings = try .fromEnvironment(environment)
            }
        } catch {
            throw ValidationError(proxy == nil ? "\(error.message)." : "--proxy: \(error.message).")
        }
        if let noProxy { settings.noProxy = DownloadManager.ProxySettings.parseList(noProxy) }
        if let proxyUser { settings = try Self.giving(settings, credentials: proxyUser) }
        return settings
    }

    /// `settings` with `--proxy-user`'s `user:password` for each of its proxies.
    static func giving(_ settings: DownloadManager.ProxySettings, credentials: String) throws
        -> DownloadManager.ProxySettings
    {
        let (user, password) =
            credentials.firstIndex(of: ":").map {
                (String(credentials[..<$0]), String(credentials[credentials.index(after: $0)...]))
            } ?? (credentials, "")
        guard !user.isEmpty else { throw ValidationError("--proxy-user needs USER:PASSWORD.") }
        guard settings.httpProxy != nil || settings.httpsProxy != nil else {
            throw ValidationError("--proxy-user gives credentials for a proxy, but no proxy is set.")
        }
        func with(_ server: DownloadManager.ProxyServer?) throws -> DownloadManager.ProxyServer? {
            guard let server else { return nil }
            do {
                return try DownloadManager.ProxyServer(
                    host: server.host, port: server.port, username: user, password: password, kind: server.kind)
            } catch {
                throw ValidationError("--proxy-user: \(error.message).")
            }
        }
        var given = settings
        given.httpProxy = try with(settings.httpProxy)
        given.httpsProxy = try with(settings.httpsProxy)
        return given
    }

    /// The netrc file `--netrc-file` or `--netrc` names, parsed; `nil` without either, or
    /// for `--netrc` when the default file does not exist (as curl).
    private func loadNetrc(warn: (String) -> Void) throws -> Netrc? {
        let path: String
        if let netrcFile {
            guard !netrcFile.isEmpty else { throw ValidationError("--netrc-file needs a file path.") }
            path = netrcFile
        } else if netrc {
            path = Netrc.defaultPath
            guard FileManager.default.fileExists(atPath: path) else { return nil }
        } else {
            return nil
        }
        let parsed: Netrc
        do {
            parsed = try Netrc(contentsOfFile: path)
        } catch {
            throw ValidationError("\(netrcFile != nil ? "--netrc-file" : "--netrc"): \(error.message).")
        }
        if Netrc.isReadableByOthers(path: path) {
            warn("haul: warning: \(path) can be read by other users; its passwords are not private (chmod 600 \(path)).\n")
        }
        return parsed
    }
}
