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

    /// The download's ID: the URL.
    var id: DownloadID { DownloadID(url.absoluteString) }
}

/// A problem with an input file, or with a URL or option anywhere on the command line.
struct InputError: Error, CustomStringConvertible {
    let description: String
}

/// Reads aria2-style input files: one URL per line, each optionally followed by indented
/// `key=value` option lines.
///
/// ```
/// # comments and blank lines are ignored
/// https://example.com/big.iso
///   out=big.iso
///   checksum=sha-256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
/// https://example.com/small.txt
/// ```
///
/// Options: `out=NAME` (the file name in the output directory) and
/// `checksum=ALGORITHM=HEX` (`sha-256`, `sha-1` or `md5`).
enum InputFile {
    /// Reads and parses the file at `path`; `-` reads standard input.
    static func load(_ path: String) throws(InputError) -> [InputEntry] {
        let data: Data
        let source = path == "-" ? "standard input" : "input file '\(path)'"
        if path == "-" {
            data = FileHandle.standardInput.readDataToEndOfFile()
        } else {
            do {
                data = try Data(contentsOf: URL(fileURLWithPath: path))
            } catch {
                throw InputError(description: "cannot read \(source): \(error.localizedDescription)")
            }
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw InputError(description: "\(source) is not UTF-8 text")
        }
        return try parse(text, source: source)
    }

    /// Parses input file text; `source` names the file in error messages.
    static func parse(_ text: String, source: String) throws(InputError) -> [InputEntry] {
        var entries: [InputEntry] = []
        var keysSeen: Set<String> = []
        // Splitting on `Character.isNewline` treats "\r\n" as one line break.
        let lines = text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
        for (index, line) in lines.enumerated() {
            func failure(_ message: String) -> InputError {
                InputError(description: "\(source), line \(index + 1): \(message)")
            }
            let content = line.trimmingCharacters(in: .whitespaces)
            if content.isEmpty || content.hasPrefix("#") { continue }

            guard let first = line.first, first.isWhitespace else {
                do throws(InputError) {
                    entries.append(InputEntry(url: try httpURL(content)))
                } catch {
                    throw failure(error.description)
                }
                keysSeen = []
                continue
            }

            guard !entries.isEmpty else {
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
                if let problem = fileNameProblem(value) { throw failure("out=\(value): \(problem)") }
                entries[entries.count - 1].name = value
            case "checksum":
                do {
                    entries[entries.count - 1].checksum = try Checksum(parsing: value)
                } catch {
                    throw failure(error.message)
                }
            default:
                throw failure("unknown option '\(key)': supported options are out and checksum")
            }
        }
        return entries
    }

    /// The URL in `text`, when it is an http or https URL with a host.
    static func httpURL(_ text: String) throws(InputError) -> URL {
        if text.contains(where: \.isWhitespace) {
            throw InputError(description: "'\(text)' contains whitespace: give one URL per line")
        }
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(),
            scheme == "http" || scheme == "https", let host = url.host, !host.isEmpty
        else {
            throw InputError(description: "'\(text)' is not an http or https URL")
        }
        return url
    }

    /// What is wrong with `name` as an output file name, or `nil` when it is fine.
    static func fileNameProblem(_ name: String) -> String? {
        if name.isEmpty { return "the file name is empty" }
        if name.contains("/") { return "give a file name, not a path (use -d for the directory)" }
        if name == "." || name == ".." { return "'\(name)' is not a file name" }
        return nil
    }
}
