import Foundation
import NIOCore
import NIOHTTP1

/// Routing: turns a request into a ``ResponsePlan``. See ``FaultServer`` for the routes.
extension ServerCore {
    /// The body of injected failures (`fail=S`): 512 bytes of text.
    static let failureBody = String(String(repeating: "error body\n", count: 47).prefix(512))

    /// Plans the response to a request. Fault counters are consumed here, so this must be
    /// called exactly once per request, when it is about to be answered.
    func plan(method: HTTPMethod, target: RequestTarget, headers: HTTPHeaders) -> ResponsePlan {
        guard method == .GET || method == .HEAD else {
            var plan = ResponsePlan.text(.methodNotAllowed, "method not allowed\n")
            plan.headers.add(name: "allow", value: "GET, HEAD")
            return plan
        }
        let knobs: FaultKnobs
        do {
            knobs = try FaultKnobs(query: target.query)
        } catch {
            return .text(.badRequest, "\(error)\n")
        }

        if let failStatus = knobs.fail, self.consumeFault("fail", path: target.path, times: knobs.failTimes) {
            var plan = ResponsePlan.text(HTTPResponseStatus(statusCode: failStatus), Self.failureBody)
            if let retryAfter = knobs.retryAfter {
                plan.headers.add(name: "retry-after", value: retryAfter)
            }
            return plan
        }

        if let token = knobs.token, self.isExpired(token: token) {
            // What S3 answers for a presigned URL past its expiry.
            return .text(
                .forbidden,
                "<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>\n")
        }

        let components = target.components
        switch (components.first, components.count) {
        case ("files", 2...):
            let rawName = target.path.drop { $0 == "/" }.dropFirst("files/".count)
            return self.planFile(
                name: RequestTarget.percentDecode(rawName),
                isHead: method == .HEAD,
                path: target.path,
                knobs: knobs,
                headers: headers
            )
        case ("status", 2):
            guard let code = Int(components[1]), (200...999).contains(code) else {
                return .text(.badRequest, "invalid status code\n")
            }
            var plan = ResponsePlan.text(HTTPResponseStatus(statusCode: code), "status \(code)")
            if let retryAfter = knobs.retryAfter {
                plan.headers.add(name: "retry-after", value: retryAfter)
            }
            return plan
        case ("redirect", 2):
            guard let remaining = Int(components[1]), remaining >= 0 else {
                return .text(.badRequest, "invalid redirect count\n")
            }
            let destination = target.query["to"] ?? "/status/200"
            let location =
                remaining == 0
                ? self.absoluteURL(destination)
                : "\(self.baseURL)/redirect/\(remaining - 1)?to=\(RequestTarget.percentEncodeQueryValue(destination))"
                    + (target.query["code"].map { "&code=\($0)" } ?? "")
            return self.redirect(to: location, code: target.query["code"])
        case ("sign", 2...):
            // A signing endpoint: redirects to the file with a fresh token; the first token
            // minted expires after `expire_after` bytes, as `/files/` would.
            let name = target.path.drop { $0 == "/" }.dropFirst("sign/".count)
            let (token, first) = self.mintToken()
            var location = "\(self.baseURL)/files/\(name)?token=\(token)"
            if first, let bytes = knobs.expireAfter { location += "&expire_after=\(bytes)" }
            return self.redirect(to: location, code: target.query["code"])
        case ("loop", 2):
            let next = components[1] == "a" ? "b" : "a"
            return self.redirect(to: "\(self.baseURL)/loop/\(next)", code: target.query["code"])
        case ("echo-headers", 1):
            var text = ""
            for header in headers {
                text += "\(header.name.lowercased()): \(header.value)\n"
            }
            return .text(.ok, text)
        default:
            return .text(.notFound, "not found: \(target.path)\n")
        }
    }

    private func absoluteURL(_ destination: String) -> String {
        // Absolute already, in any scheme (a redirect to ftp: or file: is a test case too).
        if let colon = destination.firstIndex(of: ":"),
            destination[..<colon].allSatisfy({ $0.isLetter || $0 == "+" || $0 == "-" || $0 == "." }),
            !destination[..<colon].isEmpty
        {
            return destination
        }
        return destination.hasPrefix("/") ? self.baseURL + destination : self.baseURL + "/" + destination
    }

    private func redirect(to location: String, code: String?) -> ResponsePlan {
        let status: HTTPResponseStatus
        switch code.flatMap({ Int($0) }) {
        case 301?: status = .movedPermanently
        case 303?: status = .seeOther
        case 307?: status = .temporaryRedirect
        case 308?: status = .permanentRedirect
        default: status = .found
        }
        var plan = ResponsePlan.text(status, "redirecting to \(location)\n")
        plan.headers.add(name: "location", value: location)
        return plan
    }

    private func planFile(
        name: String,
        isHead: Bool,
        path: String,
        knobs: FaultKnobs,
        headers requestHeaders: HTTPHeaders
    ) -> ResponsePlan {
        guard let file = self.file(name) else {
            return .text(.notFound, "no such file: \(name)\n")
        }
        let total = file.content.readableBytes
        let etag: String? =
            knobs.noValidators
            ? nil
            : file.etag.map { knobs.weakETag && !$0.hasPrefix("W/") ? "W/" + $0 : $0 }
        let lastModified = knobs.noValidators ? nil : file.lastModified

        var headers = HTTPHeaders()
        if !knobs.ignoreRange {
            headers.add(name: "accept-ranges", value: "bytes")
        }
        if let etag {
            headers.add(name: "etag", value: etag)
        }
        if let lastModified {
            headers.add(name: "last-modified", value: lastModified)
        }

        if knobs.setsCaching {
            let date = Date().addingTimeInterval(TimeInterval(knobs.dateSkew ?? 0))
            headers.add(name: "date", value: HTTPDate.format(date))
            if let cacheControl = knobs.cacheControl { headers.add(name: "cache-control", value: cacheControl) }
            if let expires = knobs.expires {
                let value = Int(expires).map { HTTPDate.format(date.addingTimeInterval(TimeInterval($0))) } ?? expires
                headers.add(name: "expires", value: value)
            }
            if let age = knobs.age { headers.add(name: "age", value: age) }
            if let vary = knobs.vary { headers.add(name: "vary", value: vary) }
        }

        if let ifNoneMatch = requestHeaders.first(name: "if-none-match"), let etag,
            Self.ifNoneMatch(ifNoneMatch, matches: etag)
        {
            return ResponsePlan(status: .notModified, headers: headers, body: nil)
        }
        if requestHeaders.first(name: "if-none-match") == nil, let since = requestHeaders.first(name: "if-modified-since"),
            let lastModified, since == lastModified
        {
            return ResponsePlan(status: .notModified, headers: headers, body: nil)
        }

        var status = HTTPResponseStatus.ok
        var range = 0..<total
        if !knobs.ignoreRange, let rangeHeader = requestHeaders.first(name: "range") {
            var honourRange = true
            if let ifRange = requestHeaders.first(name: "if-range") {
                let validator = String(ifRange.trimmingASCIIWhitespace())
                let matchesETag = etag.map { !$0.hasPrefix("W/") && $0 == validator } ?? false
                let matchesDate = lastModified.map { $0 == validator } ?? false
                honourRange = matchesETag || matchesDate
            }
            if honourRange {
                switch ByteRange(header: rangeHeader, total: total) {
                case .ignore:
                    break
                case .unsatisfiable:
                    headers.add(name: "content-range", value: "bytes */\(total)")
                    headers.add(name: "content-length", value: "0")
                    return ResponsePlan(status: .rangeNotSatisfiable, headers: headers, body: nil)
                case .satisfiable(let satisfiable):
                    status = .partialContent
                    range = satisfiable
                    headers.add(
                        name: "content-range",
                        value: "bytes \(satisfiable.lowerBound)-\(satisfiable.upperBound - 1)/\(total)"
                    )
                }
            }
        }

        headers.add(name: "content-type", value: "application/octet-stream")
        if let disposition = knobs.disposition {
            headers.add(name: "content-disposition", value: disposition)
        }
        let length = range.count
        if knobs.chunked {
            headers.add(name: "transfer-encoding", value: "chunked")
        } else {
            headers.add(name: "content-length", value: String(max(0, length + knobs.lieLength)))
        }

        var body = file.content.getSlice(at: file.content.readerIndex + range.lowerBound, length: length)
        for corrupt in knobs.corruptAt where range.contains(corrupt) {
            // A mirror that lies about a byte: the same size and validators, one bit flipped.
            guard var copy = body else { break }
            let index = copy.readerIndex + corrupt - range.lowerBound
            copy.setInteger(copy.getInteger(at: index, as: UInt8.self)! ^ 0x01, at: index)
            body = copy
        }
        var plan = ResponsePlan(status: status, headers: headers, body: body)
        plan.rate = knobs.rate
        if let gate = knobs.gate, let after = knobs.gateAfter {
            plan.hold = (gate, after, knobs.gateRate ?? ResponsePlan.trickleRate)
        }
        if knobs.chunked {
            plan.chunkSize = max(1, min(ResponsePlan.defaultChunkSize, (length + 3) / 4))
        }
        guard !isHead else { return plan }

        if let token = knobs.token, let expireAfter = knobs.expireAfter {
            // The URL expires while its body is sent: after `expire_after` bytes the
            // connection closes (FIN, so every one of them arrives) and the token is refused
            // from then on.
            self.expire(token: token)
            plan.bodyLimit = min(expireAfter, length)
            plan.ending = .reset(orderly: true)
        } else if let resetAfter = knobs.resetAfter, self.consumeFault("reset", path: path, times: knobs.resetTimes) {
            plan.bodyLimit = min(resetAfter, length)
            plan.ending = .reset(orderly: knobs.resetOrderly)
        } else if let stallAfter = knobs.stallAfter,
            self.consumeFault("stall", path: path, times: knobs.stallTimes)
        {
            plan.bodyLimit = min(stallAfter, length)
            plan.ending = .stall
        } else if knobs.lieLength != 0 && !knobs.chunked {
            plan.ending = .close
        }
        return plan
    }

    /// Weak comparison of an `If-None-Match` list against the current entity tag.
    static func ifNoneMatch(_ header: String, matches etag: String) -> Bool {
        func opaque(_ tag: Substring) -> Substring {
            tag.hasPrefix("W/") ? tag.dropFirst(2) : tag
        }
        let candidates = header.split(separator: ",").map { $0.trimmingASCIIWhitespace() }
        let current = opaque(Substring(etag))
        return candidates.contains { $0 == "*" || opaque($0) == current }
    }
}
