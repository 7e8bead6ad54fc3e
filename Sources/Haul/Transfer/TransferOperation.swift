import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// How a transfer ended.
enum TransferOutcome: Sendable {
    /// Done; `file` describes the saved file for revalidation next time (file destinations).
    case completed(DownloadResult, file: CompletedFile?)
    case failed(DownloadError)
    /// The Swift task was cancelled (pause, cancel, eviction); the partial is intact.
    case interrupted
    /// The host could not be reached, nor probed: wait for the network.
    case waitingForNetwork
}

/// Runs one download to its end: attempts, redirects, resume, retries, verification and
/// the final atomic rename. One Swift task per download, no thread: the bytes are
/// handled by ``TransferDelegate`` on the event loop and the I/O pool.
///
/// A class, not a struct: its closures (retries, I/O-pool work) capture it, and a
/// reference is one retain where a copy of the download and its environment is dozens.
package final class TransferOperation: Sendable {
    /// The download to transfer, and what this run of it starts from.
    package struct Download: Sendable {
        let request: DownloadRequest
        /// The partial file's paths (file destinations).
        let paths: PartialPaths?
        /// The request's host and port.
        let endpoint: HostReachability.Endpoint
        /// Its events, progress meter and speed limits.
        let core: JobCore
        /// Records progress in the journal, when there is one.
        let checkpointer: Checkpointer?
        /// What the journal knew of the partial file when this run began.
        let journaled: JournaledProgress?
        /// Connections it may open (a segmented transfer): the scheduler's grant (see
        /// ``SchedulerMachine/Action/start(_:connections:)``).
        var connections: Int = 1
    }

    /// What the manager lends every transfer.
    package struct Environment: Sendable {
        /// The manager's clients: each request takes the one for its route.
        let clients: HTTPClients
        let threadPool: NIOThreadPool
        /// Makes the final rename durable, grouped with the manager's other renames.
        let directorySync: DirectorySync
        let configuration: DownloadManager.Configuration
        let logger: Logger
        /// Probes hosts after connection failures.
        let reachability: HostReachability
        /// The object store, for object destinations.
        var objectStore: S3Client? = nil
        /// The manager's cache of responses, if it has one.
        var cache: ResponseCache? = nil
    }

    let download: Download
    let environment: Environment

    init(_ download: Download, environment: Environment) {
        self.download = download
        self.environment = environment
    }

    private var request: DownloadRequest { download.request }
    private var paths: PartialPaths? { download.paths }
    private var core: JobCore { download.core }
    private var checkpointer: Checkpointer? { download.checkpointer }
    private var endpoint: HostReachability.Endpoint { download.endpoint }
    private var clients: HTTPClients { environment.clients }
    private var threadPool: NIOThreadPool { environment.threadPool }
    private var directorySync: DirectorySync { environment.directorySync }
    private var configuration: DownloadManager.Configuration { environment.configuration }
    private var logger: Logger { environment.logger }
    private var reachability: HostReachability { environment.reachability }

    /// A journal's view of a partial file, from before this process started the job.
    package struct JournaledProgress: Sendable {
        /// Bytes the journal knows are on stable storage.
        var committed: Int64
        /// The machine boot during which they were recorded.
        var bootID: String?
        /// The completed file of an earlier run of the same download, to revalidate
        /// instead of downloading again while it is unchanged.
        var completedFile: CompletedFile? = nil

        /// How much of a partial file of `length` bytes can be trusted.
        ///
        /// In the same boot the kernel still holds every byte any process wrote, so the
        /// file's length is right even if the writer was killed before syncing. After a
        /// reboot only the bytes the journal recorded after an fsync can be trusted.
        func trustedLength(of length: Int64, currentBoot: String?) -> Int64 {
            if let bootID, let currentBoot, bootID == currentBoot { return length }
            return min(length, committed)
        }
    }

    func run() async -> TransferOutcome {
        var digest: ContentDigest?
        var journaled = download.journaled
        // Checked once: a file or object changed since its completion is downloaded again.
        var revalidating: CompletedFile?
        if let completed = journaled?.completedFile, await completed.isUnchanged(in: environment.objectStore) {
            revalidating = completed
        }
        // Where the URL's content is fetched from: the URL, or where it was refreshed to.
        var primary = request.location ?? request.url
        var source = URLRefreshRule(url: primary, canRefresh: configuration.refreshURL != nil)
        // The request's URL and its mirrors, shared with the segments of this run.
        let sources = NIOLockedValueBox(SourceSet(urls: request.sourceURLs))
        /// A fresh URL replaces `expired`; one that replaces the URL is remembered, in the
        /// journal too, so that a resumed download starts from it.
        func refreshed(_ expired: URL, to fresh: URL) {
            sources.withLockedValue { $0.replace(expired, with: fresh) }
            source.refreshed(to: fresh)
            guard expired == primary else { return }
            primary = fresh
            core.location = fresh
            checkpointer?.relocated(to: fresh, mirrors: request.mirrors)
        }
        var refreshes = 0
        var outcome: AttemptOutcome<(DownloadResult, CompletedFile?)>
        while true {
            if case .refresh(let expired) = source.beforeAttempt(now: Date()) {
                refreshes += 1
                switch await refresh(expired, number: refreshes, because: nil) {
                case .success(let fresh):
                    refreshed(source.current, to: fresh)
                case .failure(let error): return Task.isCancelled ? .interrupted : .failed(error)
                }
            }
            let transferred = core.meter.bytesTransferred
            outcome = await withRetries(
                configuration.retry, checkingNetwork: checkNetwork,
                progress: { core.meter.furthestCompleted },
                onRetry: { retry, error, delay in
                    logger.debug("retrying", metadata: ["id": "\(request.id)", "retry": "\(retry)", "error": "\(error)"])
                    core.emit(.retrying(attempt: retry, reason: error, delay: delay))
                    checkpointer?.attempted(retry)
                }
            ) { () throws(DownloadError) in
                while true {
                    // The journal's view only matters before this process first touches the file.
                    let known = journaled
                    journaled = nil
                    let attemptSource = source
                    do throws(DownloadError) {
                        return try await attempt(
                            carrying: &digest, journaled: known, revalidating: revalidating, source: attemptSource,
                            sources: sources)
                    } catch {
                        // A source that failed while another is left is dropped, and the
                        // attempt goes on at once from the next one.
                        guard !Task.isCancelled,
                            case .dropped(let url, let reason, let next) = sources.withLockedValue({
                                $0.failed(error, at: attemptSource.current)
                            })
                        else { throw error }
                        logger.debug(
                            "source dropped", metadata: ["id": "\(request.id)", "url": "\(url)", "next": "\(next)"])
                        core.emit(.sourceDropped(url, reason: reason))
                        source.switched(to: next)
                    }
                }
            }
            // A URL that stopped serving the content is followed again or refreshed.
            guard case .failed(let error) = outcome, !Task.isCancelled else { break }
            let progressed = core.meter.bytesTransferred > transferred
            switch source.failed(error, progressed: progressed, now: Date()) {
            case .refollow:
                logger.debug("following the URL again", metadata: ["id": "\(request.id)", "error": "\(error)"])
                continue
            case .refresh(let expired):
                refreshes += 1
                switch await refresh(expired, number: refreshes, because: error) {
                case .success(let fresh):
                    refreshed(source.current, to: fresh)
                    continue
                case .failure(let failure):
                    if Task.isCancelled { return .interrupted }
                    outcome = .failed(failure)
                }
            case .fail(let final):
                outcome = .failed(final)
            case .proceed:
                break
            }
            break
        }
        switch outcome {
        case .succeeded(let (result, file)):
            return .completed(result, file: file)
        case .failed(let error):
            logger.debug("download failed", metadata: ["id": "\(request.id)", "error": "\(error)"])
            if let paths { try? await io { () throws(DownloadError) in Self.removeEmptyPartial(paths) } }
            // Failed for good: its upload is aborted (the staged file is kept to resume).
            if let paths { await discardUpload(paths) }
            return .failed(error)
        case .interrupted:
            return .interrupted
        case .waitingForNetwork:
            return .waitingForNetwork
        }
    }

    /// Asks the configuration's ``DownloadManager/Configuration/refreshURL`` for a URL in
    /// place of `expired`, which failed with `error` (or, `nil`, whose query says it has
    /// expired), and tells the download's watchers (a `retrying` event with no delay).
    private func refresh(_ expired: URL, number: Int, because cause: DownloadError?) async -> Result<URL, DownloadError> {
        guard let refreshURL = configuration.refreshURL else {
            return .failure(cause ?? DownloadError(.urlExpired, "\(expired.absoluteString): the URL has expired"))
        }
        let reason = cause.map { "HTTP \($0.statusCode ?? 0)" } ?? "its signature has expired"
        core.emit(
            .retrying(
                attempt: number,
                reason: DownloadError(
                    .urlExpired, "\(expired.absoluteString): \(reason): asking for a fresh URL", statusCode: cause?.statusCode,
                    url: expired),
                delay: .zero))
        logger.debug("refreshing the URL", metadata: ["id": "\(request.id)", "reason": "\(reason)"])
        let fresh: URL
        do {
            fresh = try await refreshURL(expired, request.id)
        } catch {
            if Task.isCancelled { return .failure(.cancelled(.userRequested, id: request.id)) }
            return .failure(
                DownloadError(
                    .urlExpired,
                    "\(expired.absoluteString): the URL has expired (\(reason)), and asking for a fresh one failed: \(error)",
                    statusCode: cause?.statusCode, url: expired))
        }
        guard fresh.isWebAddress else {
            return .failure(
                DownloadError(
                    .urlExpired,
                    "\(expired.absoluteString): the URL has expired (\(reason)), and the fresh URL given is not an http or https URL: \(fresh.absoluteString)"
                ))
        }
        return .success(fresh)
    }

    /// After a failure to reach the host: is it the host, or the network?
    ///
    /// Only a host that answered before (or left a partial file) can tell: then a host
    /// known to be down, or one that does not answer a probe, means the network is gone.
    private func checkNetwork() async -> RetrySchedule.Network {
        let paths = self.paths
        let hadPartial = (try? await io { () throws(DownloadError) in Self.hasContent(paths) }) ?? false
        guard reachability.hasAnswered(endpoint.key) || hadPartial else { return .neverReached }
        if await reachability.isDown(endpoint.key) { return .down }
        return await reachability.probe(endpoint, timeout: configuration.connectTimeout) ? .hostAnswers : .down
    }

    /// Whether a partial file with content exists, left by this or an earlier run: proof
    /// that the host was reachable once. Blocking: for the I/O pool.
    private static func hasContent(_ paths: PartialPaths?) -> Bool {
        guard let paths else { return false }
        var info = stat()
        return stat(paths.partial, &info) == 0 && info.st_size > 0
    }

    /// A failed download keeps a partial that holds bytes, for a later resume, but leaves
    /// no empty file behind. Blocking: for the I/O pool.
    private static func removeEmptyPartial(_ paths: PartialPaths) {
        var info = stat()
        if stat(paths.partial, &info) == 0, info.st_size == 0 { PartialFile.remove(paths) }
    }

    // MARK: - One attempt

    private func attempt(
        carrying digest: inout ContentDigest?, journaled: JournaledProgress?, revalidating: CompletedFile?,
        source: URLRefreshRule, sources: NIOLockedValueBox<SourceSet>
    ) async throws(DownloadError) -> (DownloadResult, CompletedFile?) {
        guard let paths else { return (try await attemptInMemory(carrying: &digest, source: source), nil) }
        if let delta = request.delta {
            // Before anything is fetched, the seeds give what they hold (once: a seeded
            // partial's sidecar records it, and later attempts resume it).
            let seeder = DeltaSeeder(
                control: delta.control, threadPool: threadPool,
                parallelism: max(1, min(ProcessInfo.processInfo.activeProcessorCount, 8)))
            if let report = try await seeder.prepare(seeds: delta.seeds, paths: paths, url: request.url) {
                logger.debug(
                    "delta seeded",
                    metadata: [
                        "id": "\(request.id)", "reused": "\(report.reusedBytes)", "missing": "\(report.missingBytes)",
                    ])
                core.emit(.deltaPrepared(report))
            }
        }
        let (file, length) = try await openPartial(paths, journaled: journaled)
        do {
            let result = try await transfer(
                into: file, existing: length, paths: paths, carrying: &digest, revalidating: revalidating,
                source: source, sources: sources)
            file.close()
            return result
        } catch {
            // Whatever reached the file is made durable and recorded, so a pause or a
            // retry loses nothing (a segmented partial's sidecar says what it holds).
            if let checkpointer, file.isOpen {
                try? await io { () throws(DownloadError) in
                    guard PartialMetadata.load(from: paths.metadata)?.remaining == nil else { return }
                    try file.sync()
                    checkpointer.synced(upTo: try file.length())
                }
            }
            file.close()
            throw error
        }
    }

    /// Opens the partial file and says how many of its bytes to keep.
    ///
    /// With no partial yet, the common case, there is nothing to open or trust: the file is
    /// created when something is first written (a small body is written once, at the
    /// end), and a stat is cheap enough to make here rather than through a hop to the I/O
    /// pool. Otherwise one hop opens and measures the file and, for a partial the journal
    /// knew, keeps only what can be trusted. (A segmented partial has holes: its sidecar,
    /// not its length, says what is there.)
    private func openPartial(_ paths: PartialPaths, journaled: JournaledProgress?) async throws(DownloadError)
        -> (PartialFile, Int64)
    {
        var info = stat()
        if stat(paths.partial, &info) != 0, errno == ENOENT {
            return (PartialFile(creatingOnDemand: paths.partial), 0)
        }
        let checkpointer = self.checkpointer
        return try await io { () throws(DownloadError) -> (PartialFile, Int64) in
            let file = try PartialFile(path: paths.partial)
            var length = try file.length()
            if let journaled, length > 0, PartialMetadata.load(from: paths.metadata)?.remaining == nil {
                let trusted = journaled.trustedLength(of: length, currentBoot: ProcessIdentity.bootID)
                if trusted < length { try file.truncate(to: trusted) }
                try file.sync()
                checkpointer?.synced(upTo: trusted)
                length = trusted
            }
            return (file, length)
        }
    }

    /// Carries out the machine's actions for a file: requests, segments, and the commit.
    private func transfer(
        into file: PartialFile, existing: Int64, paths: PartialPaths, carrying digest: inout ContentDigest?,
        revalidating: CompletedFile?, source: URLRefreshRule, sources: NIOLockedValueBox<SourceSet>
    ) async throws(DownloadError) -> (DownloadResult, CompletedFile?) {
        let url = request.url.absoluteString
        let requested = request.url
        let stored =
            existing > 0
            ? try await io { () throws(DownloadError) in
                PartialMetadata.load(from: paths.metadata).flatMap { $0.isFrom(requested) ? $0 : nil }
            }
            : nil
        // A resumed download does not ask again the sources it dropped before.
        if let health = stored?.sources { sources.withLockedValue { $0.restore(health) } }
        var machine = TransferMachine(
            settings: machineSettings(carrying: digest, source: source), destination: .file,
            partial: TransferMachine.Partial(
                length: existing, stored: stored, currentBoot: ProcessIdentity.bootID,
                revalidating: revalidating?.validator))
        let sink = TransferDelegate.Sink.file(file, paths)
        var body: ByteBuffer?
        var handover: ResponseHandover?
        // The cache is asked as the transfer starts (a queued job holds no body meanwhile),
        // unless a completed file of an earlier run is revalidated instead.
        let use = revalidating == nil ? try await cacheUse(resuming: existing > 0) : nil
        if case .answer(let entry, let tier) = use {
            return try await finish(from: entry, as: tier, file: file, paths: paths, digest: &digest)
        }
        if let conditions = use?.conditions, !conditions.isEmpty, existing == 0 {
            machine = TransferMachine(
                settings: machineSettings(carrying: digest, source: source), destination: .file,
                partial: TransferMachine.Partial(
                    length: 0, stored: nil, currentBoot: ProcessIdentity.bootID, conditions: conditions))
        }
        var requestTime = Date().timeIntervalSince1970
        var action = machine.start()
        while true {
            switch action {
            case .send:
                requestTime = Date().timeIntervalSince1970
                action = try await exchange(
                    &machine, action, sink: sink, digest: &digest, body: &body, handover: &handover)
            case .segment(let segments):
                // Segments are hashed as the file fills in from its start (see
                // `PrefixDigest`), not as they arrive.
                digest = nil
                sources.withLockedValue {
                    $0.beginSegments(from: segments.url, validator: segments.validator, startedAt: source.current)
                }
                let first = handover
                handover = nil
                defer { first?.abandon() }
                action = machine.segmentsEnded(
                    try await segmented(
                        segments, file: file, paths: paths, sources: sources, adopting: first, digest: &digest))
            case .finish(let finish):
                let kept = body
                let finished = try await self.finish(finish, file: file, paths: paths, digest: &digest, body: body)
                if use != nil {
                    await storeInCache(
                        finished.0, kept: kept, head: machine.contentHead, requestTime: requestTime,
                        responseTime: Date().timeIntervalSince1970)
                }
                return finished
            case .notModified(let finalURL):
                guard let revalidating else {
                    guard case .revalidate(let entry, _) = use else {
                        throw DownloadError(.protocolViolation, "\(url): unexpected response")
                    }
                    let updated = await revalidated(
                        entry, head: machine.contentHead, requestTime: requestTime,
                        responseTime: Date().timeIntervalSince1970)
                    return try await finish(
                        from: updated, as: .revalidated, file: file, paths: paths, digest: &digest, finalURL: finalURL)
                }
                // Still current: the completed file stays as it is, and nothing was transferred.
                core.meter.reset(completed: revalidating.size, total: revalidating.size)
                let result = DownloadResult(
                    id: request.id, fileURL: revalidating.url, data: nil, finalURL: finalURL,
                    byteCount: revalidating.size, bytesTransferred: 0, isUnchanged: true)
                return (result, revalidating)
            case .fail(let error):
                throw error
            case .reject(let error):
                await discardUpload(paths)
                try? await io { () throws(DownloadError) in PartialFile.remove(paths) }
                throw error
            }
        }
    }

    /// Segments smaller than this are never split further.
    static let minimumSplit: Int64 = 1 << 20
    /// The same across several sources (mirrors), whose speeds differ: a slow mirror's
    /// tail is at most twice this.
    static let minimumSplitAcrossSources: Int64 = 128 << 10

    /// Connections a large download may use: what the scheduler granted it.
    private var connections: Int { max(1, download.connections) }

    /// What a machine for this download starts from.
    private func machineSettings(carrying digest: ContentDigest?, source: URLRefreshRule) -> TransferMachine.Settings {
        var threshold = TransferMachine.segmentationThreshold(
            connections: connections, configured: configuration.segmentationThreshold,
            pacedRequestSize: core.pacedRequestSize)
        // Piece checksums are checked as segments write them: a content with more than one
        // piece is always fetched in segments, where the server allows ranges.
        if let pieces = request.pieces { threshold = min(threshold ?? .max, pieces.length + 1) }
        return TransferMachine.Settings(
            url: source.current, policy: policy, maxRedirects: configuration.maxRedirects,
            expectedSize: request.expectedSize, hashes: request.checksum != nil, carriedDigestBytes: digest?.byteCount,
            segmentationThreshold: threshold,
            allowsBlindResume: configuration.allowsBlindResume, recordedURL: request.url,
            usesStoredLocation: source.usesStoredLocation,
            isDelta: request.delta != nil)
    }

    /// Runs the segments: a fresh download's file is emptied, reserved and given its
    /// sidecar first. An object destination sent in parts uploads them as they complete
    /// (``PartStream``). A content checked whole comes back with its `digest`, computed as
    /// the file filled in (``PrefixDigest``), when that worked.
    private func segmented(
        _ segments: TransferMachine.Segments, file: PartialFile, paths: PartialPaths,
        sources: NIOLockedValueBox<SourceSet>, adopting handover: ResponseHandover?, digest: inout ContentDigest?
    ) async throws(DownloadError) -> SegmentedTransfer.Outcome {
        if segments.prepares {
            // The staged bytes go: so do the parts read from them.
            await discardUpload(paths)
            let metadata = segments.metadata
            try await io { () throws(DownloadError) in
                try file.truncate(to: 0)
                try file.reserve(upTo: segments.total)
                try metadata.save(to: paths.metadata)
            }
        }
        let parts = partStream(for: segments, file: file, paths: paths)
        parts?.start()
        let transfer = SegmentedTransfer(
            segments, file: file, paths: paths, connections: connections, sources: sources, policy: policy,
            download: download, environment: environment, parts: parts, adopting: handover)
        let outcome: SegmentedTransfer.Outcome
        do {
            outcome = try await transfer.run()
        } catch {
            await parts?.stop()
            throw error
        }
        switch outcome {
        case .complete:
            digest = await transfer.fileDigest()
            await parts?.finish()
        case .changed:
            await parts?.stop()
            await discardUpload(paths)
        }
        reachability.noteAnswered(endpoint.key)
        return outcome
    }

    /// The stream that uploads the segments' parts as they complete, for an object
    /// destination too large for one `PUT`; `nil` otherwise.
    private func partStream(for segments: TransferMachine.Segments, file: PartialFile, paths: PartialPaths)
        -> PartStream?
    {
        guard paths.object != nil, let store = environment.objectStore, let settings = configuration.objectStorage,
            // The key the finish will use: the same response's name.
            let object = try? paths.objectLocation(
                contentDisposition: segments.contentDisposition, finalURL: segments.url)
        else { return nil }
        let upload = ObjectUpload(
            client: store, location: object, file: file, size: segments.total, recordPath: paths.uploadRecord,
            threadPool: threadPool, retry: configuration.retry, settings: settings,
            validator: segments.validator?.headerValue, onRetry: uploadRetried)
        return PartStream(upload: upload, logger: logger)
    }

    /// A request to the object store is tried again: said as the download's retries are.
    private var uploadRetried: @Sendable (Int, DownloadError, Duration) -> Void {
        { [core, logger, id = request.id] attempt, error, delay in
            logger.debug("retrying the upload", metadata: ["id": "\(id)", "retry": "\(attempt)", "error": "\(error)"])
            core.emit(.retrying(attempt: attempt, reason: error, delay: delay))
        }
    }

    /// Aborts the upload an object destination's sidecar names, and forgets it: its parts
    /// were read from staged bytes that are about to go (a download that starts over, a
    /// content that did not match its checksum, one that failed for good).
    private func discardUpload(_ paths: PartialPaths) async {
        guard paths.object != nil, let store = environment.objectStore else { return }
        await ObjectUpload.abandon(recordPath: paths.uploadRecord, client: store, threadPool: threadPool)
    }

    /// Verifies the checksum, then syncs the file and renames it into place (the machine
    /// has checked the size).
    ///
    /// `body` is a small body kept in memory, written here at offset 0 in the same hop to
    /// the I/O pool as the sync and the rename.
    /// Returns the result and, when the content had a validator, the saved file's details
    /// for revalidation next time.
    private func finish(
        _ finish: TransferMachine.Finish, file: PartialFile, paths: PartialPaths, digest: inout ContentDigest?,
        body: ByteBuffer?
    ) async throws(DownloadError) -> (DownloadResult, CompletedFile?) {
        var body = body
        let (size, validator) = (finish.size, finish.validator)

        if let checksum = request.checksum {
            do {
                let hex: String
                if let digest, digest.byteCount == size {
                    hex = digest.hex()
                } else {
                    let unwritten = body
                    body = nil
                    hex = try await io { () throws(DownloadError) in
                        if let unwritten { try file.write(unwritten, at: 0) }
                        let fresh = ContentDigest(checksum.algorithm)
                        try file.digest(into: fresh, length: size)
                        return fresh.hex()
                    }
                }
                try verify(checksum: checksum, actual: hex)
            } catch {
                await discardUpload(paths)
                try? await io { () throws(DownloadError) in PartialFile.remove(paths) }
                throw error
            }
        }

        if let object = try paths.objectLocation(contentDisposition: finish.contentDisposition, finalURL: finish.url) {
            return try await upload(
                file: file, paths: paths, to: object, size: size, validator: validator, body: body, finalURL: finish.url)
        }
        let destination = paths.destination(contentDisposition: finish.contentDisposition, finalURL: finish.url)
        let unwritten = body
        // A body kept in memory for a file created on demand is the whole file, and no
        // sidecar was written for it: nothing to cut or clean up.
        let wholeInMemory = unwritten != nil && file.createdOnDemand
        let prepare: @Sendable () throws(DownloadError) -> Void = { () throws(DownloadError) in
            try file.makeDurable(size: size, writing: unwritten)
        }
        let directorySync = self.directorySync
        let commit: @Sendable () throws(DownloadError) -> (size: Int64, modified: Int64)? = {
            () throws(DownloadError) in
            // Only worth a stat when there is a validator to revalidate with; the rename
            // keeps what the open file says.
            let attributes = validator == nil ? nil : file.attributes()
            try file.commit(to: destination, syncing: directorySync)
            if !wholeInMemory {
                _ = unlink(paths.metadata)
                _ = unlink(paths.metadata + ".tmp")
            }
            return attributes
        }
        let fence = checkpointer
        // Another process may have taken the job over (a shared queue's lease that
        // expired): the file goes into place only once the store says this run still holds
        // the job, so a stale run never renames its file over a newer one. Asked in the
        // hop that makes the file durable; an answer known at once (the journal's) renames
        // it in that hop too, one to wait for (the queue's statement) is awaited here.
        let placement = try await io { () throws(DownloadError) -> FilePlacement in
            try prepare()
            switch fence?.confirmCompletion(bytes: size) ?? .confirmed {
            case .confirmed: return .placed(try commit())
            case .refused(let error): throw error
            case let pending: return .confirming(pending)
            }
        }
        let attributes: (size: Int64, modified: Int64)?
        switch placement {
        case .placed(let placed):
            attributes = placed
        case .confirming(let confirmation):
            try await confirmation.answer()
            attributes = try await io(commit)
        }
        let result = DownloadResult(
            id: request.id, fileURL: destination, data: nil, finalURL: finish.url, byteCount: size,
            bytesTransferred: core.meter.bytesTransferred)
        guard let validator, let attributes else { return (result, nil) }
        return (
            result,
            CompletedFile(path: destination.path, size: attributes.size, modified: attributes.modified, validator: validator)
        )
    }

    /// Puts the file at `path`, complete and durable (a stream's, which ``HLSJobTransfer``
    /// assembled beside the partial path), into `object`, as a download's verified staged
    /// file is; the file is removed once the object is in place.
    func upload(assembled path: String, to object: S3Location, finalURL: URL) async throws(DownloadError) -> DownloadResult {
        guard let paths else { throw .invalid("\(object): no staging directory for the upload") }
        let (file, size) = try await io { () throws(DownloadError) -> (PartialFile, Int64) in
            let file = try PartialFile(path: path)
            guard let attributes = file.attributes() else {
                file.close()
                throw .fileSystem("read", path: path, errno: errno)
            }
            return (file, attributes.size)
        }
        let (result, _) = try await upload(
            file: file, paths: paths, to: object, size: size, validator: nil, body: nil, finalURL: finalURL)
        try await io { () throws(DownloadError) in _ = unlink(path) }
        return result
    }

    /// Puts the verified, staged file into its object (``ObjectUpload``), then removes the
    /// staged file: the object appears only now, complete.
    private func upload(
        file: PartialFile, paths: PartialPaths, to object: S3Location, size: Int64, validator: Validator?,
        body: ByteBuffer?, finalURL: URL
    ) async throws(DownloadError) -> (DownloadResult, CompletedFile?) {
        guard let store = environment.objectStore, let settings = configuration.objectStorage else {
            throw DownloadError(
                .invalidConfiguration, "\(object): no object store is configured (DownloadManager.Configuration.objectStorage)")
        }
        let unwritten = body
        // The staged file is synced first: the upload's parts are read back from it, and a
        // kill during the upload resumes from it.
        try await io { () throws(DownloadError) in try file.makeDurable(size: size, writing: unwritten) }
        let upload = ObjectUpload(
            client: store, location: object, file: file, size: size, recordPath: paths.uploadRecord,
            threadPool: threadPool, retry: configuration.retry, settings: settings, validator: validator?.headerValue,
            onRetry: uploadRetried)
        let checkpointer = self.checkpointer
        let etag: String
        do {
            etag = try await upload.run { () throws(DownloadError) in
                if let fence = checkpointer { try await fence.confirmCompletion(bytes: size).answer() }
            }
        } catch where error.code == .network || error.code == .timeout {
            // The store, not the download's source, could not be reached: never a reason to
            // drop a mirror. Retried as a busy store is.
            throw DownloadError(.objectStorage, "cannot reach the object store: \(error.message)", statusCode: 503)
        }
        try await io { () throws(DownloadError) in
            file.close()
            PartialFile.remove(paths)
            _ = unlink(paths.uploadRecord)
        }
        let result = DownloadResult(
            id: request.id, fileURL: object.address, data: nil, finalURL: finalURL, byteCount: size,
            bytesTransferred: core.meter.bytesTransferred)
        // With a validator, the same download next time asks the store whether the object is
        // still this one, then the server whether its content changed.
        let completed = validator.map {
            CompletedFile(path: object.description, size: size, modified: 0, objectTag: etag, validator: $0)
        }
        return (result, completed)
    }

    private func attemptInMemory(carrying digest: inout ContentDigest?, source: URLRefreshRule) async throws(DownloadError)
        -> DownloadResult
    {
        guard case .memory(let limit) = request.destination else {
            throw .invalid("no partial file for a file destination")
        }
        let use = request.cacheUse
        if case .answer(let entry, let tier) = use { return try cachedResult(entry, as: tier, finalURL: nil) }
        let conditions = use?.conditions ?? []
        var machine = TransferMachine(
            settings: machineSettings(carrying: nil, source: source), destination: .memory(limit: limit),
            partial: conditions.isEmpty
                ? nil : TransferMachine.Partial(length: 0, stored: nil, currentBoot: nil, conditions: conditions))
        var used: ContentDigest?
        var body: ByteBuffer?
        var handover: ResponseHandover?  // (never: a body in memory is not split)
        let requestTime = Date().timeIntervalSince1970
        let action = try await exchange(
            &machine, machine.start(), sink: .memory, digest: &used, body: &body, handover: &handover)
        let finish: TransferMachine.Finish
        switch action {
        case .finish(let finished):
            finish = finished
        case .notModified(let finalURL):
            guard case .revalidate(let entry, _) = use else {
                throw DownloadError(.protocolViolation, "\(request.url.absoluteString): unexpected response")
            }
            let updated = await revalidated(
                entry, head: machine.contentHead, requestTime: requestTime, responseTime: Date().timeIntervalSince1970)
            return try cachedResult(updated, as: .revalidated, finalURL: finalURL)
        case .send, .segment:
            throw DownloadError(.protocolViolation, "\(request.url.absoluteString): unexpected response")
        case .fail(let error), .reject(let error):
            throw error
        }
        let content = body ?? ByteBuffer()
        if let checksum = request.checksum {
            let fresh = used ?? {
                let digest = ContentDigest(checksum.algorithm)
                digest.update(content)
                return digest
            }()
            try verify(checksum: checksum, actual: fresh.hex())
        }
        let result = DownloadResult(
            id: request.id, fileURL: nil, data: Data(content.readableBytesView), finalURL: finish.url,
            byteCount: finish.size, bytesTransferred: core.meter.bytesTransferred)
        if use != nil {
            await storeInCache(
                result, kept: nil, head: machine.contentHead, requestTime: requestTime,
                responseTime: Date().timeIntervalSince1970)
        }
        return result
    }

    // MARK: - Requests and redirects

    /// Sends the machine's requests (`action`, then each redirect and restart) until it
    /// asks for something else, which is returned. `digest` is the digest carried in and
    /// then the one a kept body used; `body` is the body kept in memory.
    ///
    /// A response the machine splits is handed over (`handover`, for the segments to
    /// adopt) where the segments can take it: a file's, from one source, not paced.
    private func exchange(
        _ machine: inout TransferMachine, _ action: TransferMachine.EndAction, sink: TransferDelegate.Sink,
        digest: inout ContentDigest?, body: inout ByteBuffer?, handover: inout ResponseHandover?
    ) async throws(DownloadError) -> TransferMachine.EndAction {
        var action = action
        while case .send(let next) = action {
            switch next.reason {
            case .first, .redirect:
                break
            case .restart(let reason):
                logger.debug("restarting from zero", metadata: ["id": "\(request.id)", "reason": "\(reason)"])
            case .segmentsChanged(let reason):
                // Changed under our feet: once more, over one connection.
                logger.debug("segments restart from zero", metadata: ["id": "\(request.id)", "reason": "\(reason)"])
                if case .file(let file, let paths) = sink {
                    try await io { () throws(DownloadError) in
                        try file.truncate(to: 0)
                        _ = unlink(paths.metadata)
                    }
                }
            }
            if let progress = next.progress { core.meter.reset(completed: progress.completed, total: progress.total) }
            var adoptable: ResponseHandover?
            if machine.maySplit, case .file = sink, request.mirrors.isEmpty, core.pacedRequestSize == nil {
                adoptable = ResponseHandover()
            }
            let delegate = TransferDelegate(
                machine: machine, sink: sink,
                context: TransferDelegate.Context(
                    core: core, threadPool: threadPool, checkpointer: checkpointer,
                    algorithm: request.checksum?.algorithm, carriedDigest: digest, name: request.url.lastPathComponent),
                handover: adoptable)
            let transportError: (any Error)?
            if let adoptable {
                switch await adoptable.run({ await self.start(next, delegate: delegate) }) {
                case .handedOver:
                    handover = adoptable
                    transportError = nil
                case .ended(nil):
                    transportError = nil
                case .ended(let error?):
                    transportError = await clients.diagnosed(error, url: next.url)
                }
            } else {
                transportError = await send(next, delegate: delegate)
            }
            let received = await delegate.drained()
            if received.answered { reachability.noteAnswered(endpoint.key) }
            machine = received.machine
            if let used = received.digest { digest = used }
            body = received.body
            action = machine.requestEnded(error: transportError.map { TransportErrors.translate($0, url: next.url) })
        }
        return action
    }

    /// Which headers go to which hop: credentials only to the request's origin.
    private var policy: RedirectPolicy {
        RedirectPolicy(request: request, netrc: configuration.netrc, allowsDowngrade: configuration.allowsInsecureRedirects)
    }

    /// Sends one request and waits for its end; returns the transport error, if any.
    private func send(_ next: TransferMachine.Request, delegate: TransferDelegate) async -> (any Error)? {
        let httpRequest: HTTPClient.Request
        do throws(DownloadError) {
            httpRequest = try request(next)
        } catch {
            return error
        }
        guard let error = await clients.execute(httpRequest, receiver: delegate, logger: logger) else { return nil }
        return await clients.diagnosed(error, url: next.url)
    }

    /// Starts one request (for a response that may be handed over: ``ResponseHandover``);
    /// its end carries the transport error as the client reports it.
    private func start(_ next: TransferMachine.Request, delegate: TransferDelegate) async -> HTTPClients.Started {
        do throws(DownloadError) {
            return await clients.start(try request(next), receiver: delegate, logger: logger)
        } catch {
            return clients.failed(error)
        }
    }

    /// The client's request for the machine's `next`.
    private func request(_ next: TransferMachine.Request) throws(DownloadError) -> HTTPClient.Request {
        try HTTPClients.get(next.url, userAgent: configuration.userAgent, headers: next.headers, replacing: next.resumeHeaders)
    }

    // MARK: - Cache

    /// How a file download's run uses the cache (``DownloadRequest/cacheUse``, else what
    /// the cache decides now); `nil` without one. A partial being resumed (`resuming`) is
    /// not answered from the cache, only stored after. Throws
    /// ``DownloadError/Code/notCached`` for a policy that forbids loading what is not stored.
    private func cacheUse(resuming: Bool) async throws(DownloadError) -> CacheUse? {
        if let use = request.cacheUse { return use }
        guard let cache = environment.cache, request.usesCache else {
            if request.cachePolicy == .returnCacheDataDontLoad {
                throw DownloadError.notCached(request.url, configured: false)
            }
            return nil
        }
        if resuming { return .store }
        switch await cache.decide(for: request, netrc: configuration.netrc, promoting: false) {
        case .answer(let entry, let tier): return .answer(entry, from: tier)
        // (A file waits for the revalidation rather than being answered stale.)
        case .answerAndRevalidate(let entry, _, let conditions), .revalidate(let entry, let conditions):
            return .revalidate(entry, conditions: conditions)
        case .load: return .store
        case .unavailable: throw DownloadError.notCached(request.url, configured: true)
        }
    }

    /// The result a cached `entry` gives a memory download, from `tier` (or revalidated).
    private func cachedResult(_ entry: CachedEntry, as tier: DownloadResult.Source, finalURL: URL?) throws(DownloadError)
        -> DownloadResult
    {
        let size = Int64(entry.body.count)
        if case .memory(let limit) = request.destination, entry.body.count > limit {
            throw DownloadError(.tooLarge, "\(request.url.absoluteString) is \(size) bytes, over the \(limit)-byte memory limit")
        }
        core.meter.reset(completed: size, total: size)
        var result = DownloadResult(
            id: request.id, fileURL: nil, data: entry.body,
            finalURL: finalURL ?? URL(string: entry.response.url) ?? request.url, byteCount: size,
            bytesTransferred: core.meter.bytesTransferred)
        result.source = tier
        return result
    }

    /// Writes a cached `entry`'s body to the destination as a download's is (checked,
    /// synced, renamed into place, recorded), with no request.
    private func finish(
        from entry: CachedEntry, as tier: DownloadResult.Source, file: PartialFile, paths: PartialPaths,
        digest: inout ContentDigest?, finalURL: URL? = nil
    ) async throws(DownloadError) -> (DownloadResult, CompletedFile?) {
        let size = Int64(entry.body.count)
        if let expected = request.expectedSize, expected != size {
            throw DownloadError(
                .sizeMismatch, "\(request.url.absoluteString) is \(size) bytes but \(expected) were expected")
        }
        let finish = TransferMachine.Finish(
            size: size, validator: entry.response.validator,
            contentDisposition: entry.response.headers.first("Content-Disposition"),
            url: finalURL ?? URL(string: entry.response.url) ?? request.url)
        digest = nil
        core.meter.reset(completed: size, total: size)
        var (result, completed) = try await self.finish(
            finish, file: file, paths: paths, digest: &digest, body: ByteBuffer(bytes: entry.body))
        result.source = tier
        return (result, completed)
    }

    /// The stored `entry` after a `304` whose head is `head`: its headers updated as RFC
    /// 9111 says, in the cache too.
    private func revalidated(
        _ entry: CachedEntry, head: (status: Int, headers: HTTPHeaders)?, requestTime: Double, responseTime: Double
    ) async -> CachedEntry {
        let response = CacheRules.updated(
            entry.response, notModified: head.map { CachedResponse.fields(of: $0.headers) } ?? [],
            requestTime: requestTime, responseTime: responseTime)
        let updated = CachedEntry(response: response, body: entry.body)
        await environment.cache?.update(updated, for: updated.response.url)
        return updated
    }

    /// Stores a completed download's response in the cache, where the rules allow: its
    /// body from memory (`result.data`, or `kept` for a small file's), or read back from
    /// the saved file when the disk tier would keep one of its size. A response the rules
    /// forbid to store removes what was stored for the URL.
    private func storeInCache(
        _ result: DownloadResult, kept: ByteBuffer?, head: (status: Int, headers: HTTPHeaders)?, requestTime: Double,
        responseTime: Double
    ) async {
        guard let cache = environment.cache, let head else { return }
        let key = ResponseCache.key(for: request.url)
        let fields = CachedResponse.fields(of: head.headers)
        let rules = CacheRules.Request(request, netrc: configuration.netrc)
        guard CacheRules.mayStore(rules, status: head.status, headers: fields) else {
            await cache.remove(key)
            return
        }
        let body: Data
        if let data = result.data {
            body = data
        } else if let kept, Int64(kept.readableBytes) == result.byteCount {
            body = Data(kept.readableBytesView)
        } else if let path = result.fileURL?.path, result.byteCount <= cache.configuration.diskEntryLimit,
            cache.disk != nil
        {
            guard let read = try? await io({ () throws(DownloadError) in FileManager.default.contents(atPath: path) }),
                Int64(read.count) == result.byteCount
            else { return }
            body = read
        } else {
            await cache.remove(key)
            return
        }
        let response = CachedResponse(
            url: key, status: head.status, headers: fields, varying: CacheRules.varying(rules, responseHeaders: fields),
            requestTime: requestTime, responseTime: responseTime, bodySize: body.count)
        await cache.store(CachedEntry(response: response, body: body), for: key, inMemory: result.data != nil)
    }

    // MARK: - Checks and helpers

    private func verify(checksum: Checksum, actual: String) throws(DownloadError) {
        guard actual == checksum.hex else {
            if request.delta != nil {
                throw DownloadError(
                    .checksumMismatch,
                    "\(checksum.algorithm.rawValue) check failed: the file built from local blocks and fetched ranges has digest \(actual), not the control file's \(checksum.hex); the file at the destination was left as it was (the control file may be older than the file it describes)"
                )
            }
            throw DownloadError(
                .checksumMismatch,
                "\(checksum.algorithm.rawValue) check failed: the content's digest is \(actual), not the expected \(checksum.hex); nothing was kept (check the digest given, or the source)"
            )
        }
    }

    /// Runs blocking file work on the I/O pool (even for a cancelled task, so that a
    /// pause's final sync and checkpoint still happen).
    private func io<T: Sendable>(_ body: @escaping @Sendable () throws(DownloadError) -> T) async throws(DownloadError)
        -> T
    {
        try await threadPool.perform(body)
    }
}

/// Where a finished file stands after the hop that made it durable: in place (with what
/// its rename kept, for a ``CompletedFile``), or waiting for its store's confirmation.
private enum FilePlacement: Sendable {
    case placed((size: Int64, modified: Int64)?)
    case confirming(CompletionConfirmation)
}
