import Foundation

/// One of `haul get`'s positional arguments, read once: a URL to download, an HLS
/// playlist, a zsync control file, or a Metalink file on disk. What it is decides where
/// it goes; nothing after this parses the text again.
enum GetArgument {
    /// An http or https URL to download.
    case download(URL)
    /// The URL of an HLS playlist (see ``HLSEntries/isPlaylist(_:)``).
    case playlist(URL)
    /// The URL of a zsync control file (see ``ZsyncEntries/isControlFile(_:)``).
    case zsyncControl(URL)
    /// A local Metalink file (see ``MetalinkEntries/isMetalinkFile(_:)``).
    case metalinkFile(String)
    /// Neither a URL nor a Metalink file: reported by ``EntryScan`` with the entries,
    /// once the options are checked.
    case invalid(InputError)

    init(_ text: String) {
        if MetalinkEntries.isMetalinkFile(text) {
            self = .metalinkFile(text)
            return
        }
        do throws(InputError) {
            let url = try InputFile.httpURL(text)
            if ZsyncEntries.isControlFile(url) {
                self = .zsyncControl(url)
            } else if HLSEntries.isPlaylist(url) {
                self = .playlist(url)
            } else {
                self = .download(url)
            }
        } catch {
            self = .invalid(error)
        }
    }

    /// The argument as an entry's URL for ``EntryScan``, when it is one to download as
    /// given (or is not a URL at all, which the scan reports).
    var download: Result<URL, InputError>? {
        switch self {
        case .download(let url): .success(url)
        case .invalid(let error): .failure(error)
        case .playlist, .zsyncControl, .metalinkFile: nil
        }
    }

    var playlist: URL? {
        if case .playlist(let url) = self { url } else { nil }
    }

    var zsyncControl: URL? {
        if case .zsyncControl(let url) = self { url } else { nil }
    }

    var metalinkFile: String? {
        if case .metalinkFile(let path) = self { path } else { nil }
    }
}
