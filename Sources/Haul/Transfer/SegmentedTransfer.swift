import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// Fetches the remaining ranges of a file over several connections at once, writing each
/// at its offset with `pwrite`, and stealing half of the largest remaining range whenever a
/// connection runs out of work.
///
/// A download limited to a low rate comes this way too, even over one connection: each
/// request asks for a small part of its segment (``RateSchedule/pacedRequestSize(forLimit:)``),
/// so that the socket is read in small, even steps rather than in reads of 256 KiB.
///
/// With mirrors (``DownloadRequest/mirrors``) the connections are spread across the
/// sources still in use, each source taking at most the per-host cap; a source that fails
/// or answers with other content is dropped (``SourceSet``) and its connections move to the
/// others without spending a retry. Work stealing moves the tail to whichever connection
/// runs out of work first: the fastest source's.
///
/// Progress survives interruption: at each checkpoint (and when the transfer stops for any
/// reason) the partial file is fsynced and the ranges still missing are saved in its
/// `.haul-meta` sidecar (and the completed byte count in the journal), so a later run
/// resumes every segment where it stood.
struct SegmentedTransfer: Sendable {
    enum Outcome: Sendable {
        /// Every byte is in the file.
        case complete
        /// The content changed (or ranges stopped working): start over from zero.
        case changed(String)
    }

    let clients: HTTPClients
    /// Where the segments are fetched from (the final URL of the first request).
    let url: URL
    let validator: Validator
    let table: SegmentTable
    let file: PartialFile
    let paths: PartialPaths
    /// The sidecar's content; `remaining` is filled in at each save.
    let metadata: PartialMetadata
    let connections: Int
    /// Which headers each source gets: credentials only to the request's origin.
    let policy: RedirectPolicy
    /// Where the bytes may come from, shared with the rest of the download's run.
    let sources: NIOLockedValueBox<SourceSet>
    /// Connections one source may take.
    let perSource: Int
    let configuration: DownloadManager.Configuration
    let core: JobCore
    let threadPool: NIOThreadPool
    let checkpointer: Checkpointer?
    let logger: Logger

    /// Serialises sidecar saves, which several I/O threads may find due at once.
    private let checkpointLock = NIOLock()
    /// When the sidecar last recorded progress.
    private let lastProgressSave = NIOLockedValueBox(ContinuousClock.now)
    /// The missing ranges at the last fsync, kept here so progress saves need not read
    /// the sidecar back. Guarded by `checkpointLock`.
    private let syncedRemaining: NIOLockedValueBox<[[Int64]]?>
    /// The length of the sidecar's document as this transfer last saved it, which places
    /// the progress record; `nil` until it has saved one. Guarded by `checkpointLock`.
    private let documentLength = NIOLockedValueBox<Int?>(nil)
    /// How often progress (not yet synced) is saved in the sidecar while batches are full;
    /// partial batches are saved each time.
    static let progressInterval: Duration = .milliseconds(100)

    /// Runs `segments` into `file` over at most `connections` connections.
    init(
        _ segments: TransferMachine.Segments, file: PartialFile, paths: PartialPaths, connections: Int,
        sources: NIOLockedValueBox<SourceSet>, policy: RedirectPolicy,
        download: TransferOperation.Download, environment: TransferOperation.Environment
    ) {
        self.clients = environment.clients
        self.url = segments.url
        self.validator = segments.validator
        self.table = SegmentTable(
            total: segments.total, remaining: segments.remaining, connections: connections,
            minimumSplit: TransferOperation.minimumSplit)
        self.file = file
        self.paths = paths
        self.metadata = segments.metadata
        self.connections = connections
        self.policy = policy
        self.sources = sources
        self.perSource = max(1, min(connections, environment.configuration.maxConnectionsPerHost))
        self.configuration = environment.configuration
        self.core = download.core
        self.threadPool = environment.threadPool
        self.checkpointer = download.checkpointer
        self.logger = environment.logger
        self.syncedRemaining = NIOLockedValueBox(segments.metadata.remaining)
    }

    /// How a worker, or one of its requests, ended.
    private typealias WorkerResult = TransferMachine.SegmentResponse.Ending

    func run() async throws(DownloadError) -> Outcome {
        core.meter.reset(completed: table.completed, total: table.total)
        checkpointer?.describe(validator: validator, total: table.total)
        // The first segments are claimed here, not by the workers once they run, so the
        // split does not depend on when each task gets a thread.
        let firstClaims = (0..<connections).compactMap { _ in table.claim() }
        core.connections = firstClaims.count
        defer { core.connections = 0 }
        let result = await withTaskGroup(of: WorkerResult.self) { group -> WorkerResult in
            for claim in firstClaims { group.addTask { await worker(startingWith: claim) } }
            var outcome = WorkerResult.done
            while let next = await group.next() {
                switch next {
                case .done:
                    continue
                case .changed, .failed:
                    if case .done = outcome { outcome = next }
                    group.cancelAll()
                }
            }
            return outcome
        }
        // Whatever happened, what is in the file is made durable and recorded (on the I/O
        // pool, which runs it even for a cancelled task).
        try? await threadPool.perform { () throws(DownloadError) in try checkpoint() }
        if Task.isCancelled {
            throw DownloadError(.cancelled, "\(url.absoluteString): interrupted", cancellationReason: .userRequested)
        }
        switch result {
        case .done:
            guard table.isComplete else {
                throw DownloadError(.network, "\(url.absoluteString): segments ended before the content was complete")
            }
            return .complete
        case .changed(let reason):
            return .changed(reason)
        case .failed(let error):
            throw error
        }
    }

    /// Saves the sidecar with the missing ranges after an fsync, and records the count.
    func checkpoint() throws(DownloadError) {
        checkpointLock.lock()
        defer { checkpointLock.unlock() }
        try file.sync()
        let remaining = table.remaining().map { [$0.0, $0.1] }
        var metadata = self.metadata
        metadata.remaining = remaining
        metadata.unsyncedRemaining = remaining
        metadata.bootID = ProcessIdentity.bootID
        let length = try metadata.save(to: paths.metadata)
        documentLength.withLockedValue { $0 = length }
        syncedRemaining.withLockedValue { $0 = remaining }
        checkpointer?.synced(upTo: table.completed)
    }

    /// Saves what has been written, without an fsync: enough for a restart in this boot.
    ///
    /// Called after each batch is written. A partial batch (a connection slower than
    /// 40 MiB/s: at most 40 of them a second per connection) is always saved, so a SIGKILL
    /// loses none of it; full batches are saved at most every ``progressInterval``. A save
    /// rewrites the sidecar's progress record in place, one small `pwrite`; only the first
    /// one of a transfer (and one whose record outgrows a page) replaces the whole sidecar.
    private func saveProgress(at now: ContinuousClock.Instant, always: Bool) throws(DownloadError) {
        let due = lastProgressSave.withLockedValue { last in
            guard always || now - last >= Self.progressInterval else { return false }
            last = now
            return true
        }
        guard due else { return }
        checkpointLock.lock()
        defer { checkpointLock.unlock() }
        var metadata = self.metadata
        metadata.remaining = syncedRemaining.withLockedValue { $0 }
        metadata.unsyncedRemaining = table.remaining().map { [$0.0, $0.1] }
        metadata.bootID = ProcessIdentity.bootID
        if let length = documentLength.withLockedValue({ $0 }),
            try metadata.saveProgress(to: paths.metadata, documentLength: length)
        {
            return
        }
        let length = try metadata.save(to: paths.metadata)
        documentLength.withLockedValue { $0 = length }
    }

    /// What one attempt of a worker did.
    private enum Step {
        /// Fetched a claim: the worker goes on to the next.
        case fetched
        /// Nothing is left to claim.
        case noWork
        case changed(String)
    }

    /// Fetches claims one after another until none is left. A failed claim is released
    /// for any worker to take; this worker's consecutive failures are retried under the
    /// retry policy, and a fetched claim starts the count afresh.
    private func worker(startingWith first: SegmentTable.Claim) async -> WorkerResult {
        var next: SegmentTable.Claim? = first
        var failedStart: Int64 = 0
        guard var source = sources.withLockedValue({ $0.assign(maximumPerSource: perSource) }) else {
            table.release(first.index)
            return .done
        }
        defer { sources.withLockedValue { [source] in $0.release(source) } }
        while !Task.isCancelled {
            let step = await withRetries(
                configuration.retry,
                onRetry: { _, error, _ in
                    logger.debug(
                        "segment retry", metadata: ["url": "\(url)", "start": "\(failedStart)", "error": "\(error)"])
                }
            ) { () throws(DownloadError) -> Step in
                while true {
                    guard let claim = next ?? table.claim() else { return .noWork }
                    next = nil
                    if source.validator == nil {
                        source.validator = sources.withLockedValue { [source] in $0.validator(of: source) }
                    }
                    let (ending, validator) = await fetch(claim, from: source)
                    let verdict: SourceSet.Failure
                    switch ending {
                    case .done:
                        // A paced request fetched part of the segment: the rest comes next.
                        next = table.continuation(of: claim.index)
                        verdict = sources.withLockedValue { [source] in $0.saw(validator, from: source) }
                        if case .kept = verdict {
                            // A mirror's first answer shows its validator: sent from now on.
                            if source.validator == nil { source.validator = validator }
                            return .fetched
                        }
                    case .changed(let reason):
                        verdict = sources.withLockedValue { [source] in $0.disagreed(source, reason: reason) }
                        guard case .dropped = verdict else { return .changed(reason) }
                        table.release(claim.index)
                    case .failed(let error):
                        table.release(claim.index)
                        failedStart = claim.start
                        verdict = sources.withLockedValue { [source] in $0.failed(error, from: source) }
                        guard case .dropped = verdict else { throw error }
                    }
                    // The source is dropped: this connection goes on from another at once.
                    guard case .dropped(let url, let reason, _) = verdict else { return .fetched }
                    logger.debug("source dropped", metadata: ["url": "\(url)", "reason": "\(reason)"])
                    core.emit(.sourceDropped(url, reason: reason))
                    guard let other = sources.withLockedValue({ $0.assign(maximumPerSource: perSource) }) else {
                        return .noWork
                    }
                    source = other
                }
            }
            switch step {
            case .succeeded(.fetched):
                continue
            case .succeeded(.noWork), .interrupted, .waitingForNetwork:
                return .done
            case .succeeded(.changed(let reason)):
                return .changed(reason)
            case .failed(let error):
                return .failed(error)
            }
        }
        return .done
    }

    /// Fetches (part of) `claim` from `source`; returns how it went and the validator its
    /// response showed.
    private func fetch(_ claim: SegmentTable.Claim, from source: SourceSet.Assignment) async -> (
        WorkerResult, Validator?
    ) {
        let url = source.url
        var requestHeaders = HTTPHeaders()
        requestHeaders.add(name: "User-Agent", value: configuration.userAgent)
        for header in policy.headers(for: url) { requestHeaders.add(name: header.name, value: header.value) }
        // A download limited to a low rate asks for a little at a time (its reads come in
        // small, even steps); the rest of the claim is the next request's.
        let end = core.pacedRequestSize.map { min(claim.end, claim.start + $0) } ?? claim.end
        requestHeaders.replaceOrAdd(name: "Range", value: "bytes=\(claim.start)-\(end - 1)")
        // A mirror's first request has no validator to send: its size is checked, and the
        // validator it answers with is sent from then on.
        if let validator = source.validator {
            requestHeaders.replaceOrAdd(name: "If-Range", value: validator.headerValue)
        }
        let request: HTTPClient.Request
        do {
            request = try HTTPClient.Request(url: url, method: .GET, headers: requestHeaders)
        } catch {
            return (.failed(DownloadError.invalid("\(url.absoluteString): \(error)")), nil)
        }
        let checkpointer = self.checkpointer
        let delegate = SegmentDelegate(
            TransferMachine.SegmentResponse(
                url: url, start: claim.start, requestEnd: end, claimEnd: claim.end, total: table.total),
            claim: claim, table: table, file: file, core: core, threadPool: threadPool
        ) { count, now in
            if let checkpointer, checkpointer.wrote(count, at: now) {
                try checkpoint()
            } else {
                try saveProgress(at: now, always: count < BatchWriter.batchSize)
            }
        }
        let transportError = await clients.execute(request, receiver: delegate, logger: logger)
        let ending = await delegate.drained(error: transportError.map { TransferOperation.translate($0, url: url) })
        return (ending, delegate.responseValidator)
    }
}
