import Foundation
import NIOCore
import NIOSSL

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension DownloadManager {
    /// How a manager checks the certificates of `https` servers.
    ///
    /// A server's certificate must chain to a trusted certificate authority and name the
    /// host. By default the trusted authorities are the system's; add the authority of a
    /// private or self-signed server here rather than turning checks off. A server that
    /// asks for a client certificate gets ``clientCertificate``.
    ///
    /// ```swift
    /// var configuration = DownloadManager.Configuration()
    /// configuration.tls.additionalTrustRoots = ["/etc/ssl/private-ca.pem"]
    /// let manager = DownloadManager(configuration: configuration)
    /// ```
    ///
    /// Over TLS the manager offers HTTP/2 and HTTP/1.1, and speaks what the server picks
    /// (see ``allowsHTTP2``).
    public struct TLSOptions: Sendable, Hashable {
        /// Paths of PEM files of certificate authorities to trust in addition to the
        /// system's (`haul get --ca-certificate FILE`), or instead of them when
        /// ``trustsSystemRoots`` is off. A file may hold several certificates.
        ///
        /// The files are read when the manager is created. One that cannot be read or holds
        /// no PEM certificate makes every download, enqueue and sync of that manager fail
        /// with ``DownloadError/Code/tls`` naming the file.
        public var additionalTrustRoots: [String]

        /// Whether the system's certificate authorities are trusted. On by default; off
        /// (`haul get --no-system-ca`), only the authorities of ``additionalTrustRoots``
        /// are, which must then name at least one file.
        public var trustsSystemRoots: Bool

        /// The certificate and key to present to servers that ask for one (mutual TLS,
        /// `haul get --certificate FILE --private-key FILE`); `nil` (the default) presents
        /// none.
        public var clientCertificate: ClientCertificate?

        /// Whether servers' certificates are checked at all. On by default. Turning it off
        /// (`haul get --insecure`) accepts any certificate for any host, so anyone on the
        /// path can read and change the downloads: use it only to diagnose, and say so to
        /// the person running the program (the `haul` command warns on every run).
        public var verifiesCertificates: Bool

        /// Whether to offer HTTP/2 as well as HTTP/1.1 (by ALPN) to `https` servers, and
        /// speak what each chooses. On by default; off (`haul get --http1.1`), every server
        /// is spoken to over HTTP/1.1.
        ///
        /// Over HTTP/2 the requests to a server share at most two connections, as streams
        /// (up to the server's `SETTINGS_MAX_CONCURRENT_STREAMS`), so many small files fill
        /// a far link without a connection each, and a stream's flow-control window grows
        /// with the measured bandwidth-delay product. Requests through a proxy, and plain
        /// `http` ones, are HTTP/1.1 either way.
        public var allowsHTTP2: Bool

        /// On Linux, the directory of hash-linked authorities read instead of the bundle
        /// when it holds any (see ``SystemTrustRoots``); tests point it elsewhere.
        package var systemRootsDirectory = SystemTrustRoots.hashedDirectory

        /// Creates options; the default trusts the system's authorities only, checks every
        /// certificate, presents none and offers HTTP/2 and HTTP/1.1.
        public init(
            additionalTrustRoots: [String] = [], trustsSystemRoots: Bool = true,
            clientCertificate: ClientCertificate? = nil, verifiesCertificates: Bool = true,
            allowsHTTP2: Bool = true
        ) {
            self.additionalTrustRoots = additionalTrustRoots
            self.trustsSystemRoots = trustsSystemRoots
            self.clientCertificate = clientCertificate
            self.verifiesCertificates = verifiesCertificates
            self.allowsHTTP2 = allowsHTTP2
        }
    }

    /// A client certificate for servers that ask for one: PEM files of the certificate
    /// (with any intermediate certificates after it) and its private key.
    ///
    /// ```swift
    /// configuration.tls.clientCertificate = .init(certificateFile: "me.pem", privateKeyFile: "me.key")
    /// ```
    ///
    /// The files are read when the manager is created; the key must not be encrypted.
    public struct ClientCertificate: Sendable, Hashable {
        /// The PEM file of the certificate, then any intermediates.
        public var certificateFile: String
        /// The PEM file of the certificate's private key; it may be the same file as
        /// ``certificateFile``.
        public var privateKeyFile: String

        /// A certificate and key; without `privateKeyFile` the key is read from
        /// `certificateFile`.
        public init(certificateFile: String, privateKeyFile: String? = nil) {
            self.certificateFile = certificateFile
            self.privateKeyFile = privateKeyFile ?? certificateFile
        }
    }

    /// How long a connection Haul closes waits for the server's own `close_notify` after
    /// sending its own: not at all.
    ///
    /// NIOSSL waits up to 5 s by default. A request Haul stops in the middle of a body (a
    /// segment whose range another connection took over, a cancelled or paused download)
    /// closes its connection while the server is still sending, and a server busy writing
    /// (nginx) does not answer `close_notify`: the connection stayed open for those 5 s,
    /// and the process with it, after the download's last byte. Nothing is read from a
    /// connection Haul closes, so there is nothing to protect by waiting: the
    /// `close_notify` is still sent, and the socket closed on the next turn of its loop.
    static let tlsShutdownTimeout = TimeAmount.zero

    /// The HTTP client's TLS configuration for `options`. Blocking: it reads the files.
    ///
    /// - Throws: ``DownloadError/Code/tls`` naming a file that cannot be read or holds no
    ///   PEM certificate or key, or when no authority at all would be trusted.
    static func tlsConfiguration(_ options: TLSOptions) throws(DownloadError) -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.shutdownTimeout = tlsShutdownTimeout
        var certificates: [NIOSSLCertificate] = []
        for path in options.additionalTrustRoots {
            try checkReadable(path, what: "CA certificate file")
            let loaded: [NIOSSLCertificate]
            do {
                loaded = try NIOSSLCertificate.fromPEMFile(path)
            } catch {
                throw DownloadError(
                    .tls, "\(path) is not a PEM file of CA certificates (-----BEGIN CERTIFICATE-----): \(error)")
            }
            guard !loaded.isEmpty else {
                throw DownloadError(
                    .tls, "\(path) holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
            }
            certificates += loaded
        }
        if options.trustsSystemRoots {
            #if os(Linux)
                // Read lazily from the hashed directory where there is one, not decoded
                // whole from the bundle before the first handshake (see SystemTrustRoots).
                configuration.trustRoots = SystemTrustRoots.trustRoots(directory: options.systemRootsDirectory)
            #endif
            if !certificates.isEmpty { configuration.additionalTrustRoots = [.certificates(certificates)] }
        } else {
            guard !certificates.isEmpty || !options.verifiesCertificates else {
                throw DownloadError(
                    .tls,
                    "the system's certificate authorities are not trusted (--no-system-ca, TLSOptions.trustsSystemRoots) and no other is given: add one with --ca-certificate FILE (TLSOptions.additionalTrustRoots)"
                )
            }
            configuration.trustRoots = .certificates(certificates)
        }
        if let client = options.clientCertificate {
            try checkReadable(client.certificateFile, what: "client certificate file")
            try checkReadable(client.privateKeyFile, what: "private key file")
            let chain: [NIOSSLCertificate]
            do {
                chain = try NIOSSLCertificate.fromPEMFile(client.certificateFile)
            } catch {
                throw DownloadError(
                    .tls, "\(client.certificateFile) is not a PEM certificate (-----BEGIN CERTIFICATE-----): \(error)")
            }
            guard !chain.isEmpty else {
                throw DownloadError(
                    .tls, "\(client.certificateFile) holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
            }
            let key: NIOSSLPrivateKey
            do {
                key = try NIOSSLPrivateKey(file: client.privateKeyFile, format: .pem)
            } catch {
                throw DownloadError(
                    .tls,
                    "\(client.privateKeyFile) holds no unencrypted PEM private key (-----BEGIN PRIVATE KEY-----): \(error)")
            }
            configuration.certificateChain = chain.map { .certificate($0) }
            configuration.privateKey = .privateKey(key)
        }
        if !options.verifiesCertificates { configuration.certificateVerification = .none }
        return configuration
    }

    /// Throws ``DownloadError/Code/tls`` unless `path` can be read.
    private static func checkReadable(_ path: String, what: String) throws(DownloadError) {
        guard access(path, R_OK) == 0 else {
            let reason = String(cString: strerror(errno))
            throw DownloadError(.tls, "cannot read the \(what) \(path): \(reason)")
        }
    }

    /// Throws the error that loading the configuration's trust roots or client certificate
    /// gave, if any.
    nonisolated func checkTLSSetup() throws(DownloadError) {
        if let tlsSetupError { throw tlsSetupError }
    }
}
