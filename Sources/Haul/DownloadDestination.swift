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
    /// An object in an S3-compatible bucket, which appears at its key only once the download
    /// is complete and verified (in one `PUT`, or by completing a multipart upload whose
    /// parts survive a kill; a segmented download uploads each part as soon as its bytes
    /// are in). The manager's
    /// ``DownloadManager/Configuration/objectStorage`` says which store and credentials.
    ///
    /// A `key` that ends with `/` is a prefix: the object's name is then taken from the
    /// response or the URL, as for ``directory(_:name:)``. The bytes wait in `staging`, a
    /// local directory (created if missing, owner-only), until they are uploaded; a
    /// resumed download continues from there.
    case object(bucket: String, key: String, staging: URL)
}
