import Foundation
import Haul

/// One JSON object rendered on one line, keys in sorted order, strings escaped per RFC 8259.
struct JSONLine {
    /// A JSON value the CLI emits.
    enum Value {
        case string(String)
        case int(Int64)
        case double(Double)
        case bool(Bool)
        case null
    }

    private var fields: [String: Value] = [:]

    /// Sets a field; `nil` leaves it out, ``Value/null`` writes `null`.
    subscript(key: String) -> Value? {
        get { fields[key] }
        set { fields[key] = newValue }
    }

    /// The object as a single line, without the trailing newline.
    func rendered() -> String {
        var out = "{"
        for (index, key) in fields.keys.sorted().enumerated() {
            if index > 0 { out += "," }
            Self.append(string: key, to: &out)
            out += ":"
            switch fields[key]! {
            case .string(let text): Self.append(string: text, to: &out)
            case .int(let number): out += String(number)
            case .double(let number): out += number.isFinite ? String(format: "%.3f", number) : "null"
            case .bool(let flag): out += flag ? "true" : "false"
            case .null: out += "null"
            }
        }
        return out + "}"
    }

    private static func append(string: String, to out: inout String) {
        JSONText.appendQuoted(string, to: &out)
    }
}
