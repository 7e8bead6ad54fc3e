import Foundation
import Haul

// Output of `haul sync`
// =====================
//
// Errors go to standard error: `haul: sync failed: MESSAGE` when the whole sync fails
// (manifest unreachable or invalid, a symbolic link in the way, another sync running),
// and `haul: failed: PATH: MESSAGE` per file that could not be synced.
//
// Lines (stdout is not a TTY) and terminal modes print, in order:
//
//     [1/5] fetch-manifest
//     manifest VERSION: N files                    (", not modified" after a 304)
//     [2/5] plan
//     plan: 2 to download (24.0 KiB), 1 to update (12.0 KiB), 3 to delete (1.0 KiB), 97 unchanged (1.2 MiB)
//     [3/5] transfer
//     downloaded PATH (SIZE)  |  updated PATH (SIZE)  |  deleted PATH
//     [4/5] verify
//     [5/5] commit
//     synced: 2 downloaded (24.0 KiB), 1 updated (12.0 KiB), 3 deleted (1.0 KiB), 97 unchanged (1.2 MiB); 36.0 KiB transferred in 0.4 s
//
// A terminal also gets a status line, redrawn ten times a second during the transfer:
// `  12/40 files  3.4 MiB / 10.0 MiB  1.2 MiB/s`. With --dry-run the plan is followed by
// one line per change (`download PATH (SIZE)`, `update PATH (SIZE)`, `delete PATH`,
// `blocked PATH: REASON`, `extraneous PATH (kept; --delete removes it)`) and
// `dry run: N changes` or `dry run: up to date`; nothing else happens.
//
// JSON (--json): NDJSON, keys sorted, with `event` and `time` (ISO 8601 UTC) in every
// object:
//
//     stage       stage: fetch-manifest | plan | transfer | verify | commit
//     manifest    version, files (count), notModified (bool)
//     plan        download, update, delete, unchanged (counts); downloadBytes, updateBytes,
//                 deleteBytes, unchangedBytes; blocked (count)
//     change      (dry run only) path, action: download | update | delete | blocked | extraneous
//     file        path, action: download | update, bytes
//     deleted     path
//     failed      path, message, code
//     summary     downloaded, updated, deleted, unchanged (counts) and downloadedBytes,
//                 updatedBytes, deletedBytes, unchangedBytes, transferredBytes, reusedBytes
//                 (of files updated by delta, from their old versions); failed
//                 (count), matches (bool), dryRun (bool), seconds; or, when the whole sync
//                 failed: error (message), code

/// Shows a sync's events on standard output and errors on standard error.
// Called from the syncing task and the ticker: the mutable state is behind `lock`.
final class SyncRenderer: @unchecked Sendable {
    private struct State {
        var filesDone = 0
        var filesToTransfer = 0
        var statusShown = false
        var inTransfer = false
    }

    private let mode: ProgressRenderer.Mode
    private let lock = NSLock()
    private var unsafeState = State()

    init(mode: ProgressRenderer.Mode) {
        self.mode = mode
    }

    private func withState<T>(_ body: (inout State) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&unsafeState)
    }

    func handle(_ event: SyncEvent) {
        switch event {
        case .stage(let stage):
            let number = (SyncStage.allCases.firstIndex(of: stage) ?? 0) + 1
            withState { $0.inTransfer = stage == .transfer }
            text("[\(number)/\(SyncStage.allCases.count)] \(stage.rawValue)")
            json("stage", ["stage": .string(stage.rawValue)])
        case .manifest(let version, let count, let notModified):
            text("manifest \(version): \(count) files\(notModified ? ", not modified" : "")")
            json(
                "manifest", ["version": .string(version), "files": .int(Int64(count)), "notModified": .bool(notModified)])
        case .planned(let plan):
            withState { $0.filesToTransfer = plan.count(.download) + plan.count(.update) }
            text("plan: " + Self.describe(plan))
            json(
                "plan",
                [
                    "download": .int(Int64(plan.count(.download))), "downloadBytes": .int(plan.bytes(.download)),
                    "update": .int(Int64(plan.count(.update))), "updateBytes": .int(plan.bytes(.update)),
                    "delete": .int(Int64(plan.count(.delete))), "deleteBytes": .int(plan.bytes(.delete)),
                    "unchanged": .int(Int64(plan.unchangedCount)), "unchangedBytes": .int(plan.unchangedBytes),
                    "blocked": .int(Int64(plan.blocked.count)),
                ])
        case .fileSynced(let path, let action, let bytes):
            withState { $0.filesDone += 1 }
            text("\(action == .download ? "downloaded" : "updated") \(path) (\(Format.bytes(bytes)))")
            json("file", ["path": .string(path), "action": .string(action.rawValue), "bytes": .int(bytes)])
        case .fileFailed(let path, let error):
            withState { $0.filesDone += 1 }
            if mode != .json { Console.err("haul: failed: \(path): \(error.message)\n") }
            json("failed", ["path": .string(path), "message": .string(error.message), "code": .string(error.code.description)])
        case .deleted(let path):
            text("deleted \(path)")
            json("deleted", ["path": .string(path)])
        case .finished(let summary):
            if summary.dryRun { showDryRun(summary.plan) }
        }
    }

    /// Redraws the status line during the transfer (terminal mode only).
    func tick(_ progress: AggregateProgress) {
        guard mode == .live else { return }
        let line: String? = withState { state in
            guard state.inTransfer, state.filesToTransfer > 0 else { return nil }
            state.statusShown = true
            var line = "  \(state.filesDone)/\(state.filesToTransfer) files  \(Format.bytes(progress.completedBytes))"
            if let total = progress.totalBytes, total > 0 { line += " / \(Format.bytes(total))" }
            return line + "  \(Format.rate(progress.bytesPerSecond))"
        }
        if let line { Console.out("\r\u{1B}[2K" + line) }
    }

    func finish(_ outcome: Result<SyncSummary, DownloadError>, elapsed: Duration) {
        clearStatus()
        switch outcome {
        case .success(let summary):
            if !summary.dryRun {
                let tally = [
                    "\(summary.downloaded.files) downloaded (\(Format.bytes(summary.downloaded.bytes)))",
                    "\(summary.updated.files) updated (\(Format.bytes(summary.updated.bytes)))",
                    "\(summary.deleted.files) deleted (\(Format.bytes(summary.deleted.bytes)))",
                    "\(summary.unchanged.files) unchanged (\(Format.bytes(summary.unchanged.bytes)))",
                ].joined(separator: ", ")
                let verdict = summary.matchesManifest ? "synced" : "not synced (\(summary.failures.count) failed)"
                let reused =
                    summary.bytesReused > 0 ? ", \(Format.bytes(summary.bytesReused)) reused from old versions (zsync)" : ""
                text(
                    "\(verdict): \(tally); \(Format.bytes(summary.bytesTransferred)) transferred\(reused) in \(Format.elapsed(elapsed))")
            }
            for blocked in summary.plan.blocked where mode != .json && !summary.dryRun {
                Console.err("haul: blocked: \(blocked.path): \(blocked.reason)\n")
            }
            json(
                "summary",
                [
                    "downloaded": .int(Int64(summary.downloaded.files)), "downloadedBytes": .int(summary.downloaded.bytes),
                    "updated": .int(Int64(summary.updated.files)), "updatedBytes": .int(summary.updated.bytes),
                    "deleted": .int(Int64(summary.deleted.files)), "deletedBytes": .int(summary.deleted.bytes),
                    "unchanged": .int(Int64(summary.unchanged.files)), "unchangedBytes": .int(summary.unchanged.bytes),
                    "transferredBytes": .int(summary.bytesTransferred), "reusedBytes": .int(summary.bytesReused),
                    "failed": .int(Int64(summary.failures.count)),
                    "matches": .bool(summary.matchesManifest), "dryRun": .bool(summary.dryRun),
                    "seconds": .double(Format.seconds(elapsed)),
                ])
        case .failure(let error):
            if mode != .json { Console.err("haul: sync failed: \(error.message)\n") }
            json(
                "summary",
                [
                    "error": .string(error.message), "code": .string(error.code.description),
                    "matches": .bool(false), "seconds": .double(Format.seconds(elapsed)),
                ])
        }
    }

    private func showDryRun(_ plan: SyncPlan) {
        for change in plan.changes {
            let size = change.action == .delete ? "" : " (\(Format.bytes(change.size)))"
            text("\(change.action.rawValue) \(change.path)\(size)")
            json("change", ["path": .string(change.path), "action": .string(change.action.rawValue)])
        }
        for blocked in plan.blocked {
            text("blocked \(blocked.path): \(blocked.reason)")
            json("change", ["path": .string(blocked.path), "action": .string("blocked"), "message": .string(blocked.reason)])
        }
        for path in plan.extraneousKept {
            text("extraneous \(path) (kept; --delete removes it)")
            json("change", ["path": .string(path), "action": .string("extraneous")])
        }
        let count = plan.changes.count + plan.blocked.count
        text(count == 0 ? "dry run: up to date" : "dry run: \(count) changes")
    }

    static func describe(_ plan: SyncPlan) -> String {
        var parts = [
            "\(plan.count(.download)) to download (\(Format.bytes(plan.bytes(.download))))",
            "\(plan.count(.update)) to update (\(Format.bytes(plan.bytes(.update))))",
            "\(plan.count(.delete)) to delete (\(Format.bytes(plan.bytes(.delete))))",
            "\(plan.unchangedCount) unchanged (\(Format.bytes(plan.unchangedBytes)))",
        ]
        if !plan.blocked.isEmpty { parts.append("\(plan.blocked.count) blocked") }
        if !plan.extraneousKept.isEmpty { parts.append("\(plan.extraneousKept.count) extraneous kept") }
        return parts.joined(separator: ", ")
    }

    // MARK: - Output

    private func text(_ line: String) {
        guard mode == .live || mode == .lines else { return }
        clearStatus()
        Console.out(line + "\n")
    }

    private func clearStatus() {
        let shown = withState { state in
            defer { state.statusShown = false }
            return state.statusShown
        }
        if shown { Console.out("\r\u{1B}[2K") }
    }

    private func json(_ event: String, _ fields: [String: JSONLine.Value]) {
        guard mode == .json else { return }
        var line = JSONLine()
        line["event"] = .string(event)
        line["time"] = .string(UTCDateText.rfc3339(Date()))
        for (key, value) in fields { line[key] = value }
        Console.out(line.rendered() + "\n")
    }
}
