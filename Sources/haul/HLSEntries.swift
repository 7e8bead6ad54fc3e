import ArgumentParser
import Foundation
import Haul

/// `haul get URL.m3u8`: a stream given as an HLS playlist, downloaded into one playable file
/// by ``HLSDownloader`` with the command's network settings, by a manager of its own (the
/// stream's staging directory, not the journal, is what a later run resumes from).
enum HLSEntries {
    /// Whether a command-line argument's URL is a playlist's (its path ends in `.m3u8` or
    /// `.m3u`).
    static func isPlaylist(_ url: URL) -> Bool {
        let path = url.path.lowercased()
        return path.hasSuffix(".m3u8") || path.hasSuffix(".m3u")
    }

    /// The stream options of `haul get`, checked.
    struct Settings {
        var options: HLSOptions
        /// `-o`: the output's name or path below the directory, when given.
        var output: String?
        var directory: URL
        /// `--hls-variant list`: show each master playlist's variants, download nothing.
        var listsVariants = false
    }

    /// `--hls-variant list`: prints each playlist's variants, one a line (resolution,
    /// bandwidth, average bandwidth, frame rate, codecs, URL; `--json`: an object each);
    /// returns the exit code.
    static func listVariants(_ urls: [URL], settings: Settings, run: RunSettings) async -> Int32 {
        let manager = DownloadManager(
            configuration: run.configuration, eventLoopGroup: ProcessResources.eventLoopGroup,
            threadPool: ProcessResources.threadPool)
        var failed = false
        for url in urls {
            do {
                let variants = try await HLSDownloader(manager: manager).variants(of: url, options: settings.options)
                if variants.isEmpty, run.mode != .json {
                    Console.out("\(url.absoluteString): a media playlist (one stream, no variants)\n")
                }
                for variant in variants {
                    let resolution = variant.resolution.map { "\($0.width)x\($0.height)" }
                    if run.mode == .json {
                        var line = JSONLine()
                        line["playlist"] = .string(url.absoluteString)
                        line["url"] = .string(variant.url.absoluteString)
                        line["bandwidth"] = .int(Int64(variant.bandwidth))
                        if let average = variant.averageBandwidth { line["averageBandwidth"] = .int(Int64(average)) }
                        if let resolution { line["resolution"] = .string(resolution) }
                        if let frameRate = variant.frameRate { line["frameRate"] = .double(frameRate) }
                        if let codecs = variant.codecs { line["codecs"] = .string(codecs) }
                        Console.out(line.rendered() + "\n")
                    } else {
                        let fields = [
                            (resolution ?? "-").padding(toLength: 10, withPad: " ", startingAt: 0),
                            "\(variant.bandwidth) b/s".padding(toLength: 14, withPad: " ", startingAt: 0),
                            variant.frameRate.map { String(format: "%.3g fps", $0) } ?? "-",
                            variant.codecs ?? "-", variant.url.absoluteString,
                        ]
                        Console.out(fields.joined(separator: "  ") + "\n")
                    }
                }
            } catch {
                Console.err("haul: \(url.absoluteString): \(error.message)\n")
                failed = true
            }
        }
        await manager.shutdown()
        return failed ? 1 : 0
    }

    /// Downloads each playlist of `urls` in turn; returns the exit code (0 when every
    /// stream's file is in place, else 1).
    ///
    /// The first Ctrl-C (or SIGTERM) ends a live recording where it is, its file written with
    /// the segments planned; during a playlist that is not live it exits at once (130), the
    /// staged segments kept for the same command to continue. A second one exits at once.
    static func run(_ urls: [URL], settings: Settings, run: RunSettings) async -> Int32 {
        if settings.listsVariants { return await listVariants(urls, settings: settings, run: run) }
        let manager = DownloadManager(
            configuration: run.configuration, eventLoopGroup: ProcessResources.eventLoopGroup,
            threadPool: ProcessResources.threadPool)
        let stop = HLSRecordingStop()
        let live = LiveFlag()
        let signals = SignalHandler(catching: [SIGINT, SIGTERM]) { signal in
            Console.err("\nhaul: interrupted again; exiting without waiting\n")
            exit(DownloadSession.exitCode(forSignal: signal))
        }
        let watcher = Task {
            for await signal in signals.received {
                guard live.value else {
                    Console.err("\nhaul: interrupted; the segments fetched are kept: run the same command again to continue\n")
                    exit(DownloadSession.exitCode(forSignal: signal))
                }
                Console.err("\nhaul: ending the live recording here and writing its file (Ctrl-C again to stop at once)\n")
                stop.finish()
            }
        }
        defer {
            watcher.cancel()
            signals.stop()
        }
        var failed = false
        for url in urls {
            if stop.isFinished {
                // Interrupted: the streams not begun are left.
                await manager.shutdown()
                return DownloadSession.exitCode(forSignal: SIGINT)
            }
            let file = destination(of: url, settings: settings)
            do {
                try FileManager.default.createDirectory(
                    at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
            } catch {
                Console.err("haul: \(url.absoluteString): cannot create \(file.deletingLastPathComponent().path): \(error.localizedDescription)\n")
                failed = true
                continue
            }
            let reporter = Reporter(url: url, mode: run.mode)
            do {
                _ = try await HLSDownloader(manager: manager).download(
                    from: url, to: file, options: settings.options, until: stop
                ) { event in
                    if case .started(let progress) = event { live.value = progress.isLive }
                    reporter.report(event)
                }
            } catch {
                reporter.failed(error)
                failed = true
            }
        }
        await manager.shutdown()
        return failed ? 1 : 0
    }

    /// Where the stream of `url` goes: `-o`, else the playlist's name without its extension
    /// (the library adds `.ts` or `.mp4`), in the output directory.
    static func destination(of url: URL, settings: Settings) -> URL {
        let stem = (url.lastPathComponent as NSString).deletingPathExtension
        let name = settings.output ?? FileNaming.sanitize(stem) ?? "stream"
        return settings.directory.appendingPathComponent(name)
    }

    /// Whether the stream being downloaded is live, for the signal handler.
    final class LiveFlag: @unchecked Sendable {
        private let lock = NSLock()
        private var flag = false

        var value: Bool {
            get { lock.withLock { flag } }
            set { lock.withLock { flag = newValue } }
        }
    }

    /// Shows a stream's progress as `haul get` shows a download's: a line per change on a
    /// terminal (rewritten in place), JSON objects with `--json`, nothing with `--quiet`.
    final class Reporter: Sendable {
        let url: URL
        let mode: ProgressRenderer.Mode

        init(url: URL, mode: ProgressRenderer.Mode) {
            self.url = url
            self.mode = mode
        }

        @Sendable func report(_ event: HLSEvent) {
            switch mode {
            case .quiet:
                return
            case .json:
                var line = JSONLine()
                line["url"] = .string(url.absoluteString)
                switch event {
                case .started(let progress), .progress(let progress):
                    line["event"] = .string(eventName(event))
                    line["file"] = .string(progress.file.path)
                    line["segments"] = .int(Int64(progress.segments))
                    line["segmentsCompleted"] = .int(Int64(progress.segmentsCompleted))
                    line["duration"] = .double(progress.duration)
                    line["durationCompleted"] = .double(progress.durationCompleted)
                    line["bytesReceived"] = .int(progress.bytesReceived)
                    line["live"] = .bool(progress.isLive)
                case .saved(let output):
                    line["event"] = .string("completed")
                    line["file"] = .string(output.file.path)
                    line["segments"] = .int(Int64(output.segments))
                    line["duration"] = .double(output.duration)
                    line["bytes"] = .int(output.byteCount)
                    line["bytesTransferred"] = .int(output.bytesTransferred)
                    if case .rendition(let type, let name, let language) = output.kind {
                        line["rendition"] = .string(type)
                        line["name"] = .string(name)
                        if let language { line["language"] = .string(language) }
                    }
                }
                Console.out(line.rendered() + "\n")
            case .live, .lines:
                switch event {
                case .started(let progress), .progress(let progress):
                    let text =
                        "\(progress.file.lastPathComponent): \(progress.segmentsCompleted)/\(progress.segments) segments, "
                        + "\(seconds(progress.durationCompleted))/\(seconds(progress.duration)) s"
                        + (progress.isLive ? " (live)" : "")
                    if mode == .live {
                        Console.out("\r\u{1B}[K" + text)
                    } else if case .started = event {
                        Console.out(text + "\n")
                    }
                case .saved(let output):
                    Console.out(
                        (mode == .live ? "\r\u{1B}[K" : "")
                            + "saved \(output.file.path) (\(output.segments) segments, \(seconds(output.duration)) s, \(output.byteCount) bytes)\n"
                    )
                }
            }
        }

        func failed(_ error: DownloadError) {
            if mode == .json {
                var line = JSONLine()
                line["event"] = .string("failed")
                line["url"] = .string(url.absoluteString)
                line["code"] = .string(error.code.description)
                line["message"] = .string(error.message)
                Console.out(line.rendered() + "\n")
            } else if mode == .live {
                Console.out("\n")
            }
            // Messages about a playlist start with its URL; a fetch's do not.
            let message = error.message.hasPrefix("http://") || error.message.hasPrefix("https://")
                ? error.message : "\(url.absoluteString): \(error.message)"
            Console.err("haul: \(message)\n")
        }

        private func eventName(_ event: HLSEvent) -> String {
            if case .started = event { "started" } else { "progress" }
        }

        private func seconds(_ value: Double) -> String { String(format: "%.1f", value) }
    }
}
