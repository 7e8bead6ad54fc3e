import Foundation
import GRDB

/// Dates as the journal stores them, GRDB's text format (`yyyy-MM-dd HH:mm:ss.SSS`, UTC),
/// written by hand: GRDB writes them through a `DateFormatter`, whose ICU formatting cost
/// about 1.5 µs a date, twice for every download added. The text is the same, to the
/// millisecond (rounded as Foundation rounds it), so rows compare and sort as before.
enum JournalDate {
    /// The database value of `date`: the same text GRDB would store.
    static func databaseValue(_ date: Date) -> DatabaseValue {
        guard let text = text(date) else { return date.databaseValue }
        return text.databaseValue
    }

    /// `date` as stored text, or `nil` outside the years 1900 to 9999 (left to GRDB:
    /// ICU switches to the Julian calendar before 1582).
    static func text(_ date: Date) -> String? {
        let milliseconds = UTCDateText.roundedMilliseconds(date)
        guard milliseconds.magnitude < 1e15 else { return nil }
        return UTCDateText.text(
            millisecondsSince1970: Int64(milliseconds), separator: UInt8(ascii: " "), milliseconds: true, zulu: false)
    }
}
