import ArgumentParser
import Foundation
import HaulCommandSupport

/// `--on-complete`, `--on-error` and `--hook-timeout`: programs run after each download
/// ends, in the process that downloads (`haul get`, `haul resume`, `haul serve`,
/// `haul worker`). See ``CompletionHooks``.
struct HookOptions: ParsableArguments {
    @Option(
        name: .customLong("on-complete"),
        help: ArgumentHelp(
            "A program run (without a shell, no arguments) after each download that completes, with HAUL_ID, HAUL_URL, HAUL_PATH and HAUL_BYTES in its environment.",
            valueName: "program"))
    var onComplete: String?

    @Option(
        name: .customLong("on-error"),
        help: ArgumentHelp(
            "A program run (without a shell, no arguments) after each download that fails, with HAUL_ID, HAUL_URL, HAUL_ERROR and HAUL_ERROR_CODE in its environment.",
            valueName: "program"))
    var onError: String?

    @Option(
        name: .customLong("hook-timeout"),
        help: ArgumentHelp(
            "Seconds a hook may run before it is killed; its exit status and output are logged.",
            valueName: "seconds"))
    var timeout: Int = 60

    /// The hooks, found and checked, once `validate()` has run (empty when none is given).
    @Derived var hooks: CompletionHooks?

    /// Whether a hook was given.
    var given: Bool { onComplete != nil || onError != nil }

    mutating func validate() throws {
        guard (1...86_400).contains(timeout) else { throw ValidationError("--hook-timeout must be between 1 and 86400 seconds.") }
        guard given else {
            hooks = CompletionHooks()
            return
        }
        let environment = ProcessInfo.processInfo.environment
        var hooks = CompletionHooks()
        do {
            if let onComplete {
                hooks.onComplete = try CompletionHooks.program(onComplete, option: "--on-complete", environment: environment)
            }
            if let onError {
                hooks.onError = try CompletionHooks.program(onError, option: "--on-error", environment: environment)
            }
        } catch {
            throw ValidationError(error.description)
        }
        hooks.timeLimit = .seconds(timeout)
        self.hooks = hooks
    }
}
