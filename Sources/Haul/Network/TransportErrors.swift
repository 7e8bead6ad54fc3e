import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL

/// What the network's failures mean to a person: transport errors (the client's, NIO's,
/// TLS, SOCKS and socket errors) and HTTP error statuses as ``DownloadError`` values that
/// say what happened and what to do, with the codes the retry rules read.
///
/// One place for every transfer, segment, manifest and object-store request.
enum TransportErrors {
    /// An HTTP error status, with what it usually means. The URL that answered is the
    /// error's, not its message's: a person sees it named once, where the download is (and
    /// as "from URL" when it was another, see ``DownloadError/naming(download:)``).
    static func httpError(status: Int, url: URL, retryAfter: String?) -> DownloadError {
        let reason = HTTPResponseStatus(statusCode: status).reasonPhrase
        let meaning: String
        switch status {
        case 401: meaning = ": the server asks for credentials (--secret-header, --netrc, or USER:PASSWORD@ in the URL)"
        case 403: meaning = ": the server refuses to serve it (credentials, an expired signature, or a URL not meant to be fetched)"
        case 404, 410: meaning = ": the server has no file at this URL"
        case 407: meaning = ": the proxy asks for credentials (http://USER:PASSWORD@HOST:PORT)"
        default: meaning = ""
        }
        return DownloadError(
            .httpStatus, "HTTP \(status) \(reason)\(meaning)", statusCode: status,
            retryAfter: retryAfter.flatMap(parseRetryAfter), url: url)
    }

    /// Parses `Retry-After` as seconds or an HTTP date.
    static func parseRetryAfter(_ value: String) -> Duration? {
        let text = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int64(text), seconds >= 0 { return .seconds(seconds) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: text) else { return nil }
        return .milliseconds(Int64(max(0, date.timeIntervalSinceNow) * 1000))
    }

    /// Turns a transport error into a ``DownloadError`` a person can act on, about `url`.
    static func translate(_ error: any Error, url: URL) -> DownloadError {
        if let error = error as? DownloadError { return error }
        return describe(error, url: url).about(url)
    }

    private static func describe(_ error: any Error, url: URL) -> DownloadError {
        let host = url.host ?? url.absoluteString
        if let tls = translateTLSError(error, host: host, url: url) { return tls }
        if let closed = error as? NIOHTTP2Errors.StreamClosed,
            closed.errorCode == .refusedStream || closed.errorCode == .cancel
        {
            return DownloadError(
                .network,
                "\(host) did not process the request (its HTTP/2 stream was \(closed.errorCode == .refusedStream ? "refused" : "cancelled, the connection closing"))",
                wasNotProcessed: true)
        }
        if let client = error as? HTTPClientError {
            switch client {
            case .connectTimeout:
                return DownloadError(
                    .timeout, "could not connect to \(host) within the connect timeout", isConnectivity: true)
            case .readTimeout, .deadlineExceeded:
                return DownloadError(.timeout, "no data within the idle timeout")
            case .remoteConnectionClosed:
                return DownloadError(.network, "the server closed the connection early")
            case .cancelled:
                // Not Haul's own cancellation (that ends the attempts before any error is
                // looked at): the client gave up a request on a connection that was closing
                // (an HTTP/2 `GOAWAY`) before the server processed it.
                return DownloadError(
                    .network,
                    "\(host) did not process the request (its connection was closing)",
                    wasNotProcessed: true)
            case .proxyAuthenticationRequired:
                return DownloadError(
                    .proxy,
                    "the proxy asked for credentials (407 Proxy Authentication Required): give them in the proxy URL, http://USER:PASSWORD@HOST:PORT"
                )
            case .invalidProxyResponse:
                return DownloadError(
                    .proxy,
                    "the proxy refused to open a tunnel (CONNECT) to \(host): it may not accept the credentials given, or not allow this host or port"
                )
            case .httpProxyHandshakeTimeout:
                return DownloadError(
                    .timeout, "the proxy did not open a tunnel to \(host) in time")
            case .socksHandshakeTimeout:
                return DownloadError(
                    .timeout, "the SOCKS proxy did not open a connection to \(host) in time")
            default:
                return DownloadError(.network, "\(client)")
            }
        }
        if let connection = error as? NIOConnectionError {
            if connection.dnsAError != nil || connection.dnsAAAAError != nil {
                return DownloadError(
                    .network, "cannot resolve host \(connection.host): check the name and your DNS", isConnectivity: true)
            }
            if let first = connection.connectionErrors.first?.error {
                return translateSocketError(first, host: "\(connection.host):\(connection.port)", url: url)
            }
        }
        if let socks = translateSOCKSError(error, host: host, url: url) { return socks }
        return translateSocketError(error, host: host, url: url)
    }

    /// A SOCKS proxy's refusal (RFC 1928 §6), told apart by its reply code: the target
    /// being unreachable or refusing is a network failure (retried), the proxy's rules or
    /// an unsupported request are not.
    ///
    /// The client's SOCKS errors are NIO's `SOCKSError` types, which Haul does not import:
    /// they are recognised by name, and the reply code read by reflection.
    static func translateSOCKSError(_ error: any Error, host: String, url: URL) -> DownloadError? {
        let type = String(reflecting: Swift.type(of: error))
        guard type.contains("SOCKSError") else { return nil }
        let reply = Mirror(reflecting: error).children.first { $0.label == "reply" }.flatMap { reply in
            Mirror(reflecting: reply.value).children.first { $0.label == "value" }?.value as? UInt8
        }
        switch reply {
        case 3, 4:
            return DownloadError(
                .network, "the SOCKS proxy cannot reach \(host) (\(reply == 3 ? "network" : "host") unreachable)")
        case 5:
            return DownloadError(.network, "\(host) refused the SOCKS proxy's connection")
        case 6:
            return DownloadError(.timeout, "the SOCKS proxy's connection to \(host) timed out")
        case 2:
            return DownloadError(
                .proxy, "the SOCKS proxy's rules do not allow a connection to \(host)")
        case let code?:
            return DownloadError(
                .proxy, "the SOCKS proxy refused the connection to \(host) (reply \(code))")
        case nil:
            let name = type.split(separator: ".").last.map(String.init) ?? type
            return DownloadError(
                .proxy, "the SOCKS proxy's answer was not understood (\(name))")
        }
    }

    static func translateSocketError(_ error: any Error, host: String, url: URL) -> DownloadError {
        if let io = error as? IOError {
            switch io.errnoCode {
            case ECONNREFUSED:
                return DownloadError(
                    .network, "connection refused by \(host): is the server running?", isConnectivity: true)
            case ECONNRESET, EPIPE:
                return DownloadError(.network, "connection reset by the server")
            case ENETUNREACH, EHOSTUNREACH:
                return DownloadError(.network, "\(host) is unreachable: check the network", isConnectivity: true)
            case ETIMEDOUT:
                return DownloadError(.timeout, "\(host) did not answer in time")
            default:
                return DownloadError(.network, "\(String(cString: strerror(io.errnoCode)))")
            }
        }
        if let channel = error as? ChannelError, case .connectTimeout = channel {
            return DownloadError(
                .timeout, "could not connect to \(host) within the connect timeout", isConnectivity: true)
        }
        return DownloadError(.network, "\(error)")
    }

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
                    "untrusted certificate (certificate verify failed): \(host)'s certificate is not signed by an authority Haul trusts (self-signed or a private authority), or has expired; \(advice)"
                )
            }
            if text.contains("CERTIFICATE_REQUIRED") || (text.contains("HANDSHAKE_FAILURE") && text.contains("ALERT")) {
                return DownloadError(
                    .tls,
                    "\(host) refused the TLS handshake (\(text)); if it asks for a client certificate, give one with --certificate FILE --private-key FILE (TLSOptions.clientCertificate)"
                )
            }
            return DownloadError(.tls, "the TLS handshake with \(host) failed: \(text)")
        }
        if let extra = error as? NIOSSLExtraError, extra == .failedToValidateHostname {
            return DownloadError(
                .tls,
                "wrong host name: the server's certificate is not valid for \(host) (it names other hosts)"
            )
        }
        return nil
    }
}
