import Foundation

/// Human-readable sizes, rates and durations.
enum Format {
    private static let units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]

    /// `512 B`, `1.5 KiB`, `12.3 MiB`: binary units, one decimal.
    static func bytes(_ count: Int64) -> String {
        guard count >= 1024 else { return "\(count) B" }
        var value = Double(count) / 1024
        var unit = 0
        while value >= 1023.95, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return String(format: "%.1f", value) + " " + units[unit]
    }

    /// `3.2 MiB/s`.
    static func rate(_ bytesPerSecond: Double) -> String {
        bytes(Int64(max(0, bytesPerSecond).rounded())) + "/s"
    }

    /// A short remaining time: `45s`, `3m05s`, `2h07m`.
    static func eta(_ duration: Duration) -> String {
        let total = max(0, Int(seconds(duration).rounded(.up)))
        if total < 60 { return "\(total)s" }
        if total < 3600 { return "\(total / 60)m" + pad(total % 60) + "s" }
        if total < 100 * 3600 { return "\(total / 3600)h" + pad(total / 60 % 60) + "m" }
        return ">99h"
    }

    /// An elapsed time for summaries: `0.4 s`, `2.3 s`, `95.0 s`.
    static func elapsed(_ duration: Duration) -> String {
        String(format: "%.1f s", seconds(duration))
    }

    /// The duration in seconds.
    static func seconds(_ duration: Duration) -> Double {
        duration.inSeconds
    }

    private static func pad(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
}
