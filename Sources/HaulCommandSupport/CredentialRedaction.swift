import Foundation

/// Takes credentials out of text bound for a log: the user and password of a URL
/// (`https://user:secret@host` → `https://***@host`), the values of query parameters that
/// sign or authorize a URL (`X-Amz-Signature`, `X-Amz-Credential`, `X-Amz-Security-Token`,
/// `X-Goog-Signature`, `Signature`, `sig`, `token`, `access_token`, `key`, `password`, …),
/// and what follows `Bearer` or `Basic`.
package enum CredentialRedaction {
    /// Query parameters whose values are credentials, lowercased.
    static let secretParameters: Set<String> = [
        "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature", "x-goog-credential",
        "signature", "sig", "token", "access_token", "auth", "key", "api_key", "apikey", "password", "passwd",
        "secret", "client_secret", "policy", "key-pair-id",
    ]

    package static func redact(_ text: String) -> String {
        // Fast path: nothing that could hold a credential.
        guard text.contains("@") || text.contains("=") || text.contains("Bearer") || text.contains("Basic") else {
            return text
        }
        var result = redactUserInfo(text)
        result = redactParameters(result)
        result = redactSchemes(result)
        return result
    }

    /// `scheme://user:password@` → `scheme://***@`.
    private static func redactUserInfo(_ text: String) -> String {
        var output = ""
        var rest = Substring(text)
        while let marker = rest.range(of: "://") {
            output += rest[..<marker.upperBound]
            rest = rest[marker.upperBound...]
            // The authority ends at the first of / ? # or white space; a user part at its last @.
            let authorityEnd =
                rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" || $0.isWhitespace || $0 == "\"" || $0 == "'" }
                ?? rest.endIndex
            if let at = rest[..<authorityEnd].lastIndex(of: "@") {
                output += "***@"
                rest = rest[rest.index(after: at)...]
            }
        }
        return output + rest
    }

    /// `?…&sig=VALUE` → `?…&sig=***` for the parameters in ``secretParameters``.
    private static func redactParameters(_ text: String) -> String {
        var output = ""
        var rest = Substring(text)
        while let equals = rest.firstIndex(of: "=") {
            let before = rest[..<equals]
            // The parameter's name runs back to ? or & (or a space or quote for a form in text).
            let nameStart =
                before.lastIndex { $0 == "?" || $0 == "&" || $0 == ";" || $0.isWhitespace || $0 == "\"" || $0 == "," }
                .map { before.index(after: $0) } ?? before.startIndex
            let name = before[nameStart...].lowercased()
            output += rest[...equals]
            rest = rest[rest.index(after: equals)...]
            guard secretParameters.contains(name) else { continue }
            let valueEnd =
                rest.firstIndex { $0 == "&" || $0 == "#" || $0.isWhitespace || $0 == "\"" || $0 == "'" || $0 == ")" || $0 == "," }
                ?? rest.endIndex
            if valueEnd > rest.startIndex { output += "***" }
            rest = rest[valueEnd...]
        }
        return output + rest
    }

    /// `Bearer TOKEN` and `Basic CREDENTIALS` → `Bearer ***`, `Basic ***`.
    private static func redactSchemes(_ text: String) -> String {
        var result = text
        for scheme in ["Bearer ", "Basic "] {
            var output = ""
            var rest = Substring(result)
            while let found = rest.range(of: scheme) {
                output += rest[..<found.upperBound]
                rest = rest[found.upperBound...]
                let end = rest.firstIndex { $0.isWhitespace || $0 == "\"" || $0 == "'" || $0 == "," } ?? rest.endIndex
                if end > rest.startIndex { output += "***" }
                rest = rest[end...]
            }
            result = output + rest
        }
        return result
    }
}
