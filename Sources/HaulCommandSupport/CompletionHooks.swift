package import Foundation
package import Haul
package import Logging

/// `--on-complete PROGRAM` and `--on-error PROGRAM`: a program of the operator's run after
/// each download that completes, or fails.
///
/// The program runs without a shell, with no arguments, and the download in its
/// environment: `HAUL_ID`, `HAUL_URL`, `HAUL_PATH` (the saved file; empty after a failure),
/// `HAUL_BYTES` (its size; empty after a failure) and `HAUL_ERROR` (the error's message,
/// with its code in `HAUL_ERROR_CODE`; empty after a completion). Whatever a file name
/// holds (`$(…)`, quotes, new lines) reaches it as it is and runs nothing. Each run has
/// ``timeLimit``, then is killed; its exit status and output are logged.
///
/// Hooks are set only by whoever starts the process (its command line): the HTTP API and
/// the aria2 options cannot set or change them.
package struct CompletionHooks: Sendable {
    /// The program run after a completion: its path, found when the options were read.
    package var onComplete: String?
    /// The program run after a failure.
    package var onError: String?
    /// How long a run may take before it is killed.
    package var timeLimit: Duration = .seconds(60)
    /// How many runs go on at once; more wait their turn, in order.
    package var concurrency = 4
    /// The environment the programs start from (the process's), given `HAUL_*` on top.
    package var environment: [String: String] = ProcessInfo.processInfo.environment

    package init(onComplete: String? = nil, onError: String? = nil) {
        self.onComplete = onComplete
        self.onError = onError
    }

    /// Whether there is nothing to run.
    package var isEmpty: Bool { onComplete == nil && onError == nil }

    /// Why a hook's program cannot be used.
    package struct Failure: Error, CustomStringConvertible, Sendable {
        package var description: String
    }

    /// `program` (a path, or a name looked up in `PATH`) as a path to run, or why it
    /// cannot be; `option` names it in the message.
    package static func program(_ program: String, option: String, environment: [String: String]) throws(Failure)
        -> String
    {
        #if os(Linux) || os(macOS)
        do {
            return try ChildProcess.program(program, for: option, searchPath: environment["PATH"])
        } catch {
            throw Failure(description: error.description)
        }
        #else
        throw Failure(description: "\(option): programs cannot be started on this platform.")
        #endif
    }

    /// What one run is told.
    package struct Ending: Sendable, Equatable {
        package var id: DownloadID
        package var url: URL
        /// The saved file's path and size, after a completion.
        package var path: String?
        package var bytes: Int64?
        /// The error, after a failure.
        package var error: DownloadError?

        /// The `HAUL_*` variables.
        package var variables: [String: String] {
            [
                "HAUL_ID": id.rawValue, "HAUL_URL": url.absoluteString, "HAUL_PATH": path ?? "",
                "HAUL_BYTES": bytes.map(String.init) ?? "", "HAUL_ERROR": error?.message ?? "",
                "HAUL_ERROR_CODE": error?.code.description ?? "",
            ]
        }
    }

    /// The run an event asks for, if any: a completion or a failure with a program set for
    /// it (a cancellation or a pause runs nothing).
    package func ending(for event: DownloadManager.Event) -> (program: String, ending: Ending)? {
        switch event.event {
        case .completed(let result):
            guard let onComplete else { return nil }
            return (
                onComplete,
                Ending(id: event.id, url: event.url, path: result.savedAt, bytes: result.byteCount, error: nil)
            )
        case .failed(let error):
            guard let onError else { return nil }
            return (onError, Ending(id: event.id, url: event.url, path: nil, bytes: nil, error: error))
        default:
            return nil
        }
    }

    /// Runs the hooks for `events` until they end, and for every run already started.
    package func run(_ events: AsyncStream<DownloadManager.Event>, logger: Logger) async {
        guard !isEmpty else { return }
        await withTaskGroup(of: Void.self) { group in
            var running = 0
            for await event in events {
                guard let (program, ending) = ending(for: event) else { continue }
                if running >= max(1, concurrency) {
                    await group.next()
                    running -= 1
                }
                running += 1
                group.addTask { await self.run(program, for: ending, logger: logger) }
            }
        }
    }

    /// Runs `program` once for `ending`, and logs how it went.
    package func run(_ program: String, for ending: Ending, logger: Logger) async {
        #if os(Linux) || os(macOS)
        let name = URL(fileURLWithPath: program).lastPathComponent
        var metadata: Logger.Metadata = ["id": .string(ending.id.rawValue), "hook": .string(name)]
        let run: ChildProcess.Run
        do {
            run = try await ChildProcess.run(
                program, arguments: [], environment: environment.merging(ending.variables) { _, new in new },
                timeLimit: timeLimit, mergingErrors: true)
        } catch {
            metadata["error"] = .string("\(error)")
            logger.error("hook could not start", metadata: metadata)
            return
        }
        let output = String(decoding: run.output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if !output.isEmpty { metadata["output"] = .string(output) }
        if run.timedOut {
            metadata["limit"] = "\(timeLimit)"
            logger.warning("hook ran out of time and was killed", metadata: metadata)
        } else if run.termination.succeeded {
            metadata["status"] = "0"
            logger.info("hook ran", metadata: metadata)
        } else {
            metadata["status"] = .string(run.termination.bySignal ? "signal \(run.termination.code)" : "\(run.termination.code)")
            logger.warning("hook failed", metadata: metadata)
        }
        #endif
    }
}
