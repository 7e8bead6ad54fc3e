// Output of `haul get`
// ===================
//
// Standard output depends on the mode; errors always go to standard error, as
// `haul: failed: <url>: <message>`, one line per failed download, after the summary.
//
// Terminal (stdout is a TTY; not --quiet or --json): a live display redrawn about ten
// times a second: one line per active download (name, bar, percent, bytes, speed, ETA),
// at most 20 of them (fewer on a short screen) and "… and N more", then a total line.
// Finished downloads scroll up as `✓ NAME (SIZE)` or `✗ NAME: MESSAGE`; after an
// interrupt, `- NAME: paused at DONE / TOTAL, partial kept`. Ends with the summary line.
//
// Lines (stdout is not a TTY): one line per state change, then the summary:
//
//     started URL
//     retrying URL: attempt N in 1.3 s: MESSAGE
//     paused URL
//     completed URL -> PATH (12.3 MiB)
//     failed URL: MESSAGE
//     cancelled URL: REASON
//     3 completed, 1 failed, 12.0 MiB in 2.3 s
//
// The summary adds ", N paused" after an interrupt. SIZE and the summary's bytes are
// the sizes of the completed files, in binary units (B, KiB, MiB, GiB, ...).
//
// JSON (--json): NDJSON, one object per line, keys sorted, every string JSON-escaped.
// Every object has:
//
//     event   string  queued | started | progress | retrying | paused | completed |
//                     failed | cancelled | summary
//     time    string  when it was written, ISO 8601 UTC with milliseconds,
//                     e.g. "2025-01-31T09:15:02.123Z"
//
// Every object except `summary` has:
//
//     id      string  the download's ID: its URL as given (normalised by URL parsing)
//
// and, per event:
//
//     queued     (nothing more)
//     started    url          string   the requested URL
//     progress   bytes        integer  bytes on disk, resumed bytes included
//                total        integer  the content's size, or null when unknown
//                speed        integer  smoothed rate in bytes per second
//                eta          number   seconds remaining, or null when unknown
//     retrying   attempt      integer  the number of the retry about to happen (1 = first)
//                code         string   the error code, e.g. "network", "timeout", "httpStatus"
//                reason       string   the error message
//                delay        number   seconds until the retry starts
//     paused     (nothing more; the partial file is kept)
//     completed  path         string   the verified file
//                bytes        integer  its size
//                transferred  integer  bytes received in this run (less after a resume)
//                url          string   the URL the content came from, after redirects
//     failed     code         string   the error code, e.g. "httpStatus", "checksumMismatch",
//                                      "network", "timeout", "duplicate"
//                error        string   the error message
//                status       integer  the HTTP status, or null
//     cancelled  reason       string   e.g. "shutdown", "evicted", "cancelled"
//     summary    completed    integer  downloads that completed and were verified
//                failed       integer  downloads that failed or were cancelled
//                paused       integer  downloads interrupted with their partial file kept
//                bytes        integer  total size of the completed files
//                seconds      number   wall time of the whole command
//                interrupted  boolean  whether SIGINT or SIGTERM stopped the command
//
// Numbers of seconds have three decimals. Progress objects come at most about ten times
// a second per download, and only when `bytes` or `total` changed. On an interrupt, running downloads report `paused`, then
// `cancelled` with reason "shutdown" when the manager shuts down; their partial files
// stay and running the same command again resumes them. `summary` is always last.
//
// Quiet (--quiet): nothing on standard output.

import Foundation
import Haul

/// Shows a `haul get` run: a live terminal display, state-change lines, NDJSON, or
/// nothing. See the comment at the top of this file for the formats.
actor ProgressRenderer {
    /// How to show the run.
    enum Mode: Sendable {
        case live
        case lines
        case json
        case quiet
    }

    /// The outcome of the whole run.
    struct Summary: Sendable {
        var completed = 0
        var failed = 0
        var paused = 0
        var bytes: Int64 = 0
        var elapsed: Duration = .zero
        var interrupted = false
    }

    private enum Status {
        case queued
        case running
        case retrying(until: ContinuousClock.Instant, attempt: Int, reason: String)
        case paused
    }

    private struct Row {
        var name: String
        var status: Status = .queued
        var progress = DownloadProgress()
        var lastBytes = ContinuousClock.now
        var order = 0
    }

    private struct ReportedProgress: Equatable {
        var bytes: Int64
        var total: Int64?
    }

    /// Most download lines the live display shows.
    private static let maxLiveRows = 20

    private let mode: Mode
    private let names: [DownloadID: String]
    private let fileCount: Int
    private let timestamps = ISO8601DateFormatter()
    private var rows: [DownloadID: Row] = [:]
    private var nextOrder = 0
    private var finishedFiles = 0
    private var finishedBytes: Int64 = 0
    private var pendingLines: [String] = []
    private var drawnLines = 0
    private var lastReported: [DownloadID: ReportedProgress] = [:]

    /// A renderer for the downloads of `entries`.
    init(mode: Mode, entries: [InputEntry]) {
        self.mode = mode
        var names: [DownloadID: String] = [:]
        for entry in entries { names[entry.id] = entry.name ?? Self.displayName(for: entry.url) }
        self.names = names
        self.fileCount = names.count
        timestamps.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    }

    // MARK: - Input

    /// Shows one event of the manager.
    func handle(_ managerEvent: DownloadManager.Event) {
        let id = managerEvent.id
        let event = managerEvent.event
        update(id: id, event)
        switch mode {
        case .quiet: return
        case .json: emitJSON(id: id, event)
        case .lines: emitLine(id: id, event)
        case .live: logLive(id: id, event)
        }
    }

    /// Shows a download that failed before the manager took it.
    func rejected(_ entry: InputEntry, code: String, message: String) {
        finishedFiles += 1
        switch mode {
        case .quiet:
            return
        case .json:
            var object = self.object("failed", id: entry.id)
            object["code"] = .string(code)
            object["error"] = .string(message)
            object["status"] = .null
            Console.out(object.rendered() + "\n")
        case .lines:
            Console.out("failed \(entry.url.absoluteString): \(message)\n")
        case .live:
            pendingLines.append("✗ \(names[entry.id] ?? entry.url.absoluteString): \(message)")
        }
    }

    /// Redraws the live display; does nothing in the other modes.
    func tick() {
        guard mode == .live else { return }
        let size = Console.size
        // Keep the live area shorter than the screen: the cursor cannot move up past its top.
        draw(live: liveLines(width: size.columns, maxRows: min(Self.maxLiveRows, size.rows - 3)))
    }

    /// Ends the display and shows the summary.
    func finish(_ summary: Summary) {
        var parts = ["\(summary.completed) completed", "\(summary.failed) failed"]
        if summary.paused > 0 { parts.append("\(summary.paused) paused") }
        let line = parts.joined(separator: ", ") + ", \(Format.bytes(summary.bytes)) in \(Format.elapsed(summary.elapsed))"
        switch mode {
        case .quiet:
            return
        case .json:
            var object = JSONLine()
            object["event"] = .string("summary")
            object["time"] = .string(timestamps.string(from: Date()))
            object["completed"] = .int(Int64(summary.completed))
            object["failed"] = .int(Int64(summary.failed))
            object["paused"] = .int(Int64(summary.paused))
            object["bytes"] = .int(summary.bytes)
            object["seconds"] = .double(Format.seconds(summary.elapsed))
            object["interrupted"] = .bool(summary.interrupted)
            Console.out(object.rendered() + "\n")
        case .lines:
            Console.out(line + "\n")
        case .live:
            let paused = sortedRows().filter { if case .paused = $0.1.status { true } else { false } }
            for (_, row) in paused.prefix(Self.maxLiveRows) {
                pendingLines.append("- \(row.name): paused at \(sizeText(row.progress)), partial kept")
            }
            if paused.count > Self.maxLiveRows {
                pendingLines.append("… and \(paused.count - Self.maxLiveRows) more paused")
            }
            pendingLines.append(line)
            draw(live: [])
        }
    }

    // MARK: - State

    private func update(id: DownloadID, _ event: DownloadEvent) {
        if rows[id] == nil, !event.isTerminal {
            nextOrder += 1
            rows[id] = Row(name: names[id] ?? id.rawValue, order: nextOrder)
        }
        switch event {
        case .queued:
            rows[id]?.status = .queued
        case .started:
            rows[id]?.status = .running
            rows[id]?.lastBytes = .now
        case .progress(let progress):
            rows[id]?.progress = progress
            rows[id]?.lastBytes = .now
            if case .retrying = rows[id]?.status { rows[id]?.status = .running }
        case .retrying(let attempt, let reason, let delay):
            rows[id]?.status = .retrying(until: .now + delay, attempt: attempt, reason: reason.message)
        case .paused:
            rows[id]?.status = .paused
        case .networkLost:
            rows[id]?.status = .paused
        case .networkRestored:
            rows[id]?.status = .queued
        case .completed(let result):
            finishedFiles += 1
            finishedBytes += result.byteCount
            rows[id] = nil
        case .failed:
            finishedFiles += 1
            rows[id] = nil
        case .cancelled(let reason) where reason == .shutdown:
            // After an interrupt, the shutdown ends the paused downloads; their partial
            // files stay, so they still count as paused.
            rows[id]?.status = .paused
        case .cancelled:
            finishedFiles += 1
            rows[id] = nil
        }
    }

    // MARK: - Lines

    private func emitLine(id: DownloadID, _ event: DownloadEvent) {
        let url = id.rawValue
        let line: String
        switch event {
        case .queued, .progress:
            return
        case .started:
            line = "started \(url)"
        case .retrying(let attempt, let reason, let delay):
            line = "retrying \(url): attempt \(attempt) in \(Format.elapsed(delay)): \(reason.message)"
        case .paused:
            line = "paused \(url)"
        case .networkLost(let host):
            line = "network lost \(url): waiting for \(host) to answer"
        case .networkRestored(let host):
            line = "network restored \(url): \(host) answers again"
        case .completed(let result):
            let path = result.fileURL?.path ?? "memory"
            line = "completed \(url) -> \(path) (\(Format.bytes(result.byteCount)))"
        case .failed(let error):
            line = "failed \(url): \(error.message)"
        case .cancelled(let reason):
            if reason == .shutdown { return }
            line = "cancelled \(url): \(reason.rawValue)"
        }
        Console.out(line + "\n")
    }

    // MARK: - JSON

    private func object(_ event: String, id: DownloadID) -> JSONLine {
        var object = JSONLine()
        object["event"] = .string(event)
        object["id"] = .string(id.rawValue)
        object["time"] = .string(timestamps.string(from: Date()))
        return object
    }

    private func emitJSON(id: DownloadID, _ event: DownloadEvent) {
        var object: JSONLine
        switch event {
        case .queued:
            object = self.object("queued", id: id)
        case .started:
            object = self.object("started", id: id)
            object["url"] = .string(id.rawValue)
        case .progress(let progress):
            // The library repeats the last progress when a download ends; say it once.
            let reported = ReportedProgress(bytes: progress.completedBytes, total: progress.totalBytes)
            guard lastReported.updateValue(reported, forKey: id) != reported else { return }
            object = self.object("progress", id: id)
            object["bytes"] = .int(progress.completedBytes)
            object["total"] = progress.totalBytes.map { .int($0) } ?? .null
            object["speed"] = .int(Int64(progress.bytesPerSecond.rounded()))
            object["eta"] = progress.estimatedTimeRemaining.map { .double(Format.seconds($0)) } ?? .null
        case .retrying(let attempt, let reason, let delay):
            object = self.object("retrying", id: id)
            object["attempt"] = .int(Int64(attempt))
            object["code"] = .string(reason.code.description)
            object["reason"] = .string(reason.message)
            object["delay"] = .double(Format.seconds(delay))
        case .paused:
            object = self.object("paused", id: id)
        case .networkLost(let host):
            object = self.object("networkLost", id: id)
            object["host"] = .string(host)
        case .networkRestored(let host):
            object = self.object("networkRestored", id: id)
            object["host"] = .string(host)
        case .completed(let result):
            object = self.object("completed", id: id)
            object["path"] = result.fileURL.map { .string($0.path) } ?? .null
            object["bytes"] = .int(result.byteCount)
            object["transferred"] = .int(result.bytesTransferred)
            object["url"] = .string(result.finalURL.absoluteString)
        case .failed(let error):
            object = self.object("failed", id: id)
            object["code"] = .string(error.code.description)
            object["error"] = .string(error.message)
            object["status"] = error.statusCode.map { .int(Int64($0)) } ?? .null
        case .cancelled(let reason):
            object = self.object("cancelled", id: id)
            object["reason"] = .string(reason.rawValue)
        }
        Console.out(object.rendered() + "\n")
    }

    // MARK: - Live display

    private func logLive(id: DownloadID, _ event: DownloadEvent) {
        let name = names[id] ?? id.rawValue
        switch event {
        case .completed(let result):
            let shown = result.fileURL?.lastPathComponent ?? name
            pendingLines.append("✓ \(shown) (\(Format.bytes(result.byteCount)))")
        case .failed(let error):
            pendingLines.append("✗ \(name): \(error.message)")
        case .cancelled(let reason) where reason != .shutdown:
            pendingLines.append("✗ \(name): cancelled (\(reason.rawValue))")
        default:
            break
        }
    }

    private func sortedRows() -> [(DownloadID, Row)] {
        rows.sorted { $0.value.order < $1.value.order }
    }

    private func liveLines(width: Int, maxRows: Int) -> [String] {
        let now = ContinuousClock.now
        var active: [Row] = []
        var queued = 0
        var paused = 0
        var done = finishedBytes
        var total: Int64? = finishedBytes
        var speed = 0.0
        for (_, row) in sortedRows() {
            done += row.progress.completedBytes
            if let size = row.progress.totalBytes, let sum = total { total = sum + size } else { total = nil }
            switch row.status {
            case .queued: queued += 1
            case .paused: paused += 1; active.append(row)
            case .running, .retrying: active.append(row); speed += currentSpeed(row, now: now)
            }
        }
        let shown = active.prefix(active.count > maxRows ? max(0, maxRows - 1) : maxRows)
        let nameWidth = min(shown.map { $0.name.count }.max() ?? 0, max(10, width * 3 / 10))
        var lines = shown.map { rowLine($0, nameWidth: nameWidth, width: width, now: now) }
        if active.count > shown.count { lines.append("… and \(active.count - shown.count) more") }

        var totalLine = "\(finishedFiles)/\(fileCount) files  "
        totalLine += total.map { "\(Format.bytes(done)) / \(Format.bytes($0))" } ?? Format.bytes(done)
        totalLine += "  \(Format.rate(speed))"
        if let total, speed > 1 {
            totalLine += "  ETA " + Format.eta(.milliseconds(Int64(Double(max(0, total - done)) / speed * 1000)))
        }
        var extras: [String] = []
        if queued > 0 { extras.append("\(queued) queued") }
        if paused > 0 { extras.append("\(paused) paused") }
        if !extras.isEmpty { totalLine += "  (" + extras.joined(separator: ", ") + ")" }
        lines.append(totalLine)
        return lines
    }

    private func currentSpeed(_ row: Row, now: ContinuousClock.Instant) -> Double {
        guard case .running = row.status, now - row.lastBytes < .seconds(2) else { return 0 }
        return row.progress.bytesPerSecond
    }

    private func sizeText(_ progress: DownloadProgress) -> String {
        guard let total = progress.totalBytes else { return Format.bytes(progress.completedBytes) }
        return "\(Format.bytes(progress.completedBytes)) / \(Format.bytes(total))"
    }

    private func rowLine(_ row: Row, nameWidth: Int, width: Int, now: ContinuousClock.Instant) -> String {
        let name = Self.fit(row.name, nameWidth)
        let right: String
        switch row.status {
        case .queued:
            right = "queued"
        case .paused:
            right = "paused  \(sizeText(row.progress))"
        case .retrying(let until, let attempt, let reason):
            let wait = until > now ? Format.eta(until - now) : "now"
            right = "retry \(attempt) in \(wait): \(reason)"
        case .running:
            let progress = row.progress
            let speed = currentSpeed(row, now: now)
            var text = Self.fit(sizeText(progress), 21, alignRight: true) + "  "
            text += Self.fit(Format.rate(speed), 12, alignRight: true)
            if progress.totalBytes != nil {
                let rate = DownloadProgress(
                    completedBytes: progress.completedBytes, totalBytes: progress.totalBytes, bytesPerSecond: speed)
                text += "  ETA " + Self.fit(rate.estimatedTimeRemaining.map(Format.eta) ?? "--", 6)
            }
            guard let fraction = progress.fractionCompleted else {
                right = text
                break
            }
            let percent = Self.fit("\(Int(fraction * 100))%", 4, alignRight: true)
            let barWidth = min(40, width - 1 - nameWidth - 2 - 2 - 1 - percent.count - 2 - text.count)
            guard barWidth >= 5 else {
                right = percent + "  " + text
                break
            }
            let filled = Int(fraction * Double(barWidth))
            let bar = String(repeating: "=", count: filled)
                + (filled < barWidth ? ">" + String(repeating: " ", count: barWidth - filled - 1) : "")
            right = "[\(bar)] \(percent)  \(text)"
        }
        return Self.fit(name + "  " + right, width - 1, pad: false)
    }

    /// Writes the lines that scroll up, then redraws the live area below them.
    private func draw(live: [String]) {
        let width = Console.size.columns
        var out = drawnLines > 0 ? "\r\u{1B}[\(drawnLines)A" : "\r"
        for line in pendingLines + live {
            out += Self.fit(line, width - 1, pad: false) + "\u{1B}[K\n"
        }
        out += "\u{1B}[J"
        pendingLines = []
        drawnLines = live.count
        Console.out(out)
    }

    // MARK: - Helpers

    /// `text` cut with "…" or padded with spaces to `width` characters.
    private static func fit(_ text: String, _ width: Int, alignRight: Bool = false, pad: Bool = true) -> String {
        let width = max(1, width)
        if text.count > width { return String(text.prefix(width - 1)) + "…" }
        guard pad else { return text }
        let padding = String(repeating: " ", count: width - text.count)
        return alignRight ? padding + text : text + padding
    }

    /// What the file will probably be called: the URL's last path component, or its host.
    private static func displayName(for url: URL) -> String {
        let last = url.lastPathComponent
        if !last.isEmpty, last != "/" { return last }
        return url.host ?? url.absoluteString
    }
}
