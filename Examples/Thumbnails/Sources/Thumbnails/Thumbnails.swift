// Many small downloads for a scrolling list: the thumbnails of a list that the user scrolls,
// flings and leaves. Run with no arguments to use a local server, or with image URLs to use
// them as the list's rows.

import Foundation
import Haul
import HaulTestSupport

/// How many rows fit on the screen, and how many are prefetched below it.
let rowsOnScreen = 6
let rowsPrefetched = 6

@main
struct Thumbnails {
    static func main() async throws {
        let arguments = Array(CommandLine.arguments.dropFirst())
        var server: FaultServer?
        let urls: [URL]
        if arguments.isEmpty {
            let local = try await FaultServer.start()
            urls = DemoList.publish(on: local)
            server = local
            print("A local server at \(local.baseURL) serves \(urls.count) rows of thumbnails.")
        } else {
            urls = arguments.map { argument in
                guard let url = URL(string: argument), url.scheme == "http" || url.scheme == "https" else {
                    print("not an http or https URL: \(argument)")
                    exit(2)
                }
                return url
            }
        }

        // The app's caches: images in memory (8 MiB) and on disk (in the app's caches
        // directory), kept and revalidated as their server's Cache-Control says.
        let caches = FileManager.default.temporaryDirectory.appendingPathComponent("thumbnails-cache-\(getpid())")
        defer { try? FileManager.default.removeItem(at: caches) }
        // Bounded slots: at most three images in flight, whatever the list asks for.
        var configuration = DownloadManager.Configuration()
        configuration.cache = ResponseCache.Configuration(directory: caches, memoryCostLimit: 8 << 20)
        configuration.maxConcurrentDownloads = 3
        // A thumbnail is not worth a long wait: one quick retry for a 5xx or a dropped connection.
        configuration.retry = RetryPolicy(maxRetries: 1, baseDelay: .milliseconds(200))
        let manager = DownloadManager(configuration: configuration)
        let list = ScrollingList(urls: urls, manager: manager)

        // Every transfer that takes a slot, as it happens (made before the first download).
        let starts = Task {
            for await event in manager.events(includingProgress: false) {
                if case .started = event.event { await list.transferStarted(event.id) }
            }
        }

        print("\(urls.count) rows, \(rowsOnScreen) on screen, \(rowsPrefetched) prefetched below; 3 slots.\n")
        await list.scroll(to: 0)  // the list appears
        await list.settle(prefetches: false)  // the user looks at the first screen
        await list.scroll(to: 3)  // and scrolls a little: rows 6-8 come on screen
        try await Task.sleep(for: .milliseconds(200))
        let landing = min(30, max(0, urls.count - rowsOnScreen))
        if landing > 3 { await list.scroll(to: landing) }  // a fling: what is above is left behind
        await list.settle(prefetches: true)

        // A full-size image to a disk cache, opened and closed again before it arrived.
        let cache = FileManager.default.temporaryDirectory.appendingPathComponent("thumbnails-\(getpid())")
        try FileManager.default.createDirectory(at: cache, withIntermediateDirectories: true)
        let fullSize = server?.url("/files/full-size.jpg?rate=500000") ?? urls[landing]
        await list.openAndClose(fullSize, cache: cache, after: .milliseconds(300))
        try? FileManager.default.removeItem(at: cache)

        print("\nFirst pass: \(await list.takeTally())")

        // The user scrolls back to the top and through the whole list again: every image
        // that arrived is in memory now; those whose server said `no-cache` are checked
        // with a conditional request (a 304 sends no body).
        print("\nScroll back to the top, then through the whole list.\n")
        await list.browse()
        print("\nSecond pass: \(await list.takeTally())")

        await manager.shutdown()  // ends the events stream too
        await starts.value

        // The app is quit and started again: a new manager on the same cache directory.
        // Memory is empty; the disk tier answers what is still fresh.
        print("\nThe app restarts (a new manager, the same cache directory), and the list is shown again.\n")
        let restarted = DownloadManager(configuration: configuration)
        let again = ScrollingList(urls: urls, manager: restarted)
        await again.browse()
        print("\nAfter the restart: \(await again.takeTally())")
        await restarted.shutdown()

        if let server {
            let avatar = server.requests(path: "/files/avatar.png").count
            print("\nThe server answered \(server.requests().count) requests; avatar.png, shown on rows",
                  DemoList.avatarRows.map(String.init).joined(separator: ", "),
                  "was requested \(avatar) time\(avatar == 1 ? "" : "s").")
            try await server.shutdown()
        }
    }
}

/// The list: which rows are on screen, the task loading each one, the prefetches and a
/// memory cache of the images that arrived.
actor ScrollingList {
    let urls: [URL]
    let manager: DownloadManager
    let started = ContinuousClock.now
    /// The tasks awaiting the images of the rows on screen, as a SwiftUI `.task` on each row
    /// would hold them: cancelled when the row scrolls away.
    private var cells: [Int: Task<Void, Never>] = [:]
    /// The prefetches under way, by row.
    private var prefetches: [Int: (id: DownloadID, task: Task<Void, Never>)] = [:]
    /// Where the images shown came from (the network, the manager's cache in memory or on
    /// disk, or the cache after a 304), since the tally was last taken.
    private var tally: [DownloadResult.Source: Int] = [:]

    init(urls: [URL], manager: DownloadManager) {
        self.urls = urls
        self.manager = manager
    }

    /// Puts row `first` at the top of the screen.
    func scroll(to top: Int) async {
        let first = max(0, min(top, urls.count - rowsOnScreen))
        let screen = first..<min(first + rowsOnScreen, urls.count)
        let ahead = screen.upperBound..<min(screen.upperBound + rowsPrefetched, urls.count)
        log("scroll to rows \(screen.lowerBound)-\(screen.upperBound - 1), prefetch \(describe(ahead))")
        let wanted = Set((screen.lowerBound..<ahead.upperBound).map { urls[$0] })

        // Rows that left the screen: drop their tasks. Each withdraws only its own interest;
        // a transfer stops once nobody wants it (an image shown on another row goes on).
        for (row, task) in cells where !screen.contains(row) {
            task.cancel()
            cells[row] = nil
        }
        // Prefetches that fell out of the window: cancel them by ID, for everyone, unless a
        // row still on screen or ahead shows the same image.
        for (row, prefetch) in prefetches where !screen.contains(row) && !ahead.contains(row) {
            if !wanted.contains(urls[row]) { await manager.cancel(id: prefetch.id) }
            prefetches[row] = nil
        }
        // Rows on screen: the top two first, the rest next. A row whose image is already
        // being prefetched joins that transfer and raises its priority; the prefetch then
        // hands it over (its task withdraws, the row's task still wants the transfer).
        for row in screen where cells[row] == nil {
            await show(row, priority: row - first < 2 ? .veryHigh : .high)
            if let prefetch = prefetches.removeValue(forKey: row) { prefetch.task.cancel() }
        }
        // Rows below the screen, at low priority: they take a slot only when no row on
        // screen waits for one.
        for row in ahead where prefetches[row] == nil && cells[row] == nil {
            await prefetch(row)
        }
    }

    /// Scrolls from the top to the end of the list a screen at a time, waiting on each
    /// screen for its images.
    func browse() async {
        for top in stride(from: 0, to: urls.count, by: rowsOnScreen) {
            await scroll(to: top)
            await settle(prefetches: true)
        }
    }

    /// `12 from the network, 30 from memory, …`, and starts a new tally.
    func takeTally() -> String {
        defer { tally = [:] }
        let words: [(DownloadResult.Source, String)] = [
            (.network, "from the network"), (.memory, "from memory"), (.disk, "from disk"),
            (.revalidated, "after a 304"),
        ]
        return words.map { "\(tally[$0.0, default: 0]) \($0.1)" }.joined(separator: ", ")
    }

    /// Waits until every row on screen (and every prefetch) has its outcome.
    func settle(prefetches includingPrefetches: Bool) async {
        for task in cells.values { await task.value }
        guard includingPrefetches else { return }
        for prefetch in prefetches.values { await prefetch.task.value }
    }

    private func show(_ row: Int, priority: DownloadPriority) async {
        let url = urls[row]
        // What a cell shows at once, with no task: a fresh image in the cache's memory.
        if let image = manager.cache?.freshDataInMemory(for: url) {
            tally[.memory, default: 0] += 1
            log("row \(row): \(size(image.count)) from the memory cache, at once")
            return
        }
        do throws(DownloadError) {
            let handle = try await manager.download(
                DownloadRequest(url: url, destination: .memory(limit: 256 << 10), priority: priority))
            cells[row] = Task {
                do throws(DownloadError) {
                    let result = try await handle.result
                    let image = result.data ?? Data()
                    self.arrived(result)
                    self.log("row \(row): \(self.size(image.count)) shown (\(priority))\(Self.origin(result))")
                } catch {
                    self.log("row \(row): \(Self.explain(error))")
                }
            }
        } catch {
            log("row \(row): \(Self.explain(error))")
        }
    }

    private func prefetch(_ row: Int) async {
        let url = urls[row]
        guard manager.cache?.freshDataInMemory(for: url) == nil else { return }
        do throws(DownloadError) {
            let handle = try await manager.download(
                DownloadRequest(url: url, destination: .memory(limit: 256 << 10), priority: .low))
            prefetches[row] = (handle.id, Task {
                do throws(DownloadError) {
                    let result = try await handle.result
                    self.arrived(result)
                    self.log("row \(row): \(self.size(result.data?.count ?? 0)) prefetched\(Self.origin(result))")
                } catch where error.cancellationReason == .noLongerWanted {
                    // Handed over to the row's own task, which now shows it.
                } catch {
                    self.log("row \(row): prefetch \(Self.explain(error))")
                }
            })
        } catch {
            log("row \(row): prefetch \(Self.explain(error))")
        }
    }

    /// Downloads `url` into `cache` the way a detail view would, and closes the view after
    /// `delay`: its task is cancelled, and since nobody else wants the file and the request
    /// says `.deletePartial`, the partial file goes too.
    func openAndClose(_ url: URL, cache: URL, after delay: Duration) async {
        log("open \(url.lastPathComponent) full size, into a disk cache")
        let handle: DownloadHandle
        do throws(DownloadError) {
            handle = try await manager.download(
                DownloadRequest(
                    url: url, destination: .directory(cache), priority: .veryHigh, whenAbandoned: .deletePartial))
        } catch {
            log("full size: \(Self.explain(error))")
            return
        }
        let view = Task {
            do throws(DownloadError) {
                let result = try await handle.result
                let name = result.fileURL?.lastPathComponent ?? "?"
                self.log("full size: \(self.size(Int(result.byteCount))) saved as \(name)")
            } catch {
                self.log("full size: \(Self.explain(error, gone: "the view closed"))")
            }
        }
        try? await Task.sleep(for: delay)
        log("close the full-size view")
        view.cancel()
        await view.value
        // The handle's events end with the download's last event, once its files are dealt with.
        for await event in handle.events where event.isTerminal {}
        let left = (try? FileManager.default.contentsOfDirectory(atPath: cache.path)) ?? []
        log("disk cache now holds: \(left.isEmpty ? "nothing" : left.sorted().joined(separator: ", "))")
    }

    /// The manager gave a transfer a slot.
    func transferStarted(_ id: DownloadID) {
        let rows = urls.indices.filter { urls[$0].absoluteString == id.rawValue }
        let name = URL(string: id.rawValue)?.lastPathComponent ?? id.rawValue
        let list = rows.map(String.init).joined(separator: ", ")
        let shown = rows.isEmpty ? "" : " (row\(rows.count > 1 ? "s" : "") \(list))"
        log("start \(name)\(shown)")
    }

    private func arrived(_ result: DownloadResult) { tally[result.source, default: 0] += 1 }

    /// ` (from disk)`, ` (after a 304)`: where an image came from, unless the network.
    static func origin(_ result: DownloadResult) -> String {
        switch result.source {
        case .network: ""
        case .memory: " (from memory)"
        case .disk: " (from disk)"
        case .revalidated: " (after a 304)"
        }
    }

    /// What a failed or cancelled load means for the row.
    static func explain(_ error: DownloadError, gone: String = "scrolled away") -> String {
        switch error.code {
        case .cancelled where error.cancellationReason == .noLongerWanted:
            "no longer wanted (\(gone))"
        case .cancelled where error.cancellationReason == .userRequested:
            "cancelled by ID (out of the prefetch window)"
        case .cancelled:
            "cancelled (\(error.cancellationReason?.rawValue ?? "?"))"
        case .httpStatus:
            "failed with DownloadError .httpStatus, statusCode \(error.statusCode ?? 0): \(error.message)"
        default:
            "failed with DownloadError .\(error.code): \(error.message)"
        }
    }

    private func describe(_ rows: Range<Int>) -> String {
        rows.isEmpty ? "nothing" : "rows \(rows.lowerBound)-\(rows.upperBound - 1)"
    }

    private func size(_ bytes: Int) -> String {
        bytes < 1024 ? "\(bytes) B" : String(format: "%.1f KiB", Double(bytes) / 1024)
    }

    private func log(_ line: String) {
        let elapsed = ContinuousClock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        print(String(format: "%5.2f s  ", seconds) + line)
    }
}

/// The rows the local server serves: thumbnails of 6-16 KiB trickled at 40 KB/s (each takes
/// a few tenths of a second, as over a phone's connection), one avatar shown on several rows,
/// one image missing (404) and one forbidden (403). Two rows in three are fresh for an hour
/// (`Cache-Control: max-age=3600`); the others say `no-cache`: a cache checks them with a
/// conditional request each time.
enum DemoList {
    static let count = 48
    static let avatarRows = [1, 4, 9, 31, 34]
    static let missingRow = 5
    static let forbiddenRow = 32

    static func publish(on server: FaultServer) -> [URL] {
        server.setFile("avatar.png", FaultServer.randomBytes(count: 9_000, seed: 99))
        server.setFile("full-size.jpg", FaultServer.randomBytes(count: 2 << 20, seed: 100))
        return (0..<count).map { row in
            let caching = row % 3 == 2 ? "cache_control=no-cache" : "cache_control=max-age%3D3600"
            if avatarRows.contains(row) { return server.url("/files/avatar.png?rate=40000&cache_control=max-age%3D3600") }
            if row == missingRow { return server.url("/files/thumb-\(row).jpg") }
            let bytes = FaultServer.randomBytes(count: 6_144 + row * 997 % 10_240, seed: UInt64(row))
            server.setFile("thumb-\(row).jpg", bytes)
            if row == forbiddenRow { return server.url("/files/thumb-\(row).jpg?fail=403") }
            return server.url("/files/thumb-\(row).jpg?rate=40000&\(caching)")
        }
    }
}
