package import Foundation

/// Dates written as UTC text by hand, for the formats written once per journal row or
/// service event, where `DateFormatter` and `gmtime_r` plus string building cost more than
/// the rest of the row or event.
package enum UTCDateText {
    /// `yyyy-MM-dd<separator>HH:mm:ss`, then `.SSS` when `milliseconds`, then `Z` when
    /// `zulu`, for the instant `milliseconds` after 1970 (proleptic Gregorian calendar).
    /// `nil` outside the years 1900 to 9999, which callers leave to Foundation.
    package static func text(millisecondsSince1970 total: Int64, separator: UInt8, milliseconds: Bool, zulu: Bool)
        -> String?
    {
        // 1900-01-01 and 10000-01-01.
        guard total >= -2_208_988_800_000, total < 253_402_300_800_000 else { return nil }
        let msPerDay: Int64 = 86_400_000
        var days = total / msPerDay
        var inDay = total % msPerDay
        if inDay < 0 {
            inDay += msPerDay
            days -= 1
        }
        let civil = CivilDays.date(daysSince1970: Int(days))
        let (year, month, day) = (Int64(civil.year), Int64(civil.month), Int64(civil.day))
        return String(unsafeUninitializedCapacity: 24) { buffer in
            var count = 0
            func put(_ value: Int64, digits: Int) {
                var rest = value
                for position in stride(from: count + digits - 1, through: count, by: -1) {
                    buffer[position] = UInt8(ascii: "0") + UInt8(rest % 10)
                    rest /= 10
                }
                count += digits
            }
            func put(_ byte: UInt8) {
                buffer[count] = byte
                count += 1
            }
            put(year, digits: 4)
            put(UInt8(ascii: "-"))
            put(month, digits: 2)
            put(UInt8(ascii: "-"))
            put(day, digits: 2)
            put(separator)
            put(inDay / 3_600_000, digits: 2)
            put(UInt8(ascii: ":"))
            put(inDay / 60_000 % 60, digits: 2)
            put(UInt8(ascii: ":"))
            put(inDay / 1000 % 60, digits: 2)
            if milliseconds {
                put(UInt8(ascii: "."))
                put(inDay % 1000, digits: 3)
            }
            if zulu { put(UInt8(ascii: "Z")) }
            return count
        }
    }

    /// The instant that `text` names in the format that
    /// ``text(millisecondsSince1970:separator:milliseconds:zulu:)`` writes with a space and
    /// milliseconds, `yyyy-MM-dd HH:mm:ss.SSS`, as seconds since 2001 (`Date`'s reference
    /// date); `nil` for any other text, or a date outside the years 1900 to 9999, which
    /// callers leave to Foundation. The seconds are those Foundation's Gregorian calendar
    /// computes from the same fields, to the bit: the day's start, plus the time of day with
    /// its fraction added last.
    package static func secondsSinceReferenceDate(spacedMilliseconds text: String) -> Double? {
        var text = text
        return text.withUTF8 { bytes -> Double? in
            guard bytes.count == 23, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
                bytes[10] == UInt8(ascii: " "), bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
                bytes[19] == UInt8(ascii: ".")
            else { return nil }
            func number(_ start: Int, _ digits: Int) -> Int? {
                var value = 0
                for index in start..<(start + digits) {
                    let digit = bytes[index] &- UInt8(ascii: "0")
                    guard digit < 10 else { return nil }
                    value = value * 10 + Int(digit)
                }
                return value
            }
            guard let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
                let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2),
                let millisecond = number(20, 3),
                year >= 1900, (1...12).contains(month), day >= 1, day <= CivilDays.inMonth(month, of: year),
                hour < 24, minute < 60, second < 60
            else { return nil }
            // 2001-01-01 is 11,323 days after 1970-01-01.
            let dayStart = Double((CivilDays.since1970(year: year, month: month, day: day) - 11_323) * 86_400)
            let timeOfDay = Double(hour * 3600 + minute * 60 + second) + Double(millisecond * 1_000_000) / 1_000_000_000
            return dayStart + timeOfDay
        }
    }

    /// RFC 3339 in UTC with milliseconds, as events and log lines are stamped:
    /// `2026-11-27T14:05:00.123Z`.
    package static func rfc3339(_ date: Date) -> String {
        let milliseconds = roundedMilliseconds(date)
        guard milliseconds.magnitude < 1e15 else { return foundationRFC3339(date) }
        return text(
            millisecondsSince1970: Int64(milliseconds), separator: UInt8(ascii: "T"), milliseconds: true, zulu: true)
            ?? foundationRFC3339(date)
    }

    /// Milliseconds since 1970 to the nearest (halves up), as Foundation's formatters hand
    /// them to ICU: what both the journal's and the events' text show.
    static func roundedMilliseconds(_ date: Date) -> Double {
        ((date.timeIntervalSinceReferenceDate + 978_307_200) * 1000 + 0.5).rounded(.down)
    }

    private static func foundationRFC3339(_ date: Date) -> String {
        ISO8601DateFormatter.string(
            from: date, timeZone: TimeZone(identifier: "UTC")!, formatOptions: [.withInternetDateTime, .withFractionalSeconds])
    }
}
