import Foundation

/// `docs/cli.md`, rendered from what ArgumentParser says of `haul`
/// (`haul --experimental-dump-help`), so that the reference cannot drift from the parser:
/// ``CLIReferenceTests`` fails when the file differs from this rendering.
enum CLIReference {
    /// The parts of ArgumentParser's `ToolInfoV0` the reference shows.
    struct Dump: Decodable {
        var command: Command
    }

    struct Command: Decodable {
        var commandName: String
        var abstract: String?
        var discussion: String?
        var shouldDisplay: Bool?
        var arguments: [Argument]?
        var subcommands: [Command]?
    }

    struct Argument: Decodable {
        struct Name: Decodable {
            var kind: String
            var name: String
        }

        var kind: String
        var names: [Name]?
        var valueName: String?
        var abstract: String?
        var discussion: String?
        var defaultValue: String?
        var allValues: [String]?
        var isRepeating: Bool
        var shouldDisplay: Bool
        var sectionTitle: String?
    }

    /// The page's header: how the file came to be and how to bring it up to date.
    static let header = """
        <!-- Generated from `haul --experimental-dump-help` by Tests/HaulTests/Support/CLIReference.swift.
             Do not edit: change the command's help in Sources/haul, then run scripts/update-cli-docs.sh.
             `swift test` fails while this file differs from the parser. -->

        # `haul` command reference

        Every command and option of `haul`, as its own `--help` gives them. For what the
        commands do together (the journal, resuming, proxies, credentials), read
        [Using haul](guide.md); for `haul sync` and manifests, [Manifests and content
        sync](sync.md); for `haul serve`, [the service](service.md); for `haul worker`,
        [many machines, one queue](cluster.md).

        Every command also takes `-h`/`--help`.
        """

    static func render(_ json: Data) throws -> String {
        let root = try JSONDecoder().decode(Dump.self, from: json).command
        let commands = (root.subcommands ?? []).filter { $0.shouldDisplay != false && $0.commandName != "help" }
        var page = header + "\n\n"
        page += commands.map { "- [`haul \($0.commandName)`](#haul-\($0.commandName)): \(text($0.abstract ?? ""))" }
            .joined(separator: "\n")
        page += "\n\n" + section(root, path: "haul", heading: "## `haul`")
        for command in commands {
            page += section(command, path: "haul \(command.commandName)", heading: "## `haul \(command.commandName)`")
        }
        return page.hasSuffix("\n\n") ? String(page.dropLast()) : page
    }

    private static func section(_ command: Command, path: String, heading: String) -> String {
        var out = heading + "\n\n"
        let arguments = (command.arguments ?? []).filter { $0.shouldDisplay && !isHelp($0) }
        if let abstract = command.abstract, !abstract.isEmpty { out += text(abstract) + "\n\n" }
        let positionals = arguments.filter { $0.kind == "positional" }
        let usage = ([path] + (arguments.contains { $0.kind != "positional" } ? ["[options]"] : [])
            + positionals.map { $0.isRepeating ? "[<\($0.valueName ?? "value")> ...]" : "<\($0.valueName ?? "value")>" })
            .joined(separator: " ")
        out += "```\n\(usage)\n```\n\n"
        if let discussion = command.discussion, !discussion.isEmpty {
            out += discussion.components(separatedBy: "\n\n").map(text).joined(separator: "\n\n") + "\n\n"
        }
        if !positionals.isEmpty {
            out += "| Argument | Meaning |\n|---|---|\n"
            out += positionals.map { "| `<\($0.valueName ?? "value")>`\($0.isRepeating ? " ..." : "") | \(cell($0)) |" }
                .joined(separator: "\n") + "\n\n"
        }
        // Options in the order the parser shows them, grouped under their section titles.
        var groups: [(title: String, options: [Argument])] = []
        for argument in arguments where argument.kind != "positional" {
            let title = argument.sectionTitle ?? "Options"
            if let index = groups.firstIndex(where: { $0.title == title }) {
                groups[index].options.append(argument)
            } else {
                groups.append((title, [argument]))
            }
        }
        for group in groups {
            out += "| \(group.title) | Meaning |\n|---|---|\n"
            out += group.options.map { "| \(names($0)) | \(cell($0)) |" }.joined(separator: "\n") + "\n\n"
        }
        return out
    }

    private static func isHelp(_ argument: Argument) -> Bool {
        argument.names?.contains { $0.kind == "long" && $0.name == "help" } ?? false
    }

    /// `-i`, `--input-file <file>`.
    private static func names(_ argument: Argument) -> String {
        let spelled = (argument.names ?? []).map { name in
            switch name.kind {
            case "short": "-" + name.name
            case "longWithSingleDash": "-" + name.name
            default: "--" + name.name
            }
        }
        let value = argument.kind == "option" ? " <\(argument.valueName ?? "value")>" : ""
        return spelled.map { "`\($0)\(value)`" }.joined(separator: ", ")
    }

    private static func cell(_ argument: Argument) -> String {
        var parts = [text(argument.abstract ?? "")]
        if let discussion = argument.discussion, !discussion.isEmpty { parts.append(text(discussion)) }
        if let values = argument.allValues, !values.isEmpty {
            parts.append("One of " + values.map { "`\($0)`" }.joined(separator: ", ") + ".")
        }
        // (unless the help says so already)
        if argument.isRepeating, argument.kind != "positional", !(argument.abstract ?? "").lowercased().contains("repeatable") {
            parts.append("Repeatable.")
        }
        if let value = argument.defaultValue, !value.isEmpty, argument.kind != "flag" {
            parts.append("Default: `\(value)`.")
        }
        return parts.filter { !$0.isEmpty }.joined(separator: " ").replacingOccurrences(of: "|", with: "\\|")
            .replacingOccurrences(of: "\n", with: " ")
    }

    /// Help text as Markdown: the parser's text is plain, so what Markdown would read as
    /// markup or HTML is escaped.
    private static func text(_ plain: String) -> String {
        var out = ""
        for character in plain {
            switch character {
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "*", "_", "`", "[", "]", "\\": out += "\\" + String(character)
            default: out.append(character)
            }
        }
        return out
    }
}
