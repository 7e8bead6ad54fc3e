// Output of `haul get` and `haul resume`
// =====================================
//
// Standard output depends on the mode; errors always go to standard error, after the
// summary:
//
//     haul: failed: <url>: <message>          one line per failed download (at most
//                                             10,000, then "… and N more failures")
//     haul: disk full: partial downloads kept; free some space and run 'haul resume'
//     haul: N downloads paused; partial downloads kept, run 'haul resume' to finish
//     haul: interrupted; partial downloads kept, run 'haul resume' (or the same command) to resume
//
// Terminal (stdout is a TTY; not --quiet or --json): a live display redrawn about ten
// times a second: one line per active download (name, bar, percent, bytes, speed, ETA;
// or "retry N in 3s: MESSAGE", "paused", "waiting for HOST"), at most 20 of them (fewer
// on a short screen) and "… and N more", then a total line:
//
//     12/2000 files  3.4 MiB  1.2 MiB/s  (16 running, 1972 queued, 1 paused, 2 waiting for network)
//
// Queued downloads have no line of their own, so a list of 100,000 URLs shows the same
// few lines. The total size and ETA appear once every remaining download's size is known.
// Finished downloads scroll up as `✓ NAME (SIZE)` or `✗ NAME: MESSAGE`; downloads left
// paused as `- NAME: paused at DONE / TOTAL, partial kept`. Ends with the summary line.
//
// Lines (stdout is not a TTY): one line per state change, then the summary:
//
//     started URL
//     attached URL: run by haul process PID on HOST; following it
//     retrying URL: attempt N in 1.3 s: MESSAGE
//     paused URL
//     waiting URL: HOST cannot be reached; resumes when it answers
//     network restored URL: HOST answers again
//     completed URL -> PATH (12.3 MiB)
//     unchanged URL -> PATH (12.3 MiB)
//     completed URL -> PATH (12.3 MiB, from the cache)             (--cache, fresh: no request)
//     completed URL -> PATH (12.3 MiB, from the cache after a 304) (--cache, revalidated)
//     failed URL: MESSAGE
//     cancelled URL: REASON
//     3 completed, 1 unchanged, 1 failed: 12.0 MiB transferred in 2.3 s (5.2 MiB/s), 30.0 MiB reused
//
// `unchanged` is a download completed before whose server said it has not changed (a 304):
// nothing was fetched. The summary counts files completed, unchanged (shown when there are
// any), failed, then ", N paused" when downloads are left paused (after an interrupt, a
// `haul pause` or a full disk), and ", N run by another process" for downloads another
// live haul runs, left to it because of --no-wait. Then the bytes that came over the
// network in this run, by every download (paused and failed ones too), the time, the speed
// of those bytes, and the bytes of completed files that a resume found already there.
// SIZE is the file's size. Sizes are in binary units (B, KiB, MiB, GiB, ...). When
// `haul resume` finds nothing to do it prints `nothing to resume` instead.
//
// JSON (--json): NDJSON, one object per line, keys sorted, every string JSON-escaped.
// Every object has:
//
//     event   string  queued | attached | started | progress | retrying | paused |
//                     networkLost | networkRestored | completed | failed | cancelled |
//                     summary
//     time    string  when it was written, ISO 8601 UTC with milliseconds,
//                     e.g. "2025-01-31T09:15:02.123Z"
//
// Every object except `summary` has:
//
//     id      string  the download's ID: its URL as given (normalised by URL parsing,
//                     without user info: a password never appears in any event)
//
// and, per event:
//
//     queued           (nothing more)
//     attached         pid          integer  another live haul process runs this download:
//                      host         string   its PID and host; this one follows its progress
//                                            (at its checkpoints) and its end from the journal
//     started          url          string   the requested URL
//     progress         bytes        integer  bytes on disk, resumed bytes included
//                      total        integer  the content's size, or null when unknown
//                      speed        integer  smoothed rate in bytes per second
//                      eta          number   seconds remaining, or null when unknown
//     retrying         attempt      integer  the number of the retry about to happen (1 = first)
//                      code         string   the error code, e.g. "network", "timeout", "httpStatus"
//                      reason       string   the error message
//                      delay        number   seconds until the retry starts
//     paused           (nothing more; the partial file is kept)
//     networkLost      host         string   the host that cannot be reached; the download
//                                            waits, without using up retries, until it answers
//     networkRestored  host         string   the host answers again; the download queues again
//     completed        path         string   the verified file
//                      bytes        integer  its size
//                      transferred  integer  bytes received in this run (less after a resume)
//                      unchanged    boolean  completed before and not changed since (a 304):
//                                            nothing was fetched
//                      url          string   the URL the content came from, after redirects
//                      from         string   where the answer came from: "network", or with
//                                            --cache "disk" (a fresh cached response, no
//                                            request), "memory", or "revalidated" (a cached
//                                            response the server said is current: a 304)
//     failed           code         string   the error code, e.g. "httpStatus", "checksumMismatch",
//                                            "network", "timeout", "diskFull", "duplicate",
//                                            "insecureRedirect" (https redirected to http, refused
//                                            without --allow-insecure-redirects),
//                                            "unusableRedirect" (to ftp:, file: or no Location),
//                                            "credentialsRequired" (haul resume of a download whose
//                                            credentials the journal does not store: it stays
//                                            paused and nothing is sent)
//                      error        string   the error message
//                      status       integer  the HTTP status, or null
//     cancelled        reason       string   e.g. "shutdown", "evicted", "cancelled"
//     summary          completed    integer  downloads that completed and were verified, with
//                                            content fetched in this run
//                      unchanged    integer  downloads completed before and not changed since
//                      failed       integer  downloads that failed or were cancelled
//                      paused       integer  downloads left paused with their partial file kept
//                      elsewhere    integer  downloads another live haul runs, not followed
//                                            (--no-wait); also counted in failed
//                      bytes        integer  total size of the completed files
//                      transferred  integer  bytes received over the network in this run
//                      reused       integer  bytes of the completed files a resume found there
//                      seconds      number   wall time of the whole command
//                      interrupted  boolean  whether SIGINT or SIGTERM stopped the command
//
// Numbers of seconds have three decimals. Progress objects come at most about ten times
// a second per download, and only when `bytes` or `total` changed. Downloads paused by an
// interrupt or by `haul pause` report `paused`, then `cancelled` with reason "shutdown"
// when the command ends; their partial files stay and `haul resume` continues them.
// `summary` is always last (also when `haul resume` finds nothing to do: all zeros).
//
// Quiet (--quiet): nothing on standard output.

import Foundation
import Haul

/// Shows a `haul get` or `haul resume` run: a live terminal display, state-change lines,
/// NDJSON, or nothing. See the comment at the top of this file for the formats.
///
/// It keeps state only for downloads that are active (started and not yet finished), so
/// its memory does not grow with the number of downloads queued.
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
        var unchanged = 0
        var failed = 0
        var paused = 0
        /// Downloads another process runs, not followed (`--no-wait`); also in `failed`.
        var elsewhere = 0
        /// The sizes of the completed files.
        var bytes: Int64 = 0
        /// Bytes received over the network in this run.
        var transferred: Int64 = 0
        /// Bytes of the completed files that a resume found already there.
        var reused: Int64 = 0
        var elapsed: Duration = .zero
        var interrupted = false
    }

    private enum Status {
        case running
        case retrying(until: ContinuousClock.Instant, attempt: Int, reason: String)
        case paused
        case waiting(host: String)
    }

    private struct Row {
        var name: String
        var status: Status = .running
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
    private let nameLookup: @Sendable (DownloadID) -> String?
    private var expected = 0
    private var rejectedCount = 0
    private var rows: [DownloadID: Row] = [:]
    private var nextOrder = 0
    private var pendingLines: [String] = []
    private var drawnLines = 0
    private var lastReported: [DownloadID: ReportedProgress] = [:]

    /// A renderer; `nameLookup` gives a download's file name for the live display (it is
    /// asked once per download that starts, and only in live mode).
    init(mode: Mode, nameLookup: @escaping @Sendable (DownloadID) -> String?) {
        self.mode = mode
        self.nameLookup = nameLookup
    }

    // MARK: - Input

    /// How many downloads the run has in all, for the live total line.
    func expect(_ count: Int) {
        expected = count
    }

    /// Shows one event of the manager.
    func handle(_ managerEvent: DownloadManager.Event) {
        let id = managerEvent.id
        let event = managerEvent.event
        if mode == .live { update(id: id, event) }
        switch mode {
        case .quiet: return
        case .json: emitJSON(id: id, event)
        case .lines: emitLine(id: id, event)
        case .live: logLive(id: id, event)
        }
    }

    /// Shows a download that failed before the manager took it.
    func rejected(id: DownloadID, name: String, code: String, message: String) {
        rejectedCount += 1
        switch mode {
        case .quiet:
            return
        case .json:
            var object = self.object("failed", id: id)
            object["code"] = .string(code)
            object["error"] = .string(message)
            object["status"] = .null
            Console.out(object.rendered() + "\n")
        case .lines:
            Console.out("failed \(id.rawValue): \(message)\n")
        case .live:
            pendingLines.append("✗ \(name): \(message)")
        }
    }

    /// Redraws the live display with the manager's `progress`; does nothing in the other modes.
    func tick(_ progress: AggregateProgress) {
        guard mode == .live else { return }
        let size = Console.size
        // Keep the live area shorter than the screen: the cursor cannot move up past its top.
        draw(live: liveLines(progress, width: size.columns, maxRows: min(Self.maxLiveRows, size.rows - 3)))
    }

    /// Ends the display and shows the summary.
    func finish(_ summary: Summary) {
        switch mode {
        case .quiet:
            return
        case .json:
            emitSummary(summary)
        case .lines:
            Console.out(Self.summaryLine(summary) + "\n")
        case .live:
            let paused = sortedRows().filter { if case .paused = $0.1.status { true } else { false } }
            for (_, row) in paused.prefix(Self.maxLiveRows) {
                pendingLines.append("- \(row.name): paused at \(sizeText(row.progress)), partial kept")
            }
            if paused.count > Self.maxLiveRows {
                pendingLines.append("… and \(paused.count - Self.maxLiveRows) more paused")
            }
            pendingLines.append(Self.summaryLine(summary))
            draw(live: [])
        }
    }

    /// `3 completed, 1 unchanged, 1 failed: 12.0 MiB transferred in 2.3 s (5.2 MiB/s), 30.0 MiB reused`.
    static func summaryLine(_ summary: Summary) -> String {
        var parts = ["\(summary.completed) completed"]
        if summary.unchanged > 0 { parts.append("\(summary.unchanged) unchanged") }
        parts.append("\(summary.failed) failed")
        if summary.paused > 0 { parts.append("\(summary.paused) paused") }
        if summary.elsewhere > 0 { parts.append("\(summary.elsewhere) run by another process") }
        var moved = "\(Format.bytes(summary.transferred)) transferred in \(Format.elapsed(summary.elapsed))"
        let seconds = Format.seconds(summary.elapsed)
        if summary.transferred > 0, seconds > 0 {
            moved += " (\(Format.bytes(Int64(Double(summary.transferred) / seconds)))/s)"
        }
        if summary.reused > 0 { moved += ", \(Format.bytes(summary.reused)) reused" }
        return parts.joined(separator: ", ") + ": " + moved
    }

    /// Ends a run that had nothing to do: `message` on a terminal or in lines, an all-zero
    /// summary in JSON.
    func nothing(_ message: String) {
        switch mode {
        case .quiet:
            return
        case .json:
            emitSummary(Summary())
        case .lines:
            Console.out(message + "\n")
        case .live:
            pendingLines.append(message)
            draw(live: [])
        }
    }

    // MARK: - State (live mode)

    private func update(id: DownloadID, _ event: DownloadEvent) {
        switch event {
        case .queued:
            // Back in the queue (or never started): no line until it starts.
            rows[id] = nil
            return
        case .completed, .failed:
            rows[id] = nil
            return
        case .cancelled(let reason) where reason == .shutdown:
            // The shutdown at the end keeps the partial files: these downloads stay paused.
            if rows[id] != nil { rows[id]?.status = .paused }
            return
        case .cancelled:
            rows[id] = nil
            return
        default:
            break
        }
        if rows[id] == nil {
            nextOrder += 1
            rows[id] = Row(name: nameLookup(id) ?? Self.displayName(for: id), order: nextOrder)
        }
        switch event {
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
        case .networkLost(let host):
            rows[id]?.status = .waiting(host: host)
        case .attached:
            rows[id]?.status = .running
            rows[id]?.lastBytes = .now
        case .networkRestored, .queued, .completed, .failed, .cancelled, .sourceDropped, .deltaPrepared:
            break
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
        case .attached(let owner):
            line = "attached \(url): run by \(owner); following it"
        case .retrying(let attempt, let reason, let delay):
            line = "retrying \(url): attempt \(attempt) in \(Format.elapsed(delay)): \(reason.message)"
        case .sourceDropped(let source, let reason):
            line = "source dropped \(url): \(source.absoluteString): \(reason.message)"
        case .deltaPrepared(let report):
            line =
                "seeded \(url): \(Format.bytes(report.reusedBytes)) of \(Format.bytes(report.length)) reused from local files, \(Format.bytes(report.missingBytes)) to fetch in \(report.missingRanges) ranges (scanned \(Format.bytes(report.scannedBytes)) in \(Format.elapsed(report.duration)))"
        case .paused:
            line = "paused \(url)"
        case .networkLost(let host):
            line = "waiting \(url): \(host) cannot be reached; resumes when it answers"
        case .networkRestored(let host):
            line = "network restored \(url): \(host) answers again"
        case .completed(let result):
            let path = result.savedAt ?? "memory"
            // A qualified ID says where already: the path says it in full.
            let source = JobIdentity.url(of: url)
            line = "\(result.isUnchanged ? "unchanged" : "completed") \(source) -> \(path) (\(Format.bytes(result.byteCount))\(Self.cacheNote(result)))"
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
        object["time"] = .string(UTCDateText.rfc3339(Date()))
        return object
    }

    private func emitSummary(_ summary: Summary) {
        var object = JSONLine()
        object["event"] = .string("summary")
        object["time"] = .string(UTCDateText.rfc3339(Date()))
        object["completed"] = .int(Int64(summary.completed))
        object["unchanged"] = .int(Int64(summary.unchanged))
        object["failed"] = .int(Int64(summary.failed))
        object["paused"] = .int(Int64(summary.paused))
        object["elsewhere"] = .int(Int64(summary.elsewhere))
        object["bytes"] = .int(summary.bytes)
        object["transferred"] = .int(summary.transferred)
        object["reused"] = .int(summary.reused)
        object["seconds"] = .double(Format.seconds(summary.elapsed))
        object["interrupted"] = .bool(summary.interrupted)
        Console.out(object.rendered() + "\n")
    }

    private func emitJSON(id: DownloadID, _ event: DownloadEvent) {
        var object: JSONLine
        switch event {
        case .queued:
            object = self.object("queued", id: id)
        case .started:
            object = self.object("started", id: id)
            object["url"] = .string(id.rawValue)
        case .attached(let owner):
            object = self.object("attached", id: id)
            object["pid"] = .int(Int64(owner.pid))
            object["host"] = .string(owner.host)
        case .progress(let progress):
            // The library repeats the last progress when a download ends; say it once.
            let reported = ReportedProgress(bytes: progress.completedBytes, total: progress.totalBytes)
            guard lastReported.updateValue(reported, forKey: id) != reported else { return }
            object = self.object("progress", id: id)
            object["bytes"] = .int(progress.completedBytes)
            object["total"] = progress.totalBytes.map { .int($0) } ?? .null
            object["speed"] = .int(Int64(progress.bytesPerSecond.rounded()))
            object["eta"] = progress.estimatedTimeRemaining.map { .double(Format.seconds($0)) } ?? .null
            if let limit = progress.limit { object["limit"] = .int(Int64(limit)) }
        case .retrying(let attempt, let reason, let delay):
            object = self.object("retrying", id: id)
            object["attempt"] = .int(Int64(attempt))
            object["code"] = .string(reason.code.description)
            object["reason"] = .string(reason.message)
            object["delay"] = .double(Format.seconds(delay))
        case .deltaPrepared(let report):
            object = self.object("deltaPrepared", id: id)
            object["length"] = .int(report.length)
            object["reused"] = .int(report.reusedBytes)
            object["missing"] = .int(report.missingBytes)
            object["ranges"] = .int(Int64(report.missingRanges))
            object["scanned"] = .int(report.scannedBytes)
            object["seconds"] = .double(Format.seconds(report.duration))
        case .sourceDropped(let source, let reason):
            object = self.object("sourceDropped", id: id)
            object["source"] = .string(source.absoluteString)
            object["code"] = .string(reason.code.description)
            object["reason"] = .string(reason.message)
        case .paused:
            object = self.object("paused", id: id)
        case .networkLost(let host):
            object = self.object("networkLost", id: id)
            object["host"] = .string(host)
        case .networkRestored(let host):
            object = self.object("networkRestored", id: id)
            object["host"] = .string(host)
        case .completed(let result):
            lastReported[id] = nil
            object = self.object("completed", id: id)
            object["path"] = result.savedAt.map { .string($0) } ?? .null
            object["bytes"] = .int(result.byteCount)
            object["transferred"] = .int(result.bytesTransferred)
            object["unchanged"] = .bool(result.isUnchanged)
            object["url"] = .string(result.finalURL.absoluteString)
            object["from"] = .string(result.source.rawValue)
        case .failed(let error):
            lastReported[id] = nil
            object = self.object("failed", id: id)
            object["code"] = .string(error.code.description)
            object["error"] = .string(error.message)
            object["status"] = error.statusCode.map { .int(Int64($0)) } ?? .null
        case .cancelled(let reason):
            lastReported[id] = nil
            object = self.object("cancelled", id: id)
            object["reason"] = .string(reason.rawValue)
        }
        Console.out(object.rendered() + "\n")
    }

    /// `, from the cache` or `, revalidated`: how a download the cache answered is shown.
    static func cacheNote(_ result: DownloadResult) -> String {
        switch result.source {
        case .network: ""
        case .memory, .disk: ", from the cache"
        case .revalidated: ", from the cache after a 304"
        }
    }

    // MARK: - Live display

    private func logLive(id: DownloadID, _ event: DownloadEvent) {
        switch event {
        case .completed(let result):
            let shown = result.fileURL?.lastPathComponent ?? Self.displayName(for: id)
            pendingLines.append(
                "✓ \(shown) (\(Format.bytes(result.byteCount))\(result.isUnchanged ? ", unchanged" : "")\(Self.cacheNote(result)))")
        case .failed(let error):
            pendingLines.append("✗ \(liveName(id)): \(error.message)")
        case .attached(let owner):
            pendingLines.append("↪ \(liveName(id)): run by \(owner); following it")
        case .cancelled(let reason) where reason != .shutdown:
            pendingLines.append("✗ \(liveName(id)): cancelled (\(reason.rawValue))")
        default:
            break
        }
    }

    /// The name a finishing download had on screen (its row is gone by now), else a lookup.
    private func liveName(_ id: DownloadID) -> String {
        nameLookup(id) ?? Self.displayName(for: id)
    }

    private func sortedRows() -> [(DownloadID, Row)] {
        rows.sorted { $0.value.order < $1.value.order }
    }

    private func liveLines(_ progress: AggregateProgress, width: Int, maxRows: Int) -> [String] {
        let now = ContinuousClock.now
        var active: [Row] = []
        var speed = 0.0
        for (_, row) in sortedRows() {
            active.append(row)
            speed += currentSpeed(row, now: now)
        }
        let shown = active.prefix(active.count > maxRows ? max(0, maxRows - 1) : maxRows)
        let nameWidth = min(shown.map { $0.name.count }.max() ?? 0, max(10, width * 3 / 10))
        var lines = shown.map { rowLine($0, nameWidth: nameWidth, width: width, now: now) }
        if active.count > shown.count { lines.append("… and \(active.count - shown.count) more") }

        let finished = progress.completed + progress.failed + rejectedCount
        let total = max(expected, finished + progress.queued + progress.running + progress.paused + progress.waiting)
        // Downloads not yet taken from the journal have no size yet: show a total only when
        // every remaining download is in the manager.
        let notAdmitted = total - finished - progress.queued - progress.running - progress.paused - progress.waiting
        let queued = progress.queued + max(0, notAdmitted)

        var totalLine = "\(finished)/\(total) files  "
        if notAdmitted <= 0, let size = progress.totalBytes {
            totalLine += "\(Format.bytes(progress.completedBytes)) / \(Format.bytes(size))"
        } else {
            totalLine += Format.bytes(progress.completedBytes)
        }
        totalLine += "  \(Format.rate(speed))"
        if notAdmitted <= 0, let size = progress.totalBytes, speed > 1 {
            let remaining = Double(max(0, size - progress.completedBytes)) / speed
            totalLine += "  ETA " + Format.eta(.milliseconds(Int64(remaining * 1000)))
        }
        var extras: [String] = []
        if progress.running > 0 { extras.append("\(progress.running) running") }
        if queued > 0 { extras.append("\(queued) queued") }
        if progress.paused > 0 { extras.append("\(progress.paused) paused") }
        if progress.waiting > 0 { extras.append("\(progress.waiting) waiting for network") }
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
        case .paused:
            right = "paused  \(sizeText(row.progress))"
        case .waiting(let host):
            right = "waiting for \(host)  \(sizeText(row.progress))"
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
    static func fit(_ text: String, _ width: Int, alignRight: Bool = false, pad: Bool = true) -> String {
        let width = max(1, width)
        if text.count > width { return String(text.prefix(width - 1)) + "…" }
        guard pad else { return text }
        let padding = String(repeating: " ", count: width - text.count)
        return alignRight ? padding + text : text + padding
    }

    /// What the file will probably be called: the URL's last path component, or its host.
    static func displayName(for url: URL) -> String {
        let last = url.lastPathComponent
        if !last.isEmpty, last != "/" { return last }
        return url.host ?? url.absoluteString
    }

    /// ``displayName(for:)-(URL)`` for an ID that is a URL, or a URL and where it goes
    /// (`URL -> PATH`: the path's file name, when it has one); else the ID itself.
    static func displayName(for id: DownloadID) -> String {
        let url = JobIdentity.url(of: id.rawValue)
        if url.endIndex != id.rawValue.endIndex {
            let path = id.rawValue[url.endIndex...].dropFirst(JobIdentity.separator.count)
            if !path.hasSuffix("/") { return PathText.lastComponent(String(path)) }
        }
        return URL(string: String(url)).map { displayName(for: $0) } ?? id.rawValue
    }
}
