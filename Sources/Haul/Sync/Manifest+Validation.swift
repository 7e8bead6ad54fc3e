import Foundation

extension Manifest {
    /// Checks every rule a manifest must keep; `lines` (XML only) holds each entry's line.
    ///
    /// Rules: a non-empty version without control characters; for each entry, a relative
    /// path of non-empty components separated by `/` with no `.` or `..` component, no
    /// backslash and no control character; a path that is not the same as another (compared
    /// case-sensitively, after Unicode canonical normalisation) and not a directory of
    /// another; a well-formed URL; a size of zero or more; a SHA-256 of 64 hex digits; a mode
    /// of at most `07777`.
    func validate(lines: [Int]?) throws(DownloadError) {
        if version.isEmpty {
            throw DownloadError(.invalidManifest, "invalid manifest: the version is empty")
        }
        if version.unicodeScalars.contains(where: Self.isControl) {
            throw DownloadError(.invalidManifest, "invalid manifest: the version contains a control character")
        }
        // Swift's String equality and hashing are by canonical equivalence, so "é" written
        // precomposed and decomposed are the same key.
        var indexByPath: [String: Int] = [:]
        indexByPath.reserveCapacity(files.count)
        for (index, entry) in files.enumerated() {
            let line = lines.flatMap { index < $0.count ? $0[index] : nil }
            if let reason = Self.pathProblem(entry.path) {
                throw Self.entryError(index: index, path: entry.path, line: line, reason)
            }
            if let first = indexByPath[entry.path] {
                throw Self.entryError(
                    index: index, path: entry.path, line: line, "duplicate path, already at \(Self.name(first, lines))")
            }
            indexByPath[entry.path] = index
            if !Self.isWellFormedURL(entry.url) {
                throw Self.entryError(
                    index: index, path: entry.path, line: line,
                    "url \(String(reflecting: entry.url)) is not a valid relative or http(s) URL")
            }
            if entry.size < 0 {
                throw Self.entryError(index: index, path: entry.path, line: line, "size \(entry.size) is negative")
            }
            if let sha256 = entry.sha256, !Self.isSHA256(sha256) {
                throw Self.entryError(
                    index: index, path: entry.path, line: line,
                    "sha256 \(String(reflecting: sha256)) is not 64 hex digits")
            }
            if let zsync = entry.zsync, !Self.isWellFormedURL(zsync) {
                throw Self.entryError(
                    index: index, path: entry.path, line: line,
                    "zsync \(String(reflecting: zsync)) is not a valid relative or http(s) URL")
            }
            if let mode = entry.mode, !(0...0o7777).contains(mode) {
                throw Self.entryError(index: index, path: entry.path, line: line, "mode \(mode) is not in 0...07777")
            }
        }
        // A path whose leading components are another entry's path needs that entry to be a
        // directory and a file at once.
        for (index, entry) in files.enumerated() {
            var prefix = ""
            for component in entry.path.split(separator: "/").dropLast() {
                prefix += prefix.isEmpty ? String(component) : "/" + component
                if let file = indexByPath[prefix] {
                    let line = lines.flatMap { index < $0.count ? $0[index] : nil }
                    throw Self.entryError(
                        index: index, path: entry.path, line: line,
                        "its directory \(String(reflecting: prefix)) is also a file at \(Self.name(file, lines))")
                }
            }
        }
    }

    /// What is wrong with `path`, or `nil` if it is a valid manifest path: the rule for
    /// every relative path that names where a file goes (a manifest's, a Metalink file's
    /// names with folders, `haul get -o`).
    package static func pathProblem(_ path: String) -> String? {
        if isPlainPath(path) { return nil }
        if path.isEmpty { return "path is empty" }
        if path.hasPrefix("/") { return "path is absolute" }
        if path.unicodeScalars.contains(where: isControl) { return "path contains a NUL or control character" }
        if path.contains("\\") { return "path contains a backslash" }
        for component in path.split(separator: "/", omittingEmptySubsequences: false) {
            switch component {
            case "": return "path has an empty component"
            case ".": return "path has a '.' component"
            case "..": return "path has a '..' component"
            default: continue
            }
        }
        return nil
    }

    /// A fast check for the common path: printable ASCII with no backslash, and
    /// components that are neither empty nor `.` nor `..`. A path that fails it is checked
    /// in full by ``pathProblem(_:)``.
    private static func isPlainPath(_ path: String) -> Bool {
        var componentLength = 0
        var dots = 0
        for byte in path.utf8 {
            switch byte {
            case UInt8(ascii: "/"):
                if componentLength == 0 || componentLength == dots && dots <= 2 { return false }
                componentLength = 0
                dots = 0
            case 0x20...0x7E where byte != UInt8(ascii: "\\"):
                componentLength += 1
                if byte == UInt8(ascii: ".") { dots += 1 }
            default:
                return false
            }
        }
        return componentLength > 0 && !(componentLength == dots && dots <= 2)
    }

    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    static func isSHA256(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// `files[3] "docs/a.txt" (line 7): REASON`.
    static func entryError(index: Int, path: String?, line: Int?, _ reason: String) -> DownloadError {
        var location = "files[\(index)]"
        if let path { location += " \(String(reflecting: path))" }
        if let line { location += " (line \(line))" }
        return DownloadError(.invalidManifest, "invalid manifest: \(location): \(reason)")
    }

    private static func name(_ index: Int, _ lines: [Int]?) -> String {
        if let lines, index < lines.count { return "files[\(index)] (line \(lines[index]))" }
        return "files[\(index)]"
    }
}
