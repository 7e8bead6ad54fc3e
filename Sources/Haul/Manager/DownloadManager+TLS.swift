import Foundation
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
    /// private or self-signed server here rather than turning checks off.
    ///
    /// ```swift
    /// var configuration = DownloadManager.Configuration()
    /// configuration.tls.additionalTrustRoots = ["/etc/ssl/private-ca.pem"]
    /// let manager = DownloadManager(configuration: configuration)
    /// ```
    ///
    /// Over TLS the manager speaks HTTP/1.1 unless ``allowsHTTP2`` is set.
    public struct TLSOptions: Sendable, Hashable {
        /// Paths of PEM files of certificate authorities to trust in addition to the
        /// system's (`haul get --ca-certificate FILE`). A file may hold several
        /// certificates.
        ///
        /// The files are read when the manager is created. One that cannot be read or holds
        /// no PEM certificate makes every download, enqueue and sync of that manager fail
        /// with ``DownloadError/Code/tls`` naming the file.
        public var additionalTrustRoots: [String]

        /// Whether to offer HTTP/2 as well as HTTP/1.1 (by ALPN), and use what the server
        /// chooses (`haul get --http2`). Off by default: with the HTTP client Haul runs on,
        /// HTTP/2 was slower in every case measured, 2.2-2.4× for one large file and
        /// 1.25-1.45× for many small ones (see the README's benchmarks), and one connection
        /// per download spreads over the cores where multiplexed streams share one.
        public var allowsHTTP2: Bool

        /// Creates options; the default trusts the system's authorities only and speaks
        /// HTTP/1.1.
        public init(additionalTrustRoots: [String] = [], allowsHTTP2: Bool = false) {
            self.additionalTrustRoots = additionalTrustRoots
            self.allowsHTTP2 = allowsHTTP2
        }
    }

    /// The HTTP client's TLS configuration for `options`: `nil` (the client's default)
    /// when there is nothing to add.
    ///
    /// - Throws: ``DownloadError/Code/tls`` naming a file that cannot be read or holds no
    ///   PEM certificate.
    static func tlsConfiguration(_ options: TLSOptions) throws(DownloadError) -> TLSConfiguration? {
        guard !options.additionalTrustRoots.isEmpty else { return nil }
        var certificates: [NIOSSLCertificate] = []
        for path in options.additionalTrustRoots {
            guard access(path, R_OK) == 0 else {
                let reason = String(cString: strerror(errno))
                throw DownloadError(.tls, "cannot read the CA certificate file \(path): \(reason)")
            }
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
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.additionalTrustRoots = [.certificates(certificates)]
        return configuration
    }

    /// Throws the error that loading the configuration's trust roots gave, if any.
    nonisolated func checkTLSSetup() throws(DownloadError) {
        if let tlsSetupError { throw tlsSetupError }
    }
}

extension TransferOperation {
    /// A TLS failure as a ``DownloadError`` naming the problem, or `nil` for other errors.
    ///
    /// A certificate that does not verify, a host name it does not cover and a failed
    /// handshake are ``DownloadError/Code/tls``, which is not retried; a TLS connection that
    /// breaks later is left to the network rules.
    static func translateTLSError(_ error: any Error, host: String, url: URL) -> DownloadError? {
        let advice =
            "if the server's certificate is signed by a private authority, trust it with --ca-certificate FILE (TLSOptions.additionalTrustRoots)"
        if let ssl = error as? NIOSSLError, case .handshakeFailed(let detail) = ssl {
            let text = "\(detail)"
            if text.contains("CERTIFICATE_VERIFY_FAILED") {
                return DownloadError(
                    .tls,
                    "\(url.absoluteString): certificate verify failed: \(host)'s certificate is not signed by a trusted authority, or has expired; \(advice)"
                )
            }
            return DownloadError(.tls, "\(url.absoluteString): the TLS handshake with \(host) failed: \(text)")
        }
        if let extra = error as? NIOSSLExtraError, extra == .failedToValidateHostname {
            return DownloadError(
                .tls, "\(url.absoluteString): the server's certificate is not valid for \(host): \(extra)")
        }
        return nil
    }
}
