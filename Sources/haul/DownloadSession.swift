import Foundation
import Haul

/// One run of `haul get`: adds every download to a manager, shows their events, waits for
/// all of them or for SIGINT/SIGTERM, and works out the exit code.
struct DownloadSession: Sendable {
    /// The downloads, each URL once.
    let entries: [InputEntry]
    /// Where the files go; it exists.
    let directory: URL
    /// Extra request headers for every download.
    let headers: [(name: String, value: String)]
    /// The manager's configuration.
    let configuration: DownloadManager.Configuration
    /// How to show progress.
    let mode: ProgressRenderer.Mode

    /// The exit code after an interrupt: 128 + the signal's number (130 for SIGINT).
    static func exitCode(forSignal signal: Int32) -> Int32 { 128 + signal }

    private typealias Outcome = Result<DownloadResult, DownloadError>

    private enum Race: Sendable {
        case finished([DownloadID: Outcome])
        case signal(Int32)
        case noSignal
    }

    /// Runs every download to the end, or until interrupted; returns the exit code.
    func run() async -> Int32 {
        let started = ContinuousClock.now
        let signals = SignalHandler(catching: [SIGINT, SIGTERM]) { signal in
            Console.err("\nhaul: interrupted again; exiting without waiting\n")
            exit(Self.exitCode(forSignal: signal))
        }
        defer { signals.stop() }

        let manager = DownloadManager(configuration: configuration)
        let renderer = ProgressRenderer(mode: mode, entries: entries)
        let events = manager.events
        let consumer = Task {
            for await event in events { await renderer.handle(event) }
        }
        let ticker: Task<Void, Never>? =
            mode == .live
            ? Task {
                while !Task.isCancelled {
                    await renderer.tick()
                    try? await Task.sleep(for: .milliseconds(100))
                }
            } : nil

        var summary = ProgressRenderer.Summary()
        var failures: [(url: String, message: String)] = []
        var handles: [(entry: InputEntry, handle: DownloadHandle)] = []
        for entry in entries {
            let request = DownloadRequest(
                url: entry.url, destination: .directory(directory, name: entry.name), id: entry.id,
                checksum: entry.checksum, headers: headers)
            do {
                let handle = try await manager.download(request)
                guard handle.id == request.id else {
                    // The library joined it to another URL saved under the same file name.
                    let message =
                        "it would be saved to the same file as \(handle.id); give it another name with out= in an input file"
                    await renderer.rejected(entry, code: "duplicate", message: message)
                    failures.append((entry.url.absoluteString, message))
                    continue
                }
                handles.append((entry, handle))
            } catch {
                await renderer.rejected(entry, code: error.code.description, message: error.message)
                failures.append((entry.url.absoluteString, error.message))
            }
        }

        let (outcomes, interruption) = await Self.wait(
            for: handles.map(\.handle), manager: manager, signals: signals)
        await manager.shutdown()
        await consumer.value
        ticker?.cancel()
        await ticker?.value

        summary.failed = failures.count
        for (entry, handle) in handles {
            switch outcomes[handle.id] {
            case .success(let result):
                summary.completed += 1
                summary.bytes += result.byteCount
            case .failure(let error) where interruption != nil && error.cancellationReason == .shutdown:
                summary.paused += 1
            case .failure(let error):
                summary.failed += 1
                let message =
                    error.code == .cancelled ? "cancelled (\(error.cancellationReason?.rawValue ?? "cancelled"))" : error.message
                failures.append((entry.url.absoluteString, message))
            case nil:
                summary.failed += 1
                failures.append((entry.url.absoluteString, "the download ended without a result"))
            }
        }
        summary.elapsed = ContinuousClock.now - started
        summary.interrupted = interruption != nil
        await renderer.finish(summary)

        for failure in failures { Console.err("haul: failed: \(failure.url): \(failure.message)\n") }
        if let interruption {
            Console.err("haul: interrupted; partial downloads kept, run the same command again to resume\n")
            return Self.exitCode(forSignal: interruption)
        }
        return failures.isEmpty ? 0 : 1
    }

    /// Waits for every result, or for a signal: then pauses everything, keeping the partial
    /// files, and shuts the manager down so the waiting ends.
    ///
    /// The task awaiting the results is never cancelled before the shutdown: cancelling it
    /// would withdraw interest in the downloads, which deletes their partial files.
    private static func wait(
        for handles: [DownloadHandle], manager: DownloadManager, signals: SignalHandler
    ) async -> (outcomes: [DownloadID: Outcome], interruption: Int32?) {
        await withTaskGroup(of: Race.self) { group in
            group.addTask { .finished(await results(of: handles)) }
            group.addTask {
                for await signal in signals.received { return .signal(signal) }
                return .noSignal
            }
            var outcomes: [DownloadID: Outcome]?
            var interruption: Int32?
            while let next = await group.next() {
                switch next {
                case .finished(let results):
                    outcomes = results
                    group.cancelAll()  // stops the signal watcher
                case .signal(let signal) where outcomes == nil:
                    interruption = signal
                    await pauseAll(manager)
                    await manager.shutdown()
                case .signal, .noSignal:
                    break
                }
            }
            return (outcomes ?? [:], interruption)
        }
    }

    private static func results(of handles: [DownloadHandle]) async -> [DownloadID: Outcome] {
        await withTaskGroup(of: (DownloadID, Outcome).self) { group in
            for handle in handles {
                group.addTask {
                    do throws(DownloadError) {
                        return (handle.id, .success(try await handle.result))
                    } catch {
                        return (handle.id, .failure(error))
                    }
                }
            }
            var outcomes: [DownloadID: Outcome] = [:]
            for await (id, outcome) in group { outcomes[id] = outcome }
            return outcomes
        }
    }

    /// Pauses every download; the manager returns once none is running.
    private static func pauseAll(_ manager: DownloadManager) async {
        await manager.pauseAll()
    }
}
