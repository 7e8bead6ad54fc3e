import Foundation

/// Formats dates as RFC 7231 IMF-fixdate strings (`Sun, 06 Nov 1994 08:49:37 GMT`).
///
/// Implemented by hand (civil-from-days) so it is allocation-light, locale-independent and
/// free of `DateFormatter` thread-safety concerns.
enum HTTPDate {
    private static let weekdays = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// The base of automatic Last-Modified dates: 2024-01-01 00:00:00 GMT.
    static let automaticBase = Date(timeIntervalSince1970: 1_704_067_200)

    static func format(_ date: Date) -> String {
        let seconds = Int64(date.timeIntervalSince1970.rounded(.down))
        var days = seconds / 86_400
        var secondOfDay = seconds % 86_400
        if secondOfDay < 0 {
            secondOfDay += 86_400
            days -= 1
        }
        // 1970-01-01 was a Thursday (index 4 with Sunday = 0).
        let weekday = Int(((days % 7) + 7 + 4) % 7)

        // Howard Hinnant's civil_from_days.
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)

        let hour = secondOfDay / 3600
        let minute = (secondOfDay % 3600) / 60
        let second = secondOfDay % 60
        return "\(weekdays[weekday]), \(pad2(day)) \(months[Int(month) - 1]) \(year) "
            + "\(pad2(hour)):\(pad2(minute)):\(pad2(second)) GMT"
    }

    private static func pad2(_ value: Int64) -> String {
        value < 10 ? "0\(value)" : "\(value)"
    }
}
