// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "EmbeddedService",
    platforms: [.macOS(.v13)],
    dependencies: [
        // Haul itself, from this repository.
        .package(name: "Haul", path: "../.."),
        // The same versions Haul depends on: nothing new to build.
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
    ],
    targets: [
        .executableTarget(
            name: "EmbeddedService",
            dependencies: [
                .product(name: "Haul", package: "Haul"),
                // FaultServer: the local HTTP server the example downloads from when given no URLs.
                .product(name: "HaulTestSupport", package: "Haul"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                // The app's own event loops and file I/O threads, handed to the manager.
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
