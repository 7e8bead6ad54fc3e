// The DownloadManager as a swift-service-lifecycle Service, in a ServiceGroup beside the app's
// own service, on the app's event loops and I/O threads; SIGTERM or Ctrl-C shuts it down
// gracefully, with every partial file checkpointed. Run with no arguments for a demo against a
// local server that interrupts itself and starts again; with URLs to download them into
// ./downloads until they are done or you press Ctrl-C (run it again to resume).

import Foundation
import Haul
import HaulTestSupport
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle

@main
struct EmbeddedService {
    static func main() async throws {
        let arguments = Array(CommandLine.arguments.dropFirst())
        var logger = Logger(label: "embedded-service")
        logger.logLevel = .info

        // The app's event loops and I/O threads: the manager runs on them and never shuts
        // them down; the app does, once the service group has returned.
        let eventLoopGroup = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let threadPool = NIOThreadPool(numberOfThreads: 4)
        threadPool.start()

        if arguments.isEmpty {
            try await demo(eventLoopGroup: eventLoopGroup, threadPool: threadPool, logger: logger)
        } else {
            let urls = arguments.map { argument in
                guard let url = URL(string: argument), url.scheme == "http" || url.scheme == "https" else {
                    print("not an http or https URL: \(argument)")
                    exit(2)
                }
                return url
            }
            let directory = URL(fileURLWithPath: "downloads")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let journal = try Journal(path: directory.appendingPathComponent(".haul/journal.sqlite").path)
            print("Downloading \(urls.count) URL(s) into \(directory.path); Ctrl-C stops, running again resumes.")
            let requests = urls.map { DownloadRequest(url: $0, destination: .directory(directory)) }
            try await runGroup(
                journal: journal, work: .add(requests), interruptAt: nil,
                eventLoopGroup: eventLoopGroup, threadPool: threadPool, logger: logger)
            report(journal)
        }

        try await threadPool.shutdownGracefully()
        try await eventLoopGroup.shutdownGracefully()
    }

    /// Three files trickled by a local server; the service is stopped by a SIGTERM it sends
    /// itself at 40%, then started again, and the manager resumes them from their partial files.
    static func demo(eventLoopGroup: any EventLoopGroup, threadPool: NIOThreadPool, logger: Logger) async throws {
        let server = try await FaultServer.start()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("embedded-service-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let journal = try Journal(path: directory.appendingPathComponent(".haul/journal.sqlite").path)
        var requests: [DownloadRequest] = []
        for number in 1...3 {
            server.setFile("file-\(number).bin", FaultServer.randomBytes(count: 3 << 20, seed: UInt64(number)))
            // 2 MB/s each: about 1.5 s for a file.
            requests.append(
                DownloadRequest(
                    url: server.url("/files/file-\(number).bin?rate=2000000"), destination: .directory(directory)))
        }
        print("A local server trickles 3 files of 3 MiB at 2 MB/s each.\n")

        print("== the service starts")
        try await runGroup(
            journal: journal, work: .add(requests), interruptAt: 0.4,
            eventLoopGroup: eventLoopGroup, threadPool: threadPool, logger: logger)
        report(journal)
        for request in requests {
            let partial = directory.appendingPathComponent(request.url.lastPathComponent + ".haul-partial")
            let bytes = (try? FileManager.default.attributesOfItem(atPath: partial.path)[.size] as? Int) ?? 0
            print("  \(partial.lastPathComponent): \(size(Int64(bytes))) on disk")
        }

        print("\n== the service starts again")
        try await runGroup(
            journal: journal, work: .resumeUnfinished, interruptAt: nil,
            eventLoopGroup: eventLoopGroup, threadPool: threadPool, logger: logger)
        report(journal)

        try await server.shutdown()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Runs the manager and the app's own service in one group until the app's service is
    /// done (the group then shuts down gracefully) or a SIGTERM or SIGINT arrives.
    static func runGroup(
        journal: Journal, work: Mirror.Work, interruptAt: Double?,
        eventLoopGroup: any EventLoopGroup, threadPool: NIOThreadPool, logger: Logger
    ) async throws {
        let manager = DownloadManager(journal: journal, eventLoopGroup: eventLoopGroup, threadPool: threadPool)
        let mirror = Mirror(manager: manager, work: work, interruptAt: interruptAt)
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [
                    // Shut down last (a group shuts its services down in reverse order): the
                    // app's service stops using it first.
                    .init(service: manager),
                    // When it returns (everything downloaded), the whole group shuts down.
                    .init(service: mirror, successTerminationBehavior: .gracefullyShutdownGroup),
                ],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        try await group.run()
        print("the service group has returned")
    }

    /// What the journal says of every download.
    static func report(_ journal: Journal) {
        guard let jobs = try? journal.jobs() else { return }
        print("the journal:")
        for job in jobs.sorted(by: { $0.name < $1.name }) {
            let total = job.totalBytes.map(size) ?? "?"
            print("  \(job.name): \(job.state), \(size(job.bytes)) of \(total)\(job.error.map { " (\($0))" } ?? "")")
        }
    }
}

/// The app's own service: it adds the downloads (or resumes those the journal holds) and
/// reports progress until they are done or the group shuts down.
struct Mirror: Service {
    enum Work: Sendable {
        case add([DownloadRequest])
        case resumeUnfinished
    }

    let manager: DownloadManager
    let work: Work
    /// For the demo: the fraction of the bytes at which this process sends itself SIGTERM,
    /// as `kill` or a container runtime would.
    let interruptAt: Double?

    func run() async throws {
        let events = manager.events(includingProgress: false)
        let printer = Task {
            for await event in events {
                switch event.event {
                case .completed(let result):
                    let name = result.fileURL?.lastPathComponent ?? event.id.rawValue
                    let transferred = size(result.bytesTransferred)
                    print("  completed \(name): \(size(result.byteCount)), \(transferred) of it in this run")
                case .failed(let error):
                    print("  failed \(event.id): DownloadError.\(error.code): \(error.message)")
                default:
                    break
                }
            }
        }
        defer { printer.cancel() }

        switch work {
        case .add(let requests): try await manager.enqueue(requests)
        case .resumeUnfinished: try await manager.resumeUnfinished()
        }
        // Until everything is done, or the group shuts down gracefully (the sleep is then
        // cancelled and this returns at once, before the manager is asked to stop).
        try? await cancelWhenGracefulShutdown { try await reportProgress() }
        if Task.isShuttingDownGracefully { print("graceful shutdown: the app's service has stopped; now the manager") }
    }

    /// Prints the manager's progress four times a second until nothing is queued, running
    /// or waiting for the network.
    private func reportProgress() async throws {
        var interrupted = false
        while true {
            try await Task.sleep(for: .milliseconds(250))
            let progress = await manager.progress
            let total = progress.totalBytes ?? 0
            let fraction = total > 0 ? Double(progress.completedBytes) / Double(total) : 0
            print(
                String(format: "  %3.0f%%", fraction * 100),
                "\(size(progress.completedBytes)) of \(size(total)),",
                "\(size(Int64(progress.bytesPerSecond)))/s, \(progress.running) running")
            if progress.queued + progress.running + progress.waiting == 0 { return }
            if let interruptAt, !interrupted, fraction >= interruptAt {
                interrupted = true
                print("  kill -TERM \(getpid())")
                kill(getpid(), SIGTERM)
            }
        }
    }
}

/// `bytes` for a person: `512 B`, `3.0 KiB`, `1.5 MiB`.
func size(_ bytes: Int64) -> String {
    switch bytes {
    case ..<1024: "\(bytes) B"
    case ..<(1 << 20): String(format: "%.1f KiB", Double(bytes) / 1024)
    default: String(format: "%.1f MiB", Double(bytes) / 1_048_576)
    }
}
