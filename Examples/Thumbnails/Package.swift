// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "Thumbnails",
    platforms: [.macOS(.v13)],
    dependencies: [
        // Haul itself, from this repository.
        .package(name: "Haul", path: "../.."),
    ],
    targets: [
        .executableTarget(
            name: "Thumbnails",
            dependencies: [
                .product(name: "Haul", package: "Haul"),
                // FaultServer: the local HTTP server the example runs against when given no URLs.
                .product(name: "HaulTestSupport", package: "Haul"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
