#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Haul

/// One URL to fetch, with its per-URL options.
struct InputEntry: Sendable {
    /// The resource, always http or https.
    var url: URL
    /// The file name in the output directory; `nil` lets the response decide.
    var name: String?
    /// The digest the content must have.
    var checksum: Checksum?
    /// Other addresses of the same content (tab-separated on the URL's line, as aria2
    /// takes them, or `--mirror`).
    var mirrors: [URL] = []
    /// The size the content must have (a Metalink file's).
    var expectedSize: Int64?
    /// The digests of its pieces (a Metalink file's).
    var pieces: PieceChecksums?
    /// The zsync control file it is built from, with its seeds (`URL.zsync`, `--zsync`).
    var delta: DeltaSource?
    /// The stream of an HLS playlist it is (`URL.m3u8` for a service or the shared queue).
    var stream: HLSStream?

    /// Whether ``name`` is a path below the output directory (a Metalink file's name
    /// with folders), not a plain file name.
    var isPath: Bool { name?.contains("/") ?? false }

    /// The download's ID: the URL.
    var id: DownloadID { DownloadID(url.absoluteString) }
}

/// A problem with an input file, or with a URL or option anywhere on the command line.
struct InputError: Error, CustomStringConvertible {
    let description: String
}

/// aria2-style input files: one URL per line, each optionally followed by indented
/// `key=value` option lines. Several URLs on one line, separated by tabs, are addresses
/// of the same content (mirrors): the first names the download.
///
/// ```
/// # comments and blank lines are ignored
/// https://example.com/big.iso	https://mirror.example.net/big.iso
///   out=big.iso
///   checksum=sha-256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
/// https://example.com/small.txt
/// ```
///
/// Options: `out=NAME` (the file name in the output directory) and
/// `checksum=ALGORITHM=HEX` (`sha-256`, `sha-1` or `md5`).
///
/// Files are read a line at a time (``InputReader``), so a list of a million URLs costs
/// no more memory than a list of ten.
enum InputFile {
    /// The URL in `text`, when it is an http or https URL with a host.
    static func httpURL(_ text: String) throws(InputError) -> URL {
        // (Checked byte by byte first: only a space, a control from tab to carriage return
        // or a non-ASCII byte can start whitespace.)
        if text.utf8.contains(where: { $0 == 0x20 || (0x09...0x0D).contains($0) || $0 >= 0x80 }),
            text.contains(where: \.isWhitespace)
        {
            throw InputError(description: "'\(text)' contains whitespace: give one URL per line")
        }
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(),
            scheme == "http" || scheme == "https", let host = url.host, !host.isEmpty
        else {
            throw InputError(description: "'\(text)' is not an http or https URL")
        }
        return url
    }

    /// `text` without leading and trailing whitespace. Most lines are plain ASCII with
    /// nothing to trim: those are checked byte by byte instead of through `CharacterSet`,
    /// which costs microseconds a line and shows when a list has a million.
    static func trimmed(_ text: String) -> String {
        let bytes = text.utf8
        guard let first = bytes.first, let last = bytes.last else { return text }
        func isPlain(_ byte: UInt8) -> Bool { byte > 0x20 && byte < 0x80 }
        if isPlain(first), isPlain(last) { return text }
        return text.trimmingCharacters(in: .whitespaces)
    }

    /// What is wrong with `name` as an output file name, or `nil` when it is fine.
    static func fileNameProblem(_ name: String) -> String? {
        if name.isEmpty { return "the file name is empty" }
        if name.contains("/") { return "give a file name, not a path (use -d for the directory)" }
        if name == "." || name == ".." { return "'\(name)' is not a file name" }
        return nil
    }

    /// The name of the partial file the library will use for `entry` in a directory: the
    /// entry's name, else the URL's last path component, made safe the way the library
    /// does it. Two entries with the same key would share a partial file.
    static func partialKey(for entry: InputEntry) -> String {
        if let name = entry.name { return entry.isPath ? name : sanitize(name) ?? name }
        let last = entry.url.lastPathComponent
        guard !last.isEmpty, last != "/" else { return "download" }
        return sanitize(last) ?? "download"
    }

    /// The library's reduction to one safe path component.
    private static func sanitize(_ name: String) -> String? {
        FileNaming.sanitize(name)
    }
}

/// Reads an input file one entry at a time.
///
/// Standard input (`-`) can only be read once, so ``InputSource`` copies it to an
/// anonymous temporary file on the first pass and reads that on the second.
final class InputReader {
    /// How errors name the input: `input file 'PATH'` or `standard input`.
    let source: String
    private let file: UnsafeMutablePointer<FILE>
    private let closesFile: Bool
    private let copy: UnsafeMutablePointer<FILE>?
    private var buffer: UnsafeMutablePointer<CChar>?
    private var capacity = 0
    private var lineNumber = 0
    private var pending: InputEntry?
    private var keysSeen: Set<String> = []

    /// Reads `file` from its current position; copies every line read to `copy`, if given.
    init(file: UnsafeMutablePointer<FILE>, source: String, closesFile: Bool, copyingTo copy: UnsafeMutablePointer<FILE>?) {
        self.file = file
        self.source = source
        self.closesFile = closesFile
        self.copy = copy
    }

    deinit {
        free(buffer)
        if closesFile { fclose(file) }
    }

    /// The next entry, with its option lines; `nil` at the end of the input.
    func next() throws(InputError) -> InputEntry? {
        while let line = try readLine() {
            func failure(_ message: String) -> InputError {
                InputError(description: "\(source), line \(lineNumber): \(message)")
            }
            let content = InputFile.trimmed(line)
            if content.isEmpty || content.hasPrefix("#") { continue }

            guard let first = line.first, first.isWhitespace else {
                var entry: InputEntry
                do throws(InputError) {
                    let urls = content.split(separator: "\t", omittingEmptySubsequences: true).map {
                        InputFile.trimmed(String($0))
                    }
                    entry = InputEntry(url: try InputFile.httpURL(urls[0]))
                    for mirror in urls.dropFirst() { entry.mirrors.append(try InputFile.httpURL(mirror)) }
                } catch {
                    throw failure(error.description)
                }
                keysSeen = []
                let previous = pending
                pending = entry
                if let previous { return previous }
                continue
            }

            guard pending != nil else {
                throw failure("option line '\(content)' comes before any URL")
            }
            guard let equals = content.firstIndex(of: "=") else {
                throw failure("'\(content)' is not an option: expected key=value (out=NAME or checksum=ALG=HEX)")
            }
            let key = content[..<equals].trimmingCharacters(in: .whitespaces)
            let value = content[content.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            guard keysSeen.insert(key).inserted else {
                throw failure("option '\(key)' is given twice for the same URL")
            }
            switch key {
            case "out":
                if let problem = InputFile.fileNameProblem(value) { throw failure("out=\(value): \(problem)") }
                pending?.name = value
            case "checksum":
                do {
                    pending?.checksum = try Checksum(parsing: value)
                } catch {
                    throw failure(error.message)
                }
            default:
                throw failure("unknown option '\(key)': supported options are out and checksum")
            }
        }
        defer { pending = nil }
        return pending
    }

    /// The next line without its line break, or `nil` at the end.
    private func readLine() throws(InputError) -> String? {
        errno = 0
        let length = getline(&buffer, &capacity, file)
        guard length >= 0, let buffer else {
            if ferror(file) != 0 {
                let reason = String(cString: strerror(errno))
                throw InputError(description: "cannot read \(source): \(reason)")
            }
            return nil
        }
        lineNumber += 1
        if let copy { fwrite(buffer, 1, length, copy) }
        var count = length
        let bytes = UnsafeRawPointer(buffer).assumingMemoryBound(to: UInt8.self)
        if count > 0, bytes[count - 1] == UInt8(ascii: "\n") { count -= 1 }
        if count > 0, bytes[count - 1] == UInt8(ascii: "\r") { count -= 1 }
        guard let line = String(bytes: UnsafeBufferPointer(start: bytes, count: count), encoding: .utf8) else {
            throw InputError(description: "\(source), line \(lineNumber): not UTF-8 text")
        }
        return line
    }
}

/// An input file that can be read twice: once to check every line, once to queue the
/// downloads. Standard input is copied to an anonymous temporary file as it is checked.
final class InputSource {
    /// The path given with `-i`; `-` for standard input.
    let path: String
    private var spool: UnsafeMutablePointer<FILE>?

    init(path: String) {
        self.path = path
    }

    deinit {
        if let spool { fclose(spool) }
    }

    private var source: String { path == "-" ? "standard input" : "input file '\(path)'" }

    /// A reader for the first pass.
    func firstPass() throws(InputError) -> InputReader {
        if path == "-" {
            let descriptor = dup(STDIN_FILENO)
            guard descriptor >= 0, let input = fdopen(descriptor, "r") else {
                throw InputError(description: "cannot read standard input: \(String(cString: strerror(errno)))")
            }
            guard let spool = tmpfile() else {
                fclose(input)
                throw InputError(
                    description: "cannot make a temporary copy of standard input: \(String(cString: strerror(errno)))")
            }
            self.spool = spool
            return InputReader(file: input, source: source, closesFile: true, copyingTo: spool)
        }
        return try open()
    }

    /// A reader for the second pass, from the beginning again.
    func secondPass() throws(InputError) -> InputReader {
        if let spool {
            fflush(spool)
            rewind(spool)
            return InputReader(file: spool, source: source, closesFile: false, copyingTo: nil)
        }
        return try open()
    }

    private func open() throws(InputError) -> InputReader {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            throw InputError(description: "cannot read \(source): it is a directory")
        }
        guard let file = fopen(path, "r") else {
            throw InputError(description: "cannot read \(source): \(String(cString: strerror(errno)))")
        }
        return InputReader(file: file, source: source, closesFile: true, copyingTo: nil)
    }
}
