public import Foundation

/// Where a download's bytes go.
public enum DownloadDestination: Sendable, Hashable {
    /// A file at this exact path. Its parent directory must exist.
    case file(URL)
    /// A file inside this directory. The name is `name` when given, otherwise taken from
    /// the response's `Content-Disposition` or the URL's last path component. The name is
    /// always reduced to a single, safe path component, so the file never lands outside
    /// the directory.
    case directory(URL, name: String? = nil)
    /// Memory, for small resources such as thumbnails: the body is returned as `Data`.
    /// A body larger than `limit` bytes fails with ``DownloadError/Code/tooLarge``.
    case memory(limit: Int)
}
