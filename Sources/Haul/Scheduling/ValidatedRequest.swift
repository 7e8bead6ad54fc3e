import Foundation

/// A download request checked once, with what the manager derives from it: where its
/// partial file lives and which host its per-host cap counts against.
///
/// Every request a manager takes, from a caller or from the store, becomes one of these
/// before anything else happens to it; nothing downstream checks it again.
struct ValidatedRequest: Sendable {
    var request: DownloadRequest
    /// Its partial file's paths; `nil` for a memory destination.
    let paths: PartialPaths?
    /// Its host and port (before any proxy is taken into account).
    let endpoint: HostReachability.Endpoint

    /// ``endpoint``, or its proxy's when `clients` send the request through one: reaching
    /// the proxy is what counts for reachability.
    func endpoint(through clients: HTTPClients) -> HostReachability.Endpoint {
        var endpoint = self.endpoint
        if let proxy = clients.proxy(for: request.url) {
            endpoint.proxyHost = proxy.host
            endpoint.proxyPort = proxy.port
        }
        return endpoint
    }

    /// Checks `request`: an `http` or `https` URL with a host, and a destination whose
    /// directory exists (a directory in `checkedDirectories` is taken as checked already:
    /// a batch's requests mostly share one).
    ///
    /// - Throws: ``DownloadError/Code/invalidRequest`` saying what is wrong.
    init(_ request: DownloadRequest, checkedDirectories: Set<String> = []) throws(DownloadError) {
        guard request.url.isWebAddress, let host = request.url.host, let scheme = request.url.scheme?.lowercased() else {
            throw .invalid("'\(request.url.absoluteString)' is not an http or https URL")
        }
        for mirror in request.mirrors {
            guard mirror.isWebAddress else {
                throw .invalid("mirror '\(mirror.removingUserInfo.absoluteString)' is not an http or https URL")
            }
            guard mirror.isMirrorAddress else {
                throw .invalid(
                    "mirror '\(mirror.removingUserInfo.absoluteString)' has user info: credentials go only to the first URL's origin, in a header"
                )
            }
        }
        if let connections = request.connections, !(1...64).contains(connections) {
            throw .invalid("\(request.url.absoluteString): connections must be between 1 and 64, not \(connections)")
        }
        var request = request
        if request.stream != nil {
            // A stream is named after its playlist, not the playlist's file name.
            switch request.destination {
            case .directory(let folder, nil):
                request.destination = .directory(folder, name: HLSStream.suggestedName(for: request.url))
            case .object(let bucket, let key, let staging) where key.isEmpty || key.hasSuffix("/"):
                request.destination = .object(bucket: bucket, key: key + HLSStream.suggestedName(for: request.url), staging: staging)
            default:
                break
            }
            if case .object = request.destination, request.stream?.renditions == true {
                throw .invalid(
                    "\(request.url.absoluteString): a stream's renditions are saved beside its file; into an object, give the stream alone"
                )
            }
            guard request.delta == nil, request.mirrors.isEmpty, request.pieces == nil, request.checksum == nil else {
                throw .invalid(
                    "\(request.url.absoluteString): a stream (HLS) is checked segment by segment: it takes no mirrors, checksum, pieces or zsync"
                )
            }
        }
        self.request = request
        self.paths = try PartialPaths(
            destination: request.destination, url: request.url, checkedDirectories: checkedDirectories)
        if request.delta != nil, paths?.fixedDestination == nil || paths?.object != nil {
            throw .invalid(
                "\(request.url.absoluteString): a delta download (zsync) goes into a named file (.file, or .directory with a name)")
        }
        if request.stream != nil, paths?.fixedDestination == nil {
            throw .invalid("\(request.url.absoluteString): a stream (HLS) goes into a named file or object")
        }
        self.endpoint = HostReachability.Endpoint(
            host: host, port: request.url.port ?? (scheme == "https" ? 443 : 80))
    }
}
