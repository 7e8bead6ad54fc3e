import Foundation
import Testing

@testable import Haul

/// RFC 9111's rules for a private cache, as tables: what may be stored, how fresh a stored
/// response is and how old, what a request does with it under each policy, how a 304
/// updates it, and the HTTP dates it all reads. No clock: every time is a parameter.
@Suite("Cache rules")
struct CacheRulesTests {
    typealias Lookup = CacheRules.Lookup
    typealias Policy = DownloadRequest.CachePolicy

    /// When the stored responses' request was sent and their head arrived (seconds since
    /// 1970): Tue, 14 Nov 2023 22:13:20 GMT.
    static let t0: Double = 1_700_000_000
    static let etag = "\"v1\""
    /// Last-Modified 10,000 s before `t0`: a heuristic lifetime of 1,000 s.
    static let lastModified = httpDate(t0 - 10_000)
    static let ifNoneMatch = HeaderField("If-None-Match", etag)
    static let ifModifiedSince = HeaderField("If-Modified-Since", lastModified)

    /// `seconds` as an IMF-fixdate, written by Foundation (not by the parser under test).
    static func httpDate(_ seconds: Double) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: Date(timeIntervalSince1970: seconds))
    }

    /// A stored 200 with `headers`, requested and received at `t0` unless told otherwise.
    static func stored(
        _ headers: [HeaderField], varying: [HeaderField] = [], requestTime: Double = t0, responseTime: Double = t0
    ) -> CachedResponse {
        CachedResponse(
            url: "https://example.com/file", status: 200, headers: headers, varying: varying,
            requestTime: requestTime, responseTime: responseTime, bodySize: 100)
    }

    static func request(
        _ policy: Policy = .useProtocolCachePolicy, _ headers: [HeaderField] = [], credentials: Bool = false
    ) -> CacheRules.Request {
        CacheRules.Request(policy: policy, headers: headers, hasCredentials: credentials)
    }

    static func cacheControl(_ value: String) -> HeaderField { HeaderField("Cache-Control", value) }

    // MARK: - Freshness lifetime

    struct LifetimeCase: Sendable, CustomTestStringConvertible {
        var name: String
        var headers: [HeaderField]
        var lifetime: Double?
        var testDescription: String { name }
    }

    static let lifetimeCases: [LifetimeCase] = [
        .init(name: "max-age", headers: [cacheControl("max-age=60")], lifetime: 60),
        .init(name: "max-age=0", headers: [cacheControl("max-age=0")], lifetime: 0),
        .init(name: "directive names are case-insensitive", headers: [cacheControl("Max-Age=60")], lifetime: 60),
        .init(name: "quoted max-age is accepted", headers: [cacheControl("max-age=\"60\"")], lifetime: 60),
        .init(
            name: "a comma inside a quoted argument does not split it",
            headers: [cacheControl("community=\"UCI, max-age=5\", max-age=30")], lifetime: 30),
        .init(
            name: "max-age beyond 2^31 is 2^31", headers: [cacheControl("max-age=99999999999999999999")],
            lifetime: 2_147_483_648),
        .init(
            name: "max-age wins over Expires",
            headers: [cacheControl("max-age=60"), HeaderField("Expires", httpDate(t0 + 3600))], lifetime: 60),
        .init(name: "s-maxage is ignored by a private cache", headers: [cacheControl("s-maxage=600")], lifetime: nil),
        .init(
            name: "s-maxage does not override max-age", headers: [cacheControl("s-maxage=600, max-age=60")],
            lifetime: 60),
        .init(
            name: "Expires minus Date",
            headers: [HeaderField("Date", httpDate(t0 - 30)), HeaderField("Expires", httpDate(t0 + 270))],
            lifetime: 300),
        .init(
            name: "Expires without Date: minus the time it arrived",
            headers: [HeaderField("Expires", httpDate(t0 + 120))], lifetime: 120),
        .init(name: "Expires: 0 is already expired", headers: [HeaderField("Expires", "0")], lifetime: 0),
        .init(
            name: "an Expires that is no date is already expired",
            headers: [HeaderField("Expires", "tomorrow"), HeaderField("Last-Modified", lastModified)], lifetime: 0),
        .init(
            name: "Expires before Date is 0",
            headers: [HeaderField("Date", httpDate(t0)), HeaderField("Expires", httpDate(t0 - 60))], lifetime: 0),
        .init(
            name: "heuristic: a tenth of Date minus Last-Modified",
            headers: [HeaderField("Date", httpDate(t0 - 2000)), HeaderField("Last-Modified", lastModified)],
            lifetime: 800),
        .init(
            name: "heuristic without Date: from the time it arrived",
            headers: [HeaderField("Last-Modified", lastModified)], lifetime: 1000),
        .init(
            name: "no heuristic with max-age",
            headers: [cacheControl("max-age=5"), HeaderField("Last-Modified", lastModified)], lifetime: 5),
        .init(
            name: "no heuristic with Expires",
            headers: [HeaderField("Expires", httpDate(t0 + 20)), HeaderField("Last-Modified", lastModified)],
            lifetime: 20),
        .init(
            name: "no heuristic with no-cache",
            headers: [cacheControl("no-cache"), HeaderField("Last-Modified", lastModified)], lifetime: nil),
        .init(name: "no lifetime at all", headers: [HeaderField("ETag", etag)], lifetime: nil),
        .init(name: "duplicate max-age is stale", headers: [cacheControl("max-age=60, max-age=60")], lifetime: 0),
        .init(
            name: "max-age on two lines is stale",
            headers: [cacheControl("max-age=60"), cacheControl("max-age=3600")], lifetime: 0),
        .init(name: "non-numeric max-age is stale", headers: [cacheControl("max-age=1m")], lifetime: 0),
        .init(name: "negative max-age is stale", headers: [cacheControl("max-age=-1")], lifetime: 0),
        .init(name: "max-age without a value is stale", headers: [cacheControl("max-age")], lifetime: 0),
        .init(
            name: "an invalid max-age is stale despite Expires",
            headers: [cacheControl("max-age=abc"), HeaderField("Expires", httpDate(t0 + 3600))], lifetime: 0),
    ]

    @Test(arguments: lifetimeCases)
    func freshnessLifetime(_ row: LifetimeCase) {
        #expect(CacheRules.freshnessLifetime(Self.stored(row.headers)) == row.lifetime)
    }

    // MARK: - Age

    struct AgeCase: Sendable, CustomTestStringConvertible {
        var name: String
        var headers: [HeaderField]
        /// Seconds after `t0`; the request went out at `t0 - 2`, the head arrived at `t0`.
        var now: Double = 8
        var age: Double
        var testDescription: String { name }
    }

    static let ageCases: [AgeCase] = [
        .init(name: "no Date, no Age: the round trip plus the time since", headers: [], age: 10),
        .init(name: "Age adds to the round trip", headers: [HeaderField("Age", "30")], age: 40),
        .init(name: "a list Age: its first member", headers: [HeaderField("Age", "5, 7")], age: 15),
        .init(name: "Age that is not a number is ignored", headers: [HeaderField("Age", "abc")], age: 10),
        .init(name: "negative Age is ignored", headers: [HeaderField("Age", "-5")], age: 10),
        .init(name: "fractional Age is ignored", headers: [HeaderField("Age", "1.5")], age: 10),
        .init(name: "Date behind: its apparent age", headers: [HeaderField("Date", httpDate(t0 - 100))], age: 108),
        .init(
            name: "Age beyond the apparent age wins",
            headers: [HeaderField("Date", httpDate(t0 - 10)), HeaderField("Age", "50")], age: 60),
        .init(name: "Date ahead: no negative age", headers: [HeaderField("Date", httpDate(t0 + 100))], age: 10),
        .init(
            name: "a Date that is no date: the time it arrived", headers: [HeaderField("Date", "yesterday")], age: 10),
        .init(name: "a clock turned back: no time resident", headers: [], now: -50, age: 2),
    ]

    @Test(arguments: ageCases)
    func currentAge(_ row: AgeCase) {
        let response = Self.stored(row.headers, requestTime: Self.t0 - 2, responseTime: Self.t0)
        #expect(CacheRules.currentAge(response, now: Self.t0 + row.now) == row.age)
    }

    /// A server whose clock is an hour off ours, sending `max-age=60`.
    ///
    /// §4.2.3 takes apparent_age = max(0, response_time − date_value) and
    /// corrected_initial_age = max(apparent_age, age_value + response_delay):
    /// - Date an hour ahead: apparent_age is max(0, −3600) = 0, so the age counts from
    ///   arrival and the response is fresh for its 60 s, not an hour more (max-age, unlike
    ///   Expires, is relative to the age, not to the server's clock).
    /// - Date an hour behind: apparent_age is 3600, so the response is stale at once. The
    ///   formula deliberately takes the larger estimate; what it costs is a conditional
    ///   request answered by a 304, never a stale answer.
    @Test func serverClockSkewFollowsTheAgeFormula() {
        let ahead = Self.stored([
            HeaderField("Date", Self.httpDate(Self.t0 + 3600)), Self.cacheControl("max-age=60"),
            HeaderField("ETag", Self.etag),
        ])
        #expect(CacheRules.currentAge(ahead, now: Self.t0) == 0)
        #expect(CacheRules.lookup(Self.request(), stored: ahead, now: Self.t0 + 59) == .serve(age: 59))
        #expect(CacheRules.lookup(Self.request(), stored: ahead, now: Self.t0 + 60) == .revalidate([Self.ifNoneMatch]))
        #expect(
            CacheRules.lookup(Self.request(), stored: ahead, now: Self.t0 + 1800) == .revalidate([Self.ifNoneMatch]))

        let behind = Self.stored([
            HeaderField("Date", Self.httpDate(Self.t0 - 3600)), Self.cacheControl("max-age=60"),
            HeaderField("ETag", Self.etag),
        ])
        #expect(CacheRules.currentAge(behind, now: Self.t0) == 3600)
        #expect(CacheRules.lookup(Self.request(), stored: behind, now: Self.t0) == .revalidate([Self.ifNoneMatch]))
    }

    // MARK: - Storing

    struct StoreCase: Sendable, CustomTestStringConvertible {
        var name: String
        var request: [HeaderField] = []
        var credentials = false
        var status = 200
        var response: [HeaderField]
        var stored: Bool
        var testDescription: String { name }
    }

    static let storeCases: [StoreCase] = [
        .init(name: "200 with max-age", response: [cacheControl("max-age=60")], stored: true),
        .init(name: "200 with only a validator", response: [HeaderField("ETag", etag)], stored: true),
        .init(name: "200 with nothing (heuristically cacheable)", response: [], stored: true),
        .init(name: "206 is not stored", status: 206, response: [cacheControl("max-age=60")], stored: false),
        .init(name: "304 is not stored", status: 304, response: [cacheControl("max-age=60")], stored: false),
        .init(name: "404 is not stored", status: 404, response: [cacheControl("max-age=60")], stored: false),
        .init(name: "response no-store", response: [cacheControl("no-store")], stored: false),
        .init(
            name: "response no-store among other directives, any case",
            response: [cacheControl("max-age=60, No-Store")], stored: false),
        .init(
            name: "response no-store on a second line",
            response: [cacheControl("max-age=60"), cacheControl("no-store")], stored: false),
        .init(
            name: "request no-store", request: [cacheControl("no-store")], response: [cacheControl("max-age=60")],
            stored: false),
        .init(
            name: "private is stored by a private cache", response: [cacheControl("private, max-age=60")],
            stored: true),
        .init(name: "no-cache is stored (and always revalidated)", response: [cacheControl("no-cache")], stored: true),
        .init(
            name: "Vary: * is not stored", response: [cacheControl("max-age=60"), HeaderField("Vary", "*")],
            stored: false),
        .init(
            name: "Vary with * among names is not stored",
            response: [cacheControl("max-age=60"), HeaderField("Vary", "Accept-Encoding, *")], stored: false),
        .init(
            name: "Vary naming fields is stored",
            response: [cacheControl("max-age=60"), HeaderField("Vary", "Accept-Encoding")], stored: true),
        .init(
            name: "credentials, max-age only: not stored", credentials: true, response: [cacheControl("max-age=60")],
            stored: false),
        .init(
            name: "credentials, private: not stored", credentials: true,
            response: [cacheControl("private, max-age=60")], stored: false),
        .init(
            name: "credentials, public: stored", credentials: true, response: [cacheControl("public, max-age=60")],
            stored: true),
        .init(
            name: "credentials, s-maxage: stored", credentials: true, response: [cacheControl("s-maxage=60")],
            stored: true),
        .init(
            name: "credentials, must-revalidate: stored", credentials: true,
            response: [cacheControl("must-revalidate, max-age=60")], stored: true),
        .init(
            name: "credentials, public but no-store: not stored", credentials: true,
            response: [cacheControl("public, no-store")], stored: false),
    ]

    @Test(arguments: storeCases)
    func mayStore(_ row: StoreCase) {
        let request = Self.request(.useProtocolCachePolicy, row.request, credentials: row.credentials)
        #expect(CacheRules.mayStore(request, status: row.status, headers: row.response) == row.stored)
    }

    // MARK: - Lookup (useProtocolCachePolicy)

    struct LookupCase: Sendable, CustomTestStringConvertible {
        var name: String
        var stored: [HeaderField]
        var varying: [HeaderField] = []
        var request: [HeaderField] = []
        /// Seconds after `t0` (when the stored response was requested and received).
        var at: Double
        var lookup: Lookup
        var testDescription: String { name }
    }

    static let fresh600 = [cacheControl("max-age=600"), HeaderField("ETag", etag)]
    static let stale60 = [cacheControl("max-age=60"), HeaderField("ETag", etag)]

    static let lookupCases: [LookupCase] = [
        // Freshness
        .init(name: "fresh by max-age: served with its age", stored: stale60, at: 10, lookup: .serve(age: 10)),
        .init(
            name: "stale at exactly its lifetime: revalidated", stored: stale60, at: 60,
            lookup: .revalidate([ifNoneMatch])),
        .init(name: "stale without a validator: loaded", stored: [cacheControl("max-age=60")], at: 61, lookup: .load),
        .init(
            name: "no lifetime at all: stale at once", stored: [HeaderField("ETag", etag)], at: 0,
            lookup: .revalidate([ifNoneMatch])),
        .init(
            name: "heuristic: fresh within a tenth of its Last-Modified age",
            stored: [HeaderField("Last-Modified", lastModified)], at: 999, lookup: .serve(age: 999)),
        .init(
            name: "heuristic: stale after it", stored: [HeaderField("Last-Modified", lastModified)], at: 1000,
            lookup: .revalidate([ifModifiedSince])),
        .init(
            name: "invalid Expires: stale at once", stored: [HeaderField("Expires", "0"), HeaderField("ETag", etag)],
            at: 0, lookup: .revalidate([ifNoneMatch])),
        // The response's no-cache
        .init(
            name: "response no-cache: revalidated while fresh", stored: [cacheControl("no-cache")] + fresh600, at: 1,
            lookup: .revalidate([ifNoneMatch])),
        .init(
            name: "response no-cache with field names: as plain no-cache",
            stored: [cacheControl("no-cache=\"Set-Cookie\"")] + fresh600, at: 1, lookup: .revalidate([ifNoneMatch])),
        .init(
            name: "response no-cache without a validator: loaded",
            stored: [cacheControl("no-cache, max-age=600")], at: 1, lookup: .load),
        // The request's directives
        .init(
            name: "request no-store: loaded though fresh", stored: fresh600, request: [cacheControl("no-store")],
            at: 10, lookup: .load),
        .init(
            name: "request no-cache: revalidated though fresh", stored: fresh600, request: [cacheControl("no-cache")],
            at: 10, lookup: .revalidate([ifNoneMatch])),
        .init(
            name: "request Pragma: no-cache without Cache-Control: revalidated", stored: fresh600,
            request: [HeaderField("Pragma", "no-cache")], at: 10, lookup: .revalidate([ifNoneMatch])),
        .init(
            name: "request Pragma: no-cache beside a Cache-Control: Pragma ignored", stored: fresh600,
            request: [HeaderField("Pragma", "no-cache"), cacheControl("max-age=600")], at: 10, lookup: .serve(age: 10)),
        .init(
            name: "request max-age=0: revalidated though fresh", stored: fresh600, request: [cacheControl("max-age=0")],
            at: 10, lookup: .revalidate([ifNoneMatch])),
        .init(
            name: "request max-age=0 at age 0: revalidated all the same", stored: fresh600,
            request: [cacheControl("max-age=0")], at: 0, lookup: .revalidate([ifNoneMatch])),
        .init(
            name: "request max-age above the age: served", stored: fresh600, request: [cacheControl("max-age=20")],
            at: 10, lookup: .serve(age: 10)),
        .init(
            name: "request max-age below the age: revalidated", stored: fresh600, request: [cacheControl("max-age=5")],
            at: 10, lookup: .revalidate([ifNoneMatch])),
        .init(
            name: "request min-fresh within what is left: served", stored: fresh600,
            request: [cacheControl("min-fresh=100")], at: 10, lookup: .serve(age: 10)),
        .init(
            name: "request min-fresh beyond what is left: revalidated", stored: fresh600,
            request: [cacheControl("min-fresh=595")], at: 10, lookup: .revalidate([ifNoneMatch])),
        .init(
            name: "request max-stale within: stale served", stored: stale60, request: [cacheControl("max-stale=100")],
            at: 100, lookup: .serve(age: 100)),
        .init(
            name: "request max-stale exceeded: revalidated", stored: stale60, request: [cacheControl("max-stale=10")],
            at: 100, lookup: .revalidate([ifNoneMatch])),
        .init(
            name: "request max-stale without a value: any staleness served", stored: stale60,
            request: [cacheControl("max-stale")], at: 100_000, lookup: .serve(age: 100_000)),
        .init(
            name: "request max-stale, response must-revalidate: revalidated",
            stored: [cacheControl("must-revalidate")] + stale60, request: [cacheControl("max-stale")], at: 100,
            lookup: .revalidate([ifNoneMatch])),
        // immutable (RFC 8246)
        .init(
            name: "immutable fresh, request no-cache: served", stored: [cacheControl("immutable")] + fresh600,
            request: [cacheControl("no-cache")], at: 10, lookup: .serve(age: 10)),
        .init(
            name: "immutable fresh, request max-age=0: served", stored: [cacheControl("immutable")] + fresh600,
            request: [cacheControl("max-age=0")], at: 10, lookup: .serve(age: 10)),
        .init(
            name: "immutable fresh, request Pragma: no-cache: served", stored: [cacheControl("immutable")] + fresh600,
            request: [HeaderField("Pragma", "no-cache")], at: 10, lookup: .serve(age: 10)),
        .init(
            name: "immutable stale, request no-cache: revalidated", stored: [cacheControl("immutable")] + fresh600,
            request: [cacheControl("no-cache")], at: 600, lookup: .revalidate([ifNoneMatch])),
        .init(
            name: "immutable with its own no-cache: revalidated",
            stored: [cacheControl("immutable, no-cache")] + fresh600, at: 10, lookup: .revalidate([ifNoneMatch])),
        // must-revalidate
        .init(
            name: "must-revalidate fresh: served", stored: [cacheControl("must-revalidate")] + stale60, at: 10,
            lookup: .serve(age: 10)),
        .init(
            name: "must-revalidate stale: revalidated, even within stale-while-revalidate",
            stored: [cacheControl("must-revalidate, stale-while-revalidate=600")] + stale60, at: 100,
            lookup: .revalidate([ifNoneMatch])),
        .init(
            name: "must-revalidate stale without a validator: loaded",
            stored: [cacheControl("max-age=60, must-revalidate")], at: 100, lookup: .load),
        .init(
            name: "proxy-revalidate is for shared caches: ignored",
            stored: [cacheControl("proxy-revalidate, stale-while-revalidate=600")] + stale60, at: 100,
            lookup: .serveStale(age: 100, revalidation: [ifNoneMatch])),
        // stale-while-revalidate (RFC 5861)
        .init(
            name: "stale-while-revalidate inside its window: served stale, revalidated behind",
            stored: [cacheControl("stale-while-revalidate=60"), HeaderField("Last-Modified", lastModified)] + stale60,
            at: 100, lookup: .serveStale(age: 100, revalidation: [ifNoneMatch, ifModifiedSince])),
        .init(
            name: "stale-while-revalidate at its window's end: revalidated",
            stored: [cacheControl("stale-while-revalidate=60")] + stale60, at: 120, lookup: .revalidate([ifNoneMatch])),
        .init(
            name: "stale-while-revalidate outside its window: revalidated",
            stored: [cacheControl("stale-while-revalidate=60")] + stale60, at: 500, lookup: .revalidate([ifNoneMatch])),
        .init(
            name: "stale-while-revalidate without a validator: loaded",
            stored: [cacheControl("max-age=60, stale-while-revalidate=60")], at: 100, lookup: .load),
        .init(
            name: "stale-while-revalidate, request no-cache: revalidated",
            stored: [cacheControl("stale-while-revalidate=60")] + stale60, request: [cacheControl("no-cache")],
            at: 100, lookup: .revalidate([ifNoneMatch])),
        .init(
            name: "stale-while-revalidate while fresh: plain serve",
            stored: [cacheControl("stale-while-revalidate=60")] + stale60, at: 10, lookup: .serve(age: 10)),
        // Vary
        .init(
            name: "Vary matched: served", stored: fresh600 + [HeaderField("Vary", "Accept-Encoding")],
            varying: [HeaderField("accept-encoding", "gzip")], request: [HeaderField("Accept-Encoding", "gzip")],
            at: 10, lookup: .serve(age: 10)),
        .init(
            name: "Vary mismatched: loaded", stored: fresh600 + [HeaderField("Vary", "Accept-Encoding")],
            varying: [HeaderField("accept-encoding", "gzip")], request: [HeaderField("Accept-Encoding", "br")],
            at: 10, lookup: .load),
        .init(
            name: "Vary values compared exactly", stored: fresh600 + [HeaderField("Vary", "Accept-Encoding")],
            varying: [HeaderField("accept-encoding", "gzip")], request: [HeaderField("Accept-Encoding", "GZIP")],
            at: 10, lookup: .load),
        .init(
            name: "Vary field absent in both: served", stored: fresh600 + [HeaderField("Vary", "Accept-Language")],
            at: 10, lookup: .serve(age: 10)),
        .init(
            name: "Vary field sent now, absent before: loaded",
            stored: fresh600 + [HeaderField("Vary", "Accept-Language")],
            request: [HeaderField("Accept-Language", "en")], at: 10, lookup: .load),
        .init(
            name: "Vary field sent before, absent now: loaded",
            stored: fresh600 + [HeaderField("Vary", "Accept-Language")],
            varying: [HeaderField("accept-language", "en")], at: 10, lookup: .load),
        .init(
            name: "Vary names case-insensitive, values trimmed",
            stored: fresh600 + [HeaderField("Vary", "accept-encoding , X-Client")],
            varying: [HeaderField("accept-encoding", "gzip"), HeaderField("x-client", "a")],
            request: [HeaderField("ACCEPT-ENCODING", " gzip "), HeaderField("x-client", "a\t")], at: 10,
            lookup: .serve(age: 10)),
        .init(name: "Vary: * never served", stored: fresh600 + [HeaderField("Vary", "*")], at: 10, lookup: .load),
    ]

    @Test(arguments: lookupCases)
    func protocolLookup(_ row: LookupCase) {
        let stored = Self.stored(row.stored, varying: row.varying)
        let request = Self.request(.useProtocolCachePolicy, row.request)
        #expect(CacheRules.lookup(request, stored: stored, now: Self.t0 + row.at) == row.lookup)
    }

    // MARK: - Conditional fields

    struct ConditionsCase: Sendable, CustomTestStringConvertible {
        var name: String
        var validators: [HeaderField]
        var lookup: Lookup
        var testDescription: String { name }
    }

    static let conditionsCases: [ConditionsCase] = [
        .init(
            name: "ETag only: If-None-Match", validators: [HeaderField("ETag", etag)],
            lookup: .revalidate([ifNoneMatch])),
        .init(
            name: "weak ETag: sent as stored", validators: [HeaderField("etag", "W/\"v1\"")],
            lookup: .revalidate([HeaderField("If-None-Match", "W/\"v1\"")])),
        .init(
            name: "Last-Modified only: If-Modified-Since", validators: [HeaderField("Last-Modified", lastModified)],
            lookup: .revalidate([ifModifiedSince])),
        .init(
            name: "both: both", validators: [HeaderField("Last-Modified", lastModified), HeaderField("ETag", etag)],
            lookup: .revalidate([ifNoneMatch, ifModifiedSince])),
        .init(name: "neither: loaded", validators: [HeaderField("Content-Type", "text/plain")], lookup: .load),
    ]

    @Test(arguments: conditionsCases)
    func conditionalFields(_ row: ConditionsCase) {
        let stored = Self.stored([Self.cacheControl("max-age=60")] + row.validators)
        #expect(CacheRules.lookup(Self.request(), stored: stored, now: Self.t0 + 100) == row.lookup)
    }

    // MARK: - Policies

    /// What the cache holds for a policy case, and what the request sends.
    enum Holding: String, Sendable, CaseIterable {
        case nothing, fresh, stale, noCache, varyMismatch, varyStar

        var stored: CachedResponse? {
            switch self {
            case .nothing: nil
            case .fresh: CacheRulesTests.stored(CacheRulesTests.fresh600)
            case .stale: CacheRulesTests.stored(CacheRulesTests.stale60)
            case .noCache: CacheRulesTests.stored([CacheRulesTests.cacheControl("no-cache")] + CacheRulesTests.fresh600)
            case .varyMismatch:
                CacheRulesTests.stored(
                    CacheRulesTests.fresh600 + [HeaderField("Vary", "Accept-Encoding")],
                    varying: [HeaderField("accept-encoding", "gzip")])
            case .varyStar: CacheRulesTests.stored(CacheRulesTests.fresh600 + [HeaderField("Vary", "*")])
            }
        }
    }

    struct PolicyCase: Sendable, CustomTestStringConvertible {
        var policy: Policy
        var holding: Holding
        var lookup: Lookup
        var testDescription: String { "\(policy), \(holding)" }
    }

    /// Every policy against every holding, looked up 100 s after `t0` (`fresh600` fresh,
    /// `stale60` stale) by a request sending `Accept-Encoding: br`.
    static let policyCases: [PolicyCase] = [
        .init(policy: .useProtocolCachePolicy, holding: .nothing, lookup: .load),
        .init(policy: .useProtocolCachePolicy, holding: .fresh, lookup: .serve(age: 100)),
        .init(policy: .useProtocolCachePolicy, holding: .stale, lookup: .revalidate([ifNoneMatch])),
        .init(policy: .useProtocolCachePolicy, holding: .noCache, lookup: .revalidate([ifNoneMatch])),
        .init(policy: .useProtocolCachePolicy, holding: .varyMismatch, lookup: .load),
        .init(policy: .useProtocolCachePolicy, holding: .varyStar, lookup: .load),
        .init(policy: .reloadIgnoringCache, holding: .nothing, lookup: .load),
        .init(policy: .reloadIgnoringCache, holding: .fresh, lookup: .load),
        .init(policy: .reloadIgnoringCache, holding: .stale, lookup: .load),
        .init(policy: .reloadIgnoringCache, holding: .noCache, lookup: .load),
        .init(policy: .reloadIgnoringCache, holding: .varyMismatch, lookup: .load),
        .init(policy: .reloadIgnoringCache, holding: .varyStar, lookup: .load),
        .init(policy: .returnCacheDataElseLoad, holding: .nothing, lookup: .load),
        .init(policy: .returnCacheDataElseLoad, holding: .fresh, lookup: .serve(age: 100)),
        .init(policy: .returnCacheDataElseLoad, holding: .stale, lookup: .serve(age: 100)),
        .init(policy: .returnCacheDataElseLoad, holding: .noCache, lookup: .serve(age: 100)),
        .init(policy: .returnCacheDataElseLoad, holding: .varyMismatch, lookup: .load),
        .init(policy: .returnCacheDataElseLoad, holding: .varyStar, lookup: .load),
        .init(policy: .returnCacheDataDontLoad, holding: .nothing, lookup: .unavailable),
        .init(policy: .returnCacheDataDontLoad, holding: .fresh, lookup: .serve(age: 100)),
        .init(policy: .returnCacheDataDontLoad, holding: .stale, lookup: .serve(age: 100)),
        .init(policy: .returnCacheDataDontLoad, holding: .noCache, lookup: .serve(age: 100)),
        .init(policy: .returnCacheDataDontLoad, holding: .varyMismatch, lookup: .unavailable),
        .init(policy: .returnCacheDataDontLoad, holding: .varyStar, lookup: .unavailable),
    ]

    @Test(arguments: policyCases)
    func everyPolicy(_ row: PolicyCase) {
        let request = Self.request(row.policy, [HeaderField("Accept-Encoding", "br")])
        #expect(CacheRules.lookup(request, stored: row.holding.stored, now: Self.t0 + 100) == row.lookup)
    }

    @Test func policyTableCoversEveryPolicyAndHolding() {
        let covered = Set(Self.policyCases.map { "\($0.policy), \($0.holding)" })
        for policy in Policy.allCases {
            for holding in Holding.allCases { #expect(covered.contains("\(policy), \(holding)")) }
        }
    }

    // MARK: - Vary recorded

    @Test func varyingRecordsTheNamedRequestFields() {
        let request = Self.request(
            .useProtocolCachePolicy,
            [
                HeaderField("Accept-Encoding", "gzip"), HeaderField("accept-language", " en "),
                HeaderField("Accept-Language", "fr"), HeaderField("X-Other", "1"),
            ])
        let response = [
            HeaderField("Vary", "Accept-Encoding, Accept-Language"), HeaderField("Vary", "X-Absent, accept-encoding"),
        ]
        #expect(
            CacheRules.varying(request, responseHeaders: response) == [
                HeaderField("accept-encoding", "gzip"), HeaderField("accept-language", "en, fr"),
            ])
        // What it records makes the same request match, and another not.
        let stored = Self.stored(
            Self.fresh600 + response, varying: CacheRules.varying(request, responseHeaders: response))
        #expect(CacheRules.lookup(request, stored: stored, now: Self.t0 + 1) == .serve(age: 1))
        let other = Self.request(.useProtocolCachePolicy, [HeaderField("Accept-Encoding", "gzip")])
        #expect(CacheRules.lookup(other, stored: stored, now: Self.t0 + 1) == .load)
    }

    // MARK: - 304

    @Test func notModifiedReplacesAddsAndKeepsFieldsAndMakesItFreshAgain() {
        let stored = Self.stored(
            [
                HeaderField("Date", Self.httpDate(Self.t0)), Self.cacheControl("max-age=60"),
                HeaderField("ETag", "W/\"v1\""), HeaderField("Content-Type", "text/plain"),
                HeaderField("Content-Length", "100"), HeaderField("Link", "<a>; rel=x"),
                HeaderField("Link", "<b>; rel=y"), HeaderField("Content-Encoding", "gzip"),
            ], varying: [HeaderField("accept-encoding", "gzip")])
        let notModified = [
            HeaderField("date", Self.httpDate(Self.t0 + 1000)), Self.cacheControl("max-age=120"),
            HeaderField("ETag", Self.etag), HeaderField("Content-Length", "0"),
            HeaderField("Content-Encoding", "identity"), HeaderField("Transfer-Encoding", "chunked"),
            HeaderField("Link", "<c>; rel=z"), HeaderField("X-Served-By", "b"),
        ]
        // Stale before the 304
        #expect(
            CacheRules.lookup(Self.request(), stored: stored, now: Self.t0 + 1010)
                == .revalidate([HeaderField("If-None-Match", "W/\"v1\"")]))

        let updated = CacheRules.updated(
            stored, notModified: notModified, requestTime: Self.t0 + 999, responseTime: Self.t0 + 1000)

        #expect(
            updated.headers == [
                HeaderField("date", Self.httpDate(Self.t0 + 1000)), Self.cacheControl("max-age=120"),
                HeaderField("ETag", Self.etag), HeaderField("Content-Type", "text/plain"),
                HeaderField("Content-Length", "100"), HeaderField("Link", "<c>; rel=z"),
                HeaderField("Content-Encoding", "gzip"), HeaderField("X-Served-By", "b"),
            ])
        #expect(updated.requestTime == Self.t0 + 999)
        #expect(updated.responseTime == Self.t0 + 1000)
        #expect(updated.url == stored.url && updated.status == 200 && updated.bodySize == 100)
        #expect(updated.varying == stored.varying)
        // Fresh again: 1 s of round trip plus 10 s since, of 120
        #expect(CacheRules.lookup(Self.request(), stored: updated, now: Self.t0 + 1010) == .serve(age: 11))
        #expect(
            CacheRules.lookup(Self.request(), stored: updated, now: Self.t0 + 1119) == .revalidate([Self.ifNoneMatch]))
    }

    /// A 304 without Date or Age: the stored ones described the first response, and kept
    /// they would make it an hour old (or 50 s older) at once.
    @Test func notModifiedWithoutDateOrAgeLeavesNoOldOnes() {
        let stored = Self.stored([
            HeaderField("Date", Self.httpDate(Self.t0)), HeaderField("Age", "50"), Self.cacheControl("max-age=60"),
            HeaderField("ETag", Self.etag),
        ])
        let updated = CacheRules.updated(
            stored, notModified: [HeaderField("ETag", Self.etag)], requestTime: Self.t0 + 3599,
            responseTime: Self.t0 + 3600)
        #expect(updated.headers == [Self.cacheControl("max-age=60"), HeaderField("ETag", Self.etag)])
        #expect(CacheRules.lookup(Self.request(), stored: updated, now: Self.t0 + 3605) == .serve(age: 6))
    }

    // MARK: - HTTP dates

    struct DateCase: Sendable, CustomTestStringConvertible {
        var text: String
        var seconds: Double?
        var testDescription: String { "\"\(text)\"" }
    }

    /// Sun, 06 Nov 1994 08:49:37 GMT, the RFC's example.
    static let example: Double = 784_111_777

    static let dateCases: [DateCase] = [
        .init(text: "Sun, 06 Nov 1994 08:49:37 GMT", seconds: example),
        .init(text: "Sunday, 06-Nov-94 08:49:37 GMT", seconds: example),
        .init(text: "Sun Nov  6 08:49:37 1994", seconds: example),
        .init(text: "Wed Nov 16 08:49:37 1994", seconds: example + 10 * 86_400),
        .init(text: " Sun, 06 Nov 1994 08:49:37 GMT\t", seconds: example),
        .init(text: "Thu, 01 Jan 1970 00:00:00 GMT", seconds: 0),
        .init(text: "Wed, 31 Dec 1969 23:59:59 GMT", seconds: -1),
        .init(text: "Thu, 29 Feb 2024 12:00:00 GMT", seconds: 1_709_208_000),
        .init(text: "Sat, 31 Dec 2016 23:59:60 GMT", seconds: 1_483_228_800),
        .init(text: "Tue, 14 Nov 2023 22:13:20 GMT", seconds: t0),
        // Garbage
        .init(text: "", seconds: nil),
        .init(text: "0", seconds: nil),
        .init(text: "-1", seconds: nil),
        .init(text: "1994-11-06T08:49:37Z", seconds: nil),
        .init(text: "Sun, 06 Nov 1994 08:49:37", seconds: nil),
        .init(text: "Sun, 06 Nov 1994 08:49:37 UTC", seconds: nil),
        .init(text: "Sun, 06 Nov 1994 08:49:37 gmt", seconds: nil),
        .init(text: "Sun, 06 Nov 1994 08:49:37 GMT x", seconds: nil),
        .init(text: "Sun, 6 Nov 1994 08:49:37 GMT", seconds: nil),
        .init(text: "sun, 06 nov 1994 08:49:37 GMT", seconds: nil),
        .init(text: "Sun, 06 Foo 1994 08:49:37 GMT", seconds: nil),
        .init(text: "Sunday, 06 Nov 1994 08:49:37 GMT", seconds: nil),
        .init(text: "Sun, 06-Nov-94 08:49:37 GMT", seconds: nil),
        .init(text: "Funday, 06-Nov-94 08:49:37 GMT", seconds: nil),
        .init(text: "Sun Nov 6 08:49:37 1994", seconds: nil),
        .init(text: "Sun, 31 Feb 1994 08:49:37 GMT", seconds: nil),
        .init(text: "Wed, 29 Feb 2023 12:00:00 GMT", seconds: nil),
        .init(text: "Sun, 00 Nov 1994 08:49:37 GMT", seconds: nil),
        .init(text: "Sun, 06 Nov 1994 24:00:00 GMT", seconds: nil),
        .init(text: "Sun, 06 Nov 1994 08:60:00 GMT", seconds: nil),
        .init(text: "Sun, 06 Nov 1994 08:49:61 GMT", seconds: nil),
    ]

    @Test(arguments: dateCases)
    func parsesHTTPDates(_ row: DateCase) {
        #expect(HTTPDateParser.parse(row.text, relativeTo: Self.t0) == row.seconds)
    }

    /// Foundation's idea of a UTC day, to check the parser against.
    static func utc(_ year: Int, _ month: Int, _ day: Int) -> Double {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "GMT") ?? calendar.timeZone
        let date = calendar.date(from: DateComponents(year: year, month: month, day: day))
        return date?.timeIntervalSince1970 ?? .nan
    }

    /// An RFC 850 year is the one with its two digits at most 50 years after the time the
    /// date was received, and less than 50 before it (RFC 9110 §5.6.7).
    @Test(arguments: [
        ("Thursday, 01-Jan-70 00:00:00 GMT", t0, utc(2070, 1, 1)),
        ("Wednesday, 01-Jan-73 00:00:00 GMT", t0, utc(2073, 1, 1)),
        ("Tuesday, 01-Jan-74 00:00:00 GMT", t0, utc(1974, 1, 1)),
        ("Saturday, 01-Jan-00 00:00:00 GMT", t0, utc(2000, 1, 1)),
        ("Sunday, 01-Jan-20 00:00:00 GMT", utc(2080, 6, 1), utc(2120, 1, 1)),
        ("Sunday, 01-Jan-30 00:00:00 GMT", utc(2080, 6, 1), utc(2130, 1, 1)),
        ("Sunday, 01-Jan-30 00:00:00 GMT", utc(1979, 6, 1), utc(1930, 1, 1)),
    ])
    func rfc850TwoDigitYears(_ text: String, _ reference: Double, _ seconds: Double) {
        #expect(HTTPDateParser.parse(text, relativeTo: reference) == seconds)
    }
}
