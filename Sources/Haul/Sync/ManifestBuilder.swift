#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
public import Foundation

/// Builds the ``Manifest`` of a local directory.
///
/// Every regular file below ``directory`` becomes an entry with its size, SHA-256,
/// modification time and permission bits, sorted by path (byte order of the UTF-8). Left out:
///
/// - symbolic links that lead outside the directory, to something that is not a regular
///   file, or to a directory (so a link can never make the walk loop); a link to a file
///   inside the directory is listed under the link's own path;
/// - Haul's own partial downloads (`*.haul-partial`, `*.haul-meta`) and anything named
///   `.haul-*`, such as a staging directory;
/// - sockets, FIFOs and devices.
///
/// Each entry's `url` is its path with every component percent-encoded (everything but
/// RFC 3986 unreserved characters), so it resolves against the manifest's own URL; with a
/// ``baseURL`` it is that URL plus the encoded path instead.
public struct ManifestBuilder: Sendable {
    /// The directory to describe.
    public var directory: URL
    /// If set, entries get absolute URLs: this URL, a `/`, then the encoded path.
    public var baseURL: URL?
    /// The manifest's version label.
    public var version: String

    /// Creates a builder for `directory`.
    public init(directory: URL, baseURL: URL? = nil, version: String) {
        self.directory = directory
        self.baseURL = baseURL
        self.version = version
    }

    /// Walks the directory, hashes every file and returns the validated manifest.
    ///
    /// - Throws: ``DownloadError`` with code ``DownloadError/Code/fileSystem`` if the
    ///   directory or a file cannot be read, or ``DownloadError/Code/invalidManifest`` if a
    ///   file's name cannot be written in a manifest (a backslash or control character).
    public func build() throws(DownloadError) -> Manifest {
        guard let root = Self.realPath(directory.path) else {
            throw DownloadError.fileSystem("read", path: directory.path, errno: errno)
        }
        var files: [Manifest.Entry] = []
        try walk(root: root, relative: "", into: &files)
        files.sort { $0.path.utf8.lexicographicallyPrecedes($1.path.utf8) }
        let manifest = Manifest(version: version, files: files)
        try manifest.validate(lines: nil)
        return manifest
    }

    /// `path` with each `/`-separated component percent-encoded.
    public static func encodedURLPath(_ path: String) -> String {
        var unreserved = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        unreserved.insert(charactersIn: "-._~")
        return path.split(separator: "/", omittingEmptySubsequences: false)
            .map { $0.addingPercentEncoding(withAllowedCharacters: unreserved) ?? String($0) }
            .joined(separator: "/")
    }

    /// The `url` field for `path`.
    func url(for path: String) -> String {
        let encoded = Self.encodedURLPath(path)
        guard let baseURL else { return encoded }
        var base = baseURL.absoluteString
        if !base.hasSuffix("/") { base += "/" }
        return base + encoded
    }

    private func walk(root: String, relative: String, into files: inout [Manifest.Entry]) throws(DownloadError) {
        let absolute = relative.isEmpty ? root : root + "/" + relative
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: absolute)
        } catch {
            throw DownloadError(.fileSystem, "cannot list \(absolute): \(error.localizedDescription)")
        }
        for name in names.sorted() where !Self.isSkipped(name) {
            let path = relative.isEmpty ? name : relative + "/" + name
            let full = root + "/" + path
            var info = stat()
            guard lstat(full, &info) == 0 else { throw DownloadError.fileSystem("inspect", path: full, errno: errno) }
            switch info.st_mode & S_IFMT {
            case S_IFDIR:
                try walk(root: root, relative: path, into: &files)
            case S_IFREG:
                files.append(try entry(path: path, file: full, info: info))
            case S_IFLNK:
                guard let target = Self.realPath(full), target.hasPrefix(root + "/") else { continue }
                var targetInfo = stat()
                guard stat(target, &targetInfo) == 0, targetInfo.st_mode & S_IFMT == S_IFREG else { continue }
                files.append(try entry(path: path, file: target, info: targetInfo))
            default:
                continue
            }
        }
    }

    private func entry(path: String, file: String, info: stat) throws(DownloadError) -> Manifest.Entry {
        // The size is the one read while hashing, so it always matches the digest.
        let (status, digest) = try HashCache.hash(file)
        let size = status.size
        #if canImport(Darwin)
        let seconds = info.st_mtimespec.tv_sec
        #else
        let seconds = info.st_mtim.tv_sec
        #endif
        return Manifest.Entry(
            path: path, url: url(for: path), size: size, sha256: digest,
            mtime: Date(timeIntervalSince1970: TimeInterval(seconds)), mode: Int(info.st_mode) & 0o7777)
    }

    private static func isSkipped(_ name: String) -> Bool {
        name.hasPrefix(".haul-") || name.hasSuffix(".haul-partial") || name.hasSuffix(".haul-meta")
            || name.hasSuffix(".haul-meta.tmp")
    }

    private static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
