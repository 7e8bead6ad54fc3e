/// Reads HTTP dates (RFC 9110 §5.6.7) as seconds since 1970, without `DateFormatter`.
///
/// Accepts the three formats a recipient must: IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`),
/// the obsolete RFC 850 format (`Sunday, 06-Nov-94 08:49:37 GMT`), and ANSI C's asctime
/// (`Sun Nov  6 08:49:37 1994`). Names are matched case-sensitively, as the grammar says;
/// whitespace around the date is ignored. Anything else, and a date that does not exist
/// (`31 Feb`, `25:00:00`), is `nil`. The weekday must be a weekday's name but is not checked
/// against the date.
enum HTTPDateParser {
    /// The time `text` names, in seconds since 1970, or `nil` when it is not an HTTP date.
    ///
    /// `reference` (seconds since 1970, usually when the message was received) places an
    /// RFC 850 date's two-digit year: the year with those digits within 50 years of it, a
    /// year that would be more than 50 years ahead being taken a century earlier.
    static func parse(_ text: String, relativeTo reference: Double) -> Double? {
        var text = text
        return text.withUTF8 { bytes in
            var cursor = Cursor(bytes: bytes)
            return cursor.date(referenceYear: year(of: reference))
        }
    }

    static let shortWeekdays: Set<String> = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
    static let longWeekdays: Set<String> = [
        "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday",
    ]
    static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// The position in a date being read, over its UTF-8 bytes.
    private struct Cursor {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0
        var end: Int

        init(bytes: UnsafeBufferPointer<UInt8>) {
            self.bytes = bytes
            end = bytes.count
            while index < end, bytes[index] == .space || bytes[index] == .tab { index += 1 }
            while end > index, bytes[end - 1] == .space || bytes[end - 1] == .tab { end -= 1 }
        }

        /// Reads one of the three formats, up to the end.
        mutating func date(referenceYear: Int) -> Double? {
            guard let weekday = letters() else { return nil }
            if take(.comma) {
                guard take(.space), let day = digits(2) else { return nil }
                if take(.space) {
                    // IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`
                    guard HTTPDateParser.shortWeekdays.contains(weekday), let month = month(), take(.space),
                        let year = digits(4), take(.space), let time = time(), take(.space), takeGMT(), atEnd
                    else { return nil }
                    return HTTPDateParser.seconds(year: year, month: month, day: day, time: time)
                }
                // RFC 850: `Sunday, 06-Nov-94 08:49:37 GMT`
                guard HTTPDateParser.longWeekdays.contains(weekday), take(.hyphen), let month = month(),
                    take(.hyphen), let twoDigitYear = digits(2), take(.space), let time = time(), take(.space),
                    takeGMT(), atEnd
                else { return nil }
                let year = HTTPDateParser.year(twoDigits: twoDigitYear, near: referenceYear)
                return HTTPDateParser.seconds(year: year, month: month, day: day, time: time)
            }
            // asctime: `Sun Nov  6 08:49:37 1994`
            guard HTTPDateParser.shortWeekdays.contains(weekday), take(.space), let month = month(), take(.space)
            else { return nil }
            let day: Int?
            if take(.space) { day = digits(1) } else { day = digits(2) }
            guard let day, take(.space), let time = time(), take(.space), let year = digits(4), atEnd else {
                return nil
            }
            return HTTPDateParser.seconds(year: year, month: month, day: day, time: time)
        }

        var atEnd: Bool { index == end }

        /// Skips `byte` if it is next.
        mutating func take(_ byte: UInt8) -> Bool {
            guard index < end, bytes[index] == byte else { return false }
            index += 1
            return true
        }

        /// Reads exactly `count` ASCII digits.
        mutating func digits(_ count: Int) -> Int? {
            guard end - index >= count else { return nil }
            var value = 0
            for offset in 0..<count {
                let byte = bytes[index + offset]
                guard byte >= .digit0, byte <= .digit9 else { return nil }
                value = value * 10 + Int(byte - .digit0)
            }
            index += count
            return value
        }

        /// Reads a run of ASCII letters (at most 9, a weekday's longest name).
        mutating func letters() -> String? {
            let start = index
            while index < end, index - start < 10, bytes[index].isASCIILetter { index += 1 }
            guard index > start, index - start < 10 else { return nil }
            return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        }

        /// Reads a month's three-letter name: its number, 1 to 12.
        mutating func month() -> Int? {
            guard let name = letters(), let index = HTTPDateParser.months.firstIndex(of: name) else { return nil }
            return index + 1
        }

        /// Reads `hh:mm:ss` (a leap second allowed): the seconds since midnight.
        mutating func time() -> Int? {
            guard let hour = digits(2), take(.colon), let minute = digits(2), take(.colon), let second = digits(2),
                hour < 24, minute < 60, second <= 60
            else { return nil }
            return hour * 3600 + minute * 60 + second
        }

        mutating func takeGMT() -> Bool {
            take(UInt8(ascii: "G")) && take(UInt8(ascii: "M")) && take(UInt8(ascii: "T"))
        }
    }

    /// The seconds since 1970 of a day and time, or `nil` when the day does not exist.
    static func seconds(year: Int, month: Int, day: Int, time: Int) -> Double? {
        guard (1...12).contains(month), day >= 1, day <= CivilDays.inMonth(month, of: year) else { return nil }
        return Double(CivilDays.since1970(year: year, month: month, day: day) * 86_400 + time)
    }

    /// The year (UTC) of a time in seconds since 1970.
    static func year(of seconds: Double) -> Int {
        // Within ±10,000 years of 1970; a reference outside it is no time of a message.
        let bounded = seconds.isFinite ? min(max(seconds, -3e11), 3e11) : 0
        return CivilDays.date(daysSince1970: Int((bounded / 86_400).rounded(.down))).year
    }

    /// The year ending in `twoDigits` that is at most 50 years after `referenceYear` and
    /// less than 50 years before it (RFC 9110 §5.6.7).
    static func year(twoDigits: Int, near referenceYear: Int) -> Int {
        let century = referenceYear - ((referenceYear % 100) + 100) % 100
        var year = century + twoDigits
        if year > referenceYear + 50 { year -= 100 }
        if year <= referenceYear - 50 { year += 100 }
        return year
    }
}

extension UInt8 {
    static let space = UInt8(ascii: " ")
    static let tab = UInt8(ascii: "\t")
    static let comma = UInt8(ascii: ",")
    fileprivate static let hyphen = UInt8(ascii: "-")
    fileprivate static let colon = UInt8(ascii: ":")
    fileprivate static let digit0 = UInt8(ascii: "0")
    fileprivate static let digit9 = UInt8(ascii: "9")

    fileprivate var isASCIILetter: Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(self) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(self)
    }
}
