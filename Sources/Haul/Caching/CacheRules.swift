import Foundation

/// The rules of RFC 9111 for a private cache, as plain values with no I/O: whether a
/// response may be stored, and what a request does with what the cache holds.
///
/// - Only a `200` is stored, and not with `no-store` (the request's or the response's), nor
///   with `Vary: *`; a request with credentials only when the response says `public`,
///   `s-maxage` or `must-revalidate`. `private` and `no-cache` responses are stored.
/// - A response is fresh while its current age (§4.2.3) is below its freshness lifetime:
///   `max-age`, else `Expires` minus `Date`, else a tenth of the time since `Last-Modified`.
/// - A fresh response answers, unless it says `no-cache` or the request asks for a
///   revalidation (`no-cache`, `Pragma: no-cache`, `max-age`, `min-fresh`); an `immutable`
///   one answers even then (a request's `no-store` still loads).
/// - A stale one is revalidated with its validators (`If-None-Match`, `If-Modified-Since`),
///   answers at once while within its `stale-while-revalidate` (revalidated in the
///   background), or within the request's `max-stale` unless it says `must-revalidate`.
///   Without a validator, the request goes out as it is.
/// - A `304` updates the stored header fields (§3.2) and makes the response current again.
enum CacheRules {
    /// What a request brings to the lookup.
    struct Request: Sendable, Hashable {
        var policy: DownloadRequest.CachePolicy
        /// The request's header fields (for Vary matching and its own Cache-Control:
        /// no-cache, no-store, max-age=0, Pragma: no-cache).
        var headers: [HeaderField]
        /// Whether the request carries credentials (Authorization, Cookie, or a header the
        /// caller marked sensitive).
        var hasCredentials: Bool
    }

    /// What to do with a request, given what the cache holds.
    enum Lookup: Sendable, Hashable {
        /// Answer from the stored response; `age` (seconds) is its current age, for an `Age`
        /// header.
        case serve(age: Int)
        /// Answer from the stored (stale) response at once, and revalidate it in the
        /// background with these conditional header fields (within
        /// stale-while-revalidate).
        case serveStale(age: Int, revalidation: [HeaderField])
        /// Send the request with these conditional header fields (If-None-Match from ETag —
        /// weak ETags allowed here —, and If-Modified-Since from Last-Modified; both when
        /// both exist); a 304 answers from the stored response. An entry with neither
        /// validator gives `.load` instead.
        case revalidate([HeaderField])
        /// Send the request as it is; the stored response (if any) cannot be used.
        case load
        /// `.returnCacheDataDontLoad` and nothing usable is stored: fail, request nothing.
        case unavailable
    }

    // MARK: - Lookup

    /// What to do with `request`, given the response stored for its URL (if any), at `now`
    /// (seconds since 1970, the wall clock).
    static func lookup(_ request: Request, stored: CachedResponse?, now: Double) -> Lookup {
        lookup(request, facts: stored.map(Facts.init), now: now)
    }

    /// What to do with `request`, given what was read from the response stored for its URL
    /// (if any), at `now` (seconds since 1970, the wall clock): the same rules, with no
    /// header of the stored response parsed again.
    static func lookup(_ request: Request, facts stored: Facts?, now: Double) -> Lookup {
        let matching = stored.flatMap { $0.varyMatches(request) ? $0 : nil }
        switch request.policy {
        case .reloadIgnoringCache:
            return .load
        case .returnCacheDataElseLoad:
            guard let matching else { return .load }
            return .serve(age: wholeSeconds(matching.age(at: now)))
        case .returnCacheDataDontLoad:
            guard let matching else { return .unavailable }
            return .serve(age: wholeSeconds(matching.age(at: now)))
        case .useProtocolCachePolicy:
            guard let matching else { return .load }
            return protocolLookup(request, stored: matching, now: now)
        }
    }

    /// The lookup of ``DownloadRequest/CachePolicy/useProtocolCachePolicy``, for a stored
    /// response that matches the request's `Vary` fields.
    private static func protocolLookup(_ request: Request, stored: Facts, now: Double) -> Lookup {
        let age = stored.age(at: now)
        let served = Lookup.serve(age: wholeSeconds(age))
        let revalidation: Lookup = stored.conditions.isEmpty ? .load : .revalidate(stored.conditions)
        // A request with no header field asks nothing of its own: the common case, decided
        // by the stored response alone.
        if request.headers.isEmpty {
            if stored.noCache { return revalidation }
            if age < stored.lifetime { return served }
            if !stored.mustRevalidate, case .value(let seconds) = stored.staleWhileRevalidate,
                age < stored.lifetime + Double(seconds), !stored.conditions.isEmpty
            {
                return .serveStale(age: wholeSeconds(age), revalidation: stored.conditions)
            }
            return revalidation
        }
        let asked = Directives(request.headers)
        if asked.contains("no-store") { return .load }
        if stored.noCache { return revalidation }
        let lifetime = stored.lifetime
        // The request's own limits: `no-cache` (or HTTP/1.0's `Pragma: no-cache` when it
        // sends no Cache-Control) and `max-age=0` always go to the server; a `max-age` that
        // is not a number counts as 0.
        let maxAge: Double? =
            switch asked.seconds("max-age") {
            case .absent: nil
            case .invalid: 0
            case .value(let seconds): Double(seconds)
            }
        let noCache =
            asked.contains("no-cache") || maxAge == 0
            || (!request.headers.contains { $0.is("Cache-Control") }
                && request.headers.list("Pragma").contains { $0.lowercased() == "no-cache" })
        let tooOld = maxAge.map { age > $0 } ?? false
        let minFresh = asked.seconds("min-fresh")

        if age < lifetime {
            // RFC 8246: an immutable response is not revalidated while fresh, even on reload.
            if stored.immutable { return served }
            if noCache || tooOld { return revalidation }
            if case .value(let seconds) = minFresh, lifetime - age < Double(seconds) { return revalidation }
            return served
        }

        // Stale.
        if noCache || tooOld || minFresh != .absent || stored.mustRevalidate { return revalidation }
        if let maxStale = asked.first("max-stale") {
            if maxStale.argument == nil { return served }
            if case .value(let seconds) = asked.seconds("max-stale"), age - lifetime <= Double(seconds) {
                return served
            }
        }
        if case .value(let seconds) = stored.staleWhileRevalidate, age < lifetime + Double(seconds),
            !stored.conditions.isEmpty
        {
            return .serveStale(age: wholeSeconds(age), revalidation: stored.conditions)
        }
        return revalidation
    }

    /// The conditional header fields that revalidate `stored`: `If-None-Match` with its
    /// ETag (weak or strong) and `If-Modified-Since` with its Last-Modified, as stored;
    /// empty when it has neither.
    static func conditions(for stored: CachedResponse) -> [HeaderField] {
        var fields: [HeaderField] = []
        if let etag = stored.headers.first("ETag")?.trimmingOptionalWhitespace(), !etag.isEmpty {
            fields.append(HeaderField("If-None-Match", etag))
        }
        if let lastModified = stored.headers.first("Last-Modified")?.trimmingOptionalWhitespace(),
            !lastModified.isEmpty
        {
            fields.append(HeaderField("If-Modified-Since", lastModified))
        }
        return fields
    }

    // MARK: - Storing

    /// Whether a response to `request` may be stored.
    static func mayStore(_ request: Request, status: Int, headers: [HeaderField]) -> Bool {
        // We store only whole 200 responses (not 206, 304, or errors).
        guard status == 200 else { return false }
        let said = Directives(headers)
        guard !Directives(request.headers).contains("no-store"), !said.contains("no-store") else { return false }
        // `Vary: *` matches no request: stored, it could never answer.
        guard !headers.list("Vary").contains("*") else { return false }
        // §3.5: a response to a request with credentials only when it says so explicitly.
        let explicitlyShared = said.contains("public") || said.contains("s-maxage") || said.contains("must-revalidate")
        if request.hasCredentials && !explicitlyShared { return false }
        // §3: a 200 is heuristically cacheable, so it needs no explicit freshness or
        // validator; `no-cache` is stored (and always revalidated), and `private` is fine
        // in a private cache.
        return true
    }

    /// The statuses heuristically cacheable (RFC 9110 §15.1).
    static let heuristicallyCacheable: Set<Int> = [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501]

    /// The request header fields the response's Vary names, with the request's values
    /// (lowercased names; absent fields left out) — what CachedResponse.varying records.
    ///
    /// A field the request sends on several lines is recorded as one, its values joined
    /// with `, `.
    static func varying(_ request: Request, responseHeaders: [HeaderField]) -> [HeaderField] {
        var seen: Set<String> = []
        return responseHeaders.list("Vary").compactMap { name in
            let name = name.lowercased()
            guard name != "*", seen.insert(name).inserted, let value = normalizedValue(name, in: request.headers)
            else { return nil }
            return HeaderField(name, value)
        }
    }

    /// Whether `request` sends the fields `stored`'s Vary names with the values the request
    /// that stored it sent (absent from both is a match); `Vary: *` matches nothing.
    static func varyMatches(_ request: Request, _ stored: CachedResponse) -> Bool {
        Facts(stored).varyMatches(request)
    }

    /// The value of the fields named `name` in `headers`, each line trimmed and the lines
    /// joined with `, `; `nil` when there is none.
    fileprivate static func normalizedValue(_ name: String, in headers: [HeaderField]) -> String? {
        let values = headers.filter { $0.is(name) }.map { $0.value.trimmingOptionalWhitespace() }
        return values.isEmpty ? nil : values.joined(separator: ", ")
    }

    /// The fields a 304 does not update (§3.2): the body's framing and encoding, which
    /// stay those of the stored body, and the hop-by-hop fields.
    static let notUpdatedBy304: Set<String> = [
        "content-length", "content-encoding", "content-range", "transfer-encoding", "connection", "keep-alive",
        "proxy-connection", "te", "trailer", "upgrade", "proxy-authenticate", "proxy-authorization",
    ]

    /// The stored response updated by a 304's header fields (RFC 9111 §3.2 / §4.3.4), with
    /// the new requestTime/responseTime.
    ///
    /// Each field the 304 carries replaces every stored line of that name (in the place of
    /// the first), and a new one is added at the end; `Content-Length`, `Content-Encoding`,
    /// `Content-Range` and the hop-by-hop fields are not taken. `Date` and `Age` describe
    /// the validation rather than the stored response: a 304 without them removes the
    /// stored ones, so that its own arrival (`responseTime`) stands for its `Date` (as RFC
    /// 9110 §6.6.1 has a recipient add) and it has no age beyond the round trip.
    static func updated(
        _ stored: CachedResponse, notModified headers: [HeaderField], requestTime: Double, responseTime: Double
    ) -> CachedResponse {
        let incoming = headers.filter { !notUpdatedBy304.contains($0.name.lowercased()) }
        let replaced = Set(incoming.map { $0.name.lowercased() }).union(["date", "age"])
        var merged: [HeaderField] = []
        var placed: Set<String> = []
        for field in stored.headers {
            let name = field.name.lowercased()
            guard replaced.contains(name) else {
                merged.append(field)
                continue
            }
            if placed.insert(name).inserted { merged += incoming.filter { $0.name.lowercased() == name } }
        }
        merged += incoming.filter { !placed.contains($0.name.lowercased()) }
        var updated = stored
        updated.headers = merged
        updated.requestTime = requestTime
        updated.responseTime = responseTime
        return updated
    }

    // MARK: - Freshness and age

    /// The freshness lifetime in seconds (explicit, else heuristic where allowed, else nil).
    ///
    /// `max-age` (a private cache ignores `s-maxage`), else `Expires` minus `Date` (or minus
    /// `responseTime` without a `Date`), else a tenth of the time from `Last-Modified` to
    /// `Date` for a heuristically cacheable response without `no-cache`. A `max-age` that is
    /// not a number, or given twice, and an `Expires` that is not a date (`0`), give 0: the
    /// response is stale.
    static func freshnessLifetime(_ response: CachedResponse) -> Double? {
        let said = Directives(response.headers)
        switch said.seconds("max-age") {
        case .value(let seconds): return Double(seconds)
        case .invalid: return 0
        case .absent: break
        }
        if let expires = response.headers.first("Expires") {
            guard let expiry = HTTPDateParser.parse(expires, relativeTo: response.responseTime) else { return 0 }
            return max(0, expiry - dateValue(response))
        }
        guard !said.contains("no-cache"),
            heuristicallyCacheable.contains(response.status) || said.contains("public"),
            let text = response.headers.first("Last-Modified"),
            let lastModified = HTTPDateParser.parse(text, relativeTo: response.responseTime)
        else { return nil }
        return max(0, dateValue(response) - lastModified) / 10
    }

    /// The current age in seconds (RFC 9111 §4.2.3).
    ///
    /// `now` is seconds since 1970. A `Date` behind our clock adds to the age (apparent
    /// age), one ahead of it is ignored; an invalid `Age` counts as 0. A clock that went
    /// back since the request is taken as no time passing.
    static func currentAge(_ response: CachedResponse, now: Double) -> Double {
        initialAge(response) + max(0, now - response.responseTime)
    }

    /// The age the response had when it arrived (RFC 9111 §4.2.3's
    /// `corrected_initial_age`): the larger of its apparent age and its `Age` plus the
    /// response delay.
    static func initialAge(_ response: CachedResponse) -> Double {
        let apparentAge = max(0, response.responseTime - dateValue(response))
        let responseDelay = max(0, response.responseTime - response.requestTime)
        let ageValue = response.headers.list("Age").first.flatMap(deltaSeconds).map(Double.init) ?? 0
        return max(apparentAge, ageValue + responseDelay)
    }

    /// The response's `Date`, or when it arrived if it has no valid one.
    static func dateValue(_ response: CachedResponse) -> Double {
        response.headers.first("Date").flatMap { HTTPDateParser.parse($0, relativeTo: response.responseTime) }
            ?? response.responseTime
    }

    /// `text` as delta-seconds (RFC 9111 §1.2.2): digits only, at most 2^31.
    static func deltaSeconds(_ text: String) -> Int? {
        guard !text.isEmpty else { return nil }
        var value = 0
        for byte in text.utf8 {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = min(value * 10 + Int(byte - UInt8(ascii: "0")), 1 << 31)
        }
        return value
    }

    /// `seconds` as a whole number for an `Age`: rounded down, between 0 and 2^31.
    static func wholeSeconds(_ seconds: Double) -> Int {
        guard !seconds.isNaN else { return 0 }
        return Int(min(max(seconds, 0), Double(1 << 31)).rounded(.down))
    }

}

extension CacheRules {
    /// The directives of a message's `Cache-Control` (all its lines): names lowercased,
    /// arguments unquoted. Commas inside a quoted argument do not split it.
    struct Directives: Sendable, Hashable {
        /// One directive, with its argument if it has one.
        struct Directive: Sendable, Hashable {
            var name: String
            var argument: String?
        }

        /// What a directive gives as delta-seconds.
        enum Seconds: Sendable, Hashable {
            /// The directive is not there.
            case absent
            /// It is there more than once, or its argument is not a number of seconds.
            case invalid
            case value(Int)
        }

        var all: [Directive] = []

        init(_ headers: [HeaderField]) {
            for field in headers where field.is("Cache-Control") { Self.read(field.value, into: &all) }
        }

        /// Whether the directive `name` (lowercase) is there.
        func contains(_ name: String) -> Bool { all.contains { $0.name == name } }

        /// The first directive named `name` (lowercase).
        func first(_ name: String) -> Directive? { all.first { $0.name == name } }

        /// The delta-seconds argument of the directive `name` (lowercase).
        func seconds(_ name: String) -> Seconds {
            let found = all.filter { $0.name == name }
            guard let directive = found.first else { return .absent }
            guard found.count == 1, let argument = directive.argument, let seconds = CacheRules.deltaSeconds(argument)
            else { return .invalid }
            return .value(seconds)
        }

        /// Appends the directives of one field line (`token [= token / quoted-string]`,
        /// separated by commas) to `list`, reading its UTF-8 bytes.
        private static func read(_ text: String, into list: inout [Directive]) {
            var text = text
            text.withUTF8 { bytes in
                let end = bytes.count
                var index = 0
                while index < end {
                    var nameEnd = index
                    while nameEnd < end, bytes[nameEnd] != .equals, bytes[nameEnd] != .comma { nameEnd += 1 }
                    let name = String(decoding: trimmed(bytes, index..<nameEnd).lazy.map(lowercased), as: UTF8.self)
                    index = nameEnd
                    var argument: String?
                    if index < end, bytes[index] == .equals {
                        index += 1
                        while index < end, bytes[index] == .space || bytes[index] == .tab { index += 1 }
                        if index < end, bytes[index] == .quote {
                            index += 1
                            var value: [UInt8] = []
                            while index < end, bytes[index] != .quote {
                                if bytes[index] == .backslash, index + 1 < end { index += 1 }
                                value.append(bytes[index])
                                index += 1
                            }
                            argument = String(decoding: value, as: UTF8.self)
                            while index < end, bytes[index] != .comma { index += 1 }
                        } else {
                            var valueEnd = index
                            while valueEnd < end, bytes[valueEnd] != .comma { valueEnd += 1 }
                            argument = String(decoding: trimmed(bytes, index..<valueEnd), as: UTF8.self)
                            index = valueEnd
                        }
                    }
                    if index < end, bytes[index] == .comma { index += 1 }
                    if !name.isEmpty { list.append(Directive(name: name, argument: argument)) }
                }
            }
        }

        /// `bytes[range]` without the spaces and tabs at either end.
        private static func trimmed(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Slice<UnsafeBufferPointer<UInt8>> {
            var lower = range.lowerBound
            var upper = range.upperBound
            while lower < upper, bytes[lower] == .space || bytes[lower] == .tab { lower += 1 }
            while upper > lower, bytes[upper - 1] == .space || bytes[upper - 1] == .tab { upper -= 1 }
            return bytes[lower..<upper]
        }

        /// An ASCII letter in lower case; any other byte as it is.
        private static func lowercased(_ byte: UInt8) -> UInt8 {
            (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte | 0x20 : byte
        }
    }
}

extension CacheRules {
    /// What the rules read from a stored response, read once (when it is stored or loaded)
    /// so that a lookup parses none of its header fields: its `Cache-Control`, freshness
    /// lifetime, age on arrival, validators and `Vary`.
    struct Facts: Sendable {
        /// `no-cache`, `must-revalidate` and `immutable` in its `Cache-Control`.
        let noCache: Bool
        let mustRevalidate: Bool
        let immutable: Bool
        /// Its `stale-while-revalidate`.
        let staleWhileRevalidate: Directives.Seconds
        /// Its freshness lifetime in seconds (0 when it has none).
        let lifetime: Double
        /// Its age when it arrived, and when that was (seconds since 1970).
        let initialAge: Double
        let responseTime: Double
        /// The conditional fields that revalidate it (see ``CacheRules/conditions(for:)``).
        let conditions: [HeaderField]
        /// The request fields its `Vary` names (lowercased), each with the value the
        /// request that stored it sent; `nil` for `Vary: *`.
        let varying: [(name: String, value: String?)]?

        init(_ response: CachedResponse) {
            let said = Directives(response.headers)
            noCache = said.contains("no-cache")
            mustRevalidate = said.contains("must-revalidate")
            immutable = said.contains("immutable")
            staleWhileRevalidate = said.seconds("stale-while-revalidate")
            lifetime = CacheRules.freshnessLifetime(response) ?? 0
            initialAge = CacheRules.initialAge(response)
            responseTime = response.responseTime
            conditions = CacheRules.conditions(for: response)
            let names = response.headers.list("Vary").map { $0.lowercased() }
            varying =
                names.contains("*")
                ? nil : names.map { ($0, CacheRules.normalizedValue($0, in: response.varying)) }
        }

        /// Its current age at `now` (RFC 9111 §4.2.3; see ``CacheRules/currentAge(_:now:)``).
        func age(at now: Double) -> Double {
            initialAge + max(0, now - responseTime)
        }

        /// Whether `request` sends the fields its `Vary` names with the values the request
        /// that stored it sent (absent from both is a match); `Vary: *` matches nothing.
        func varyMatches(_ request: Request) -> Bool {
            guard let varying else { return false }
            return varying.allSatisfy { CacheRules.normalizedValue($0.name, in: request.headers) == $0.value }
        }
    }
}

extension HeaderField {
    /// Whether the field is named `name` (compared case-insensitively).
    fileprivate func `is`(_ name: String) -> Bool {
        self.name.equalsIgnoringASCIICase(name)
    }
}

extension UInt8 {
    fileprivate static let equals = UInt8(ascii: "=")
    fileprivate static let quote = UInt8(ascii: "\"")
    fileprivate static let backslash = UInt8(ascii: "\\")
}
