/// Path arithmetic on strings, without `NSString`: its `lastPathComponent` and
/// `appendingPathComponent` normalise the whole path first, a cost paid for every job
/// snapshot and service event.
package enum PathText {
    /// The last component of `path`, as `NSString.lastPathComponent` gives it: trailing
    /// slashes are ignored, `/` for `/`, and the empty string for the empty string (and
    /// for `//`).
    package static func lastComponent(_ path: String) -> String {
        let utf8 = path.utf8
        let slash = UInt8(ascii: "/")
        var end = utf8.endIndex
        while end != utf8.startIndex, utf8[utf8.index(before: end)] == slash { end = utf8.index(before: end) }
        // NSString's answers for paths of slashes only.
        guard end != utf8.startIndex else { return path == "/" ? "/" : "" }
        var start = end
        while start != utf8.startIndex, utf8[utf8.index(before: start)] != slash { start = utf8.index(before: start) }
        return String(Substring(utf8[start..<end]))
    }

    /// The directory that holds `path`: what comes before its last component (trailing
    /// slashes ignored), `/` for a component at the root, and `.` for a bare name.
    ///
    /// Not `NSString.deletingLastPathComponent`: swift-corelibs-foundation 6.3 traps on a
    /// path of one character (`--journal j` crashed the process).
    package static func directory(of path: String) -> String {
        let utf8 = path.utf8
        let slash = UInt8(ascii: "/")
        var end = utf8.endIndex
        while end != utf8.startIndex, utf8[utf8.index(before: end)] == slash { end = utf8.index(before: end) }
        guard end != utf8.startIndex else { return path.isEmpty ? "." : "/" }
        guard var cut = utf8[..<end].lastIndex(of: slash) else { return "." }
        // `a//b` is in `a`.
        while cut != utf8.startIndex, utf8[utf8.index(before: cut)] == slash { cut = utf8.index(before: cut) }
        return cut == utf8.startIndex ? "/" : String(Substring(utf8[..<cut]))
    }

    /// `name` inside `directory`: one slash between them, none added to an empty directory.
    package static func appending(_ name: String, to directory: String) -> String {
        if directory.isEmpty { return name }
        return directory.utf8.last == UInt8(ascii: "/") ? directory + name : directory + "/" + name
    }
}
