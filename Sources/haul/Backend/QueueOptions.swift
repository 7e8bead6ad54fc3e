import ArgumentParser
import Foundation
import HaulPostgres

/// `--queue`: the shared queue on PostgreSQL (issue 14) that `haul worker` takes jobs from
/// and `get`, `list`, `pause`, `cancel` and `retry` work on instead of the journal.
///
/// The URL comes from `--queue` or `$HAUL_QUEUE_URL`. A password may travel only in the
/// environment variable, `PGPASSWORD` or `~/.pgpass`: never in argv, where other users see it.
struct QueueOptions: ParsableArguments {
    @Option(
        name: .customLong("queue"),
        help: ArgumentHelp(
            "A shared queue on PostgreSQL, postgres://USER@HOST[:PORT]/DATABASE (default: $HAUL_QUEUE_URL). The password comes from PGPASSWORD, ~/.pgpass or $HAUL_QUEUE_URL, never from the command line.",
            valueName: "url"))
    var queue: String?

    /// The queue named by `--queue`, or by `$HAUL_QUEUE_URL` where the command needs a queue
    /// (`required`) or takes one from the environment (`fromEnvironment`: `haul serve`);
    /// `nil` when none is.
    func address(required: Bool = false, fromEnvironment: Bool = false) throws -> QueueAddress? {
        do {
            if let queue { return try QueueAddress(parsing: queue, fromCommandLine: true) }
            if let text = ProcessInfo.processInfo.environment["HAUL_QUEUE_URL"], !text.isEmpty,
                required || fromEnvironment
            {
                return try QueueAddress(parsing: text, fromCommandLine: false)
            }
        } catch {
            throw ValidationError(error.message)
        }
        if required { throw ValidationError("name the shared queue with --queue URL or HAUL_QUEUE_URL") }
        return nil
    }
}
