import ArgumentParser
import Foundation
import Haul

/// `haul get`: downloads URLs into a directory, resuming partial downloads.
struct Get: AsyncParsableCommand {
    static let configuration = HaulCommand.subcommandConfiguration(
        CommandConfiguration(
            commandName: "get",
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

                Exit status: 0 when every download completed (or was unchanged) and was \
                verified at its destination, 1 when any failed or (--no-wait) is run by another \
                process, 2 for invalid arguments, 3 when none failed but some were left paused \
                ('haul pause' or a full disk; 'haul resume' finishes them), 130 after Ctrl-C \
                (143 after SIGTERM).
                """))

    @Argument(
        help: ArgumentHelp(
            "The http or https URLs to download, or Metalink 4 files (FILE.meta4): every file they name, with its mirrors and digests; a URL ending in .zsync is a zsync control file, whose target is downloaded (see --zsync); so is a URL whose download turns out to be one (its first line is 'zsync: VERSION'), which is kept. A URL ending in .m3u8 is an HLS playlist: its stream is saved as one .ts or .mp4 file (see --hls-variant); so is the stream of a URL whose download turns out to be one (it starts with #EXTM3U), which is kept.",
            valueName: "url"))
    var urls: [String] = []

    @Option(
        name: .customLong("metalink"),
        help: ArgumentHelp(
            "A Metalink 4 document to fetch from a server, then download every file it names.",
            valueName: "url"))
    var metalinkURLs: [String] = []

    @Option(
        name: .customLong("zsync"),
        help: ArgumentHelp(
            "A zsync control file to fetch from a server: its target is built from the blocks local files hold (the file already at the destination, --seed files), and only the rest is fetched. (A URL ending in .zsync is taken as one too.)",
            valueName: "url"))
    var zsyncURLs: [String] = []

    @Option(
        name: .customLong("seed"),
        help: ArgumentHelp(
            "A local file that may hold blocks of a zsync target (an older version, a partial copy).",
            valueName: "file"))
    var seeds: [String] = []

    @Option(
        name: .customLong("hls-variant"),
        help: ArgumentHelp(
            "For a URL ending in .m3u8 (an HLS playlist, downloaded as one playable .ts or .mp4 file): which variant of a master playlist, best, worst, a bandwidth in bits per second (the highest not above it), or WIDTHxHEIGHT; list shows them and downloads nothing. (default: best)",
            valueName: "choice"))
    var hlsVariant: String?

    @Flag(
        name: .customLong("hls-renditions"),
        help: "Also download the chosen variant's audio, video and subtitle renditions (EXT-X-MEDIA), each into a file beside the stream's (subtitles as one WebVTT file).")
    var hlsRenditions = false

    @Option(
        name: .customLong("hls-duration"),
        help: ArgumentHelp(
            "Record at most this many seconds of a stream: a live playlist is refreshed until it ends or this much is recorded. (default: a live playlist is recorded until it ends)",
            valueName: "seconds"))
    var hlsDuration: Double?

    @Option(
        name: .customLong("metalink-location"),
        help: ArgumentHelp(
            "Prefer a Metalink file's mirrors in this country (ISO 3166 code, such as de or us), then its priorities.",
            valueName: "code"))
    var metalinkLocation: String?

    @Option(
        name: [.customShort("i"), .customLong("input-file")],
        help: ArgumentHelp("Read URLs and their options from a file ('-' for standard input).", valueName: "file"))
    var inputFile: String?

    @Option(
        name: [.customShort("d"), .customLong("dir")],
        help: ArgumentHelp(
            "The directory to save into, created if missing, or an S3 prefix (s3://bucket/prefix/). (default: the current directory)",
            valueName: "dir"))
    var directory: String?

    @Option(
        name: [.customShort("o"), .customLong("output")],
        help: ArgumentHelp(
            "The file to save as: a name, a path below -d (folders are made), or an absolute path; or the object to store (s3://bucket/key). Only with a single URL.",
            valueName: "path"))
    var output: String?

    @Option(
        help: ArgumentHelp(
            "The expected digest, as sha-256=HEX, sha-1=HEX or md5=HEX; only with a single URL.",
            valueName: "alg=hex"))
    var checksum: String?

    @Option(
        name: .customLong("mirror"),
        help: ArgumentHelp(
            "Another address of the same content; only with a single URL. Segments are spread across the addresses that work, and one that fails or serves other content is dropped. (In an input file: the URLs on one line, separated by tabs.)",
            valueName: "url"))
    var mirrors: [String] = []

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

    @Flag(
        name: [.customShort("c"), .customLong("continue")],
        help: """
            Accepted for wget's and curl's habit, and changes nothing: haul always continues \
            a partial download from where it stopped (when the server's validators say the \
            content is the same).
            """)
    var continuePartial = false

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

    @OptionGroup(title: "Hooks") var hookOptions: HookOptions

    /// The arguments, checked, once `validate()` has run.
    @Derived var checked: Checked?

    /// What `haul get`'s arguments ask for, checked by `validate()` without choosing a
    /// backend or reading an entry; ``plan(_:)`` takes it from there in `run()`.
    struct Checked {
        var headers: [(name: String, value: String)]
        var secretHeaders: [(name: String, value: String)]
        var checksum: Checksum?
        /// The object or prefix to store into (`-o`/`-d s3://…`).
        var object: S3Location?
        /// `-o`'s name (an object's last key component stands for it).
        var output: String?
        var mirrors: [URL]
        var arguments: [GetArgument]
        var streams: StreamArguments
        var zsync: ZsyncPlan
        var metalinkURLs: [URL]
        /// Where the files go: the output directory, or the staging directory of objects.
        var directory: URL
    }

    /// The HLS playlists among the arguments, and the stream options.
    struct StreamArguments {
        var urls: [URL]
        var options: HLSOptions
        /// `--hls-variant list`: list each playlist's variants instead.
        var listsVariants: Bool
    }

    /// The zsync control files to fetch, and the seeds their targets are built from.
    struct ZsyncPlan {
        var urls: [URL]
        var seeds: [URL]
    }

    /// What `run()` carries out: the backend, the checked downloads, and what is still to
    /// be fetched before they start.
    private struct Plan {
        var backend: BackendChoice
        var batch: GetBatch
        var metalinkURLs: [URL]
        var zsync: ZsyncPlan
        var rules: EntryScan.Rules
        var streams: (urls: [URL], settings: HLSEntries.Settings)
    }

    mutating func validate() throws {
        let headers = try Self.parsedHeaders(self.headers, option: "--header")
        let secretHeaders = try Self.parsedHeaders(self.secretHeaders, option: "--secret-header")
        let checksum = try parsedChecksum()
        let object = try objectDestination()
        // An object's key (not a prefix) takes one URL, as -o does: its last component stands
        // for the name in that rule.
        let output = object.map { $0.isPrefix ? nil : $0.key.split(separator: "/").last.map(String.init) } ?? outputPath.name
        if object == nil, let output, let problem = Self.outputProblem(output) {
            throw ValidationError("-o '\(self.output ?? output)': \(problem).")
        }
        let mirrors = try self.mirrors.map { text in
            do throws(InputError) {
                return try InputFile.httpURL(text)
            } catch {
                throw ValidationError("--mirror: \(error.description)")
            }
        }
        let arguments = urls.map(GetArgument.init)
        let streams = try streamArguments(
            arguments.compactMap(\.playlist), output: output, headers: headers, secretHeaders: secretHeaders)
        let zsync = try zsyncPlan(arguments)
        let metalinkURLs = try self.metalinkURLs.map { text in
            do throws(InputError) {
                return try InputFile.httpURL(text)
            } catch {
                throw ValidationError("--metalink: \(error.description)")
            }
        }
        checked = Checked(
            headers: headers, secretHeaders: secretHeaders, checksum: checksum, object: object, output: output,
            mirrors: mirrors, arguments: arguments, streams: streams, zsync: zsync, metalinkURLs: metalinkURLs,
            directory: object == nil ? try outputDirectory() : stagingDirectory())
    }

    /// Chooses the backend, checks what the arguments ask of it, and reads every entry
    /// (Metalink files, then the input file's first pass): a problem is a usage error, and
    /// nothing has started.
    private func plan(_ checked: Checked) throws -> Plan {
        let backend = try BackendChoice.make(journal: journalOptions, queue: queueOptions)
        try backend.permit(
            .init(
                detach: detach, credentials: !checked.secretHeaders.isEmpty,
                networkOptions: options.network.given + options.cacheOptionsGiven,
                overallRates: options.rates.maxOverallRate != nil || options.rates.maxHostRate != nil,
                hooks: hookOptions.given, objects: checked.object != nil, delta: !checked.zsync.urls.isEmpty,
                cache: options.cache != nil))
        let (streamURLs, streamSettings, streamEntries) = try streamPlan(checked, backend: backend)
        let streams = (urls: streamURLs, settings: streamSettings)
        // Streams for a service or the shared queue go there as entries.
        var metalinkEntries: [InputEntry] = streamEntries
        for path in checked.arguments.compactMap(\.metalinkFile) {
            metalinkEntries += try MetalinkEntries.entries(ofFile: path, location: metalinkLocation)
        }
        let rules = backend.entryRules(
            output: checked.output, checksum: checked.checksum, mirrors: checked.mirrors, headers: checked.headers)
        let input = inputFile.map(InputSource.init)
        let downloads = checked.arguments.compactMap(\.download)
        // Entries of a Metalink document on a server are known once it is fetched.
        let scan = try EntryScan(
            urls: downloads, extra: metalinkEntries, input: input, rules: rules,
            more: !checked.metalinkURLs.isEmpty || !checked.zsync.urls.isEmpty || !streams.urls.isEmpty)
        var batch = GetBatch(
            urls: downloads.compactMap { try? $0.get() }, extra: metalinkEntries, input: input, scan: scan,
            output: checked.output, checksum: checked.checksum, mirrors: checked.mirrors, directory: checked.directory,
            headers: checked.headers, secretHeaders: checked.secretHeaders, force: force,
            storesCredentials: storeCredentials, detach: detach, run: options.$settings)
        batch.object = checked.object
        batch.seeds = checked.zsync.seeds
        batch.streamOptions = streams.settings.options
        batch.run.hooks = hookOptions.$hooks
        if let storage = try backend.objectStorage(for: checked.object) { batch.run.configuration.objectStorage = storage }
        return Plan(
            backend: backend, batch: batch, metalinkURLs: checked.metalinkURLs, zsync: checked.zsync, rules: rules,
            streams: streams)
    }

    mutating func run() async throws {
        let plan = try plan($checked)
        var batch = plan.batch
        var streamCode: Int32 = 0
        if !plan.streams.urls.isEmpty {
            streamCode = await HLSEntries.run(plan.streams.urls, settings: plan.streams.settings, run: batch.run)
            // Any other URLs are downloaded as usual afterwards.
            guard !batch.urls.isEmpty || !batch.extra.isEmpty || batch.input != nil || !plan.metalinkURLs.isEmpty
                || !plan.zsync.urls.isEmpty
            else {
                if streamCode != 0 { throw ExitCode(streamCode) }
                return
            }
        }
        for url in plan.zsync.urls {
            // Fetched now, and checked with the others before anything starts.
            let fetched: (Data, URL)
            do {
                fetched = try await ZsyncEntries.fetch(
                    url, configuration: batch.run.configuration, headers: batch.headers,
                    secretHeaders: batch.secretHeaders)
            } catch {
                Console.err("haul: --zsync \(url.absoluteString): \(error)\n")
                throw ExitCode.failure
            }
            do {
                batch.extra.append(try ZsyncEntries.entry(of: fetched.0, at: fetched.1, seeds: plan.zsync.seeds))
            } catch {
                Console.err("haul: \(error)\n")
                throw ExitCode.validationFailure
            }
        }
        if !plan.metalinkURLs.isEmpty || !plan.zsync.urls.isEmpty {
            // Fetched now, and checked as the others were before anything starts.
            for url in plan.metalinkURLs {
                let data: Data
                do {
                    data = try await MetalinkEntries.fetch(url, configuration: batch.run.configuration)
                } catch {
                    Console.err("haul: --metalink \(url.absoluteString): \(error)\n")
                    throw ExitCode.failure
                }
                do {
                    batch.extra += try MetalinkEntries.entries(
                        of: data, source: url.absoluteString, location: metalinkLocation)
                } catch {
                    Console.err("haul: \(error)\n")
                    throw ExitCode.validationFailure
                }
            }
            do {
                batch.scan = try EntryScan(
                    urls: batch.urls.map { .success($0) }, extra: batch.extra, input: batch.input, rules: plan.rules)
            } catch {
                Console.err("haul: \(error)\n")
                throw ExitCode.validationFailure
            }
        }
        let ready = batch
        let code = try await plan.backend.with { try await $0.get(ready) }
        if code != 0 { throw ExitCode(code) }
        if streamCode != 0 { throw ExitCode(streamCode) }
    }

    // MARK: - Validation

    /// The playlist URLs among the arguments (`URL.m3u8`) and the stream options, checked.
    private func streamArguments(
        _ urls: [URL], output: String?, headers: [(name: String, value: String)],
        secretHeaders: [(name: String, value: String)]
    ) throws -> StreamArguments {
        var options = HLSOptions(renditions: hlsRenditions)
        let listsVariants = hlsVariant?.lowercased() == "list"
        if let hlsVariant, !listsVariants {
            guard let variant = HLSVariantChoice(argument: hlsVariant) else {
                throw ValidationError(
                    "--hls-variant '\(hlsVariant)': give best, worst, a bandwidth in bits per second, or WIDTHxHEIGHT (1280x720).")
            }
            options.variant = variant
        }
        if let hlsDuration {
            guard hlsDuration > 0, hlsDuration <= HLSStream.longestDuration else {
                throw ValidationError("--hls-duration needs a number of seconds above 0 (and at most \(Int(HLSStream.longestDuration))).")
            }
            options.maxDuration = .milliseconds(Int64((hlsDuration * 1000).rounded(.up)))
        }
        let given = hlsVariant != nil || hlsRenditions || hlsDuration != nil
        options.headers = headers + secretHeaders
        options.sensitiveHeaderNames = Set(secretHeaders.map(\.name))
        let streams = StreamArguments(urls: urls, options: options, listsVariants: listsVariants)
        if urls.isEmpty {
            // A URL whose download turns out to be a playlist is followed with them.
            if given, self.urls.isEmpty {
                throw ValidationError("--hls-variant, --hls-renditions and --hls-duration are for HLS playlists: give the playlist's URL.")
            }
            return streams
        }
        if output != nil, self.urls.count > 1 {
            throw ValidationError("-o can only be used with a single URL; give each playlist its own 'haul get URL -o NAME'.")
        }
        var stems: [String: URL] = [:]
        for url in urls {
            let stem = HLSEntries.destination(of: url, settings: HLSEntries.Settings(options: options, output: nil, directory: URL(fileURLWithPath: "/"))).lastPathComponent
            if let other = stems.updateValue(url, forKey: stem) {
                throw ValidationError(
                    "\(other.absoluteString) and \(url.absoluteString) would both be saved as \(stem).ts or .mp4: give each its own 'haul get URL -o NAME'.")
            }
        }
        return streams
    }

    /// The streams of `checked`, by `backend`: downloaded by this process into a local
    /// directory (`urls`), or, through a running service or onto the shared queue, given
    /// to it as entries (`entries`).
    private func streamPlan(
        _ checked: Checked, backend: BackendChoice
    ) throws -> (urls: [URL], settings: HLSEntries.Settings, entries: [InputEntry]) {
        let (urls, options, listsVariants) = (checked.streams.urls, checked.streams.options, checked.streams.listsVariants)
        let (output, object) = (checked.output, checked.object)
        if urls.isEmpty {
            return ([], HLSEntries.Settings(options: options, output: nil, directory: URL(fileURLWithPath: "/")), [])
        }
        guard case .journal(.here) = backend, object == nil else {
            // The service or a worker downloads it, or this process into an object, as a
            // stream job (DownloadRequest.stream).
            if listsVariants {
                throw ValidationError("--hls-variant list shows the variants here: give it without --queue, -o/-d s3://, or with another --journal.")
            }
            if object != nil, hlsRenditions {
                throw ValidationError("--hls-renditions saves renditions beside a file: into an object store (-o/-d s3://), give the stream alone.")
            }
            let stream = HLSStream(variant: options.variant, renditions: options.renditions, maxDuration: options.maxDuration)
            let entries = urls.map { url in
                var entry = InputEntry(url: url, name: output)
                entry.stream = stream
                return entry
            }
            return ([], HLSEntries.Settings(options: options, output: nil, directory: URL(fileURLWithPath: "/")), entries)
        }
        if detach { throw ValidationError("--detach is for downloads queued with 'haul serve'; an HLS stream is downloaded here.") }
        if listsVariants, urls.count != self.urls.count {
            throw ValidationError("--hls-variant list shows the variants of playlists: give only playlist URLs (ending in .m3u8).")
        }
        var settings = HLSEntries.Settings(options: options, output: output, directory: checked.directory)
        settings.listsVariants = listsVariants
        return (urls, settings, [])
    }

    /// The control files (`URL.zsync` arguments and `--zsync`) and `--seed` files, checked:
    /// each seed must be a readable regular file.
    private func zsyncPlan(_ arguments: [GetArgument]) throws -> ZsyncPlan {
        let urls = try arguments.compactMap(\.zsyncControl) + zsyncURLs.map { text in
            do throws(InputError) {
                return try InputFile.httpURL(text)
            } catch {
                throw ValidationError("--zsync: \(error.description)")
            }
        }
        // A URL given as an argument may turn out to be a control file by its content.
        if !seeds.isEmpty, urls.isEmpty, arguments.allSatisfy({ $0.metalinkFile != nil }) {
            throw ValidationError(
                "--seed is for delta downloads: give the URL of a zsync control file (FILE.zsync), or --zsync URL.")
        }
        let seeds = try self.seeds.map { path in
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue,
                FileManager.default.isReadableFile(atPath: path)
            else {
                throw ValidationError("--seed \(path): no such readable file.")
            }
            return URL(fileURLWithPath: path).standardizedFileURL
        }
        return ZsyncPlan(urls: urls, seeds: seeds)
    }

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

    /// The object (`-o s3://bucket/key`) or prefix (`-d s3://bucket/prefix/`) to store into,
    /// if one is named.
    private func objectDestination() throws -> S3Location? {
        func parsed(_ text: String, option: String) throws -> S3Location {
            do throws(DownloadError) {
                return try S3Location(parsing: text)
            } catch {
                throw ValidationError("\(option) \(text): \(error.message)")
            }
        }
        if let output, output.hasPrefix("s3://") {
            let object = try parsed(output, option: "-o")
            guard !object.isPrefix else {
                throw ValidationError("-o \(output) names a prefix: give the object's key, or use -d for a prefix.")
            }
            guard directory == nil || directory?.hasPrefix("s3://") == false else {
                throw ValidationError("-o s3://… and -d s3://… cannot be used together.")
            }
            return object
        }
        guard let directory, directory.hasPrefix("s3://") else { return nil }
        let prefix = try parsed(directory.hasSuffix("/") ? directory : directory + "/", option: "-d")
        guard let output else { return prefix }
        return try parsed(prefix.description + output, option: "-o")
    }

    /// Where objects' bytes wait until uploaded: `staging` beside the journal.
    private func stagingDirectory() -> URL {
        let journal = journalOptions.resolvedPath
        return URL(fileURLWithPath: PathText.directory(of: journal), isDirectory: true)
            .appendingPathComponent("staging", isDirectory: true)
    }

    /// What is wrong with `-o`'s name or relative path: a path below the output directory
    /// follows the rules for names with folders that servers send (no `..`, no empty
    /// component), so it never leaves the directory.
    static func outputProblem(_ output: String) -> String? {
        guard output.contains("/") else { return InputFile.fileNameProblem(output) }
        return Manifest.pathProblem(output).map { "\($0); a relative -o stays below -d (give an absolute path to go elsewhere)" }
    }

    /// `-o` as a name or a path below the output directory, and the directory an absolute
    /// `-o` names (which stands for -d).
    private var outputPath: (name: String?, directory: String?) {
        guard let output, output.hasPrefix("/") else { return (output, nil) }
        let path = output as NSString
        return (path.lastPathComponent.isEmpty || output.hasSuffix("/") ? "" : path.lastPathComponent, path.deletingLastPathComponent)
    }

    /// The output directory as an absolute file URL; it need not exist yet (the backend
    /// that writes into it creates it), but must not be something else.
    private func outputDirectory() throws -> URL {
        let path = outputPath.directory ?? directory ?? FileManager.default.currentDirectoryPath
        let url = URL(fileURLWithPath: path, isDirectory: true).standardizedFileURL
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), !isDirectory.boolValue {
            throw ValidationError("-d \(path): not a directory.")
        }
        return url
    }
}
