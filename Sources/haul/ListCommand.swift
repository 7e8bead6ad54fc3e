import ArgumentParser
import Foundation
import Haul

/// `haul list`: shows the journal's downloads.
///
/// A table with the columns ID, STATE, PROGRESS (`12.0 MiB / 40.0 MiB 30%`, or the bytes
/// alone when the size is unknown), SPEED (running downloads only), FILE (where it goes:
/// relative to the current directory when below it, else absolute, or the object's
/// `s3://` URL) and ERROR. On a terminal long IDs are shortened in the middle, files from
/// the left (`…/downloads/a.iso`) and errors cut to fit the width; otherwise every field is
/// printed in full.
///
/// Jobs are shown as they stand (``Journal/standingJobs(in:)``): one that a killed process
/// left `running` shows as `paused`, with the bytes its partial file holds.
///
/// `--json` prints a JSON array with one object per job, keys sorted, one object per line:
///
///     id           string   the download's ID: its URL for `haul get`, or `URL -> PATH` for
///                           the same URL fetched to another place
///     url          string   the requested URL
///     state        string   queued | running | paused | waiting | completed | failed | cancelled
///     priority     integer  0 very low … 2 normal … 4 very high; higher runs first
///     bytes        integer  bytes known to be on disk
///     total        integer  the size, or null when unknown
///     speed        integer  bytes per second while running, else 0
///     destination  string   the destination file
///     name         string   its file name
///     attempts     integer  retries made so far
///     errorCode    string   the last error's code, or null
///     error        string   the last error's message, or null
///     createdAt    string   ISO 8601 UTC with milliseconds
///     updatedAt    string   ISO 8601 UTC with milliseconds
///     finishedAt   string   ISO 8601 UTC with milliseconds, or null
///     transferred  integer  for a completed job, the bytes its last run fetched over the
///                           network (the rest were resumed); else null
///     unchanged    boolean  its last run found the content unchanged (a 304)
struct List: AsyncParsableCommand {
    static let configuration = HaulCommand.subcommandConfiguration(
        CommandConfiguration(
            commandName: "list",
            abstract: "Show the downloads in the journal.",
            discussion: """
                By default shows unfinished (queued, running, paused, waiting) and failed \
                downloads, oldest first; --all adds completed and cancelled ones. FILE is where \
                each one goes: a path below the current directory, or the whole path (--json \
                gives it in full as destination).
                """))

    @Flag(help: "Include completed and cancelled downloads.")
    var all = false

    @Flag(help: "Print a JSON array of jobs.")
    var json = false

    @OptionGroup var journalOptions: JournalOptions

    @OptionGroup var queueOptions: QueueOptions

    mutating func run() async throws {
        let request = ListRequest(all: all, json: json)
        try await BackendChoice.make(journal: journalOptions, queue: queueOptions).with { try await $0.list(request) }
    }
}

/// The journal's jobs as `haul list` prints them (from the journal or a service): a table,
/// or JSON with `--json` (see ``List``).
enum JobTable {
    /// Prints `jobs` as `request` asks.
    static func print(_ jobs: [JobSnapshot], _ request: ListRequest) {
        if request.json {
            Console.out(json(jobs))
        } else if jobs.isEmpty {
            Console.out(request.all ? "no jobs in the journal\n" : "no unfinished or failed jobs (--all shows every job)\n")
        } else {
            let width: Int? = Console.outputIsTerminal ? Console.size.columns : nil
            Console.out(table(jobs, width: width))
        }
    }

    // MARK: - JSON

    static func json(_ jobs: [JobSnapshot]) -> String {
        let dates = ISO8601DateFormatter()
        dates.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        guard !jobs.isEmpty else { return "[]\n" }
        let objects = jobs.map { job in
            var object = JSONLine()
            object["id"] = .string(job.id.rawValue)
            object["url"] = .string(job.url)
            object["state"] = .string(job.state.rawValue)
            object["priority"] = .int(Int64(job.priority))
            object["bytes"] = .int(job.bytes)
            object["total"] = job.totalBytes.map { .int($0) } ?? .null
            object["speed"] = .int(Int64(job.bytesPerSecond.rounded()))
            object["destination"] = .string(job.destination)
            object["name"] = .string(job.name)
            object["attempts"] = .int(Int64(job.attempts))
            object["errorCode"] = job.errorCode.map { .string($0) } ?? .null
            object["error"] = job.error.map { .string($0) } ?? .null
            object["createdAt"] = .string(dates.string(from: job.createdAt))
            object["updatedAt"] = .string(dates.string(from: job.updatedAt))
            object["finishedAt"] = job.finishedAt.map { .string(dates.string(from: $0)) } ?? .null
            // What the run that completed it moved, as `haul get --json` says it.
            object["transferred"] = job.bytesTransferred.map { .int($0) } ?? .null
            object["unchanged"] = .bool(job.isUnchanged)
            return object.rendered()
        }
        return "[\n" + objects.joined(separator: ",\n") + "\n]\n"
    }

    // MARK: - Table

    static func progressText(_ job: JobSnapshot) -> String {
        guard let total = job.totalBytes else { return Format.bytes(job.bytes) }
        let percent = total > 0 ? Int(Double(min(job.bytes, total)) / Double(total) * 100) : 100
        return "\(Format.bytes(job.bytes)) / \(Format.bytes(total)) \(percent)%"
    }

    /// The table; with a `width`, long IDs and errors are shortened to fit it.
    static func table(
        _ jobs: [JobSnapshot], width: Int?, from directory: String = FileManager.default.currentDirectoryPath
    ) -> String {
        let header = ["ID", "STATE", "PROGRESS", "SPEED", "FILE", "ERROR"]
        var rows = jobs.map { job in
            [
                job.id.rawValue, job.state.rawValue, progressText(job),
                job.state == .running ? Format.rate(job.bytesPerSecond) : "", shown(job.destination, from: directory),
                job.error ?? "",
            ]
        }
        var widths = header.indices.map { column in
            rows.reduce(header[column].count) { max($0, $1[column].count) }
        }
        if let width {
            // STATE, PROGRESS and SPEED keep their widths; FILE takes at most a quarter of
            // the line (at least 16 columns); ID gets what is left, at least 24 columns;
            // ERROR gets the rest of the line.
            widths[4] = min(widths[4], max(16, width / 4))
            let fixed = widths[1...4].reduce(0, +) + 2 * 5
            let idWidth = max(24, min(widths[0], width - 1 - fixed - min(widths[5], 20)))
            widths[0] = idWidth
            let errorWidth = max(10, width - 1 - fixed - idWidth)
            rows = rows.map { row in
                var row = row
                row[0] = middleTruncated(row[0], idWidth)
                row[4] = leftTruncated(row[4], widths[4])
                if row[5].count > errorWidth { row[5] = ProgressRenderer.fit(row[5], errorWidth, pad: false) }
                return row
            }
        }
        var out = ""
        for row in [header] + rows {
            var line = ""
            for column in row.indices {
                let cell = row[column]
                line += column == row.count - 1 ? cell : ProgressRenderer.fit(cell, widths[column]) + "  "
            }
            while line.hasSuffix(" ") { line.removeLast() }
            out += line + "\n"
        }
        return out
    }

    /// Where a file goes, as `ls` would name it from `directory`: the path below it, else
    /// the whole path (or an object's `s3://` URL, as it is).
    static func shown(_ destination: String, from directory: String) -> String {
        let base = directory.hasSuffix("/") ? directory : directory + "/"
        guard destination.hasPrefix("/"), destination.hasPrefix(base), destination.count > base.count else {
            return destination
        }
        return String(destination.dropFirst(base.count))
    }

    /// `text` shortened to `width` characters from the left, as a long path is shown:
    /// `…/downloads/a.iso`.
    static func leftTruncated(_ text: String, _ width: Int) -> String {
        guard text.count > width, width > 1 else { return text }
        return "…" + String(text.suffix(width - 1))
    }

    /// `text` shortened to `width` characters by replacing its middle with "…", keeping
    /// the start (scheme and host) and the end (file name) of a URL.
    static func middleTruncated(_ text: String, _ width: Int) -> String {
        guard text.count > width, width > 1 else { return text }
        let tail = (width - 1) / 2
        let head = width - 1 - tail
        return String(text.prefix(head)) + "…" + String(text.suffix(tail))
    }
}
