import ArgumentParser
import Foundation
import Haul
import HaulServer

/// The CLI as a client of `haul serve`: when a service runs for the journal, the commands
/// that would touch the journal go through its API instead (see ``ServiceClient``).
enum ServiceMode {
    /// The client of the service running for the journal, or `nil` when none runs.
    static func client(_ journal: JournalOptions) throws -> ServiceClient? {
        do {
            return try ServiceClient(journalPath: journal.resolvedPath)
        } catch {
            Console.err("haul: \(error.message)\n")
            throw ExitCode.failure
        }
    }

    /// Runs `body` with the client, closing it after; a failed call exits with status 1.
    static func with<T>(_ client: ServiceClient, _ body: (ServiceClient) async throws -> T) async throws -> T {
        do {
            let result = try await body(client)
            await client.close()
            return result
        } catch let failure as ServiceClient.Failure {
            await client.close()
            Console.err("haul: \(failure.message)\n")
            throw ExitCode.failure
        } catch {
            await client.close()
            throw error
        }
    }

    /// Queues `inputs` with the service and, unless `detach`, follows them to their end,
    /// printing progress and outcomes; returns the exit status (0 when every one completed).
    static func get(_ client: ServiceClient, _ inputs: [DownloadInput], detach: Bool, quiet: Bool) async throws -> Int32 {
        try await with(client) { client in
            // Follow first, so that no end is missed.
            let events = detach ? nil : try await client.events()
            let ids = try await client.add(inputs)
            if detach {
                if !quiet { for id in ids { Console.out("queued \(id)\n") } }
                return 0
            }
            return try await follow(ids, events: events!, quiet: quiet)
        }
    }

    /// `haul pause`, `cancel` and `retry` through the service: one line per download it
    /// changed; exit status 1 when it changed none.
    static func control(_ client: ServiceClient, _ action: String, done: String, ids: [String], all: [JobState]?)
        async throws
    {
        let affected = try await with(client) { client in
            try await client.bulk(action, ids: all == nil ? ids : nil, states: all)
        }
        Console.out("\(done) \(affected) download\(affected == 1 ? "" : "s") (through the service at \(client.address))\n")
        if affected == 0, all == nil { throw ExitCode.failure }
    }

    /// Follows `ids` on the event stream until each has ended.
    static func follow(
        _ ids: [String], events: AsyncThrowingStream<(kind: String, data: Data), any Error>, quiet: Bool
    ) async throws -> Int32 {
        var pending = Set(ids)
        var failed = 0
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        guard !pending.isEmpty else { return 0 }
        for try await event in events {
            switch event.kind {
            case "download":
                guard let view = try? decoder.decode(DownloadView.self, from: event.data), pending.contains(view.id)
                else { continue }
                switch view.state {
                case .completed:
                    pending.remove(view.id)
                    if !quiet { Console.out("saved \(view.destination) (\(Format.bytes(view.bytes)))\n") }
                case .failed, .cancelled:
                    pending.remove(view.id)
                    failed += 1
                    Console.err("haul: \(view.id): \(view.error ?? view.state.rawValue)\n")
                default:
                    if !quiet { Console.out("\(view.state.rawValue) \(view.name)\n") }
                }
            case "progress":
                guard !quiet, let progress = try? decoder.decode(ProgressView.self, from: event.data),
                    pending.contains(progress.id)
                else { continue }
                let percent = progress.totalBytes.map { $0 > 0 ? " \(progress.bytes * 100 / $0)%" : "" } ?? ""
                Console.out(
                    "\(progress.id) \(Format.bytes(progress.bytes))\(percent) \(Format.bytes(Int64(progress.bytesPerSecond)))/s\n")
            case "removed":
                struct Removed: Decodable { var id: String }
                if let removed = try? decoder.decode(Removed.self, from: event.data), pending.remove(removed.id) != nil {
                    failed += 1
                    Console.err("haul: \(removed.id) was removed\n")
                }
            default:
                continue
            }
            if pending.isEmpty { break }
        }
        if !pending.isEmpty {
            Console.err("haul: the service stopped before \(pending.count) download(s) ended; they resume when it starts again\n")
            return 1
        }
        return failed == 0 ? 0 : 1
    }
}
