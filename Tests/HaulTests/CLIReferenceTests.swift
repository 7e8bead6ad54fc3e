import Foundation
import Testing

/// `docs/cli.md` is generated from the parser; this keeps it from drifting.
@Suite("The CLI reference")
struct CLIReferenceTests {
    /// The repository's root, from this file's place in it.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test("docs/cli.md is what the parser says of every command and option")
    func referenceMatchesTheParser() async throws {
        let run = try await Haul.run(["--experimental-dump-help"], environment: Haul.environment)
        try #require(run.status == 0, "haul --experimental-dump-help failed: \(run.stderr)")
        let rendered = try CLIReference.render(Data(run.stdout.utf8))
        let file = Self.root.appendingPathComponent("docs/cli.md")
        if ProcessInfo.processInfo.environment["HAUL_UPDATE_CLI_DOCS"] == "1" {
            try Data(rendered.utf8).write(to: file, options: .atomic)
        }
        let current = (try? String(contentsOf: file, encoding: .utf8)) ?? ""
        #expect(
            current == rendered,
            "docs/cli.md differs from the parser's help: run scripts/update-cli-docs.sh and commit the result")
        // It names every command the parser has, and an option of each that users reach for.
        for needle in ["## `haul get`", "## `haul sync`", "## `haul serve`", "## `haul worker`", "`--limit-rate <rate>`"] {
            #expect(rendered.contains(needle), "the reference lacks \(needle)")
        }
    }
}
