import Foundation
package import HaulPostgres

/// Turns a batch of inputs into jobs for the shared queue (`POST /api/v1/cluster/jobs`),
/// all or nothing, as ``DownloadBatch`` does for the service's own downloads: the first
/// bad field fails the whole batch, naming it, and nothing is queued.
///
/// The fields are checked by the same rules (``DownloadBatch/checkedFields(of:field:)``),
/// with three differences that come from the job running on another machine:
/// - no `directory`: a job's file goes into its worker's directory (`haul worker -d`),
///   under `name` when one is given;
/// - no credentials in `headers` (`Authorization`, `Proxy-Authorization`, `Cookie`): the
///   queue stores headers in the clear, where every worker and every reader of the
///   database sees them;
/// - priorities are the queue's numbers: `veryLow` -2, `low` -1, `normal` 0 (what
///   `haul get --queue` gives), `high` 1, `veryHigh` 2; workers claim higher ones first.
package enum ClusterBatch {
    /// The queue's priority for each of the API's words.
    package static let priorities: [String: Int] = ["veryLow": -2, "low": -1, "normal": 0, "high": 1, "veryHigh": 2]

    /// The API's word for a queue priority, when it has one.
    package static func word(forPriority priority: Int) -> String? {
        priorities.first { $0.value == priority }?.key
    }

    /// The jobs for `inputs`, in order; `field` names the array in errors.
    package static func requests(for inputs: [DownloadInput], field: String = "jobs") throws(FieldError) -> [QueueRequest] {
        guard !inputs.isEmpty else { throw FieldError(field: field, message: "no jobs given") }
        var requests: [QueueRequest] = []
        requests.reserveCapacity(inputs.count)
        for (index, input) in inputs.enumerated() {
            requests.append(try request(for: input, field: "\(field)[\(index)]"))
        }
        return requests
    }

    private static func request(for input: DownloadInput, field: String) throws(FieldError) -> QueueRequest {
        let fields = try DownloadBatch.checkedFields(of: input, field: field)
        if input.isDelta || input.seeds != nil {
            throw FieldError(
                field: "\(field).\(input.seeds != nil ? "seeds" : "url")",
                message:
                    "a delta download (zsync) builds on files of one machine: add it to a service's /api/v1/downloads, not to the shared queue (give \"zsync\": false to fetch a control file itself)"
            )
        }
        if input.directory != nil {
            throw FieldError(
                field: "\(field).directory",
                message: "a job of the shared queue goes into its worker's directory (haul worker -d): give a name instead")
        }
        let secret: Set<String> = ["authorization", "proxy-authorization", "cookie"]
        if let header = fields.headers.first(where: { secret.contains($0.name.lowercased()) }) {
            throw FieldError(
                field: "\(field).headers",
                message: "\(header.name): the shared queue stores headers in the clear, so it does not take credentials")
        }
        let priority = input.priority.flatMap { priorities[$0] } ?? 0
        do throws(QueueError) {
            var request = try QueueRequest(
                url: fields.url, name: fields.name, priority: priority, expectedSize: input.expectedSize,
                checksum: input.checksum, headers: fields.headers,
                maxBytesPerSecond: input.maxBytesPerSecond, connections: input.connections, mirrors: fields.mirrors,
                pieces: fields.pieces)
            request.stream = fields.stream
            return request
        } catch {
            // The checks above cover QueueRequest's own; this names the input if that changes.
            throw FieldError(field: field, message: error.message)
        }
    }
}
