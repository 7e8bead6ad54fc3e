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
/// A fresh download's first response is not cut when its head says split: it is adopted
/// as the first segment's (``ResponseHandover``), holding the whole content at first, and
/// the other connections wait until ``SplitRule`` says they pay (``SegmentJoining``); then
/// what it has left is divided among them. A resumed partial's segments, and a download
/// from mirrors or limited to a low rate, start all their connections at once.
///
/// A download limited to a low rate comes this way too, even over one connection: each
/// request asks for a small part of its segment (``RateSchedule/pacedRequestSize(forLimit:)``),
/// so that the socket is read in small, even steps rather than in reads of 256 KiB.
///
/// With mirrors (``DownloadRequest/mirrors``) the connections are spread evenly across the
/// sources still in use; a source that fails
/// or answers with other content is dropped (``SourceSet``) and its connections move to the
/// others without spending a retry. Work stealing moves the tail to whichever connection
/// runs out of work first: the fastest source's. When what is left is too small to split,
/// an idle connection chases the rest of another source's range from its own, and the
/// first to get there writes it (the end game: ``SegmentTable``); the other is stopped.
///
/// With piece checksums (``DownloadRequest/pieces``) each piece is checked on the I/O pool
/// as soon as its last byte is written (``PieceLedger``); a bad piece is fetched again, not
/// from the sources that wrote into it, and those are demoted (``SourceSet``). The pieces
/// checked are saved in the sidecar with the missing ranges.
///
/// A delta download (``DownloadRequest/delta``) resumes a partial seeded from local files,
/// whose missing ranges are many and scattered: each connection asks for up to
/// ``deltaRangesPerRequest`` of them in one request (``SegmentTable/claimMore(after:for:count:bytes:at:)``),
/// and ``MultiRangeDelegate`` hands each range's bytes to a ``SegmentDelegate`` of its own. A
/// source that answers with its whole content instead is used as it passes, then asked for
/// one range at a time (``SourceSet/answeredWhole(_:)``).
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
    let validator: Validator?
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
    /// Connections one source may take: all of them (connections are spread evenly, the
    /// fewest first, so each source takes its share while the others work).
    let perSource: Int
    /// The pieces checked so far, for a download with piece checksums.
    let ledger: NIOLockedValueBox<PieceLedger>?
    let configuration: DownloadManager.Configuration
    let core: JobCore
    let threadPool: NIOThreadPool
    let checkpointer: Checkpointer?
    let logger: Logger
    /// For an object destination sent in parts: told of each write, it uploads the parts
    /// completed.
    let parts: PartStream?
    /// The content's checksum computed as the file fills in from its start, for a download
    /// checked whole (and not by pieces: a piece that fails is written again).
    private let prefixDigest: PrefixDigest?
    /// The download's first response, still running, for the first segment to adopt
    /// rather than asking for its range again (see ``ResponseHandover``).
    let adopting: ResponseHandover?
    /// With a response adopted, the other connections, parked until ``SplitRule`` says
    /// they pay.
    private let joining: SegmentJoining?

    /// Stops the request running for each segment, by index: the end game stops the one that
    /// lost a chase (a request for several ranges is under each of its segments).
    private let fetches = NIOLockedValueBox<[Int: @Sendable () -> Void]>([:])
    /// Ranges one request may ask for: several for a delta download, whose missing blocks
    /// are scattered (see ``MultiRangeDelegate``), else one.
    private let rangesPerRequest: Int
    /// The most bytes one request for several ranges asks for: larger ranges go one per
    /// request, so that they spread over the connections.
    static let multiRangeBytes: Int64 = 4 << 20
    /// Ranges per request for a delta download (nginx takes any number by default; Apache
    /// takes 200). With tens of thousands of ranges, requests are what a far server costs:
    /// 16,000 ranges 40 ms away took 10.2 s at 32 a request, 5.5 s at 128.
    static let deltaRangesPerRequest = 128
    /// Serialises sidecar saves, which several I/O threads may find due at once.
    private let checkpointLock = NIOLock()
    /// When the sidecar last recorded progress.
    private let lastProgressSave = NIOLockedValueBox(ContinuousClock.now)
    /// Whether the progress record no longer fits in a page (many ranges missing: a delta
    /// download's scattered blocks): each save then rewrites the whole sidecar.
    private let progressOutgrewPage = NIOLockedValueBox(false)
    /// The missing ranges at the last fsync, kept here so progress saves need not read
    /// the sidecar back. Guarded by `checkpointLock`.
    private let syncedRemaining: NIOLockedValueBox<[[Int64]]?>
    /// The length of the sidecar's document as this transfer last saved it, which places
    /// the progress record; `nil` until it has saved one. Guarded by `checkpointLock`.
    private let documentLength = NIOLockedValueBox<Int?>(nil)
    /// The pieces checked at the last fsync (see ``PieceLedger/bitfield``). Guarded by
    /// `checkpointLock`.
    private let syncedPieces: NIOLockedValueBox<String?>
    /// How often progress (not yet synced) is saved in the sidecar while batches are full;
    /// partial batches are saved each time.
    static let progressInterval: Duration = .milliseconds(100)

    /// Runs `segments` into `file` over at most `connections` connections.
    init(
        _ segments: TransferMachine.Segments, file: PartialFile, paths: PartialPaths, connections: Int,
        sources: NIOLockedValueBox<SourceSet>, policy: RedirectPolicy,
        download: TransferOperation.Download, environment: TransferOperation.Environment, parts: PartStream? = nil,
        adopting: ResponseHandover? = nil
    ) {
        self.parts = parts
        self.adopting = adopting
        self.clients = environment.clients
        self.url = segments.url
        self.validator = segments.validator
        // Mirrors differ in speed: the slowest one's tail is split finer, so that the others
        // take all but a little of it.
        // An adopted first response holds the whole content at first: the others take
        // their parts of its rest when they join.
        let table = SegmentTable(
            total: segments.total, remaining: segments.remaining, connections: adopting == nil ? connections : 1,
            minimumSplit: sources.withLockedValue { $0.live.count > 1 }
                ? TransferOperation.minimumSplitAcrossSources : TransferOperation.minimumSplit)
        self.table = table
        let core = download.core
        // Over HTTP/2 the others would be streams: unless somebody asked for the split
        // (`-x` or the request's own connections, mirrors, piece checksums, a delta
        // download), a fast download is probed by one first (`SplitRule.probeAbove`).
        let request = download.request
        let asked =
            environment.configuration.segmentCap != nil || request.connections != nil || request.pieces != nil
            || !request.mirrors.isEmpty || request.delta != nil
        self.joining =
            if let adopting, connections > 1 {
                SegmentJoining(
                    rule: SplitRule(setup: adopting.setup ?? .zero, probes: segments.multiplexed && !asked),
                    total: segments.total, connections: connections
                ) { running, dividing in
                    if dividing { table.divide(0, into: running) }
                    core.connections = running
                }
            } else {
                nil
            }
        self.file = file
        self.paths = paths
        self.metadata = segments.metadata
        self.connections = connections
        self.policy = policy
        self.sources = sources
        // The scheduler granted the connections (within the request's host's cap, when one
        // was set): spread evenly, no source takes more than its share unless others fail.
        self.perSource = max(1, connections)
        self.rangesPerRequest = download.request.delta == nil ? 1 : Self.deltaRangesPerRequest
        self.ledger = download.request.pieces.map { pieces in
            let verified = segments.metadata.verifiedPieces.map {
                PieceLedger.pieces(inBitfield: $0, count: pieces.hashes.count)
            }
            return NIOLockedValueBox(PieceLedger(pieces, total: segments.total, verified: verified ?? []))
        }
        self.configuration = environment.configuration
        self.core = download.core
        self.threadPool = environment.threadPool
        self.checkpointer = download.checkpointer
        self.logger = environment.logger
        self.prefixDigest =
            if let checksum = download.request.checksum, download.request.pieces == nil {
                PrefixDigest(checksum.algorithm, file: file, table: table, threadPool: environment.threadPool)
            } else {
                nil
            }
        self.syncedRemaining = NIOLockedValueBox(segments.metadata.remaining)
        self.syncedPieces = NIOLockedValueBox(segments.metadata.verifiedPieces)
    }

    /// How a worker, or one of its requests, ended.
    private typealias WorkerResult = TransferMachine.SegmentResponse.Ending

    func run() async throws(DownloadError) -> Outcome {
        if let pieces = ledger?.withLockedValue({ $0.pieces }), !pieces.fits(total: table.total) {
            throw DownloadError(
                .sizeMismatch,
                "\(url.absoluteString) is \(table.total) bytes, which \(pieces.hashes.count) pieces of \(pieces.length) bytes do not make")
        }
        // A resumed download's pieces written before it stopped are checked first.
        if ledger != nil {
            try await threadPool.perform { () throws(DownloadError) in
                try checkPieces(ledger!.withLockedValue { $0.unchecked(missing: table.remaining()) })
            }
        }
        // A resumed download's parts written before it stopped are sent first.
        if let parts { reportParts(to: parts, around: 0..<table.total) }
        core.meter.reset(completed: table.completed, total: table.total)
        checkpointer?.describe(validator: validator, total: table.total)
        // The first segments are claimed here, not by the workers once they run, so the
        // split does not depend on when each task gets a thread.
        let started = ContinuousClock.now
        // An adopted response is the first segment's, which starts where it does and holds
        // everything (see `init`); the other connections wait for the rule to say join.
        let firstClaims = (0..<(adopting == nil ? connections : 1)).compactMap { _ in table.claim(at: started) }
        let adopted = firstClaims.first.flatMap { $0.start == 0 ? adopting : nil }
        core.connections = firstClaims.count
        defer { core.connections = 0 }
        let result = await withTaskGroup(of: WorkerResult.self) { group -> WorkerResult in
            for (index, claim) in firstClaims.enumerated() {
                group.addTask { await worker(startingWith: claim, adopting: index == 0 ? adopted : nil) }
            }
            if let joining {
                for _ in 1..<connections {
                    group.addTask {
                        guard await joining.admitted(), let claim = table.claim(at: .now) else { return .done }
                        return await worker(startingWith: claim, adopting: nil)
                    }
                }
            }
            var outcome = WorkerResult.done
            while let next = await group.next() {
                // A connection that ends before the others joined was the first: they are
                // not needed (done), or it failed.
                joining?.close()
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
        joining?.close()
        // Whatever happened, what is in the file is made durable and recorded (on the I/O
        // pool, which runs it even for a cancelled task).
        try? await threadPool.perform { () throws(DownloadError) in try checkpoint() }
        if Task.isCancelled {
            throw DownloadError(.cancelled, "interrupted", cancellationReason: .userRequested)
        }
        switch result {
        case .done:
            guard table.isComplete else {
                throw DownloadError(.network, "the segments ended before the content was complete")
            }
            return .complete
        case .changed(let reason):
            return .changed(reason)
        case .failed(let error):
            throw error
        }
    }

    /// The content's digest once ``run()`` ended complete: what ``PrefixDigest`` hashed
    /// while the file filled in, and the rest; `nil` when the content is not checked whole
    /// (or a read failed: then the file is hashed whole).
    func fileDigest() async -> ContentDigest? {
        await prefixDigest?.finish()
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
        metadata.verifiedPieces = ledger?.withLockedValue { $0.bitfield }
        metadata.sources = sources.withLockedValue { $0.health }
        syncedPieces.withLockedValue { $0 = metadata.verifiedPieces }
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
    ///
    /// Once the record outgrows a page (thousands of ranges missing: a delta download's
    /// blocks, each its own small write), every save is at most every ``progressInterval``:
    /// a whole sidecar for each write would cost as much as all the ranges per write (a
    /// 64 MiB delta download with 3,276 ranges spent 43 s of CPU on it). A SIGKILL then
    /// loses at most that interval's ranges, which are fetched again.
    private func saveProgress(at now: ContinuousClock.Instant, always: Bool) throws(DownloadError) {
        let outgrew = progressOutgrewPage.withLockedValue { $0 }
        let due = lastProgressSave.withLockedValue { last in
            guard (always && !outgrew) || now - last >= Self.progressInterval else { return false }
            last = now
            return true
        }
        guard due else { return }
        checkpointLock.lock()
        defer { checkpointLock.unlock() }
        var metadata = self.metadata
        metadata.verifiedPieces = syncedPieces.withLockedValue { $0 }
        metadata.sources = sources.withLockedValue { $0.health }
        metadata.remaining = syncedRemaining.withLockedValue { $0 }
        metadata.unsyncedRemaining = table.remaining().map { [$0.0, $0.1] }
        metadata.bootID = ProcessIdentity.bootID
        if let length = documentLength.withLockedValue({ $0 }) {
            if try metadata.saveProgress(to: paths.metadata, documentLength: length) { return }
            progressOutgrewPage.withLockedValue { $0 = true }
        }
        let length = try metadata.save(to: paths.metadata)
        documentLength.withLockedValue { $0 = length }
    }

    /// Tells `parts` of a write into `range`, widened to the whole pieces it touched (a
    /// part over several pieces is ready when the last of them passes).
    private func reportParts(to parts: PartStream, around range: Range<Int64>) {
        let ledger = self.ledger
        let around = ledger?.withLockedValue { $0.span(of: range) } ?? range
        parts.wrote(
            around: around, missing: table.remaining(),
            isVerified: ledger.map { ledger in { bytes in ledger.withLockedValue { $0.isVerified(bytes) } } })
    }

    /// Checks `pieces` (handed out by the ledger: wholly in the file) against their
    /// digests; a bad one is fetched again, not from the sources that wrote into it, and
    /// those are demoted. Blocking: for the I/O pool.
    private func checkPieces(_ pieces: [Int]) throws(DownloadError) {
        guard let ledger, !pieces.isEmpty else { return }
        let checksums = ledger.withLockedValue { $0.pieces }
        for piece in pieces {
            let range = checksums.range(of: piece, total: table.total)
            let digest = ContentDigest(checksums.algorithm)
            try file.digest(into: digest, from: range.lowerBound, length: Int64(range.count))
            guard digest.hex() != checksums.hashes[piece] else {
                ledger.withLockedValue { $0.passed(piece) }
                continue
            }
            let (bad, writers, failures, exhausted) = ledger.withLockedValue { $0.failed(piece) }
            logger.debug(
                "piece did not match", metadata: ["url": "\(url)", "piece": "\(piece)", "sources": "\(writers.sorted())"])
            if exhausted {
                throw DownloadError(
                    .checksumMismatch,
                    "\(url.absoluteString): piece \(piece) (bytes \(bad.lowerBound)-\(bad.upperBound - 1)) did not match its \(checksums.algorithm.rawValue) digest \(PieceLedger.maximumFailures) times, from every source tried")
            }
            for writer in writers {
                if case .dropped(let dropped, let reason, _) = sources.withLockedValue({ $0.servedBadPiece(writer) }) {
                    core.emit(.sourceDropped(dropped, reason: reason))
                }
            }
            // Only the other sources may fetch it again, unless none is left.
            let avoiding = avoidable(writers)
            table.reopen(bad, avoiding: avoiding)
            let from = sources.withLockedValue { set in
                writers.sorted().compactMap { set.sources.indices.contains($0) ? set.sources[$0].url.absoluteString : nil }
            }
            core.emit(
                .retrying(
                    attempt: failures,
                    reason: DownloadError(
                        .checksumMismatch,
                        "\(url.absoluteString): piece \(piece) (bytes \(bad.lowerBound)-\(bad.upperBound - 1)) from \(from.joined(separator: ", ")) did not match its \(checksums.algorithm.rawValue) digest: fetching it again\(avoiding.isEmpty ? "" : " from another source")"),
                    delay: .zero))
        }
    }

    /// Of `writers`, those a bad piece can avoid: every one, unless no other live source
    /// is left to fetch it from.
    private func avoidable(_ writers: Set<Int>) -> Set<Int> {
        sources.withLockedValue { set in
            let others = set.sources.indices.filter { set.sources[$0].isLive && !writers.contains($0) }
            return others.isEmpty ? [] : writers
        }
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
    private func worker(startingWith first: SegmentTable.Claim, adopting: ResponseHandover?) async -> WorkerResult {
        var next: SegmentTable.Claim? = first
        // The response its first claim adopts, if any: used once, for that claim.
        var adopt = adopting
        var failedStart: Int64 = 0
        guard var source = sources.withLockedValue({ $0.assign(maximumPerSource: perSource) }) else {
            table.release(first.index)
            return .done
        }
        defer { sources.withLockedValue { [source] in $0.release(source) } }
        // What this worker's failed requests wrote before they failed: a request that
        // dropped after bytes arrived is retried at once (see `RetrySchedule`).
        var writtenBeforeFailing: Int64 = 0
        while !Task.isCancelled {
            let step = await withRetries(
                configuration.retry,
                progress: { writtenBeforeFailing },
                onRetry: { _, error, _ in
                    logger.debug(
                        "segment retry", metadata: ["url": "\(url)", "start": "\(failedStart)", "error": "\(error)"])
                }
            ) { () throws(DownloadError) -> Step in
                while true {
                    if !sources.withLockedValue({ [source] in $0.isLive(source) }) {
                        // Dropped meanwhile (it served bad pieces): go on from another.
                        if let claim = next { table.release(claim.index) }
                        next = nil
                        guard let other = sources.withLockedValue({ $0.assign(maximumPerSource: perSource) }) else {
                            return .noWork
                        }
                        sources.withLockedValue { [source] in $0.release(source) }
                        source = other
                    }
                    guard let claim = next ?? table.claim(
                            for: source.index, chasing: core.pacedRequestSize == nil, at: .now)
                    else {
                        // What is left is to be fetched from another source (a bad piece).
                        guard table.hasWork(avoiding: source.index),
                            let other = sources.withLockedValue({ [source] in
                                $0.assign(maximumPerSource: perSource, excluding: source.index)
                            })
                        else { return .noWork }
                        sources.withLockedValue { [source] in $0.release(source) }
                        source = other
                        continue
                    }
                    next = nil
                    if source.validator == nil {
                        source.validator = sources.withLockedValue { [source] in $0.validator(of: source) }
                    }
                    let adopted = claim == first ? adopt : nil
                    adopt = nil
                    // A delta download's scattered ranges go several to a request.
                    var batch = [claim]
                    let several = sources.withLockedValue { [source, rangesPerRequest] in
                        $0.rangesPerRequest(source, asking: rangesPerRequest)
                    }
                    if several > 1, adopted == nil, core.pacedRequestSize == nil {
                        batch += table.claimMore(
                            after: claim, for: source.index, count: several - 1, bytes: Self.multiRangeBytes, at: .now)
                    }
                    let ending: WorkerResult
                    let validator: Validator?
                    if batch.count > 1 {
                        let (endings, shown, whole) = await stoppableFetch(batch, from: source)
                        validator = shown
                        if whole { sources.withLockedValue { [source] in $0.answeredWhole(source) } }
                        // A failed share is given back; a change gives every share back.
                        for (share, shareEnding) in endings {
                            guard case .failed = shareEnding else { continue }
                            writtenBeforeFailing += max(0, table.written(share.index) - share.start)
                            table.release(share.index)
                            failedStart = share.start
                        }
                        ending = WorkerResult.combining(endings.map { $0.1 })
                        if case .changed = ending { for share in batch { table.release(share.index) } }
                    } else {
                        (ending, validator) = await stoppableFetch(claim, from: source, adopting: adopted)
                    }
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
                        if batch.count == 1 {
                            writtenBeforeFailing += max(0, table.written(claim.index) - claim.start)
                            table.release(claim.index)
                            failedStart = claim.start
                        }
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

    /// ``fetch(_:from:)`` in a task of its own, which another connection's delegate can
    /// cancel through ``stopFetch(_:)`` when the end game's chase between them is decided.
    private func stoppableFetch(
        _ claim: SegmentTable.Claim, from source: SourceSet.Assignment, adopting: ResponseHandover?
    ) async -> (WorkerResult, Validator?) {
        table.hold(claim.index, by: source.index)
        let fetching = Task { await fetch(claim, from: source, adopting: adopting) }
        fetches.withLockedValue { $0[claim.index] = { fetching.cancel() } }
        // A chase decided before its fetch was recorded here.
        if !table.isWanted(claim.index) { fetching.cancel() }
        let result = await withTaskCancellationHandler {
            await fetching.value
        } onCancel: {
            fetching.cancel()
        }
        fetches.withLockedValue { $0[claim.index] = nil }
        return result
    }

    /// ``stoppableFetch(_:from:adopting:)`` for a request for several claims' ranges; returns
    /// how each claim's share went, the validator shown, and whether the server sent its whole
    /// content instead.
    private func stoppableFetch(_ batch: [SegmentTable.Claim], from source: SourceSet.Assignment) async -> (
        [(SegmentTable.Claim, WorkerResult)], Validator?, Bool
    ) {
        for claim in batch { table.hold(claim.index, by: source.index) }
        let fetching = Task { await fetch(batch, from: source) }
        fetches.withLockedValue { for claim in batch { $0[claim.index] = { fetching.cancel() } } }
        if !batch.allSatisfy({ table.isWanted($0.index) }) { fetching.cancel() }
        let result = await withTaskCancellationHandler {
            await fetching.value
        } onCancel: {
            fetching.cancel()
        }
        fetches.withLockedValue { for claim in batch { $0[claim.index] = nil } }
        return result
    }

    /// Stops the request running for segment `index`, if one is.
    private func stopFetch(_ index: Int) {
        fetches.withLockedValue { $0[index] }?()
    }

    /// Fetches (part of) `claim` from `source`, or takes the response `adopting` holds
    /// (the download's first, which starts where the claim does); returns how it went and
    /// the validator its response showed.
    private func fetch(
        _ claim: SegmentTable.Claim, from source: SourceSet.Assignment, adopting: ResponseHandover?
    ) async -> (WorkerResult, Validator?) {
        let url = source.url
        // A download limited to a low rate asks for a little at a time (its reads come in
        // small, even steps); the rest of the claim is the next request's.
        let end = core.pacedRequestSize.map { min(claim.end, claim.start + $0) } ?? claim.end
        // The adopted response's parts measure the link for the rule that says when the
        // other connections join; over HTTP/2, a probe's parts say whether the rest join.
        var measuring: (@Sendable (Int, ContinuousClock.Instant, any EventLoop) -> Void)?
        if let joining, adopting != nil || joining.probes {
            let first = adopting != nil
            measuring = { count, now, loop in joining.received(count, at: now, on: loop, first: first) }
        }
        let response =
            adopting != nil
            ? TransferMachine.SegmentResponse.adopted(
                url: url, claimEnd: claim.end, total: table.total, validator: validator)
            : TransferMachine.SegmentResponse(
                url: url, start: claim.start, requestEnd: end, claimEnd: claim.end, total: table.total,
                sent: source.validator)
        let request: HTTPClient.Request
        do throws(DownloadError) {
            request = try HTTPClients.get(
                url, userAgent: configuration.userAgent, headers: policy.headers(for: url),
                replacing: response.requestHeaders)
        } catch {
            return (.failed(error), nil)
        }
        let delegate = segmentDelegate(response, claim: claim, sourceIndex: source.index, measuring: measuring)
        let transportError =
            if let adopting {
                await adopting.attach(delegate)
            } else {
                await clients.execute(request, receiver: delegate, logger: logger)
            }
        let ending = await delegate.drained(error: transportError.map { TransportErrors.translate($0, url: url) })
        return (ending, delegate.responseValidator)
    }

    /// Fetches the ranges of several claims from `source` in one request (see
    /// ``MultiRangeDelegate``).
    private func fetch(_ batch: [SegmentTable.Claim], from source: SourceSet.Assignment) async -> (
        [(SegmentTable.Claim, WorkerResult)], Validator?, Bool
    ) {
        let url = source.url
        let claims = batch.sorted { $0.start < $1.start }
        let parts = claims.map { claim in
            segmentDelegate(
                TransferMachine.SegmentResponse(
                    url: url, start: claim.start, requestEnd: claim.end, claimEnd: claim.end, total: table.total,
                    sent: source.validator),
                claim: claim, sourceIndex: source.index, measuring: nil)
        }
        let delegate = MultiRangeDelegate(claims: claims, parts: parts, total: table.total, sent: source.validator)
        let headers = ResumePlan.rangeHeaders(claims.map { $0.start..<$0.end }, validator: source.validator)
        let request: HTTPClient.Request
        do throws(DownloadError) {
            request = try HTTPClients.get(
                url, userAgent: configuration.userAgent, headers: policy.headers(for: url), replacing: headers)
        } catch {
            return (claims.map { ($0, .failed(error)) }, nil, false)
        }
        let transportError = await clients.execute(request, receiver: delegate, logger: logger)
        let endings = await delegate.drained(error: transportError.map { TransportErrors.translate($0, url: url) })
        return (Array(zip(claims, endings)), delegate.responseValidator, delegate.answeredWhole)
    }

    /// The receiver of `claim`'s response from source `sourceIndex`, writing it at its
    /// offset, checking pieces, reporting parts and checkpointing as bytes land.
    private func segmentDelegate(
        _ response: TransferMachine.SegmentResponse, claim: SegmentTable.Claim, sourceIndex: Int,
        measuring: (@Sendable (Int, ContinuousClock.Instant, any EventLoop) -> Void)?
    ) -> SegmentDelegate {
        let checkpointer = self.checkpointer
        return SegmentDelegate(
            response,
            claim: claim, table: table, file: file, core: core, threadPool: threadPool,
            stopFetch: { [self] index in stopFetch(index) },
            onPart: measuring
        ) { written, now in
            if let ledger {
                let ready = ledger.withLockedValue { ledger in
                    ledger.wrote(written, by: sourceIndex)
                    return ledger.ready(around: written, missing: table.remaining())
                }
                try checkPieces(ready)
            }
            if let parts { reportParts(to: parts, around: written) }
            let count = written.count
            prefixDigest?.wrote(count)
            if let checkpointer, checkpointer.wrote(count, at: now) {
                try checkpoint()
            } else {
                try saveProgress(at: now, always: count < BatchWriter.batchSize)
            }
        }
    }
}
