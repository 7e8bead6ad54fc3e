import ArgumentParser

/// A speed in bytes per second, as `--limit-rate` and its kin take it: `500K`, `2M`,
/// `1.5MiB`, `800KB`, `100000`, optionally with `/s`. `K`, `M` and `G` (and `KiB`, `MiB`,
/// `GiB`) count in 1024s, as curl and aria2 do; `KB`, `MB` and `GB` in 1000s. Parsed
/// strictly: anything else, and anything below 1 byte per second, is refused.
struct RateArgument: Equatable {
    let bytesPerSecond: Int

    /// The rate `text` names; a `ValidationError` that says how to write one otherwise
    /// (the `transform` of the options).
    init(validating text: String) throws {
        guard let value = Self.parse(text) else {
            throw ValidationError(
                "'\(text)' is not a rate: give bytes per second, such as 500K, 2M, 1.5MiB or 800KB (K, M, G count in 1024s; KB, MB, GB in 1000s), at least 1.")
        }
        bytesPerSecond = value
    }

    static let help = "bytes per second: 500K, 2M, 1.5MiB (K, M, G count in 1024s; KB, MB, GB in 1000s)"

    static func parse(_ text: String) -> Int? {
        var text = Substring(text)
        if text.hasSuffix("/s") { text = text.dropLast(2) }
        let number = text.prefix { $0.isASCII && ($0.isNumber || $0 == ".") }
        let unit = text.dropFirst(number.count)
        guard !number.isEmpty, number.first != ".", number.last != ".", number.filter({ $0 == "." }).count <= 1,
            let value = Double(number)
        else { return nil }
        let multipliers: [String: Double] = [
            "": 1, "B": 1,
            "K": 1024, "k": 1024, "KiB": 1024, "KB": 1000, "kB": 1000,
            "M": 1_048_576, "m": 1_048_576, "MiB": 1_048_576, "MB": 1_000_000,
            "G": 1_073_741_824, "g": 1_073_741_824, "GiB": 1_073_741_824, "GB": 1_000_000_000,
        ]
        guard let multiplier = multipliers[String(unit)] else { return nil }
        let bytes = (value * multiplier).rounded()
        guard bytes >= 1, bytes <= 1_099_511_627_776 else { return nil }
        return Int(bytes)
    }
}

/// The speed-limit options of the commands that download (`get`, `resume`, `sync`) and of
/// `haul serve`.
struct RateOptions: ParsableArguments {
    @Option(
        name: .customLong("limit-rate"),
        help: ArgumentHelp(
            "The most each download may receive, in \(RateArgument.help). (default: no limit)", valueName: "rate"),
        transform: RateArgument.init(validating:))
    var limitRate: RateArgument?

    @Option(
        name: .customLong("max-overall-rate"),
        help: ArgumentHelp(
            "The most all downloads together may receive, shared evenly, in bytes per second. (default: no limit)",
            valueName: "rate"),
        transform: RateArgument.init(validating:))
    var maxOverallRate: RateArgument?

    @Option(
        name: .customLong("max-host-rate"),
        help: ArgumentHelp(
            "The most the downloads from one host may receive together, in bytes per second. (default: no limit)",
            valueName: "rate"),
        transform: RateArgument.init(validating:))
    var maxHostRate: RateArgument?
}
