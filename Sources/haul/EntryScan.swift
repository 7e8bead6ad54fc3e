import ArgumentParser
import Foundation
import Haul

/// The first pass over `haul get`'s entries (its URLs, then the input file's), made once
/// the backend is chosen and before it is opened: every URL and input line is checked (a
/// problem is a usage error, and nothing is downloaded or queued), the entries are
/// counted, and the URL that first claims each partial file name is noted.
///
/// What it keeps does not depend on the URLs' lengths, so a list of millions stays small.
struct EntryScan {
    /// Entries, duplicates included.
    var count = 0
    /// The first entry's URL, while every entry has that URL.
    var onlyURL: String?
    /// Whether the entries name more than one URL.
    var severalURLs = false
    /// Hash of a partial file name → hash of the first URL that uses it.
    var claims: [Int: Int] = [:]

    /// What the scan checks besides each entry on its own.
    struct Rules {
        /// `-o`, which only applies to a single URL.
        var output: String?
        /// `--checksum`, which only applies to a single URL.
        var checksum: Checksum?
        /// `--mirror`, which only applies to a single URL.
        var mirrors: [URL] = []
        /// Whether the entries go to the shared queue (whose messages speak of queueing).
        var queueing: Bool
        /// The backend's own check of an entry, `-o` and `--checksum` applied.
        var check: (InputEntry) throws -> Void
    }

    /// Reads `urls` (the arguments as parsed, or what was wrong with one: see
    /// ``GetArgument/download``) and `input` (its first pass) by `rules`; throws the first
    /// problem as a `ValidationError`.
    /// `extra` are entries from Metalink files, read before the input file; `more` says
    /// entries are still to come (a Metalink document to fetch), so that having none yet
    /// is not an error.
    init(
        urls: [Result<URL, InputError>], extra: [InputEntry] = [], input: InputSource?, rules: Rules, more: Bool = false
    ) throws {
        var conflict: String?
        var refusal: (any Error)?
        func note(_ entry: InputEntry) {
            var entry = entry
            count += 1
            let url = entry.url.absoluteString
            if let only = onlyURL {
                if only != url { severalURLs = true }
            } else {
                onlyURL = url
            }
            if let output = rules.output, let name = entry.name, name != output, conflict == nil {
                conflict = "-o \(output) conflicts with out=\(name) in the input file."
            }
            if let checksum = rules.checksum, let other = entry.checksum, other != checksum, conflict == nil {
                conflict = "--checksum conflicts with the checksum= line in the input file."
            }
            if let output = rules.output { entry.name = output }
            if let checksum = rules.checksum { entry.checksum = checksum }
            if !rules.mirrors.isEmpty { entry.mirrors = rules.mirrors }
            if refusal == nil {
                do { try rules.check(entry) } catch { refusal = error }
            }
            _ = claim(entry)
        }
        do throws(InputError) {
            for url in urls { note(InputEntry(url: try url.get())) }
            for entry in extra { note(entry) }
            if let input {
                let reader = try input.firstPass()
                while let entry = try reader.next() { note(entry) }
            }
        } catch {
            throw ValidationError(rules.queueing ? "\(error.description); nothing was queued" : error.description)
        }
        guard count > 0 || more else {
            throw ValidationError(
                "No URLs to \(rules.queueing ? "queue" : "download"): give at least one URL, or -i FILE.")
        }
        if rules.queueing, severalURLs, rules.output != nil || rules.checksum != nil {
            throw ValidationError(
                "-o and --checksum can only be used with a single URL; use out= and checksum= lines in an input file instead.")
        }
        if rules.output != nil, severalURLs {
            throw ValidationError("-o can only be used with a single URL; use out= lines in an input file instead.")
        }
        if !rules.mirrors.isEmpty, severalURLs || count > 1 {
            throw ValidationError(
                "--mirror can only be used with a single URL; in an input file, put a URL's mirrors on its line, separated by tabs.")
        }
        if rules.checksum != nil, severalURLs {
            throw ValidationError(
                "--checksum can only be used with a single URL; use checksum= lines in an input file instead.")
        }
        if let conflict { throw ValidationError(conflict) }
        if let refusal { throw refusal }
    }

    /// Records `entry`; `false` when another URL already uses its partial file.
    mutating func claim(_ entry: InputEntry) -> Bool {
        let url = Self.hash(entry.url.absoluteString)
        let name = Self.hash(InputFile.partialKey(for: entry))
        if let owner = claims[name] { return owner == url }
        claims[name] = url
        return true
    }

    /// Whether `entry` is the one that may use its partial file.
    func owns(_ entry: InputEntry) -> Bool {
        claims[Self.hash(InputFile.partialKey(for: entry))].map { $0 == Self.hash(entry.url.absoluteString) } ?? true
    }

    private static func hash(_ text: String) -> Int {
        var hasher = Hasher()
        hasher.combine(text)
        return hasher.finalize()
    }
}
