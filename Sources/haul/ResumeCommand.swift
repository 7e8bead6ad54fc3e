import ArgumentParser
import Haul

/// `haul resume`: continues every unfinished download in the journal.
struct Resume: AsyncParsableCommand {
    static let configuration = HaulCommand.subcommandConfiguration(
        CommandConfiguration(
            commandName: "resume",
            abstract: "Continue the journal's unfinished downloads.",
            discussion: """
                Takes over every queued, paused or waiting download in the journal that no \
                running haul is working on, for instance after Ctrl-C, a crash, a full disk or \
                'haul pause', and runs them to the end from their partial files. Output and exit \
                status are those of 'haul get'; with nothing to resume it prints "nothing to \
                resume" and exits with 0.

                The journal does not store credentials (Authorization, Proxy-Authorization, \
                Cookie, --secret-header, user info in the URL) unless 'haul get' was given \
                --store-credentials. A download that needs them is not sent without them: it \
                stays paused, is reported as failed (credentialsRequired) and the exit status \
                is 1. Run the same 'haul get' command again, with its credentials, to finish it.

                When 'haul serve' runs for the journal, the service resumes the downloads a \
                person paused, and this command follows every unfinished one to its end.
                """))

    @OptionGroup var options: DownloadOptions

    @OptionGroup var journalOptions: JournalOptions

    @OptionGroup(title: "Hooks") var hookOptions: HookOptions

    mutating func run() async throws {
        let backend = JournalChoice.make(journal: journalOptions)
        try backend.permit(.init(networkOptions: options.network.given + options.cacheOptionsGiven, hooks: hookOptions.given))
        var settings = options.$settings
        settings.hooks = hookOptions.$hooks
        // Downloads into object storage resume with the credentials the environment gives
        // now; without any, they fail saying so (and other downloads resume as usual).
        settings.configuration.objectStorage = try? .fromEnvironment()
        let code = try await backend.with { try await $0.resume(settings) }
        if code != 0 { throw ExitCode(code) }
    }
}
