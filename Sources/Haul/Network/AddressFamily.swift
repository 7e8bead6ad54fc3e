import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension DownloadManager {
    /// Which IP version connections use (`haul get -4` / `-6`).
    public enum AddressFamily: Sendable, Hashable {
        /// IPv4 or IPv6, whichever answers first (Happy Eyeballs). The default.
        case any
        /// IPv4 only: host names are resolved to IPv4 addresses only.
        case ipv4
        /// IPv6 only: host names are resolved to IPv6 addresses only.
        case ipv6
    }
}

/// Resolves a host name to one address of a given family, with `getaddrinfo`. Blocking:
/// for the I/O pool.
enum AddressResolver {
    /// The first address `getaddrinfo` gives for `host` in `family`, as text (IPv6
    /// without brackets), or `host` itself when it is already a literal of that family.
    /// With ``DownloadManager/AddressFamily/any``, `host` itself unless `evenForAny`
    /// asks for the first address of either family (to hand a SOCKS proxy an address).
    ///
    /// - Throws: ``DownloadError/Code/invalidConfiguration`` for a literal of the other
    ///   family; ``DownloadError/Code/network`` when the name has no address of this
    ///   family, or cannot be resolved (a connectivity error when the resolver could not
    ///   answer).
    static func resolve(
        _ host: String, family: DownloadManager.AddressFamily, evenForAny: Bool = false
    ) throws(DownloadError) -> String {
        var name = host
        if name.hasPrefix("["), name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        let wanted: Int32
        let label: String
        switch family {
        case .any:
            guard evenForAny else { return name }
            if IPAddress(name) != nil { return name }
            (wanted, label) = (AF_UNSPEC, "IP")
        case .ipv4: (wanted, label) = (AF_INET, "IPv4")
        case .ipv6: (wanted, label) = (AF_INET6, "IPv6")
        }
        let flag = family == .ipv4 ? " (-4)" : family == .ipv6 ? " (-6)" : ""
        if let literal = IPAddress(name) {
            guard literal.isIPv6 == (family == .ipv6) else {
                throw DownloadError(
                    .invalidConfiguration,
                    "\(name) is an \(literal.isIPv6 ? "IPv6" : "IPv4") address, but \(label) only was asked for\(flag)")
            }
            return name
        }
        var hints = addrinfo()
        hints.ai_family = wanted
        #if os(Linux)
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #else
            hints.ai_socktype = SOCK_STREAM
        #endif
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(name, nil, &hints, &list)
        defer { if let list { freeaddrinfo(list) } }
        guard status == 0, let first = list, let address = first.pointee.ai_addr else {
            if status == EAI_AGAIN {
                throw DownloadError(
                    .network, "cannot resolve host \(name): the name server did not answer", isConnectivity: true)
            }
            throw DownloadError(
                .network, "\(name) has no \(label) address\(flag): \(String(cString: gai_strerror(status)))")
        }
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        let converted: UnsafePointer<CChar>?
        if first.pointee.ai_family == AF_INET {
            converted = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                var raw = v4.pointee.sin_addr
                return inet_ntop(AF_INET, &raw, &buffer, socklen_t(buffer.count))
            }
        } else {
            converted = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                var raw = v6.pointee.sin6_addr
                return inet_ntop(AF_INET6, &raw, &buffer, socklen_t(buffer.count))
            }
        }
        guard converted != nil else {
            throw DownloadError(.network, "cannot resolve host \(name): \(String(cString: strerror(errno)))")
        }
        return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }
}
