import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Tells an expired (or not yet valid) certificate from an untrusted one.
///
/// BoringSSL reports both as `CERTIFICATE_VERIFY_FAILED`, and AsyncHTTPClient takes no
/// verification callback. So after such a failure on a direct connection, one more
/// handshake is made with a callback that only reads the validity dates of the server's
/// certificate and then fails it: no request is sent, nothing is trusted.
enum CertificateProbe {
    /// The validity of the certificate `host` presents at `address`:`port`, or `nil` when
    /// the handshake cannot get that far within `timeout`. The connection runs on `group`.
    static func validity(
        host: String, address: String, port: Int, timeout: Duration = .seconds(5), on group: any EventLoopGroup
    ) async -> (notBefore: time_t, notAfter: time_t)? {
        guard let context = try? NIOSSLContext(configuration: .makeClientConfiguration()) else { return nil }
        let seen = NIOLockedValueBox<(notBefore: time_t, notAfter: time_t)?>(nil)
        let serverName = IPAddress(host) == nil ? host : nil
        let nanoseconds = timeout.components.seconds * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000
        let bootstrap = ClientBootstrap(group: group)
            .connectTimeout(.nanoseconds(nanoseconds))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let handler = try NIOSSLClientHandler(
                        context: context, serverHostname: serverName,
                        customVerificationCallback: { certificates, promise in
                            if let leaf = certificates.first {
                                seen.withLockedValue { $0 = (leaf.notValidBefore, leaf.notValidAfter) }
                            }
                            promise.succeed(.failed)
                        })
                    try channel.pipeline.syncOperations.addHandler(handler)
                }
            }
        guard let channel = try? await bootstrap.connect(host: address, port: port).get() else { return nil }
        // The failed verification closes the channel; a server that stalls is cut off.
        let deadline = channel.eventLoop.scheduleTask(in: .nanoseconds(nanoseconds)) { channel.close(promise: nil) }
        try? await channel.closeFuture.get()
        deadline.cancel()
        return seen.withLockedValue { $0 }
    }

    /// `seconds` since the epoch as `2020-01-02 00:00 UTC`.
    static func format(_ seconds: time_t) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd HH:mm 'UTC'"
        return formatter.string(from: Date(timeIntervalSince1970: TimeInterval(seconds)))
    }
}

extension HTTPClients {
    /// `error`, or, when it is a failed certificate check on a direct `https` connection
    /// to a certificate that has expired or is not valid yet, a ``DownloadError/Code/tls``
    /// error saying so (see ``CertificateProbe``).
    func diagnosed(_ error: any Error, url: URL) async -> any Error {
        guard let ssl = error as? NIOSSLError, case .handshakeFailed(let detail) = ssl,
            "\(detail)".contains("CERTIFICATE_VERIFY_FAILED"), url.scheme?.lowercased() == "https",
            let host = url.host, !host.isEmpty, proxy(for: url) == nil,
            let route = try? await route(for: url)
        else { return error }
        var address = host
        if case .pinned(_, let pinned) = route { address = pinned }
        if address.hasPrefix("["), address.hasSuffix("]") { address = String(address.dropFirst().dropLast()) }
        guard
            let validity = await CertificateProbe.validity(
                host: host, address: address, port: url.port ?? 443, on: eventLoopGroup)
        else { return error }
        let now = time(nil)
        if validity.notAfter < now {
            return DownloadError(
                .tls,
                "expired certificate: \(host)'s certificate expired on \(CertificateProbe.format(validity.notAfter)); the server must renew it",
                url: url)
        }
        if validity.notBefore > now {
            return DownloadError(
                .tls,
                "certificate not valid yet: \(host)'s certificate is valid from \(CertificateProbe.format(validity.notBefore)); check this machine's clock",
                url: url)
        }
        return error
    }
}
