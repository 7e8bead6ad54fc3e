// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "ContentSync",
    platforms: [.macOS(.v13)],
    dependencies: [
        // Haul itself, from this repository.
        .package(name: "Haul", path: "../.."),
    ],
    targets: [
        .executableTarget(
            name: "ContentSync",
            dependencies: [
                .product(name: "Haul", package: "Haul"),
                // FaultServer: the local HTTP server that publishes the demo content.
                .product(name: "HaulTestSupport", package: "Haul"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
