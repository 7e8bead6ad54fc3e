import Foundation
import GRDB
import Testing

@testable import Haul

/// The hand-written forms of text that Foundation and GRDB would otherwise produce: they
/// must be the same, character for character.
@Suite struct StoredTextTests {
    /// GRDB's own formatter, as it stores dates.
    static let formatter: DateFormatter = {
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss.SSS"
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(secondsFromGMT: 0)
        return formatter
    }()

    @Test func journalDatesAreStoredAsGRDBStoresThem() throws {
        var generator = SystemRandomNumberGenerator()
        var dates: [Date] = [
            Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: -0.0005), Date(timeIntervalSince1970: 0.9999),
            Date(timeIntervalSince1970: 951_782_400),  // 2000-02-29
            Date(timeIntervalSince1970: 4_107_542_399.999),  // 2099-12-31 23:59:59.999
            Date(timeIntervalSince1970: -2_208_988_800),  // 1900-01-01
            Date(timeIntervalSince1970: 253_402_300_799.5),  // 9999-12-31
            Date(), Date.distantPast, Date.distantFuture,
        ]
        for _ in 0..<20_000 {
            dates.append(Date(timeIntervalSince1970: Double.random(in: -2_300_000_000...5_000_000_000, using: &generator)))
        }
        // Times just either side of a millisecond, where truncation and rounding differ.
        for _ in 0..<2_000 {
            let milliseconds = Double(Int64.random(in: 0...4_000_000_000_000, using: &generator))
            for nudge in [-1e-7, 0, 1e-7, 0.4999, 0.5, 0.9999] {
                dates.append(Date(timeIntervalSince1970: (milliseconds + nudge) / 1000))
            }
        }
        for date in dates {
            let stored = JournalDate.databaseValue(date)
            #expect(String.fromDatabaseValue(stored) == Self.formatter.string(from: date), "\(date.timeIntervalSince1970)")
            #expect(stored == date.databaseValue)
        }
        // Read back, as GRDB reads them.
        let now = Date()
        let back = try #require(Date.fromDatabaseValue(JournalDate.databaseValue(now)))
        #expect(abs(back.timeIntervalSince(now)) < 0.001)
    }

    @Test func journalDatesAreReadAsGRDBReadsThem() throws {
        var generator = SystemRandomNumberGenerator()
        var texts = [
            "1970-01-01 00:00:00.000", "1969-12-31 23:59:59.999", "2000-02-29 12:00:00.500", "1900-01-01 00:00:00.000",
            "9999-12-31 23:59:59.999", "2026-12-03 16:05:07.123", "2024-02-29 23:59:59.001",
        ]
        for _ in 0..<20_000 {
            let milliseconds = Int64.random(in: -2_208_988_800_000..<253_402_300_800_000, using: &generator)
            texts.append(
                try #require(
                    UTCDateText.text(
                        millisecondsSince1970: milliseconds, separator: UInt8(ascii: " "), milliseconds: true, zulu: false)))
        }
        for text in texts {
            let read = try #require(JournalDate.date(text.databaseValue), "\(text)")
            let grdb = try #require(Date.fromDatabaseValue(text.databaseValue), "\(text)")
            // The same instant to the bit, not merely the same millisecond.
            #expect(
                read.timeIntervalSinceReferenceDate.bitPattern == grdb.timeIntervalSinceReferenceDate.bitPattern, "\(text)")
        }
        // Anything else is GRDB's to read: other formats, numbers, and what is no date.
        let others: [DatabaseValue] = [
            "2026-12-03".databaseValue, "2026-12-03 16:05".databaseValue, "2026-12-03T16:05:07.123".databaseValue,
            "2026-12-03 16:05:07".databaseValue, "2026-02-30 16:05:07.123".databaseValue,
            "2026-13-03 16:05:07.123".databaseValue, "2026-12-03 24:05:07.123".databaseValue,
            "1899-12-31 23:59:59.999".databaseValue, "２026-12-03 16:05:07.123".databaseValue,
            1_700_000_000.5.databaseValue, 1_700_000_000.databaseValue, "not a date".databaseValue,
        ]
        for value in others {
            #expect(JournalDate.date(value) == Date.fromDatabaseValue(value), "\(value)")
        }
        #expect(JournalDate.optional(.null) == nil)
        #expect(throws: DownloadError.self) {
            try JournalDate.required("not a date".databaseValue, column: "createdAt")
        }
    }

    @Test func eventTimesAreFoundationsRFC3339WithMilliseconds() {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var generator = SystemRandomNumberGenerator()
        var dates: [Date] = [
            Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: 951_782_400.5),
            Date(timeIntervalSince1970: 4_107_542_399.999), Date(),
        ]
        for _ in 0..<2_000 {
            // Either side of a millisecond, where truncation and rounding differ.
            let milliseconds = Double(Int64.random(in: 0...4_000_000_000_000, using: &generator))
            for nudge in [-1e-7, 0, 1e-7, 0.4999, 0.5, 0.9999] {
                dates.append(Date(timeIntervalSince1970: (milliseconds + nudge) / 1000))
            }
        }
        for date in dates {
            #expect(UTCDateText.rfc3339(date) == formatter.string(from: date), "\(date.timeIntervalSince1970)")
        }
        // Outside 1900-9999 Foundation writes it.
        #expect(UTCDateText.rfc3339(Date(timeIntervalSince1970: -2_300_000_000)).hasPrefix("1897-"))
        #expect(UTCDateText.rfc3339(Date(timeIntervalSince1970: 1_795_820_700.123)) == "2026-11-27T23:05:00.123Z")
    }

    @Test func hexIsTwoLowercaseDigitsAByte() {
        #expect(Hex.lowercase([UInt8]()) == "")
        #expect(Hex.lowercase([0x00, 0x0f, 0x10, 0xab, 0xff]) == "000f10abff")
        let bytes = (0...255).map { UInt8($0) }
        #expect(Hex.lowercase(bytes) == bytes.map { String(format: "%02x", $0) }.joined())
        #expect(Hex.lowercase(bytes[250...]) == "fafbfcfdfeff")
    }

    @Test func pathComponentsAreNSStrings() {
        let paths = [
            "", "/", "//", "a", "a/", "a//", "/a", "/a/", "/a/b", "/a/b/", "/a/b//", "a/b", "/dev/shm/x.bin",
            "/dir/ünïcödé name.bin", "/a//b", ".", "..", "/a/.", "x/..",
        ]
        for path in paths {
            #expect(PathText.lastComponent(path) == (path as NSString).lastPathComponent, "\(path)")
        }
        // The directory holding a path: NSString's answer where it gives one (not asked for a
        // path of one character: it traps on those), `.` for a bare name.
        let directories: [(String, String)] = [
            ("", "."), ("/", "/"), ("//", "/"), ("j", "."), ("jj", "."), ("j.sqlite", "."), ("a/", "."),
            ("/a", "/"), ("/a/", "/"), ("/a/b", "/a"), ("/a/b/", "/a"), ("a/b", "a"), ("/a//b", "/a"),
            ("./j", "."), ("/dir/ünïcödé name.bin", "/dir"),
        ]
        for (path, directory) in directories {
            #expect(PathText.directory(of: path) == directory, "\(path)")
            if path.count > 1, directory != ".", path.contains(where: { $0 != "/" }) {
                #expect(PathText.directory(of: path) == (path as NSString).deletingLastPathComponent, "\(path)")
            }
        }
        for directory in ["/", "/a", "/a/b", "/dev/shm/downloads", "/a/b/", "relative/dir"] {
            for name in ["x", "file.bin", "ünï cödé.tar.gz", ".hidden"] {
                #expect(
                    PathText.appending(name, to: directory) == (directory as NSString).appendingPathComponent(name),
                    "\(directory) + \(name)")
            }
        }
    }
}
