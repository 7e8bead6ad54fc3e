import ArgumentParser
import Foundation
import Haul

/// The backend that runs downloads in this process, on the local journal: a
/// ``DownloadManager`` fed through a ``DownloadSession``, and the journal's own control
/// calls, which reach a running `haul get` through the journal.
struct JournalBackend: ResumingBackend {
    /// How many requests are handed to the manager at once: enough for one journal
    /// transaction to carry many, few enough that a long list is never all in memory.
    static let batchSize = 1_000

    let journal: Journal

    /// Opens the journal at `path`; on failure says why on standard error and exits with 1.
    init(path: String) throws {
        do {
            journal = try Journal(path: path)
        } catch {
            Console.err("haul: cannot use the journal \(path): \(error.message)\n")
            throw ExitCode.failure
        }
    }

    func close() async {}

    // MARK: - Downloads

    func get(_ batch: GetBatch) async throws -> Int32 {
        if batch.detach { throw BackendRefusal.detachWithoutService }
        let directory = try batch.createdDirectory()
        for warning in batch.run.warnings { Console.err(warning) }
        var session = DownloadSession(configuration: batch.run.configuration, journal: journal, mode: batch.run.mode)
        session.hooks = batch.run.hooks
        // The URLs given as arguments are looked at once they end: a zsync control file
        // among them, whatever its name, is followed by its target's delta download.
        var unexamined = batch.object == nil ? batch.urls : []
        // And an HLS playlist among them has its stream downloaded once the session ends.
        var playlists: [URL] = []
        let journal = self.journal
        let code = await session.run { intake in
            await intake.expect(batch.scan.count)
            await Self.feed(intake, batch, directory: directory)
        } followUp: { intake in
            guard !unexamined.isEmpty else { return 0 }
            defer { unexamined = [] }
            // The journal is written in batches: what ended is read once it is there.
            await intake.manager.flushJournal()
            var requests: [DownloadRequest] = []
            for found in await CompletedArguments.documents(among: unexamined, in: directory, journal: journal) {
                switch found.document {
                case .playlist:
                    playlists.append(found.argument)
                case .controlFile(let data):
                    do {
                        let entry = try ZsyncEntries.entry(of: data, at: found.url, seeds: batch.seeds)
                        requests.append(try Self.request(for: entry, batch: batch, directory: directory))
                    } catch {
                        let url = found.url.absoluteString
                        Console.err("haul: \(url) looks like a zsync control file but is not followed: \(error)\n")
                    }
                }
            }
            return await intake.follow(requests)
        }
        guard !playlists.isEmpty else { return code }
        let settings = HLSEntries.Settings(options: batch.streamOptions, output: nil, directory: directory)
        let streams = await HLSEntries.run(playlists, settings: settings, run: batch.run)
        return code != 0 ? code : streams
    }

    func resume(_ run: RunSettings) async throws -> Int32 {
        for warning in run.warnings { Console.err(warning) }
        var session = DownloadSession(configuration: run.configuration, journal: journal, mode: run.mode)
        session.nothingToDo = "nothing to resume"
        session.hooks = run.hooks
        return await session.run { intake in
            do throws(DownloadError) {
                let count = try await intake.manager.resumeUnfinished()
                await intake.adopted(count)
            } catch {
                await intake.fail("cannot resume: \(error.message)")
            }
        }
    }

    /// Where `entry` goes in `directory`: its name, or its path (a Metalink file's name
    /// with folders), whose folders are created here.
    static func destination(of entry: InputEntry, in directory: URL, object: S3Location? = nil) throws
        -> DownloadDestination
    {
        if let object {
            // An object's name is a key under the prefix; a Metalink file's folders become
            // the key's own.
            let key = object.isPrefix ? object.key + (entry.name ?? "") : object.key
            return .object(bucket: object.bucket, key: key, staging: directory)
        }
        guard entry.isPath, let name = entry.name else { return .directory(directory, name: entry.name) }
        let file = directory.appendingPathComponent(name, isDirectory: false)
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        return .file(file)
    }

    /// The request for `entry` of `batch`, into `directory`.
    private static func request(for entry: InputEntry, batch: GetBatch, directory: URL) throws -> DownloadRequest {
        var request = DownloadRequest(
            url: entry.url, destination: try Self.destination(of: entry, in: directory, object: batch.object),
            id: entry.id,
            expectedSize: entry.expectedSize, checksum: entry.checksum, headers: batch.allHeaders)
        request.mirrors = entry.mirrors
        request.pieces = entry.pieces
        request.delta = entry.delta
        request.stream = entry.stream
        request.forceDownload = batch.force
        request.sensitiveHeaderNames = Set(batch.secretHeaders.map(\.name))
        request.storesCredentials = batch.storesCredentials
        return request
    }

    /// The second pass: builds requests and queues them in batches. An entry whose file
    /// name another URL claimed first is reported as a duplicate instead.
    private static func feed(_ intake: Intake, _ batch: GetBatch, directory: URL) async {
        var requests: [DownloadRequest] = []
        requests.reserveCapacity(min(batchSize, batch.scan.count))
        do {
            try await batch.entries { entry in
                let request = try Self.request(for: entry, batch: batch, directory: directory)
                guard batch.scan.owns(entry) else {
                    let name = InputFile.partialKey(for: entry)
                    let message =
                        "another URL in the list would be saved to the same file (\(name)); give it another name with out= in an input file"
                    await intake.reject(request, code: "duplicate", message: message)
                    return true
                }
                requests.append(request)
                guard requests.count >= batchSize else { return true }
                defer { requests.removeAll(keepingCapacity: true) }
                return await intake.enqueue(requests)
            }
        } catch {
            await intake.fail("\(error) (the input changed while it was read)")
            return
        }
        if !requests.isEmpty { await intake.enqueue(requests) }
    }

    // MARK: - Jobs

    func list(_ request: ListRequest) async throws {
        let jobs: [JobSnapshot]
        do {
            jobs = try journal.standingJobs(in: request.states)
        } catch {
            Console.err("haul: \(error.message)\n")
            throw ExitCode.failure
        }
        JobTable.print(jobs, request)
    }

    func control(_ action: ControlAction, _ target: ControlTarget) async throws {
        var targets: [DownloadID]
        do throws(DownloadError) {
            switch target {
            case .all:
                targets = try journal.jobs(in: action.allStates).map(\.id)
                if targets.isEmpty { Console.out(Self.nothing(action) + "\n") }
            case .ids(let ids):
                targets = try ids.map { text throws(DownloadError) in try resolve(text) }
            }
        } catch {
            Console.err("haul: \(error.message)\n")
            throw ExitCode.failure
        }
        var missing = false
        var applied = 0
        for id in targets {
            let result: Journal.ControlResult
            do throws(DownloadError) {
                switch action {
                case .pause: result = try journal.pause(id)
                case .cancel: result = try journal.cancel(id)
                case .retry: result = try journal.retry(id)
                }
            } catch {
                Console.err("haul: \(id): \(error.message)\n")
                missing = true
                continue
            }
            switch result {
            case .applied:
                applied += 1
                Console.out("\(action.done) \(id)\n")
            case .requested:
                Console.out("asked the running haul to \(action == .retry ? "resume" : action.name) \(id)\n")
            case .unchanged(let state):
                Console.out("\(id) is already \(state.rawValue)\n")
            case .notFound:
                Console.err("haul: no job \(id)\n")
                missing = true
            }
        }
        if action == .retry, applied > 0 { Console.out("run 'haul resume' to download \(applied == 1 ? "it" : "them")\n") }
        if missing { throw ExitCode.failure }
    }

    /// What `--all` says when it finds no job.
    private static func nothing(_ action: ControlAction) -> String {
        switch action {
        case .pause: "nothing to pause"
        case .cancel: "nothing to cancel"
        case .retry: "no failed jobs"
        }
    }

    /// The download the text names: by ID, or by URL where that names one download (see
    /// ``Journal/job(named:)``), as typed or as URL parsing normalises it; the text itself
    /// when it names none (it is reported missing).
    /// A URL that is one download's ID and also names others (the same URL to other
    /// places) acts on the first and says which others it left.
    private func resolve(_ text: String) throws(DownloadError) -> DownloadID {
        var found = try journal.jobs(named: text)
        if found == nil, let normalised = URL(string: text)?.absoluteString, normalised != text {
            found = try journal.jobs(named: normalised)
        }
        guard let found else { return DownloadID(text) }
        if !found.others.isEmpty {
            let others = found.others.map { "'\($0)'" }.joined(separator: ", ")
            Console.err("haul: \(found.id) is also the URL of \(others); give that ID to act on it\n")
        }
        return found.id
    }

    /// `haul clean`: forgets finished downloads and deletes orphaned partial files. Only
    /// the journal itself does this, even while a service runs for it.
    func clean() async throws {
        do {
            let report = try journal.clean()
            let jobs = report.rows == 1 ? "job" : "jobs"
            let files = report.partialFiles == 1 ? "file" : "files"
            Console.out("removed \(report.rows) finished \(jobs) and \(report.partialFiles) orphaned partial \(files)\n")
        } catch {
            Console.err("haul: \(error.message)\n")
            throw ExitCode.failure
        }
    }
}
