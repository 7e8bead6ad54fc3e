/// The fault-injection knobs of one request, parsed from its query parameters.
///
/// See ``FaultServer`` for the meaning of each parameter.
struct FaultKnobs: Sendable {
    /// A query parameter had a value that could not be used.
    struct InvalidParameter: Error, CustomStringConvertible {
        var name: String
        var value: String
        var description: String { "invalid value for query parameter \(self.name): \(self.value)" }
    }

    var resetAfter: Int?
    var resetTimes: Int?
    var resetOrderly = false
    var stallAfter: Int?
    var stallTimes: Int?
    var ignoreRange = false
    var noValidators = false
    var weakETag = false
    var chunked = false
    var lieLength = 0
    var rate: Int?
    var fail: Int?
    var failTimes: Int?
    var retryAfter: String?
    var disposition: String?
    var gate: String?
    var gateAfter: Int?
    var gateRate: Int?
    var token: String?
    var expireAfter: Int?
    var corruptAt: [Int] = []
    var cacheControl: String?
    var expires: String?
    var age: String?
    var dateSkew: Int?
    var vary: String?
    /// Whether any of the caching knobs was given: the response then carries a `Date`.
    var setsCaching: Bool { cacheControl != nil || expires != nil || age != nil || dateSkew != nil || vary != nil }

    init(query: [String: String]) throws {
        func count(_ name: String, minimum: Int = 0) throws -> Int? {
            guard let raw = query[name] else { return nil }
            guard let value = Int(raw), value >= minimum else { throw InvalidParameter(name: name, value: raw) }
            return value
        }
        func flag(_ name: String) throws -> Bool {
            guard let raw = query[name] else { return false }
            switch raw.lowercased() {
            case "1", "true", "yes", "": return true
            case "0", "false", "no": return false
            default: throw InvalidParameter(name: name, value: raw)
            }
        }

        self.resetAfter = try count("reset_after")
        self.resetTimes = try count("reset_times")
        self.resetOrderly = try flag("reset_fin")
        self.stallAfter = try count("stall_after")
        self.stallTimes = try count("stall_times")
        self.ignoreRange = try flag("ignore_range")
        self.noValidators = try flag("no_validators")
        self.weakETag = try flag("weak_etag")
        self.chunked = try flag("chunked")
        if let raw = query["lie_length"] {
            guard let value = Int(raw) else { throw InvalidParameter(name: "lie_length", value: raw) }
            self.lieLength = value
        }
        self.rate = try count("rate", minimum: 1)
        if let raw = query["fail"] {
            guard let value = Int(raw), (200...999).contains(value) else {
                throw InvalidParameter(name: "fail", value: raw)
            }
            self.fail = value
        }
        self.failTimes = try count("fail_times")
        if let raw = query["retry_after"] {
            guard !raw.isEmpty else { throw InvalidParameter(name: "retry_after", value: raw) }
            self.retryAfter = raw
        }
        self.disposition = query["disposition"]
        self.gate = query["gate"]
        self.gateAfter = try count("gate_after")
        self.gateRate = try count("gate_rate", minimum: 1)
        self.token = query["token"]
        self.expireAfter = try count("expire_after")
        self.cacheControl = query["cache_control"]
        self.expires = query["expires"]
        self.age = query["age"]
        self.vary = query["vary"]
        if let raw = query["date_skew"] {
            guard let value = Int(raw) else { throw InvalidParameter(name: "date_skew", value: raw) }
            self.dateSkew = value
        }
        if let raw = query["corrupt_at"] {
            let offsets = raw.split(separator: ",").map { Int($0) }
            guard !offsets.isEmpty, offsets.allSatisfy({ ($0 ?? -1) >= 0 }) else {
                throw InvalidParameter(name: "corrupt_at", value: raw)
            }
            self.corruptAt = offsets.compactMap { $0 }
        }
    }
}
