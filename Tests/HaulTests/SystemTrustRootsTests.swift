import Foundation
import Testing

@testable import Haul

/// Which names in a certificate directory are `c_rehash` links, and when a directory is
/// used in place of the system's bundle.
@Suite("System trust roots")
struct SystemTrustRootsTests {
    @Test(arguments: [
        ("5ad8a5d6.0", true), ("5ad8a5d6.12", true), ("00000000.9", true),
        ("5ad8a5d6.r0", false),  // a revocation list's link
        ("ca-certificates.crt", false), ("ISRG_Root_X1.pem", false), ("5AD8A5D6.0", false),
        ("5ad8a5d.0", false), ("5ad8a5d60.0", false), ("5ad8a5d6.", false), ("5ad8a5d6", false),
        ("5ad8a5d6.0.pem", false), ("", false),
    ])
    func hashLinkNames(name: String, isLink: Bool) {
        #expect(SystemTrustRoots.isHashLinkName(Array(name.utf8)) == isLink)
    }

    @Test func aDirectoryIsUsedOnlyWhenItHoldsHashLinks() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-roots-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }

        // A missing directory, an empty one, and one with certificates but no links: not used
        #expect(!SystemTrustRoots.holdsHashLinks(directory.path + "/missing"))
        #expect(!SystemTrustRoots.holdsHashLinks(directory.path))
        try Data("x".utf8).write(to: directory.appendingPathComponent("ISRG_Root_X1.pem"))
        try Data("x".utf8).write(to: directory.appendingPathComponent("ca-certificates.crt"))
        #expect(!SystemTrustRoots.holdsHashLinks(directory.path))

        // A link as c_rehash names it: used
        try FileManager.default.createSymbolicLink(
            atPath: directory.appendingPathComponent("4042bcee.0").path, withDestinationPath: "ISRG_Root_X1.pem")
        #expect(SystemTrustRoots.holdsHashLinks(directory.path))
    }
}
