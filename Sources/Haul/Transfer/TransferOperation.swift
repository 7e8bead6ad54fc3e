import AsyncHTTPClient
import Foundation
import Logging
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
package struct TransferOperation: Sendable {
    let request: DownloadRequest
    let paths: PartialPaths?
    /// The manager's clients: each request takes the one for its route.
    let clients: HTTPClients
    let threadPool: NIOThreadPool
    /// Makes the final rename durable, grouped with the manager's other renames.
    let directorySync: DirectorySync
    let configuration: DownloadManager.Configuration
    let core: JobCore
    let logger: Logger
    /// Records progress in the journal, when there is one.
    let checkpointer: Checkpointer?
    /// What the journal knew of the partial file when this run began.
    let journaled: JournaledProgress?
    /// Probes hosts after connection failures.
    let reachability: HostReachability
    /// The request's host and port.
    let endpoint: HostReachability.Endpoint

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
        var journaled = self.journaled
        // Checked once: a file changed since its completion is downloaded again.
        let revalidating = journaled?.completedFile.flatMap { $0.isUnchanged ? $0 : nil }
        let outcome = await withRetries(
            configuration.retry, checkingNetwork: checkNetwork,
            onRetry: { retry, error, delay in
                logger.debug("retrying", metadata: ["id": "\(request.id)", "retry": "\(retry)", "error": "\(error)"])
                core.emit(.retrying(attempt: retry, reason: error, delay: delay))
                checkpointer?.attempted(retry)
            }
        ) { () throws(DownloadError) in
            // The journal's view only matters before this process first touches the file.
            let known = journaled
            journaled = nil
            return try await attempt(carrying: &digest, journaled: known, revalidating: revalidating)
        }
        switch outcome {
        case .succeeded(let (result, file)):
            return .completed(result, file: file)
        case .failed(let error):
            logger.debug("download failed", metadata: ["id": "\(request.id)", "error": "\(error)"])
            if let paths { try? await io { () throws(DownloadError) in Self.removeEmptyPartial(paths) } }
            return .failed(error)
        case .interrupted:
            return .interrupted
        case .waitingForNetwork:
            return .waitingForNetwork
        }
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
        carrying digest: inout ContentDigest?, journaled: JournaledProgress?, revalidating: CompletedFile?
    ) async throws(DownloadError) -> (DownloadResult, CompletedFile?) {
        guard let paths else { return (try await attemptInMemory(carrying: &digest), nil) }
        let (file, length) = try await openPartial(paths, journaled: journaled)
        do {
            let result = try await transfer(
                into: file, existing: length, paths: paths, carrying: &digest, revalidating: revalidating)
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

    private func transfer(
        into file: PartialFile, existing: Int64, paths: PartialPaths, carrying digest: inout ContentDigest?,
        revalidating: CompletedFile?
    ) async throws(DownloadError) -> (DownloadResult, CompletedFile?) {
        var existing = existing
        let url = request.url.absoluteString
        var stored =
            existing > 0
            ? try await io { () throws(DownloadError) in
                PartialMetadata.load(from: paths.metadata).flatMap { $0.url == url ? $0 : nil }
            }
            : nil
        var segmentation = connections > 1 ? configuration.segmentationThreshold : nil
        // A download limited to a low rate is fetched in paced steps, the way a segmented
        // one is, once it is larger than a read of the socket.
        if let requestSize = core.pacedRequestSize {
            let paced = RateSchedule.pacedDownloadThreshold(requestSize: requestSize)
            segmentation = min(segmentation ?? paced, paced)
        }

        // A segmented partial resumes segment by segment.
        if let metadata = stored, let remaining = metadata.ranges(currentBoot: ProcessIdentity.bootID),
            let validator = metadata.validator, let total = metadata.totalBytes, existing > 0
        {
            let table = SegmentTable(
                total: total, remaining: remaining, connections: connections, minimumSplit: Self.minimumSplit)
            let location = metadata.location.flatMap(URL.init(string:)) ?? request.url
            switch try await segmented(
                file: file, paths: paths, url: location, validator: validator, table: table, metadata: metadata)
            {
            case .complete:
                digest = nil
                return try await finish(
                    file: file, paths: paths, size: total, digest: &digest, headers: HTTPHeaders(),
                    validator: validator, finalURL: location)
            case .changed(let reason):
                logger.debug("segments restart from zero", metadata: ["id": "\(request.id)", "reason": "\(reason)"])
                segmentation = nil
                try await io { () throws(DownloadError) in
                    try file.truncate(to: 0)
                    _ = unlink(paths.metadata)
                }
                existing = 0
                stored = nil
            }
        }

        var plan = ResumePlan(
            existingBytes: existing, stored: stored, allowsBlindResume: configuration.allowsBlindResume)
        if plan.offset == 0 { plan.revalidating = revalidating?.validator }
        core.meter.reset(completed: plan.offset, total: stored?.totalBytes ?? request.expectedSize)

        var (outcome, finalURL) = try await exchange(
            plan: &plan, sink: .file(file, paths), carriedDigest: digest,
            segmentationThreshold: plan.offset == 0 ? segmentation : nil, partialIsEmpty: existing == 0)
        if case .notModified = outcome.action, let revalidating {
            // Still current: the completed file stays as it is, and nothing was transferred.
            core.meter.reset(completed: revalidating.size, total: revalidating.size)
            let result = DownloadResult(
                id: request.id, fileURL: URL(fileURLWithPath: revalidating.path), data: nil, finalURL: finalURL,
                byteCount: revalidating.size, bytesTransferred: 0)
            return (result, revalidating)
        }
        if let segmentable = outcome.segmentable {
            let metadata = PartialMetadata(
                url: request.url.absoluteString, validator: segmentable.validator, totalBytes: segmentable.total,
                remaining: [[0, segmentable.total]], location: finalURL.absoluteString)
            try await io { () throws(DownloadError) in
                try file.truncate(to: 0)
                try file.reserve(upTo: segmentable.total)
                try metadata.save(to: paths.metadata)
            }
            let table = SegmentTable(
                total: segmentable.total, remaining: [(0, segmentable.total)], connections: connections,
                minimumSplit: Self.minimumSplit)
            switch try await segmented(
                file: file, paths: paths, url: finalURL, validator: segmentable.validator, table: table,
                metadata: metadata)
            {
            case .complete:
                digest = nil
                return try await finish(
                    file: file, paths: paths, size: segmentable.total, digest: &digest, headers: outcome.headers,
                    validator: segmentable.validator, finalURL: finalURL)
            case .changed(let reason):
                // Changed under our feet: once more, over one connection.
                logger.debug("segments restart from zero", metadata: ["id": "\(request.id)", "reason": "\(reason)"])
                try await io { () throws(DownloadError) in
                    try file.truncate(to: 0)
                    _ = unlink(paths.metadata)
                }
                plan = .fresh
                core.meter.reset(completed: 0, total: request.expectedSize)
                (outcome, finalURL) = try await exchange(plan: &plan, sink: .file(file, paths), carriedDigest: nil)
            }
        }
        if let used = outcome.digest { digest = used }

        let size: Int64
        switch outcome.action {
        case .complete(let total):
            size = total
        case .write(let offset, _, let total):
            size = offset + outcome.bytesWritten
            if let total, size != total {
                throw DownloadError(
                    .network,
                    "\(request.url.absoluteString): connection ended after \(size) of \(total) bytes")
            }
        default:
            throw DownloadError(.protocolViolation, "\(request.url.absoluteString): unexpected response")
        }
        return try await finish(
            file: file, paths: paths, size: size, digest: &digest, headers: outcome.headers,
            validator: Validator(
                etag: outcome.headers.first(name: "ETag"), lastModified: outcome.headers.first(name: "Last-Modified")),
            finalURL: finalURL, body: outcome.body)
    }

    /// Segments smaller than this are never split further.
    static let minimumSplit: Int64 = 1 << 20

    /// Connections a large download may use: the configured number, within the host cap.
    private var connections: Int {
        max(1, min(configuration.segmentedConnections, configuration.maxConnectionsPerHost))
    }

    private func segmented(
        file: PartialFile, paths: PartialPaths, url: URL, validator: Validator, table: SegmentTable,
        metadata: PartialMetadata
    ) async throws(DownloadError) -> SegmentedTransfer.Outcome {
        let transfer = SegmentedTransfer(
            clients: clients, url: url, validator: validator, table: table, file: file, paths: paths,
            metadata: metadata, connections: connections, headers: policy.headers(for: url), configuration: configuration,
            core: core, threadPool: threadPool, checkpointer: checkpointer, logger: logger)
        let outcome = try await transfer.run()
        reachability.noteAnswered(endpoint.key)
        return outcome
    }

    /// Verifies size and checksum, then syncs the file and renames it into place.
    ///
    /// `body` is a small body kept in memory, written here at offset 0 in the same hop to
    /// the I/O pool as the sync and the rename.
    /// Returns the result and, when the content had a validator, the saved file's details
    /// for revalidation next time.
    private func finish(
        file: PartialFile, paths: PartialPaths, size: Int64, digest: inout ContentDigest?, headers: HTTPHeaders,
        validator: Validator?, finalURL: URL, body: ByteBuffer? = nil
    ) async throws(DownloadError) -> (DownloadResult, CompletedFile?) {
        var body = body

        do {
            try verify(size: size)
            if let checksum = request.checksum {
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
            }
        } catch {
            try? await io { () throws(DownloadError) in PartialFile.remove(paths) }
            throw error
        }

        let destination = paths.destination(
            contentDisposition: headers.first(name: "Content-Disposition"), finalURL: finalURL)
        let unwritten = body
        // A body kept in memory for a file created on demand is the whole file, and no
        // sidecar was written for it: nothing to cut or clean up.
        let wholeInMemory = unwritten != nil && file.createdOnDemand
        let prepare: @Sendable () throws(DownloadError) -> Void = { () throws(DownloadError) in
            if let unwritten { try file.write(unwritten, at: 0) }
            if !wholeInMemory { try file.truncate(to: size) }
            try file.sync()
        }
        let commit: @Sendable () throws(DownloadError) -> (size: Int64, modified: Int64)? = {
            () throws(DownloadError) in
            try file.commit(to: destination, syncing: directorySync)
            if !wholeInMemory {
                _ = unlink(paths.metadata)
                _ = unlink(paths.metadata + ".tmp")
            }
            // Only worth a stat when there is a validator to revalidate with.
            return validator == nil ? nil : CompletedFile.attributes(path: destination.path)
        }
        let attributes: (size: Int64, modified: Int64)?
        if let fence = checkpointer, fence.fencesCompletion {
            // Another process may have taken the job over (a shared queue's lease that
            // expired): the file goes into place only once the store says this run still
            // holds the job, so a stale run never renames its file over a newer one.
            try await io(prepare)
            try await fence.confirmCompletion(bytes: size)
            attributes = try await io(commit)
        } else {
            attributes = try await io { () throws(DownloadError) in
                try prepare()
                return try commit()
            }
        }
        let result = DownloadResult(
            id: request.id, fileURL: destination, data: nil, finalURL: finalURL, byteCount: size,
            bytesTransferred: core.meter.bytesTransferred)
        guard let validator, let attributes else { return (result, nil) }
        return (
            result,
            CompletedFile(path: destination.path, size: attributes.size, modified: attributes.modified, validator: validator)
        )
    }

    private func attemptInMemory(carrying digest: inout ContentDigest?) async throws(DownloadError)
        -> DownloadResult
    {
        guard case .memory(let limit) = request.destination else {
            throw .invalid("no partial file for a file destination")
        }
        var plan = ResumePlan.fresh
        core.meter.reset(completed: 0, total: request.expectedSize)
        let (outcome, finalURL) = try await exchange(plan: &plan, sink: .memory(limit: limit), carriedDigest: nil)
        let body = outcome.body ?? ByteBuffer()
        let size = Int64(body.readableBytes)
        if case .write(_, _, let total?) = outcome.action, total != size {
            throw DownloadError(
                .network, "\(request.url.absoluteString): connection ended after \(size) of \(total) bytes")
        }
        try verify(size: size)
        if let checksum = request.checksum {
            let fresh = outcome.digest ?? {
                let digest = ContentDigest(checksum.algorithm)
                digest.update(body)
                return digest
            }()
            try verify(checksum: checksum, actual: fresh.hex())
        }
        let data = Data(body.readableBytesView)
        return DownloadResult(
            id: request.id, fileURL: nil, data: data, finalURL: finalURL, byteCount: size,
            bytesTransferred: core.meter.bytesTransferred)
    }

    // MARK: - Requests and redirects

    /// Sends requests until one yields content (or proves the partial complete),
    /// following redirects and restarting from zero when the partial cannot be trusted.
    private func exchange(
        plan: inout ResumePlan, sink: TransferDelegate.Sink, carriedDigest: ContentDigest?,
        segmentationThreshold: Int64? = nil, partialIsEmpty: Bool = false
    ) async throws(DownloadError) -> (TransferDelegate.Outcome, URL) {
        var redirects = RedirectFollower(
            url: request.url, policy: policy, maxRedirects: configuration.maxRedirects, subject: .download)
        var restarted = false
        while true {
            let delegate = TransferDelegate(
                plan: plan, sink: sink, requestURL: request.url, expectedSize: request.expectedSize,
                algorithm: request.checksum?.algorithm, carriedDigest: carriedDigest, core: core,
                threadPool: threadPool, checkpointer: checkpointer, segmentationThreshold: segmentationThreshold,
                partialIsEmpty: partialIsEmpty && !restarted)
            let url = redirects.url
            let transportError = await send(url: url, headers: redirects.headers, plan: plan, delegate: delegate)
            await delegate.drained()
            let outcome = delegate.outcome
            if outcome.status != nil { reachability.noteAnswered(endpoint.key) }
            if let failure = outcome.failure { throw failure }
            if outcome.segmentable != nil { return (outcome, url) }
            guard let action = outcome.action else {
                throw Self.translate(transportError, url: url)
            }
            switch action {
            case .write:
                if let transportError { throw Self.translate(transportError, url: url) }
                return (outcome, url)
            case .complete, .notModified:
                return (outcome, url)
            case .fail(let status, let retryAfter):
                throw Self.httpError(status: status, url: url, retryAfter: retryAfter)
            case .restart(let reason):
                logger.debug("restarting from zero", metadata: ["id": "\(request.id)", "reason": "\(reason)"])
                guard !restarted, plan.offset > 0 else {
                    throw DownloadError(.protocolViolation, "\(url.absoluteString): \(reason)")
                }
                restarted = true
                plan = .fresh
                core.meter.reset(completed: 0, total: request.expectedSize)
            case .redirect(let location):
                try redirects.follow(status: outcome.status ?? 302, location: location)
            }
        }
    }

    /// Which headers go to which hop: credentials only to the request's origin.
    private var policy: RedirectPolicy {
        RedirectPolicy(request: request, netrc: configuration.netrc, allowsDowngrade: configuration.allowsInsecureRedirects)
    }

    /// Sends one request with `extraHeaders` (chosen by the redirect policy) and waits for
    /// its end; returns the transport error, if any.
    private func send(
        url: URL, headers extraHeaders: [(name: String, value: String)], plan: ResumePlan, delegate: TransferDelegate
    ) async -> (any Error)? {
        var headers = HTTPHeaders()
        headers.add(name: "User-Agent", value: configuration.userAgent)
        for header in extraHeaders { headers.add(name: header.name, value: header.value) }
        for (name, value) in plan.requestHeaders { headers.replaceOrAdd(name: name, value: value) }
        let httpRequest: HTTPClient.Request
        do {
            httpRequest = try HTTPClient.Request(url: url, method: .GET, headers: headers)
        } catch {
            return error
        }
        let client: HTTPClient
        do {
            client = try await clients.client(for: url)
        } catch {
            return error
        }
        let task = client.execute(request: httpRequest, delegate: delegate, logger: logger)
        do {
            try await withTaskCancellationHandler {
                try await task.futureResult.get()
            } onCancel: {
                task.cancel()
            }
            return nil
        } catch {
            return await clients.diagnosed(error, url: url)
        }
    }

    // MARK: - Checks and helpers

    private func verify(size: Int64) throws(DownloadError) {
        if let expected = request.expectedSize, expected != size {
            throw DownloadError(
                .sizeMismatch,
                "size check failed for \(request.url.absoluteString): got \(size) bytes, expected \(expected)")
        }
    }

    private func verify(checksum: Checksum, actual: String) throws(DownloadError) {
        guard actual == checksum.hex else {
            throw DownloadError(
                .checksumMismatch,
                "\(checksum.algorithm.rawValue) check failed for \(request.url.absoluteString): expected \(checksum.hex), got \(actual)"
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

    static func httpError(status: Int, url: URL, retryAfter: String?) -> DownloadError {
        let reason = HTTPResponseStatus(statusCode: status).reasonPhrase
        return DownloadError(
            .httpStatus, "HTTP \(status) \(reason) from \(url.absoluteString)", statusCode: status,
            retryAfter: retryAfter.flatMap(parseRetryAfter))
    }

    /// Parses `Retry-After` as seconds or an HTTP date.
    static func parseRetryAfter(_ value: String) -> Duration? {
        let text = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int64(text), seconds >= 0 { return .seconds(seconds) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: text) else { return nil }
        return .milliseconds(Int64(max(0, date.timeIntervalSinceNow) * 1000))
    }

    /// Turns a transport error into a ``DownloadError`` a person can act on.
    static func translate(_ error: (any Error)?, url: URL) -> DownloadError {
        guard let error else {
            return DownloadError(.network, "\(url.absoluteString): the request ended without a response")
        }
        if let error = error as? DownloadError { return error }
        let host = url.host ?? url.absoluteString
        if let tls = translateTLSError(error, host: host, url: url) { return tls }
        if let client = error as? HTTPClientError {
            switch client {
            case .connectTimeout:
                return DownloadError(
                    .timeout, "could not connect to \(host) within the connect timeout", isConnectivity: true)
            case .readTimeout, .deadlineExceeded:
                return DownloadError(.timeout, "\(url.absoluteString): no data within the idle timeout")
            case .remoteConnectionClosed:
                return DownloadError(.network, "\(url.absoluteString): the server closed the connection early")
            case .proxyAuthenticationRequired:
                return DownloadError(
                    .proxy,
                    "\(url.absoluteString): the proxy asked for credentials (407 Proxy Authentication Required): give them in the proxy URL, http://USER:PASSWORD@HOST:PORT"
                )
            case .invalidProxyResponse:
                return DownloadError(
                    .proxy,
                    "\(url.absoluteString): the proxy refused to open a tunnel (CONNECT) to \(host): it may not accept the credentials given, or not allow this host or port"
                )
            case .httpProxyHandshakeTimeout:
                return DownloadError(
                    .timeout, "\(url.absoluteString): the proxy did not open a tunnel to \(host) in time")
            default:
                return DownloadError(.network, "\(url.absoluteString): \(client)")
            }
        }
        if let connection = error as? NIOConnectionError {
            if connection.dnsAError != nil || connection.dnsAAAAError != nil {
                return DownloadError(
                    .network, "cannot resolve host \(connection.host): check the name and your DNS", isConnectivity: true)
            }
            if let first = connection.connectionErrors.first?.error {
                return translateSocketError(first, host: "\(connection.host):\(connection.port)", url: url)
            }
        }
        return translateSocketError(error, host: host, url: url)
    }

    private static func translateSocketError(_ error: any Error, host: String, url: URL) -> DownloadError {
        if let io = error as? IOError {
            switch io.errnoCode {
            case ECONNREFUSED:
                return DownloadError(
                    .network, "connection refused by \(host): is the server running?", isConnectivity: true)
            case ECONNRESET, EPIPE:
                return DownloadError(.network, "\(url.absoluteString): connection reset by the server")
            case ENETUNREACH, EHOSTUNREACH:
                return DownloadError(.network, "\(host) is unreachable: check the network", isConnectivity: true)
            case ETIMEDOUT:
                return DownloadError(.timeout, "\(host) did not answer in time")
            default:
                return DownloadError(.network, "\(url.absoluteString): \(String(cString: strerror(io.errnoCode)))")
            }
        }
        if let channel = error as? ChannelError, case .connectTimeout = channel {
            return DownloadError(
                .timeout, "could not connect to \(host) within the connect timeout", isConnectivity: true)
        }
        return DownloadError(.network, "\(url.absoluteString): \(error)")
    }
}
