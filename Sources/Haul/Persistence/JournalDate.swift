import Foundation
import GRDB

/// Dates as the journal stores them, GRDB's text format (`yyyy-MM-dd HH:mm:ss.SSS`, UTC),
/// written and read by hand: GRDB writes them through a `DateFormatter`, whose ICU
/// formatting cost about 1.5 µs a date, twice for every download added, and reads them
/// through a Gregorian `Calendar`, whose first use opens an ICU calendar and reads the
/// host's time zone (a millisecond and more of a one-file `haul get`). The text is the
/// same, to the millisecond (rounded as Foundation rounds it), so rows compare and sort as
/// before, and a date read back is the one GRDB would read, to the bit.
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

    /// The date `value` holds, as GRDB would read it (`nil` where GRDB reads none): the
    /// journal's own text by hand, anything else (an older row, a number) by GRDB.
    static func date(_ value: DatabaseValue) -> Date? {
        if case .string(let text) = value.storage,
            let seconds = UTCDateText.secondsSinceReferenceDate(spacedMilliseconds: text)
        {
            return Date(timeIntervalSinceReferenceDate: seconds)
        }
        return Date.fromDatabaseValue(value)
    }

    /// The date a non-optional date column holds (`value`, of `column`).
    static func required(_ value: DatabaseValue, column: String) throws -> Date {
        guard let date = date(value) else {
            throw DownloadError(.invalidRequest, "the journal's \(column) holds no date: \(value)")
        }
        return date
    }

    /// The date an optional date column holds: `nil` when it is NULL or not a date.
    static func optional(_ value: DatabaseValue) -> Date? {
        value.isNull ? nil : date(value)
    }
}
