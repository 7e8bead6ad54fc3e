/// The text of an AWS shared credentials file (`~/.aws/credentials`) or config file
/// (`~/.aws/config`), parsed as the AWS CLI and SDKs read them.
///
/// ```ini
/// # a comment
/// [profile dev]                      ; a section: `[NAME]` in the credentials file
/// region = eu-west-1                 # a comment after white space ends the value
/// aws_access_key_id = AKIDEXAMPLE
/// s3 =
///   endpoint_url = http://127.0.0.1:8333
/// ```
///
/// - A line whose first non-blank character is `#` or `;` is a comment; so is the rest of
///   a value from a `#` or `;` that follows white space (the SDKs' rule; a `#` inside a
///   value, as in `a#b`, is kept).
/// - `[name]` opens a section; the name is trimmed. A section seen twice is merged, the
///   later values winning.
/// - `key = value` (or `key: value`) sets a property; keys are case-sensitive, values
///   trimmed. A key seen twice keeps the later value.
/// - An indented line after a property with an empty value is a sub-property of it
///   (`s3 =` then `  endpoint_url = …`); after a property with a value, it continues that
///   value on a new line.
///
/// Parse errors name the file and line but never quote the line, which may hold a secret.
struct AWSProfileFile: Sendable, Hashable {
    /// One `[section]`: its properties and sub-properties.
    struct Section: Sendable, Hashable {
        /// The properties, by key.
        var values: [String: String] = [:]
        /// The sub-properties of properties with an empty value (`s3 =`), by property then key.
        var nested: [String: [String: String]] = [:]
    }

    /// The sections, by their trimmed name as written (`default`, `profile dev`, `services s`).
    let sections: [String: Section]

    /// Parses `text`, the contents of the file at `path` (named in errors).
    ///
    /// - Throws: ``DownloadError/Code/invalidConfiguration`` naming the file and line of a
    ///   section header without its `]`, a property before any section, or a line that is
    ///   neither a section, a property nor a comment.
    init(parsing text: String, path: String) throws(DownloadError) {
        var sections: [String: Section] = [:]
        var current: String?
        /// The last property of the current section, for continuation lines.
        var property: String?
        func problem(_ line: Int, _ reason: String) -> DownloadError {
            DownloadError(.invalidConfiguration, "\(path) line \(line): \(reason)")
        }
        // "\r\n" is one Character in Swift: both end a line.
        let lines = text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" })
        for (offset, rawLine) in lines.enumerated() {
            let number = offset + 1
            let line = rawLine.hasSuffix("\r") ? rawLine.dropLast() : rawLine
            let trimmed = Self.trimmed(line)
            if trimmed.isEmpty || trimmed.hasPrefix("#") || trimmed.hasPrefix(";") { continue }
            if let first = line.first, first == " " || first == "\t", let current, let property {
                let content = Self.withoutComment(trimmed)
                if sections[current]?.values[property]?.isEmpty == true {
                    guard let (key, value) = Self.keyValue(content) else {
                        throw problem(number, "an indented line under \"\(property) =\" must be \"key = value\"")
                    }
                    sections[current]?.nested[property, default: [:]][key] = value
                } else {
                    sections[current]?.values[property, default: ""] += "\n" + content
                }
                continue
            }
            if trimmed.hasPrefix("[") {
                guard let close = trimmed.firstIndex(of: "]") else {
                    throw problem(number, "a section header must end with ]")
                }
                let rest = Self.trimmed(trimmed[trimmed.index(after: close)...])
                guard rest.isEmpty || rest.hasPrefix("#") || rest.hasPrefix(";") else {
                    throw problem(number, "only a comment may follow a section header's ]")
                }
                let name = String(Self.trimmed(trimmed[trimmed.index(after: trimmed.startIndex)..<close]))
                guard !name.isEmpty else { throw problem(number, "a section header has no name") }
                if sections[name] == nil { sections[name] = Section() }
                current = name
                property = nil
                continue
            }
            guard let (key, value) = Self.keyValue(Self.withoutComment(trimmed)) else {
                throw problem(number, "expected [section], key = value, or a comment starting with # or ;")
            }
            guard let section = current else {
                throw problem(number, "a property before any [section]")
            }
            sections[section]?.values[key] = value
            sections[section]?.nested[key] = nil
            property = key
        }
        self.sections = sections
    }

    /// The section of a credentials file for profile `name`: `[name]`.
    func credentialsProfile(_ name: String) -> Section? {
        sections[name]
    }

    /// The section of a config file for profile `name`: `[profile name]`, or for `default`
    /// `[default]` too (merged, `[profile default]` winning).
    func configProfile(_ name: String) -> Section? {
        let prefixed = section(kind: "profile", name: name)
        guard name == "default", let plain = sections["default"] else { return prefixed }
        guard let prefixed else { return plain }
        var merged = plain
        merged.values.merge(prefixed.values) { _, new in new }
        merged.nested.merge(prefixed.nested) { _, new in new }
        return merged
    }

    /// The section `[KIND NAME]` (`[services my-services]`), with any white space between
    /// the two words.
    func section(kind: String, name: String) -> Section? {
        sections.first { key, _ in
            let words = key.split(whereSeparator: { $0 == " " || $0 == "\t" })
            return words.count == 2 && words[0] == kind && words[1] == name
        }?.value
    }

    /// `line` without a comment that starts after white space (` # …`, `\t; …`).
    static func withoutComment(_ line: Substring) -> Substring {
        var previous: Character = " "
        for index in line.indices {
            let character = line[index]
            if (character == "#" || character == ";") && (previous == " " || previous == "\t") {
                return trimmed(line[..<index])
            }
            previous = character
        }
        return line
    }

    /// `key` and `value` of `key = value` or `key: value` (the first of `=` and `:`), both
    /// trimmed, or `nil` without a delimiter or with an empty key.
    static func keyValue(_ line: Substring) -> (String, String)? {
        guard let delimiter = line.firstIndex(where: { $0 == "=" || $0 == ":" }) else { return nil }
        let key = trimmed(line[..<delimiter])
        guard !key.isEmpty else { return nil }
        return (String(key), String(trimmed(line[line.index(after: delimiter)...])))
    }

    /// `text` without leading and trailing spaces and tabs.
    static func trimmed(_ text: Substring) -> Substring {
        let isBlank: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let first = text.firstIndex(where: { !isBlank($0) }),
            let last = text.lastIndex(where: { !isBlank($0) })
        else { return text[text.endIndex...] }
        return text[first...last]
    }
}
