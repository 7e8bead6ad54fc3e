package import Haul

/// Which events a client of `GET /api/v1/events` wants: `?types=download,removed` keeps
/// those kinds of events, and `?states=completed,failed` keeps only the `download` events
/// of those states. Without either, everything is sent. A `resync` is sent to every client
/// (it says that what it missed is lost).
///
/// A client that only waits for downloads to end (`haul get -q` through the service) asks
/// for `types=download,removed&states=completed,failed,cancelled`: a third of the events of
/// a batch of small files, and none of their progress.
package struct EventFilter: Sendable, Equatable {
    /// The kinds of events the API sends.
    package static let kinds: Set<String> = ["download", "progress", "stats", "removed", "sync", "resync", "cluster"]

    /// The kinds wanted; `nil` for all.
    package var types: Set<String>?
    /// The states of the `download` events wanted; `nil` for all.
    package var states: Set<JobState>?

    package init(types: Set<String>? = nil, states: Set<JobState>? = nil) {
        self.types = types
        self.states = states
    }

    /// Everything.
    package static let all = EventFilter()

    /// The filter the query parameters `types` and `states` (comma-separated) ask for, or
    /// the field that is wrong and why.
    package static func parse(types: String?, states: String?) -> Result<EventFilter, FieldError> {
        var filter = EventFilter()
        if let types {
            let names = Set(types.split(separator: ",").map { String($0) })
            if let unknown = names.first(where: { !kinds.contains($0) }) {
                return .failure(FieldError(field: "types", message: "'\(unknown)' is not a kind of event"))
            }
            guard !names.isEmpty else { return .failure(FieldError(field: "types", message: "names no kind")) }
            filter.types = names
        }
        if let states {
            var wanted: Set<JobState> = []
            for name in states.split(separator: ",") {
                guard let state = JobState(rawValue: String(name)) else {
                    return .failure(FieldError(field: "states", message: "'\(name)' is not a state"))
                }
                wanted.insert(state)
            }
            guard !wanted.isEmpty else { return .failure(FieldError(field: "states", message: "names no state")) }
            filter.states = wanted
        }
        return .success(filter)
    }

    /// Whether an event of `kind` (a `download` event: of `state`) goes to this client.
    package func admits(kind: String, state: JobState?) -> Bool {
        if kind == "resync" { return true }
        if let types, !types.contains(kind) { return false }
        if kind == "download", let states, let state, !states.contains(state) { return false }
        return true
    }
}
