import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// Carries out a stream download (``DownloadRequest/stream``) as its job's transfer: the
/// recording of ``HLSDownloader``, with the playlists, keys and segments fetched as this
/// job's own transfers.
///
/// They take no slot of their own (a stream holding a slot while its segments waited for
/// one would wait on itself at one slot); the per-host caps of the manager's clients bound
/// them, and the job's speed limits count their bytes. The stream's resources are staged
/// beside the job's partial path (`NAME.haul-hls`), so a restarted job (`haul resume`, a
/// restarted service, another worker) goes on at the segments missing, and a cancelled one
/// leaves nothing behind (``PartialFile/remove(_:)``).
final class HLSJobTransfer: Sendable {
    /// The job's transfer, whose download and environment this one shares (and whose
    /// upload puts a stream into its object).
    private let operation: TransferOperation
    private let manager: DownloadManager
    private let eventLoopGroup: any EventLoopGroup
    private let rateLimiter: RateLimiter
    /// Where the fetches' own events go: nowhere anybody listens (the job's core reports
    /// the stream's progress).
    private let unheard = EventBroadcaster<DownloadManager.Event>()
    /// Whether a fetch found the network gone (the job then waits for it).
    private let networkLost = NIOLockedValueBox(false)
    /// The bytes counted into the job's progress so far.
    private let counted = NIOLockedValueBox<Int64>(0)

    private var download: TransferOperation.Download { operation.download }
    private var environment: TransferOperation.Environment { operation.environment }

    init(_ operation: TransferOperation, manager: DownloadManager, eventLoopGroup: any EventLoopGroup, rateLimiter: RateLimiter) {
        self.operation = operation
        self.manager = manager
        self.eventLoopGroup = eventLoopGroup
        self.rateLimiter = rateLimiter
    }

    /// The staging directory of the stream whose partial path is `partial`.
    static func staging(forPartial partial: String) -> String {
        String(partial.dropLast(PartialPaths.partialSuffix.count)) + PartialPaths.streamSuffix
    }

    func run() async -> TransferOutcome {
        let request = download.request
        guard let stream = request.stream, let paths = download.paths, let path = paths.fixedDestination else {
            return .failed(.invalid("\(request.url.absoluteString): a stream goes into a named file or object"))
        }
        let url = request.location ?? request.url
        do {
            guard let object = paths.object else {
                let summary = try await record(stream, to: path, paths: paths, fenced: true)
                let main = summary.main
                let result = DownloadResult(
                    id: request.id, fileURL: main.file, data: nil, finalURL: url, byteCount: main.byteCount,
                    bytesTransferred: summary.outputs.reduce(0) { $0 + $1.bytesTransferred })
                return .completed(result, file: nil)
            }
            // Into an object: assembled beside the partial path, then uploaded as a staged
            // download is (the store's fence comes with the upload). A file an earlier run
            // assembled (killed while uploading) is uploaded as it is.
            let base = String(paths.partial.dropLast(PartialPaths.partialSuffix.count))
            var assembled = try await environment.threadPool.perform { () -> String? in
                let name = PathText.lastComponent(base) + "."
                let names = (try? FileManager.default.contentsOfDirectory(atPath: PathText.directory(of: base))) ?? []
                return names.first { $0.hasPrefix(name) && !$0.dropFirst(name.count - 1).hasPrefix(".haul-") }
                    .map { PartialPaths.join(PathText.directory(of: base), $0) }
            }
            if assembled == nil { assembled = try await record(stream, to: base, paths: paths, fenced: false).main.file.path }
            guard let assembled else { preconditionFailure("assembled above") }
            let suffix = "." + (assembled as NSString).pathExtension
            let key = object.key.lowercased().hasSuffix(suffix) ? object.key : object.key + suffix
            let location = try S3Location(bucket: object.bucket, key: key)
            return .completed(try await operation.upload(assembled: assembled, to: location, finalURL: url), file: nil)
        } catch {
            if Task.isCancelled { return .interrupted }
            if networkLost.withLockedValue({ $0 }) { return .waitingForNetwork }
            return .failed(error)
        }
    }

    /// Records `stream` into `path` (its container's extension added), its resources
    /// staged beside the partial path; with `fenced`, the files go into place only once the
    /// store says this run still holds the job.
    private func record(_ stream: HLSStream, to path: String, paths: PartialPaths, fenced: Bool)
        async throws(DownloadError) -> HLSSummary
    {
        let request = download.request
        var fetcher = HLSFetcher(
            fetch: { [self] request throws(DownloadError) in try await fetch(request) },
            threadPool: environment.threadPool, window: max(16, environment.configuration.maxConcurrentDownloads * 4))
        if fenced, let fence = download.checkpointer {
            // Another process may have taken the job over (a shared queue's lease that
            // expired): the files go into place only once the store says this run still
            // holds it, as a file download's do (`TransferOperation`).
            fetcher.confirm = { bytes throws(DownloadError) in try await fence.confirmCompletion(bytes: bytes).answer() }
        }
        let core = download.core
        let counted = self.counted
        return try await HLSDownloader(manager: manager, fetcher: fetcher).download(
            from: request.location ?? request.url, to: URL(fileURLWithPath: path), options: HLSOptions(stream, for: request),
            staging: .under(Self.staging(forPartial: paths.partial))
        ) { event in
            switch event {
            case .started(let progress):
                core.meter.reset(completed: progress.bytesStaged, total: nil)
            case .progress(let progress):
                let added = counted.withLockedValue { counted in
                    defer { counted = progress.bytesReceived }
                    return progress.bytesReceived - counted
                }
                if added > 0 { core.received(Int(added), at: .now) }
            case .saved:
                counted.withLockedValue { $0 = 0 }
            }
        }
    }

    /// Fetches `request` to its end as a transfer of this job.
    private func fetch(_ request: DownloadRequest) async throws(DownloadError) -> DownloadResult {
        let validated = try ValidatedRequest(request)
        let endpoint = validated.endpoint(through: environment.clients)
        // Its bytes count against the job's speed limits (the job's ID and host).
        let core = JobCore(
            id: download.core.id, url: request.url, managerEvents: unheard, eventLoopGroup: eventLoopGroup,
            rateLimiter: rateLimiter, host: download.endpoint.key)
        let operation = TransferOperation(
            TransferOperation.Download(
                request: validated.request, paths: validated.paths, endpoint: endpoint, core: core, checkpointer: nil,
                journaled: nil),
            environment: environment)
        switch await operation.run() {
        case .completed(let result, _):
            return result
        case .failed(let error):
            throw error
        case .interrupted:
            throw .cancelled(.noLongerWanted, id: download.core.id)
        case .waitingForNetwork:
            networkLost.withLockedValue { $0 = true }
            throw DownloadError(.network, "\(request.url.removingUserInfo.absoluteString): the network is gone")
        }
    }
}
