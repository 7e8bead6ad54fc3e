#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif
import NIOSSL

/// Where a manager reads the system's certificate authorities from on Linux.
///
/// NIOSSL's default trust on Linux loads the whole bundle file
/// (`/etc/ssl/certs/ca-certificates.crt`): BoringSSL decodes each of its ~140 certificates
/// before the first handshake, an eighth of the CPU a one-file `haul get` spends. Debian,
/// Ubuntu and Alpine also keep every authority of that bundle one per file in
/// `/etc/ssl/certs`, each reachable by a link named after the hash of its subject
/// (`5ad8a5d6.0`, written by `update-ca-certificates`); given that directory, BoringSSL
/// reads only the authority a server's chain names, when it needs it. The directory is
/// used only when it holds such links; otherwise (Fedora's layout, a container without
/// them) the default stays. On Apple platforms the system's trust store answers, untouched.
package enum SystemTrustRoots {
    /// The directory Debian, Ubuntu and Alpine keep hash links in.
    package static let hashedDirectory = "/etc/ssl/certs"

    /// The trust roots that stand for the system's: `directory` when it holds hash links,
    /// NIOSSL's default otherwise. Blocking: it reads the directory (until the first link).
    static func trustRoots(directory: String) -> NIOSSLTrustRoots {
        holdsHashLinks(directory) ? .file(directory) : .default
    }

    /// Whether `directory` holds at least one certificate link as OpenSSL's `c_rehash`
    /// names them: eight lowercase hex digits, a dot, a decimal sequence number.
    package static func holdsHashLinks(_ directory: String) -> Bool {
        guard let stream = opendir(directory) else { return false }
        defer { closedir(stream) }
        while let entry = readdir(stream) {
            let found = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                isHashLinkName(bytes.prefix { $0 != 0 })
            }
            if found { return true }
        }
        return false
    }

    /// Whether `name` is a certificate hash link's name (`c_rehash`: `HHHHHHHH.N`; a
    /// revocation list's `HHHHHHHH.rN` is not one).
    package static func isHashLinkName<Name: Collection<UInt8>>(_ name: Name) -> Bool {
        var index = name.startIndex
        for _ in 0..<8 {
            guard index != name.endIndex else { return false }
            let byte = name[index]
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
            else { return false }
            index = name.index(after: index)
        }
        guard index != name.endIndex, name[index] == UInt8(ascii: ".") else { return false }
        index = name.index(after: index)
        guard index != name.endIndex else { return false }
        while index != name.endIndex {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(name[index]) else { return false }
            index = name.index(after: index)
        }
        return true
    }
}
