import Foundation

extension URL {
    /// Whether this is an address Haul downloads from: `http` or `https`, with a host.
    package var isWebAddress: Bool {
        guard let scheme = scheme?.lowercased(), scheme == "http" || scheme == "https", let host, !host.isEmpty
        else { return false }
        return true
    }

    /// Whether this may be a mirror: a web address without `user:password@` (credentials go
    /// only to the first URL's origin, in a header).
    package var isMirrorAddress: Bool { isWebAddress && user == nil && password == nil }

    /// The URL without `user:password@`; `self` when it has none.
    var removingUserInfo: URL {
        guard user != nil || password != nil,
            var components = URLComponents(url: self, resolvingAgainstBaseURL: true)
        else { return self }
        components.user = nil
        components.password = nil
        return components.url ?? self
    }
}
