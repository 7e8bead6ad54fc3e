import ArgumentParser
import Foundation
import Haul

/// `haul sync`: keeps a directory identical to a published manifest.
struct SyncCommand: AsyncParsableCommand {
    static let configuration = HaulCommand.subcommandConfiguration(
        CommandConfiguration(
            commandName: "sync",
            abstract: "Make a directory match a published manifest.",
            discussion: """
                Fetches the manifest (XML or JSON, see 'haul manifest') with a conditional GET, \
                compares every entry's size and SHA-256 with DIR (digests of local files are \
                cached in the journal), downloads what is missing or changed, verifies it and \
                puts it in place. Stages: fetch-manifest, plan, transfer, verify, commit.

                Exit status: 0 when DIR matches the manifest (for --dry-run: when nothing would \
                change), 1 when it does not (a file failed, an entry is blocked, or --dry-run \
                found changes), 2 for bad arguments, 130/143 when interrupted (partial files are \
                kept: run the same command again).
                """))

    @Argument(help: "The manifest's http or https URL.")
    var manifestURL: String

    @Argument(help: "The directory to keep in step (created if missing).")
    var directory: String

    @Flag(name: .customLong("delete"), help: "Delete files the manifest does not list.")
    var deleteExtraneous = false

    @Flag(name: .customLong("dry-run"), help: "Print the plan and change nothing.")
    var dryRun = false

    @Flag(
        help: """
            Stage every change beside DIR and switch the whole new tree in at once: readers \
            see the old set or the new set, never a mix. Needs write access to DIR's parent.
            """)
    var atomic = false

    @Flag(name: .customLong("verify"), help: "Hash every local file again instead of trusting the journal's cache.")
    var verifyContents = false

    @OptionGroup var options: DownloadOptions
    @OptionGroup var journalOptions: JournalOptions

    func validate() throws {
        guard let url = URL(string: manifestURL), let scheme = url.scheme?.lowercased(),
            ["http", "https"].contains(scheme), url.host?.isEmpty == false
        else {
            throw ValidationError("'\(manifestURL)' is not an http or https URL.")
        }
        guard !directory.isEmpty else { throw ValidationError("DIR must not be empty.") }
    }

    mutating func run() async throws {
        let settings = options.$settings
        for warning in settings.warnings { Console.err(warning) }
        let journal = try journalOptions.open()
        let manager = DownloadManager(
            configuration: settings.configuration, journal: journal, eventLoopGroup: ProcessResources.eventLoopGroup,
            threadPool: ProcessResources.threadPool)
        let renderer = SyncRenderer(mode: settings.mode)
        let syncOptions = SyncOptions(
            deleteExtraneous: deleteExtraneous, dryRun: dryRun, atomic: atomic, verifyContents: verifyContents)
        let started = ContinuousClock.now

        let signals = SignalHandler(catching: [SIGINT, SIGTERM]) { signal in
            Console.err("\nhaul: interrupted again; exiting without waiting\n")
            Foundation.exit(128 + signal)
        }
        defer { signals.stop() }
        // On the first signal: pause every download (keeping partial files) and shut the
        // manager down, which ends the sync with the files it has.
        let watcher = Task { () -> Int32? in
            for await signal in signals.received {
                await Task {
                    await manager.pauseAll()
                    await manager.shutdown()
                }.value
                return signal
            }
            return nil
        }
        let ticker: Task<Void, Never>? =
            options.mode == .live
            ? Task {
                while !Task.isCancelled {
                    await renderer.tick(manager.progress)
                    try? await Task.sleep(for: .milliseconds(100))
                }
            } : nil

        let url = URL(string: manifestURL)!
        let directory = URL(fileURLWithPath: self.directory)
        var outcome: Result<SyncSummary, DownloadError>
        do throws(DownloadError) {
            let summary = try await Syncer(manager: manager).sync(from: url, into: directory, options: syncOptions) {
                event in renderer.handle(event)
            }
            outcome = .success(summary)
        } catch {
            outcome = .failure(error)
        }
        ticker?.cancel()
        await ticker?.value
        watcher.cancel()
        let interruption = await watcher.value
        await manager.shutdown()
        renderer.finish(outcome, elapsed: ContinuousClock.now - started)

        if let interruption {
            Console.err("haul: interrupted; partial files kept, run the same command to continue\n")
            throw ExitCode(128 + interruption)
        }
        switch outcome {
        case .success(let summary):
            if !summary.matchesManifest { throw ExitCode.failure }
        case .failure:
            throw ExitCode.failure
        }
    }
}
