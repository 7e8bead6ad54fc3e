import ArgumentParser
import HaulPostgres
import Foundation
import Haul
import HaulServer

/// `haul get`: downloads URLs into a directory, resuming partial downloads.
struct Get: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Download URLs into a directory.",
        discussion: """
            Every download is recorded in the journal (--journal). Partial downloads are kept \
            as NAME.haul-partial next to the destination: after Ctrl-C, a full disk or \
            'haul pause', run 'haul resume' (or the same command again) to continue them.

            An input file (-i) lists one URL per line; blank lines and lines starting with # \
            are ignored. Indented lines under a URL set options for it: out=NAME (the file \
            name) and checksum=sha-256=HEX (or sha-1=HEX, md5=HEX). The file is read as a \
            stream, so it may list millions of URLs; every line is checked before anything \
            is downloaded.

            A download that another running haul is working on (same journal) is followed to \
            its end, with its progress; a dead one's downloads are taken over at once, \
            partial files and all. Running the same download again once it completed sends \
            a conditional request, and nothing is transferred if the file is unchanged \
            (--force downloads it again).

            Exit status: 0 when every download completed and was verified at its \
            destination, 1 when any failed, was left paused or (--no-wait) is run by \
            another process, 2 for invalid arguments, 130 after Ctrl-C (143 after SIGTERM).
            """)

    /// How many requests are handed to the manager at once.
    static let batchSize = 10_000

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
        help: ArgumentHelp(
            "The expected digest, as sha-256=HEX, sha-1=HEX or md5=HEX; only with a single URL.",
            valueName: "alg=hex"))
    var checksum: String?

    @Option(
        name: .customLong("header"),
        help: ArgumentHelp(
            "An extra request header, 'Name: value'; repeatable. Authorization, Proxy-Authorization and Cookie are credentials (see --secret-header).",
            valueName: "header"))
    var headers: [String] = []

    @Flag(
        help: """
            Download again even when the destination still holds the completed file of the \
            same download. (By default such a file is revalidated with a conditional request \
            and kept when the server answers 304 Not Modified.)
            """)
    var force = false
    @Option(
        name: .customLong("secret-header"),
        help: ArgumentHelp(
            "A request header that is a credential, 'Name: value'; repeatable. Like Authorization, it goes only to the URL's own origin (scheme, host, port), never to another one a redirect names, and is not stored in the journal without --store-credentials.",
            valueName: "header"))
    var secretHeaders: [String] = []

    @Flag(
        name: .customLong("store-credentials"),
        help: "Store credential headers (and URL user info) in the journal (readable by you only), so that 'haul resume' can continue without them being given again.")
    var storeCredentials = false

    @Flag(
        help: "With 'haul serve' running for the journal: queue the downloads with it and exit, without waiting for them.")
    var detach = false

    @OptionGroup var options: DownloadOptions

    @OptionGroup var journalOptions: JournalOptions

    @OptionGroup var queueOptions: QueueOptions

    mutating func run() async throws {
        if let address = try queueOptions.address() {
            try await enqueue(into: address)
            return
        }
        let configuration = try options.managerConfiguration()
        let headers = try Self.parsedHeaders(self.headers, option: "--header")
        let secretHeaders = try Self.parsedHeaders(self.secretHeaders, option: "--secret-header")
        let fixedChecksum = try parsedChecksum()
        if let output, let problem = InputFile.fileNameProblem(output) {
            throw ValidationError("-o '\(output)': \(problem).")
        }
        let input = inputFile.map(InputSource.init)
        let scan = try scanEntries(input, checksum: fixedChecksum)
        let directory = try outputDirectory()
        if let client = try ServiceMode.client(journalOptions) {
            // A service owns the journal: it downloads, this process follows.
            // The client is closed before a refusal: an HTTP client must not be dropped open.
            do {
                try options.network.refuseForService()
                if options.rates.maxOverallRate != nil || options.rates.maxHostRate != nil {
                    throw ValidationError(
                        "a service runs for this journal, and its overall and per-host limits are its own: change them with PATCH /api/v1/settings (or 'haul serve --max-overall-rate'); --limit-rate works.")
                }
            } catch {
                await client.close()
                throw error
            }
            var inputs: [DownloadInput] = []
            func add(_ entry: InputEntry) {
                var entry = entry
                applyOverrides(to: &entry, checksum: fixedChecksum)
                inputs.append(
                    DownloadInput(
                        url: entry.url.absoluteString, directory: directory.path, name: entry.name,
                        checksum: entry.checksum?.description,
                        headers: (headers + secretHeaders).isEmpty
                            ? nil : Dictionary((headers + secretHeaders).map { ($0.name, $0.value) }, uniquingKeysWith: { $1 }),
                        maxBytesPerSecond: options.rates.limitRate?.bytesPerSecond))
            }
            for text in urls { if let url = try? InputFile.httpURL(text) { add(InputEntry(url: url)) } }
            if let input {
                do throws(InputError) {
                    let reader = try input.secondPass()
                    while let entry = try reader.next() { add(entry) }
                } catch {
                    throw ValidationError(error.description)
                }
            }
            let code = try await ServiceMode.get(client, inputs, detach: detach, quiet: options.quiet)
            if code != 0 { throw ExitCode(code) }
            return
        }
        if detach { throw ValidationError("--detach needs a running 'haul serve' for the journal.") }
        let journal = try journalOptions.open()

        let session = DownloadSession(configuration: configuration, journal: journal, mode: options.mode)
        let code = await session.run { intake in
            await intake.expect(scan.count)
            await feed(
                intake, input: input, scan: scan, checksum: fixedChecksum, directory: directory,
                headers: headers + secretHeaders, secretNames: Set(secretHeaders.map { $0.name }))
        }
        if code != 0 { throw ExitCode(code) }
    }

    // MARK: - Reading the entries

    /// What the first pass over the entries learnt, in memory that does not depend on the
    /// URLs' lengths: a count, and which URL first claimed each partial file name.
    struct Scan: Sendable {
        /// Entries, duplicates included.
        var count = 0
        /// The first entry's URL, while every entry has that URL.
        var onlyURL: String?
        /// Whether the entries name more than one URL.
        var severalURLs = false
        /// Hash of a partial file name → hash of the first URL that uses it.
        var claims: [Int: Int] = [:]

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

    /// The first pass: checks every URL and input line (a problem is a usage error and
    /// nothing is downloaded), counts the entries, and notes which URL first claims each
    /// file name.
    private func scanEntries(_ input: InputSource?, checksum fixedChecksum: Checksum?) throws -> Scan {
        var scan = Scan()
        var conflict: String?
        func note(_ entry: InputEntry) {
            var entry = entry
            scan.count += 1
            let url = entry.url.absoluteString
            if let only = scan.onlyURL {
                if only != url { scan.severalURLs = true }
            } else {
                scan.onlyURL = url
            }
            if let output, let name = entry.name, name != output, conflict == nil {
                conflict = "-o \(output) conflicts with out=\(name) in the input file."
            }
            if let fixedChecksum, let other = entry.checksum, other != fixedChecksum, conflict == nil {
                conflict = "--checksum conflicts with the checksum= line in the input file."
            }
            applyOverrides(to: &entry, checksum: fixedChecksum)
            _ = scan.claim(entry)
        }
        do throws(InputError) {
            for text in urls { note(InputEntry(url: try InputFile.httpURL(text))) }
            if let input {
                let reader = try input.firstPass()
                while let entry = try reader.next() { note(entry) }
            }
        } catch {
            throw ValidationError(error.description)
        }
        guard scan.count > 0 else {
            throw ValidationError("No URLs to download: give at least one URL, or -i FILE.")
        }
        if output != nil, scan.severalURLs {
            throw ValidationError("-o can only be used with a single URL; use out= lines in an input file instead.")
        }
        if checksum != nil, scan.severalURLs {
            throw ValidationError(
                "--checksum can only be used with a single URL; use checksum= lines in an input file instead.")
        }
        if let conflict { throw ValidationError(conflict) }
        return scan
    }

    /// `-o` and `--checksum`, which only apply when there is a single URL.
    private func applyOverrides(to entry: inout InputEntry, checksum fixedChecksum: Checksum?) {
        if let output { entry.name = output }
        if let fixedChecksum { entry.checksum = fixedChecksum }
    }

    /// The second pass: builds requests and queues them in batches. An entry whose file
    /// name another URL claimed first is reported as a duplicate instead.
    private func feed(
        _ intake: Intake, input: InputSource?, scan: Scan, checksum fixedChecksum: Checksum?, directory: URL,
        headers: [(name: String, value: String)], secretNames: Set<String>
    ) async {
        var batch: [DownloadRequest] = []
        batch.reserveCapacity(min(Self.batchSize, scan.count))
        func add(_ entry: InputEntry) async -> Bool {
            var entry = entry
            applyOverrides(to: &entry, checksum: fixedChecksum)
            var request = DownloadRequest(
                url: entry.url, destination: .directory(directory, name: entry.name), id: entry.id,
                checksum: entry.checksum, headers: headers)
            request.forceDownload = force
            request.sensitiveHeaderNames = secretNames
            request.storesCredentials = storeCredentials
            guard scan.owns(entry) else {
                let name = InputFile.partialKey(for: entry)
                let message =
                    "another URL in the list would be saved to the same file (\(name)); give it another name with out= in an input file"
                await intake.reject(request, code: "duplicate", message: message)
                return true
            }
            batch.append(request)
            guard batch.count >= Self.batchSize else { return true }
            defer { batch.removeAll(keepingCapacity: true) }
            return await intake.enqueue(batch)
        }

        for text in urls {
            guard let url = try? InputFile.httpURL(text) else { continue }  // checked in the first pass
            guard await add(InputEntry(url: url)) else { return }
        }
        if let input {
            do throws(InputError) {
                let reader = try input.secondPass()
                while let entry = try reader.next() {
                    guard await add(entry) else { return }
                }
            } catch {
                await intake.fail("\(error.description) (the input changed while it was read)")
            }
        }
        if !batch.isEmpty { await intake.enqueue(batch) }
    }

    // MARK: - Validation

    private func parsedChecksum() throws -> Checksum? {
        guard let checksum else { return nil }
        do {
            return try Checksum(parsing: checksum)
        } catch {
            throw ValidationError("--checksum: \(error.message)")
        }
    }

    /// Parses `Name: value` headers. Messages never repeat a value: it may be a secret.
    static func parsedHeaders(_ headers: [String], option: String) throws -> [(name: String, value: String)] {
        try headers.map { header in
            guard let colon = header.firstIndex(of: ":") else {
                throw ValidationError("\(option): a header must look like 'Name: value' (this one has no colon).")
            }
            let name = header[..<colon].trimmingCharacters(in: .whitespaces)
            let value = header[header.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            let token = CharacterSet(charactersIn: "!#$%&'*+-.^_`|~0123456789").union(
                CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"))
            guard !name.isEmpty, name.unicodeScalars.allSatisfy({ token.contains($0) }) else {
                throw ValidationError("\(option): a header name must be a token such as 'X-Api-Key' (without spaces).")
            }
            guard !value.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" }) else {  // ("\r\n" is one Character)
                throw ValidationError("\(option) '\(name): …': the value must be on one line.")
            }
            return (name, value)
        }
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

extension Get {
    /// `haul get --queue`: adds the URLs (given and from `-i FILE`, in the same format as
    /// without `--queue`) to the shared queue for `haul worker` to run. All or nothing:
    /// every line is read and checked first, then they are added in one transaction; a bad
    /// line adds none and names the line.
    func enqueue(into address: QueueAddress) async throws {
        if !secretHeaders.isEmpty {
            throw ValidationError("--secret-header with --queue: the shared queue stores headers in the clear, so it does not take credentials")
        }
        let fixedChecksum = try parsedChecksum()
        if let output, let problem = InputFile.fileNameProblem(output) {
            throw ValidationError("-o '\(output)': \(problem).")
        }
        let headers = try Self.parsedHeaders(self.headers, option: "--header")
        var entries: [InputEntry] = []
        do throws(InputError) {
            for text in urls { entries.append(InputEntry(url: try InputFile.httpURL(text))) }
            if let inputFile {
                let reader = try InputSource(path: inputFile).firstPass()
                while let entry = try reader.next() { entries.append(entry) }
            }
        } catch {
            throw ValidationError("\(error.description); nothing was queued")
        }
        guard !entries.isEmpty else { throw ValidationError("No URLs to queue: give at least one URL, or -i FILE.") }
        if entries.count > 1, output != nil || checksum != nil {
            throw ValidationError(
                "-o and --checksum can only be used with a single URL; use out= and checksum= lines in an input file instead.")
        }
        var requests: [QueueRequest] = []
        requests.reserveCapacity(entries.count)
        for var entry in entries {
            applyOverrides(to: &entry, checksum: fixedChecksum)
            do {
                requests.append(
                    try QueueRequest(
                        url: entry.url, name: entry.name, checksum: entry.checksum?.description, headers: headers))
            } catch {
                throw ValidationError("\(error.message); nothing was queued")
            }
        }
        let wanted = requests
        let added = try await QueueOptions.with(address) { queue in try await queue.enqueue(wanted) }
        Console.out("queued \(added) of \(requests.count) (\(requests.count - added) already in the queue)\n")
    }
}
