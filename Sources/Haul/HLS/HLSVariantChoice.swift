import Foundation

/// Which variant of a stream's master playlist to download (`haul get --hls-variant`).
public enum HLSVariantChoice: Sendable, Hashable, CustomStringConvertible {
    /// The highest bandwidth (ties broken by the larger resolution).
    case best
    /// The lowest bandwidth (ties broken by the smaller resolution).
    case worst
    /// The highest bandwidth not above the given bits per second, else the lowest available.
    case bandwidth(Int)
    /// Exactly this resolution (the highest bandwidth among matches), else nothing.
    case resolution(width: Int, height: Int)

    /// Parses a command-line argument: `best`, `worst` (case-insensitive), a resolution such as
    /// `1280x720`, or a bandwidth in bits per second such as `2500000`. Surrounding whitespace is
    /// ignored. Returns nil for anything else, including zero or negative numbers.
    public init?(argument: String) {
        let text = argument.trimmingCharacters(in: .whitespaces).lowercased()
        switch text {
        case "best":
            self = .best
        case "worst":
            self = .worst
        default:
            if let resolution = HLSResolution(parsing: text) {
                guard resolution.width > 0, resolution.height > 0 else { return nil }
                self = .resolution(width: resolution.width, height: resolution.height)
            } else if let bandwidth = HLSAttributeList.decimalInteger(text), bandwidth > 0 {
                self = .bandwidth(bandwidth)
            } else {
                return nil
            }
        }
    }

    /// The choice as `--hls-variant` takes it: `best`, `worst`, a bandwidth, `WIDTHxHEIGHT`.
    public var description: String {
        switch self {
        case .best: "best"
        case .worst: "worst"
        case .bandwidth(let bitsPerSecond): "\(bitsPerSecond)"
        case .resolution(let width, let height): "\(width)x\(height)"
        }
    }

    /// Picks a variant according to this rule; nil if `variants` is empty or, for
    /// `.resolution`, none has exactly that resolution. Among exact ties the earliest variant wins.
    func choose(from variants: [HLSVariant]) -> HLSVariant? {
        switch self {
        case .best:
            return variants.max(by: Self.ranksBelow)
        case .worst:
            return variants.min(by: Self.ranksBelow)
        case .bandwidth(let limit):
            return variants.filter { $0.bandwidth <= limit }.max(by: Self.ranksBelow)
                ?? variants.min(by: Self.ranksBelow)
        case .resolution(let width, let height):
            let wanted = HLSResolution(width: width, height: height)
            return variants.filter { $0.resolution == wanted }.max(by: Self.ranksBelow)
        }
    }

    /// Orders variants by bandwidth, then by pixel count (a missing resolution counts as zero).
    private static func ranksBelow(_ lhs: HLSVariant, _ rhs: HLSVariant) -> Bool {
        if lhs.bandwidth != rhs.bandwidth { return lhs.bandwidth < rhs.bandwidth }
        return (lhs.resolution?.pixelCount ?? 0) < (rhs.resolution?.pixelCount ?? 0)
    }
}
