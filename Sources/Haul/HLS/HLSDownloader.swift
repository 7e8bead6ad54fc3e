public import Foundation
import NIOPosix

/// Downloads a stream given as an HLS playlist (`.m3u8`, RFC 8216) into one playable file,
/// with no re-encoding: MPEG-TS segments concatenated into a `.ts`, fMP4 segments after
/// their init section into an `.mp4`.
///
/// ```swift
/// let summary = try await HLSDownloader(manager: manager).download(
///     from: URL(string: "https://example.com/show/master.m3u8")!,
///     to: URL(fileURLWithPath: "/videos/show.ts"),
///     options: HLSOptions(variant: .resolution(width: 1280, height: 720)))
/// print(summary.main.segments, "segments,", summary.main.duration, "s")
/// ```
///
/// A master playlist's variant is chosen by ``HLSOptions/variant``; its audio and video
/// renditions (`EXT-X-MEDIA` with a URI) are saved beside the file with
/// ``HLSOptions/renditions``. Each segment is a download of the `manager` into a staging
/// directory beside the file (`FILE.haul-hls`), so slots, per-host connection caps,
/// HTTP/2, retries, proxies and resume apply to segments as to any download; a URL that
/// several segments share through byte ranges (`EXT-X-BYTERANGE`) is fetched once. A run
/// that stopped (a kill, a lost network) continues at the segments missing when started
/// again: staged segments are not fetched again.
///
/// Segments encrypted with `METHOD=AES-128` are decrypted with the key fetched from the
/// key's URI (with the request's headers; credentials go to their origin only) and the IV
/// the playlist gives or the media sequence number; keys may change along the playlist. A
/// playlist whose keys need a DRM system (`SAMPLE-AES`, or a `KEYFORMAT` other than
/// `identity`) is refused with ``DownloadError/Code/drmProtected`` before any segment is
/// fetched.
///
/// The file appears only complete: every segment of the playlist written once, in order,
/// each checked to start as its container's segments do (a wrong key or a damaged segment
/// fails the download instead of writing noise), the durations of the segments written
/// adding up to the playlist's, then made durable and renamed into place.
///
/// A live playlist (no `EXT-X-ENDLIST`) is fetched again every target duration, and its
/// new segments are recorded until it ends or ``HLSOptions/maxDuration`` is reached.
public struct HLSDownloader: Sendable {
    /// The manager that fetches playlists, keys and segments.
    public let manager: DownloadManager
    /// How the playlists, keys and segments are fetched.
    let fetcher: HLSFetcher

    /// Creates a downloader that fetches through `manager`.
    public init(manager: DownloadManager) {
        self.init(manager: manager, fetcher: .through(manager))
    }

    /// Creates a downloader that fetches with `fetcher` (a stream job's own transfers).
    init(manager: DownloadManager, fetcher: HLSFetcher) {
        self.manager = manager
        self.fetcher = fetcher
    }

    /// Where a recording stages its resources.
    enum Staging: Sendable {
        /// Beside each file, in `FILE.haul-hls` (``download(from:to:options:until:events:)``).
        case besideEachFile
        /// In subdirectories of one directory: `main` for the stream, one named after each
        /// rendition (a stream job's, beside its partial path, which removing the partial
        /// removes too).
        case under(String)
    }

    /// Whether `bytes`, the start of a file, begin as a playlist does: with `#EXTM3U`
    /// (after a UTF-8 byte order mark, if any). For recognising a playlist by its content
    /// when its name does not say so (`haul get` follows such a download to its stream);
    /// reading it tells whether it is a valid one.
    public static func looksLikePlaylist(_ bytes: some Collection<UInt8>) -> Bool {
        HLSPlaylist.looksLikePlaylist(contentType: nil, firstBytes: bytes)
    }

    /// How many bytes of a file's start ``looksLikePlaylist(_:)`` needs.
    public static var magicLength: Int { 10 }

    /// The variants a master playlist offers, in its order; empty for a media playlist
    /// (which has one stream). For showing what ``HLSOptions/variant`` may choose
    /// (`haul get URL --hls-variant list`).
    ///
    /// - Throws: ``DownloadError``: the playlist's fetch errors, or `invalidManifest`.
    public func variants(of playlistURL: URL, options: HLSOptions = HLSOptions()) async throws(DownloadError) -> [HLSVariant] {
        guard playlistURL.isWebAddress else {
            throw .invalid("the playlist URL '\(playlistURL.removingUserInfo.absoluteString)' is not an http or https URL")
        }
        guard case .master(let master) = try await fetchPlaylist(playlistURL, options: options).0 else { return [] }
        return master.variants
    }

    /// The largest playlist fetched into memory.
    static let playlistLimit = 16 << 20

    /// Downloads the stream of the playlist at `playlistURL` into `file`.
    ///
    /// - Parameters:
    ///   - playlistURL: An `http` or `https` URL of a master or media playlist.
    ///   - file: Where the stream goes: `.ts`, `.mp4` (or a packed stream's extension)
    ///     is added unless its name ends with the container's; renditions go beside it,
    ///     named after it (`show.audio-en.ts`).
    ///   - options: The variant, renditions, a duration limit, headers and priority.
    ///   - stop: Ends a live recording early, its file written with what was planned
    ///     (see ``HLSRecordingStop``).
    ///   - events: Called for each ``HLSEvent``, in order.
    /// - Returns: The files written.
    /// - Throws: ``DownloadError``: the fetch errors of the playlist, a key or a segment
    ///   (`httpStatus`, `network`, …, after the manager's retries); `invalidManifest` for a
    ///   playlist that is not one, breaks RFC 8216, or has no variant the choice names;
    ///   `drmProtected`; `checksumMismatch` for a segment that does not decrypt or is not
    ///   of its container; `fileSystem`.
    public func download(
        from playlistURL: URL,
        to file: URL,
        options: HLSOptions = HLSOptions(),
        until stop: HLSRecordingStop? = nil,
        events: @escaping @Sendable (HLSEvent) -> Void = { _ in }
    ) async throws(DownloadError) -> HLSSummary {
        try await download(from: playlistURL, to: file, options: options, staging: .besideEachFile, until: stop, events: events)
    }

    /// ``download(from:to:options:until:events:)``, staging as `staging` says.
    func download(
        from playlistURL: URL,
        to file: URL,
        options: HLSOptions,
        staging: Staging,
        until stop: HLSRecordingStop? = nil,
        events: @escaping @Sendable (HLSEvent) -> Void = { _ in }
    ) async throws(DownloadError) -> HLSSummary {
        guard playlistURL.isWebAddress else {
            throw .invalid("the playlist URL '\(playlistURL.removingUserInfo.absoluteString)' is not an http or https URL")
        }
        guard file.isFileURL else { throw .invalid("\(file) is not a file path") }
        let path = file.standardizedFileURL.path
        var (playlist, url) = try await fetchPlaylist(playlistURL, options: options)
        var outputs: [HLSOutput] = []
        var renditions: [(HLSRendition, URL)] = []
        if case .master(let master) = playlist {
            if let drm = master.sessionKeys.first(where: \.requiresDRM) { throw HLSPlan.drmError(drm, url: url) }
            guard let variant = options.variant.choose(from: master.variants) else {
                throw DownloadError(
                    .invalidManifest,
                    "\(url.absoluteString): no variant matches \(options.variant) (it offers \(Self.describe(master.variants)))")
            }
            if options.renditions {
                renditions = master.renditions(for: variant).compactMap { rendition in
                    // Closed captions are carried in the video itself; the others have a playlist.
                    guard rendition.type != .closedCaptions, let url = rendition.url else { return nil }
                    return (rendition, url)
                }
            }
            (playlist, url) = try await fetchPlaylist(variant.url, options: options)
            guard case .media = playlist else {
                throw DownloadError(.invalidManifest, "\(url.absoluteString): a variant's playlist is a master playlist")
            }
        }
        guard case .media(let media) = playlist else { preconditionFailure("a master playlist was replaced above") }
        var plan = try HLSPlan(media, url: url, limit: options.maxDuration?.inSeconds)
        // Every rendition's playlist is read, and refused if DRM-protected, before any
        // segment is fetched.
        var renditionPlans: [(HLSRendition, HLSPlan, HLSMediaPlaylist, URL)] = []
        for (rendition, renditionURL) in renditions {
            let (fetched, finalURL) = try await fetchPlaylist(renditionURL, options: options)
            guard case .media(let renditionMedia) = fetched else {
                throw DownloadError(.invalidManifest, "\(finalURL.absoluteString): a rendition's playlist is a master playlist")
            }
            renditionPlans.append(
                (
                    rendition,
                    try HLSPlan(
                        renditionMedia, url: finalURL, limit: options.maxDuration?.inSeconds,
                        subtitles: rendition.type == .subtitles),
                    renditionMedia, finalURL
                ))
        }
        if case .under(let root) = staging {
            try await fetcher.threadPool.perform { () throws(DownloadError) in
                guard mkdir(root, 0o755) == 0 || errno == EEXIST else {
                    throw .fileSystem("create the staging directory", path: root, errno: errno)
                }
            }
        }
        func stagingDirectory(_ name: String, for output: String) -> String {
            switch staging {
            case .besideEachFile: output + ".haul-hls"
            case .under(let root): PartialPaths.join(root, name)
            }
        }
        let mainPath = Self.path(path, for: plan)
        // Every output is written and made durable first; then, once the fetcher confirms
        // (a shared queue's job still held), all go into place.
        var written: [(output: HLSOutput, staging: String)] = []
        let mainStaging = stagingDirectory("main", for: mainPath)
        let main = try await record(
            &plan, media: media, playlistURL: url, into: mainPath, staging: mainStaging,
            kind: .main, options: options, stop: stop, events: events)
        written.append((main, mainStaging))
        let stem = mainPath.hasSuffix("." + plan.fileExtension) ? String(mainPath.dropLast(plan.fileExtension.count + 1)) : mainPath
        for (rendition, var renditionPlan, renditionMedia, renditionURL) in renditionPlans {
            let label = FileNaming.sanitize(rendition.language.map { "\(rendition.type.rawValue.lowercased())-\($0)" } ?? rendition.name)
                ?? rendition.type.rawValue.lowercased()
            let renditionPath = Self.path("\(stem).\(label)", for: renditionPlan)
            let kind = HLSOutput.Kind.rendition(type: rendition.type.rawValue, name: rendition.name, language: rendition.language)
            let renditionStaging = stagingDirectory(label, for: renditionPath)
            let output = try await record(
                &renditionPlan, media: renditionMedia, playlistURL: renditionURL, into: renditionPath,
                staging: renditionStaging, kind: kind, options: options, stop: stop, events: events)
            written.append((output, renditionStaging))
        }
        try await fetcher.confirm(main.byteCount)
        try await fetcher.threadPool.perform { [written] () throws(DownloadError) in
            for (output, directory) in written {
                try HLSAssembly.commit(directory, to: output.file.path)
                try? FileManager.default.removeItem(atPath: directory)
            }
            if case .under(let root) = staging {
                // Each output's directory is gone; the root holds nothing now.
                guard rmdir(root) == 0 || errno == ENOENT else {
                    throw .fileSystem("remove the staging directory", path: root, errno: errno)
                }
            }
        }
        outputs = written.map(\.output)
        for output in outputs { events(.saved(output)) }
        return HLSSummary(outputs: outputs)
    }

    /// What comes back from one of the concurrent fetches of a recording.
    private enum Fetched: Sendable {
        case resource(Int, Result<Int64, DownloadError>)
        /// A refreshed playlist, or `nil` when the recording was asked to stop.
        case refresh(Result<(HLSMediaPlaylist, URL)?, DownloadError>)
    }

    /// Fetches `plan`'s resources (and, for a live playlist, its refreshes) into `staging`
    /// and writes the output there, durable, for ``HLSAssembly/commit(_:to:)`` to put at
    /// `path`.
    private func record(
        _ plan: inout HLSPlan, media: HLSMediaPlaylist, playlistURL: URL, into path: String, staging: String,
        kind: HLSOutput.Kind, options: HLSOptions, stop: HLSRecordingStop?, events: @escaping @Sendable (HLSEvent) -> Void
    ) async throws(DownloadError) -> HLSOutput {
        let threadPool = fetcher.threadPool
        let saved = try await threadPool.perform { () throws(DownloadError) -> SavedPlan? in
            guard mkdir(staging, 0o755) == 0 || errno == EEXIST else {
                throw .fileSystem("create the staging directory", path: staging, errno: errno)
            }
            return SavedPlan.load(from: staging)
        }
        // A live recording an earlier run began goes on from its list: the segments that
        // have left the playlist since are still in it (and staged, or fetched now).
        if let saved, saved.playlist == playlistURL, !saved.plan.isComplete {
            var resumed = saved.plan
            try resumed.append(media, url: playlistURL)
            plan = resumed
        }
        let savesPlan = !plan.isComplete
        if savesPlan { try await SavedPlan(playlist: playlistURL, plan: plan).save(in: staging, threadPool: threadPool) }
        // Keys are fetched first: a key that cannot be had stops the download before its
        // segments are fetched.
        var keys = try await fetchKeys(plan.keys, known: [:], options: options)
        let file = URL(fileURLWithPath: path)
        let isLive = !plan.isComplete
        var progress = HLSProgress(file: file, segments: 0, duration: 0, isLive: isLive)
        var tally = HLSTally()
        var started: Set<Int> = []
        // Resources already staged by an earlier run.
        let staged = try await threadPool.perform { [resources = plan.resources] () throws(DownloadError) -> [Int: Int64] in
            var found: [Int: Int64] = [:]
            for (index, resource) in resources.enumerated() {
                var status = stat()
                if stat(PartialPaths.join(staging, resource.fileName), &status) == 0, (status.st_mode & S_IFMT) == S_IFREG {
                    found[index] = Int64(status.st_size)
                }
            }
            return found
        }
        tally.count(plan, into: &progress)
        for (index, size) in staged {
            tally.fetched(index, into: &progress)
            started.insert(index)
            progress.bytesStaged += size
        }
        events(.started(progress))
        let window = fetcher.window
        let request = { [options] (resource: HLSPlan.Resource) -> DownloadRequest in
            var request = DownloadRequest(
                url: resource.url, destination: .file(URL(fileURLWithPath: PartialPaths.join(staging, resource.fileName))),
                priority: options.priority, headers: options.headers)
            request.sensitiveHeaderNames = options.sensitiveHeaderNames
            request.isJournaled = false
            return request
        }
        let fetch = fetcher.fetch
        let outcome: Result<Void, DownloadError> = await withTaskGroup(of: Fetched.self) { group in
            var inFlight = 0
            var refreshing = false
            // Resources are planned and started in order: the next to look at.
            var nextResource = 0
            func fill() {
                while inFlight < window, nextResource < plan.resources.count {
                    let index = nextResource
                    nextResource += 1
                    guard started.insert(index).inserted else { continue }
                    inFlight += 1
                    let request = request(plan.resources[index])
                    group.addTask {
                        do throws(DownloadError) {
                            let result = try await fetch(request)
                            return .resource(index, .success(result.byteCount))
                        } catch {
                            return .resource(index, .failure(error))
                        }
                    }
                }
            }
            func refreshLater() {
                guard !plan.isComplete, !plan.reachedLimit, stop?.isFinished != true else { return }
                refreshing = true
                let wait = Duration.seconds(max(1, plan.targetDuration))
                group.addTask {
                    if let stop {
                        if await stop.sleep(for: wait) { return .refresh(.success(nil)) }
                    } else {
                        try? await Task.sleep(for: wait)
                    }
                    if Task.isCancelled {
                        return .refresh(.failure(.cancelled(.noLongerWanted, id: DownloadID(playlistURL.absoluteString))))
                    }
                    do throws(DownloadError) {
                        let (fetched, url) = try await fetchPlaylist(playlistURL, options: options, reload: true)
                        guard case .media(let media) = fetched else {
                            throw DownloadError(.invalidManifest, "\(url.absoluteString): a live playlist became a master playlist")
                        }
                        return .refresh(.success((media, url)))
                    } catch {
                        return .refresh(.failure(error))
                    }
                }
            }
            fill()
            refreshLater()
            while let next = await group.next() {
                switch next {
                case .resource(let index, .success(let bytes)):
                    inFlight -= 1
                    progress.bytesReceived += bytes
                    tally.fetched(index, into: &progress)
                    events(.progress(progress))
                    fill()
                case .refresh(.success(nil)):
                    // Asked to stop: what is planned is the recording.
                    refreshing = false
                case .refresh(.success((let media, let url)?)):
                    refreshing = false
                    do throws(DownloadError) {
                        let known = keys
                        if try plan.append(media, url: url) > 0 {
                            try await SavedPlan(playlist: playlistURL, plan: plan).save(in: staging, threadPool: threadPool)
                            keys = try await fetchKeys(plan.keys, known: known, options: options)
                            tally.count(plan, into: &progress)
                            events(.progress(progress))
                        }
                    } catch {
                        group.cancelAll()
                        return .failure(error)
                    }
                    fill()
                    refreshLater()
                case .resource(_, .failure(let error)), .refresh(.failure(let error)):
                    group.cancelAll()
                    return .failure(error)
                }
                if inFlight == 0, !refreshing { break }
            }
            return .success(())
        }
        try outcome.get()
        let written = try await threadPool.perform { [plan, keys] () throws(DownloadError) -> HLSAssembly.Written in
            try HLSAssembly.write(plan, keys: keys, staging: staging)
        }
        return HLSOutput(
            file: file, kind: kind, segments: written.segments, duration: written.duration, byteCount: written.bytes,
            bytesTransferred: progress.bytesReceived, missedSegments: plan.missedSegments)
    }

    /// Fetches the keys of `wanted` that are not in `known`; each must be 16 bytes.
    private func fetchKeys(
        _ wanted: [HLSKey], known: [HLSKey: [UInt8]], options: HLSOptions
    ) async throws(DownloadError) -> [HLSKey: [UInt8]] {
        var keys = known
        for key in wanted where keys[key] == nil {
            guard let url = key.url else { continue }
            var request = DownloadRequest(url: url, destination: .memory(limit: 4096), headers: options.headers)
            request.sensitiveHeaderNames = options.sensitiveHeaderNames
            request.cachePolicy = .reloadIgnoringCache
            let result = try await fetcher.fetch(request)
            let bytes = [UInt8](result.data ?? Data())
            guard bytes.count == 16 else {
                throw DownloadError(
                    .invalidManifest, "\(result.finalURL.absoluteString): an AES-128 key is 16 bytes; this one is \(bytes.count)")
            }
            keys[key] = bytes
        }
        return keys
    }

    /// Fetches and parses the playlist at `url`; returns it with its URL after redirects.
    private func fetchPlaylist(
        _ url: URL, options: HLSOptions, reload: Bool = false
    ) async throws(DownloadError) -> (HLSPlaylist, URL) {
        var request = DownloadRequest(url: url, destination: .memory(limit: Self.playlistLimit), headers: options.headers)
        request.sensitiveHeaderNames = options.sensitiveHeaderNames
        request.priority = options.priority
        if reload { request.cachePolicy = .reloadIgnoringCache }
        let result = try await fetcher.fetch(request)
        let data = result.data ?? Data()
        guard HLSPlaylist.looksLikePlaylist(contentType: nil, firstBytes: data.prefix(16)) else {
            throw DownloadError(.invalidManifest, "\(result.finalURL.absoluteString): not an HLS playlist (no #EXTM3U)")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw DownloadError(.invalidManifest, "\(result.finalURL.absoluteString): the playlist is not UTF-8 text")
        }
        do throws(HLSPlaylistError) {
            return (try HLSPlaylist.parse(text, url: result.finalURL), result.finalURL)
        } catch {
            throw DownloadError(.invalidManifest, "\(result.finalURL.absoluteString): \(error.description)")
        }
    }

    /// A live recording's plan, saved in its staging directory (`plan.json`) each time it
    /// grows, so that a run started after a kill records on from the same list.
    struct SavedPlan: Codable, Sendable {
        var playlist: URL
        var plan: HLSPlan

        static let fileName = "plan.json"

        /// The plan saved in `staging`, if one can be read. Blocking.
        static func load(from staging: String) -> SavedPlan? {
            guard let data = FileManager.default.contents(atPath: PartialPaths.join(staging, fileName)) else { return nil }
            return try? JSONDecoder().decode(SavedPlan.self, from: data)
        }

        /// Writes the plan into `staging`, whole or not at all (a temporary file renamed).
        func save(in staging: String, threadPool: NIOThreadPool) async throws(DownloadError) {
            let data: Data
            do {
                data = try JSONEncoder().encode(self)
            } catch {
                throw DownloadError(.fileSystem, "cannot encode the recording's plan: \(error)")
            }
            try await threadPool.perform { () throws(DownloadError) in
                let path = PartialPaths.join(staging, Self.fileName)
                do {
                    try data.write(to: URL(fileURLWithPath: path), options: .atomic)
                } catch {
                    throw DownloadError(.fileSystem, "cannot save \(path): \(error.localizedDescription)")
                }
            }
        }
    }

    /// `path`, with the extension of `plan`'s container added unless it ends with it.
    static func path(_ path: String, for plan: HLSPlan) -> String {
        path.lowercased().hasSuffix("." + plan.fileExtension) ? path : path + "." + plan.fileExtension
    }

    private static func describe(_ variants: [HLSVariant]) -> String {
        variants.map { variant in
            variant.resolution.map { "\($0.width)x\($0.height) at \(variant.bandwidth) b/s" } ?? "\(variant.bandwidth) b/s"
        }.joined(separator: ", ")
    }
}

/// How ``HLSDownloader`` fetches a stream's playlists, keys and segments: as downloads of
/// its manager (``HLSDownloader/download(from:to:options:until:events:)``), or as a stream
/// job's own transfers (``HLSJobTransfer``).
struct HLSFetcher: Sendable {
    /// Fetches one request to its end (retries, resume and verification included).
    let fetch: @Sendable (DownloadRequest) async throws(DownloadError) -> DownloadResult
    /// Where blocking file work runs.
    let threadPool: NIOThreadPool
    /// How many resources may be in flight at once (the per-host caps bound them further).
    let window: Int
    /// Called with the stream file's size once every file is written and durable, before
    /// any goes into place: throws when they must not (a shared queue's job that another
    /// worker took over).
    var confirm: @Sendable (Int64) async throws(DownloadError) -> Void = { _ in }

    /// Fetches as downloads of `manager`, each taking a slot.
    static func through(_ manager: DownloadManager) -> HLSFetcher {
        HLSFetcher(
            fetch: { request throws(DownloadError) in try await manager.download(request).result },
            threadPool: manager.threadPool, window: max(16, manager.configuration.maxConcurrentDownloads * 4))
    }
}
