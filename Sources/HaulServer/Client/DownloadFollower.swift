package import Foundation
package import Haul

/// One Server-Sent Event from the service: its `id:` (absent on the `retry:` preamble), its
/// `event:` kind and its `data:` JSON.
package struct ServiceEvent: Sendable, Equatable {
    package var id: UInt64?
    package var kind: String
    package var data: Data

    package init(id: UInt64?, kind: String, data: Data) {
        self.id = id
        self.kind = kind
        self.data = data
    }
}

/// The rules of following a set of downloads to their ends over the service's event stream,
/// as a value: it takes events (and, after a resync, the downloads as the API shows them)
/// and says what to print and what to ask. The CLI's `haul get` and `haul resume` run it
/// against a live stream; it is tested without one.
///
/// - A download ends when it is completed, failed, cancelled or removed.
/// - A state line is said once per change of state, not for every snapshot of the same state.
/// - A `resync` event (the service no longer has what this client missed) asks for the
///   pending downloads to be looked up; a looked-up download is taken like an event.
/// - ``lastEventID`` is where a reconnection picks up (`Last-Event-ID`).
package struct DownloadFollower: Sendable {
    /// What to do after an event.
    package enum Output: Sendable, Equatable {
        /// A download completed.
        case saved(Brief)
        /// A download failed or was cancelled; it counts as a failure.
        case failed(id: String, message: String)
        /// A download was removed before it ended; it counts as a failure.
        case removed(id: String)
        /// A download changed state (queued, running, waiting, paused).
        case state(Brief)
        /// A download's progress.
        case progress(ProgressView)
        /// Look up these downloads (`GET /downloads/{id}`) and pass each to ``take(_:)``: the
        /// events about them may have been lost.
        case lookUp([String])
    }

    /// What following needs of a download's view: decoding only this from each event
    /// (no dates) keeps a client of thousands of downloads cheap.
    package struct Brief: Sendable, Equatable, Decodable {
        package var id: String
        package var state: JobState
        package var name: String
        package var destination: String
        package var bytes: Int64
        package var error: String?
        /// Whether it completed unchanged (a `304`); `nil` from a service that does not say.
        package var unchanged: Bool?

        package init(_ view: DownloadView) {
            self.init(
                id: view.id, state: view.state, name: view.name, destination: view.destination, bytes: view.bytes,
                error: view.error, unchanged: view.unchanged)
        }

        /// The brief of a `download` event's JSON, read by ``FlatJSON``; `nil` when that
        /// cannot read it, or a field is missing or of the wrong type (`JSONDecoder` then
        /// has the last word).
        package init?(json data: Data) {
            var id: String?
            var state: JobState?
            var name: String?
            var destination: String?
            var bytes: Int64?
            var error: String??
            var unchanged: Bool?
            var wrong = false
            let flat = data.withUnsafeBytes { raw in
                FlatJSON.members(of: raw) { key, value in
                    switch key.count {
                    case 2 where key.elementsEqual("id".utf8):
                        id = value.string
                        wrong = wrong || id == nil
                    case 5 where key.elementsEqual("state".utf8):
                        state = value.string.flatMap(JobState.init(rawValue:))
                        wrong = wrong || state == nil
                    case 4 where key.elementsEqual("name".utf8):
                        name = value.string
                        wrong = wrong || name == nil
                    case 11 where key.elementsEqual("destination".utf8):
                        destination = value.string
                        wrong = wrong || destination == nil
                    case 5 where key.elementsEqual("bytes".utf8):
                        bytes = value.int64
                        wrong = wrong || bytes == nil
                    case 9 where key.elementsEqual("unchanged".utf8):
                        unchanged = value.bool
                        wrong = wrong || unchanged == nil
                    case 5 where key.elementsEqual("error".utf8):
                        if value.isNull {
                            error = .some(nil)
                        } else if let text = value.string {
                            error = .some(text)
                        } else {
                            wrong = true
                        }
                    default:
                        break
                    }
                }
            }
            guard flat, !wrong, let id, let state, let name, let destination, let bytes else { return nil }
            self.init(
                id: id, state: state, name: name, destination: destination, bytes: bytes, error: error ?? nil,
                unchanged: unchanged)
        }

        package init(
            id: String, state: JobState, name: String, destination: String, bytes: Int64, error: String?,
            unchanged: Bool? = nil
        ) {
            self.id = id
            self.state = state
            self.name = name
            self.destination = destination
            self.bytes = bytes
            self.error = error
            self.unchanged = unchanged
        }
    }

    /// The downloads that have not ended.
    package private(set) var pending: Set<String>
    /// How many ended without completing.
    package private(set) var failures = 0
    /// The ID of the last numbered event taken.
    package private(set) var lastEventID: UInt64?
    private var lastState: [String: JobState] = [:]
    private let decoder = JSONDecoder()

    package init(ids: some Sequence<String>) {
        pending = Set(ids)
    }

    /// Whether every download has ended.
    package var isDone: Bool { pending.isEmpty }

    /// Takes one event.
    package mutating func take(_ event: ServiceEvent) -> [Output] {
        if let id = event.id { lastEventID = id }
        switch event.kind {
        case "download":
            guard let brief = Brief(json: event.data) ?? (try? decoder.decode(Brief.self, from: event.data)) else {
                return []
            }
            return take(brief)
        case "progress":
            guard let progress = try? decoder.decode(ProgressView.self, from: event.data),
                pending.contains(progress.id)
            else { return [] }
            return [.progress(progress)]
        case "removed":
            struct Removed: Decodable { var id: String }
            guard let removed = try? decoder.decode(Removed.self, from: event.data),
                pending.remove(removed.id) != nil
            else { return [] }
            failures += 1
            return [.removed(id: removed.id)]
        case "resync":
            return pending.isEmpty ? [] : [.lookUp(pending.sorted())]
        default:
            return []
        }
    }

    /// Takes a download looked up after a resync.
    package mutating func take(_ view: DownloadView) -> [Output] {
        take(Brief(view))
    }

    /// Takes a download's current state: from a `download` event, or looked up.
    private mutating func take(_ view: Brief) -> [Output] {
        guard pending.contains(view.id) else { return [] }
        switch view.state {
        case .completed:
            pending.remove(view.id)
            return [.saved(view)]
        case .failed, .cancelled:
            pending.remove(view.id)
            failures += 1
            return [.failed(id: view.id, message: view.error ?? view.state.rawValue)]
        default:
            guard lastState.updateValue(view.state, forKey: view.id) != view.state else { return [] }
            return [.state(view)]
        }
    }

    /// Takes a download the service no longer has (a lookup answered 404): it was removed.
    package mutating func takeMissing(_ id: String) -> [Output] {
        guard pending.remove(id) != nil else { return [] }
        failures += 1
        return [.removed(id: id)]
    }
}
