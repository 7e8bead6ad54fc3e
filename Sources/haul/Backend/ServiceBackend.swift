import ArgumentParser
import Foundation
import Haul
import HaulServer

/// The backend that hands the work to a running `haul serve` through its API
/// (``ServiceClient``): it downloads, and this process follows the downloads on its event
/// stream.
struct ServiceBackend: ResumingBackend {
    /// How many downloads the first request queues; each next one takes four times more, up
    /// to 2,000 (and 512 KiB: a service takes bodies of 1 MiB at most).
    static let firstPart = 100

    let client: ServiceClient

    func close() async {
        await client.close()
    }

    /// Runs `body`; a failed call is said on standard error and exits with status 1.
    private func calling<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let failure as ServiceClient.Failure {
            Console.err("haul: \(failure.message)\n")
            throw ExitCode.failure
        }
    }

    // MARK: - Downloads

    func get(_ batch: GetBatch) async throws -> Int32 {
        if let object = batch.object { return try await get(batch, into: object) }
        let directory = try batch.createdDirectory()
        var inputs: [DownloadInput] = []
        try await entries(of: batch) { entry in
            // A Metalink file's name with folders: the folders are made here, beside the
            // service, as the directory is.
            var folder = directory
            var name = entry.name
            if entry.isPath, let path = entry.name {
                let file = directory.appendingPathComponent(path, isDirectory: false)
                folder = file.deletingLastPathComponent()
                name = file.lastPathComponent
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            }
            inputs.append(Self.input(entry, directory: folder.path, name: name, batch: batch))
        }
        return try await get(inputs, detach: batch.detach, quiet: batch.run.quiet)
    }

    /// `haul get -o s3://bucket/key` or `-d s3://bucket/prefix/`: the service stores the
    /// objects, under one of its object roots (`haul serve --root s3://…`), with its own
    /// credentials; it refuses a prefix outside them.
    private func get(_ batch: GetBatch, into object: S3Location) async throws -> Int32 {
        var inputs: [DownloadInput] = []
        try await entries(of: batch) { entry in
            // The key's folders (and a Metalink file's) go into the prefix, its last
            // component is the name.
            let key = object.isPrefix ? object.key + (entry.name ?? "") : object.key
            let slash = key.lastIndex(of: "/")
            let prefix = slash.map { String(key[...$0]) } ?? ""
            let name = String(key[(slash.map { key.index(after: $0) } ?? key.startIndex)...])
            inputs.append(
                Self.input(
                    entry, directory: "s3://\(object.bucket)/\(prefix)", name: name.isEmpty ? nil : name, batch: batch))
        }
        return try await get(inputs, detach: batch.detach, quiet: batch.run.quiet)
    }

    /// The batch's entries, each given to `body`; an input that changed while it was read is
    /// said on standard error and exits with 1.
    private func entries(of batch: GetBatch, _ body: (InputEntry) throws -> Void) async throws {
        do {
            try await batch.entries { entry in
                try body(entry)
                return true
            }
        } catch {
            Console.err("haul: \(error) (the input changed while it was read)\n")
            throw ExitCode.failure
        }
    }

    private static func input(_ entry: InputEntry, directory: String, name: String?, batch: GetBatch) -> DownloadInput {
        let headers = batch.allHeaders.isEmpty ? nil : Dictionary(batch.allHeaders.map { ($0.name, $0.value) }, uniquingKeysWith: { $1 })
        if let delta = entry.delta {
            // The service fetches the control file again and builds the target from the
            // seeds, files of this machine (inside its roots, which it checks).
            return DownloadInput(
                url: delta.controlURL.absoluteString, directory: directory, name: name, headers: headers,
                maxBytesPerSecond: batch.run.configuration.maxBytesPerSecondPerDownload, zsync: true,
                seeds: delta.seeds.isEmpty ? nil : delta.seeds.map(\.path))
        }
        if let stream = entry.stream {
            return DownloadInput(
                url: entry.url.absoluteString, directory: directory, name: name, headers: headers,
                maxBytesPerSecond: batch.run.configuration.maxBytesPerSecondPerDownload,
                hls: DownloadInput.StreamInput(
                    variant: stream.variant.description, renditions: stream.renditions,
                    duration: stream.maxDuration?.inSeconds))
        }
        return DownloadInput(
            url: entry.url.absoluteString, directory: directory, name: name,
            checksum: entry.checksum?.description, expectedSize: entry.expectedSize, headers: headers,
            maxBytesPerSecond: batch.run.configuration.maxBytesPerSecondPerDownload,
            mirrors: entry.mirrors.isEmpty ? nil : entry.mirrors.map(\.absoluteString),
            pieces: entry.pieces.map(DownloadInput.Pieces.init))
    }

    /// Queues `inputs` with the service and, unless `detach`, follows them to their end,
    /// printing progress and outcomes; returns the exit status (0 when every one completed).
    ///
    /// The downloads go to the service in parts, so that the first start while the rest are
    /// sent, as they do without a service; every one is checked here first, by the service's
    /// own rules (``DownloadBatch``), so that a bad one is refused before any is queued.
    private func get(_ inputs: [DownloadInput], detach: Bool, quiet: Bool) async throws -> Int32 {
        if inputs.count > Self.firstPart, let directory = inputs.first?.directory, !DownloadBatch.isObjectAddress(directory) {
            do throws(FieldError) {
                _ = try DownloadBatch(roots: [directory], defaultDirectory: directory).requests(for: inputs)
            } catch {
                Console.err("haul: \(error.description)\n")
                throw ExitCode.failure
            }
        }
        return try await calling {
            // Follow first, so that no end is missed.
            let events = detach ? nil : try await client.events(filter: Self.filter(quiet: quiet))
            var ids: [String] = []
            var part = Self.firstPart
            while ids.count < inputs.count {
                // At most `part` downloads and about 512 KiB of JSON (the service takes 1 MiB).
                var end = ids.count
                var bytes = 0
                while end < inputs.count, end - ids.count < part, bytes < 512 << 10 {
                    bytes += Self.estimatedSize(of: inputs[end])
                    end += 1
                }
                do {
                    ids += try await client.add(Array(inputs[ids.count..<end]))
                } catch where !ids.isEmpty {
                    Console.err("haul: \(ids.count) of \(inputs.count) downloads were queued before this failure\n")
                    throw error
                }
                part = min(part * 4, 2_000)
            }
            if detach {
                if !quiet { for id in ids { Console.out("queued \(id)\n") } }
                return 0
            }
            return try await Self.follow(ids, on: client, events: events!, quiet: quiet)
        }
    }

    /// About how many bytes of JSON a download takes in a request.
    static func estimatedSize(of input: DownloadInput) -> Int {
        let headers = input.headers?.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count + 8 } ?? 0
        return 128 + input.url.utf8.count + (input.mirrors?.reduce(0) { $0 + $1.utf8.count + 4 } ?? 0)
            + (input.pieces?.hashes.reduce(64) { $0 + $1.utf8.count + 3 } ?? 0)
            + (input.directory?.utf8.count ?? 0) + (input.name?.utf8.count ?? 0)
            + (input.checksum?.utf8.count ?? 0) + headers
    }

    /// `haul resume` through the service: resumes the downloads a person paused and follows
    /// every unfinished one to its end; returns the exit status, as `get` does.
    func resume(_ run: RunSettings) async throws -> Int32 {
        try await calling {
            let events = try await client.events(filter: Self.filter(quiet: run.quiet))
            let unfinished = try await client.list(states: [.queued, .running, .waiting, .paused])
            guard !unfinished.isEmpty else {
                if !run.quiet { Console.out("nothing to resume\n") }
                return 0
            }
            let paused = unfinished.filter { $0.state == .paused }.map(\.id)
            if !paused.isEmpty { _ = try await client.bulk("resume", ids: paused) }
            return try await Self.follow(unfinished.map(\.id), on: client, events: events, quiet: run.quiet)
        }
    }

    // MARK: - Jobs

    func list(_ request: ListRequest) async throws {
        let jobs = try await calling { try await client.list(states: request.states).map(\.snapshot) }
        JobTable.print(jobs, request)
    }

    /// One line with how many downloads the service changed; exit status 1 when it
    /// changed none of the IDs given.
    func control(_ action: ControlAction, _ target: ControlTarget) async throws {
        let affected = try await calling {
            switch target {
            case .ids(let ids): try await client.bulk(action.name, ids: ids)
            case .all: try await client.bulk(action.name, states: action.allStates.sorted { $0.rawValue < $1.rawValue })
            }
        }
        Console.out(
            "\(action.done) \(affected) download\(affected == 1 ? "" : "s") (through the service at \(client.address))\n")
        if affected == 0, case .ids = target { throw ExitCode.failure }
    }

    /// The events a follower needs: quiet, only the ends of downloads (and removals), since
    /// it prints nothing else; otherwise every state change and the progress.
    static func filter(quiet: Bool) -> EventFilter {
        quiet ? EventFilter(types: ["download", "removed"], states: [.completed, .failed, .cancelled]) : .all
    }

    /// Follows `ids` on the event stream until each has ended (see ``DownloadFollower``).
    /// A stream that ends while the service still runs (a client that fell too far behind is
    /// cut off) is opened again after the last event seen; a `resync` is answered by looking
    /// the pending downloads up.
    static func follow(
        _ ids: [String], on client: ServiceClient, events: AsyncThrowingStream<ServiceEvent, any Error>, quiet: Bool
    ) async throws(ServiceClient.Failure) -> Int32 {
        var follower = DownloadFollower(ids: ids)
        var events: AsyncThrowingStream<ServiceEvent, any Error>? = events
        // Reconnections in a row with no event between them.
        var fruitless = 0
        while !follower.isDone {
            if let stream = events {
                do {
                    for try await event in stream {
                        fruitless = 0
                        for output in follower.take(event) {
                            try await show(output, follower: &follower, client: client, quiet: quiet)
                        }
                        if follower.isDone { break }
                    }
                } catch let failure as ServiceClient.Failure {
                    throw failure
                } catch {
                    // The connection broke: the same as the stream ending.
                }
            }
            guard !follower.isDone else { break }
            // The stream ended: a service that stops ends it first; one that still runs cut
            // this client off (too far behind), and takes it back after its last event.
            events = nil
            if client.serviceRuns, fruitless < 5 {
                fruitless += 1
                events = try? await client.events(after: follower.lastEventID, filter: filter(quiet: quiet))
                if events != nil { continue }
            }
            Console.err(
                "haul: the service stopped before \(follower.pending.count) download(s) ended; they resume when it starts again\n")
            return 1
        }
        return follower.failures == 0 ? 0 : 1
    }

    /// Prints what the follower said; looks up downloads when it asks.
    private static func show(
        _ output: DownloadFollower.Output, follower: inout DownloadFollower, client: ServiceClient, quiet: Bool
    ) async throws(ServiceClient.Failure) {
        switch output {
        case .saved(let view):
            if !quiet {
                Console.out("\(view.unchanged == true ? "unchanged" : "saved") \(view.destination) (\(Format.bytes(view.bytes)))\n")
            }
        case .failed(let id, let message):
            Console.err("haul: \(id): \(message)\n")
        case .removed(let id):
            Console.err("haul: \(id) was removed\n")
        case .state(let view):
            if !quiet { Console.out("\(view.state.rawValue) \(view.name)\n") }
        case .progress(let progress):
            guard !quiet else { return }
            let percent = progress.totalBytes.map { $0 > 0 ? " \(progress.bytes * 100 / $0)%" : "" } ?? ""
            Console.out(
                "\(progress.id) \(Format.bytes(progress.bytes))\(percent) \(Format.bytes(Int64(progress.bytesPerSecond)))/s\n")
        case .lookUp(let ids):
            for id in ids {
                let found = try await client.download(id)
                let outputs = found.map { follower.take($0) } ?? follower.takeMissing(id)
                for output in outputs { try await show(output, follower: &follower, client: client, quiet: quiet) }
            }
        }
    }
}
