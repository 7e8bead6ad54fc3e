import ArgumentParser
import Foundation
import Haul

/// `haul get`: downloads URLs into a directory, resuming partial downloads.
struct Get: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Download URLs into a directory.",
        discussion: """
            Partial downloads are kept as NAME.haul-partial next to the destination: run the \
            same command again to resume them, for instance after Ctrl-C.

            An input file (-i) lists one URL per line; blank lines and lines starting with # \
            are ignored. Indented lines under a URL set options for it: out=NAME (the file \
            name) and checksum=sha-256=HEX (or sha-1=HEX, md5=HEX).

            Exit status: 0 when every download completed and was verified, 1 when any \
            failed, 2 for invalid arguments, 130 after Ctrl-C (143 after SIGTERM).
            """)

    @Argument(help: ArgumentHelp("The http or https URLs to download.", valueName: "url"))
    var urls: [String] = []

    @Option(
        name: [.customShort("i"), .customLong("input-file")],
        help: ArgumentHelp("Read URLs and their options from a file ('-' for standard input).", valueName: "file"))
    var inputFile: String?

    @Option(
        name: [.customShort("d"), .customLong("dir")],
        help: ArgumentHelp(
            "The directory to save into, created if missing. (default: the current directory)", valueName: "dir"))
    var directory: String?

    @Option(
        name: [.customShort("o"), .customLong("output")],
        help: ArgumentHelp("The file name to save as; only with a single URL.", valueName: "name"))
    var output: String?

    @Option(
        name: [.customShort("j"), .customLong("jobs")],
        help: ArgumentHelp("How many downloads run at once. (default: 10)", valueName: "n"))
    var jobs: Int?

    @Option(
        name: .customLong("per-host"),
        help: ArgumentHelp("How many downloads may use the same host at once. (default: 6)", valueName: "n"))
    var perHost: Int?

    @Option(
        help: ArgumentHelp(
            "The expected digest, as sha-256=HEX, sha-1=HEX or md5=HEX; only with a single URL.",
            valueName: "alg=hex"))
    var checksum: String?

    @Option(help: ArgumentHelp("How many times to retry a failed attempt. (default: 5)", valueName: "n"))
    var retries: Int?

    @Option(
        help: ArgumentHelp(
            "Seconds to wait for a connection, and for data once connected. (default: 30 and 60)",
            valueName: "seconds"))
    var timeout: Double?

    @Option(
        name: .customLong("header"),
        help: ArgumentHelp("An extra request header, 'Name: value'; repeatable.", valueName: "header"))
    var headers: [String] = []

    @Flag(name: [.customShort("q"), .long], help: "Print nothing on standard output; errors still go to standard error.")
    var quiet = false

    @Flag(help: "Print events as JSON, one object per line.")
    var json = false

    mutating func run() async throws {
        let configuration = try managerConfiguration()
        let headers = try parsedHeaders()
        let entries = try downloadEntries()
        let directory = try outputDirectory()

        let mode: ProgressRenderer.Mode =
            if json { .json } else if quiet { .quiet } else if Console.outputIsTerminal { .live } else { .lines }
        let session = DownloadSession(
            entries: entries, directory: directory, headers: headers, configuration: configuration, mode: mode)
        let code = await session.run()
        if code != 0 { throw ExitCode(code) }
    }

    // MARK: - Validation

    private func managerConfiguration() throws -> DownloadManager.Configuration {
        if quiet && json { throw ValidationError("--quiet and --json cannot be used together.") }
        var configuration = DownloadManager.Configuration()
        if let jobs {
            guard jobs >= 1 else { throw ValidationError("-j must be at least 1.") }
            configuration.maxConcurrentDownloads = jobs
        }
        if let perHost {
            guard perHost >= 1 else { throw ValidationError("--per-host must be at least 1.") }
            configuration.maxConnectionsPerHost = perHost
        }
        if let retries {
            guard retries >= 0 else { throw ValidationError("--retries must not be negative.") }
            configuration.retry.maxRetries = retries
        }
        if let timeout {
            guard timeout.isFinite, timeout > 0, timeout <= 86_400 else {
                throw ValidationError("--timeout must be a number of seconds above 0 (at most 86400).")
            }
            configuration.connectTimeout = .seconds(timeout)
            configuration.idleTimeout = .seconds(timeout)
        }
        return configuration
    }

    private func parsedHeaders() throws -> [(name: String, value: String)] {
        try headers.map { header in
            guard let colon = header.firstIndex(of: ":") else {
                throw ValidationError("--header '\(header)' must look like 'Name: value'.")
            }
            let name = header[..<colon].trimmingCharacters(in: .whitespaces)
            let value = header[header.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            let token = CharacterSet(charactersIn: "!#$%&'*+-.^_`|~0123456789").union(
                CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"))
            guard !name.isEmpty, name.unicodeScalars.allSatisfy({ token.contains($0) }) else {
                throw ValidationError("--header '\(header)': '\(name)' is not a valid header name.")
            }
            guard !value.contains(where: { $0 == "\r" || $0 == "\n" }) else {
                throw ValidationError("--header '\(header)': the value must be on one line.")
            }
            return (name, value)
        }
    }

    /// The URLs of the command line, then those of the input file, each once.
    private func downloadEntries() throws -> [InputEntry] {
        var entries: [InputEntry] = []
        do throws(InputError) {
            for text in urls { entries.append(InputEntry(url: try InputFile.httpURL(text))) }
            if let inputFile { entries += try InputFile.load(inputFile) }
        } catch {
            throw ValidationError(error.description)
        }

        var unique: [InputEntry] = []
        var positions: [DownloadID: Int] = [:]
        for entry in entries {
            guard let position = positions[entry.id] else {
                positions[entry.id] = unique.count
                unique.append(entry)
                continue
            }
            // The same URL again joins the same download; it may not ask for something else.
            var merged = unique[position]
            if let name = entry.name {
                if let other = merged.name, other != name {
                    throw ValidationError("\(entry.url.absoluteString) is listed twice, with out=\(other) and out=\(name).")
                }
                merged.name = name
            }
            if let checksum = entry.checksum {
                if let other = merged.checksum, other != checksum {
                    throw ValidationError("\(entry.url.absoluteString) is listed twice, with different checksums.")
                }
                merged.checksum = checksum
            }
            unique[position] = merged
        }
        guard !unique.isEmpty else {
            throw ValidationError("No URLs to download: give at least one URL, or -i FILE.")
        }

        if let output {
            guard unique.count == 1 else {
                throw ValidationError("-o can only be used with a single URL (got \(unique.count)); use out= lines in an input file instead.")
            }
            if let problem = InputFile.fileNameProblem(output) { throw ValidationError("-o '\(output)': \(problem).") }
            if let name = unique[0].name, name != output {
                throw ValidationError("-o \(output) conflicts with out=\(name) in the input file.")
            }
            unique[0].name = output
        }
        if let checksum {
            guard unique.count == 1 else {
                throw ValidationError("--checksum can only be used with a single URL (got \(unique.count)); use checksum= lines in an input file instead.")
            }
            let parsed: Checksum
            do {
                parsed = try Checksum(parsing: checksum)
            } catch {
                throw ValidationError("--checksum: \(error.message)")
            }
            if let other = unique[0].checksum, other != parsed {
                throw ValidationError("--checksum conflicts with the checksum= line in the input file.")
            }
            unique[0].checksum = parsed
        }
        return unique
    }

    /// The output directory as an absolute file URL, created if missing.
    private func outputDirectory() throws -> URL {
        let path = directory ?? FileManager.default.currentDirectoryPath
        let url = URL(fileURLWithPath: path, isDirectory: true).standardizedFileURL
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else { throw ValidationError("-d \(path): not a directory.") }
            return url
        }
        do {
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        } catch {
            Console.err("haul: cannot create directory \(path): \(error.localizedDescription)\n")
            throw ExitCode.failure
        }
        return url
    }
}
