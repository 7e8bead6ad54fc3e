// swift-tools-version: 6.0
import Foundation
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

/// How the `haul` executable is linked in a Linux release build (as `scripts/install.sh` and
/// the benchmarks build it, with the Swift runtime linked in): without `--export-dynamic`,
/// which the static runtime's link arguments add. It would export every symbol of the program
/// (a 1.3 MiB symbol table and 3.3 MiB of names, mapped at each start, about 3 MiB of a small
/// download's peak memory), and nothing looks them up: `dlsym` is only used for the system
/// libraries' symbols, and a crash report needs `swift-backtrace`, which an installed binary
/// does not have (`--no-strip` keeps the full symbol table for a debugger).
let haulLinkerSettings: [LinkerSetting] = [
    .unsafeFlags(["-Xlinker", "--no-export-dynamic"], .when(platforms: [.linux], configuration: .release))
]

/// How the `haul` executable's code reaches the metadata of generic types: through their
/// accessors, with the conformances its generic arguments need passed in, instead of by
/// mangled name. A mangled name makes the runtime look each of those conformances up the first
/// time, and on Linux each lookup walks every conformance record in the program (about
/// 11,000): an option's `Option<Value>` or a `Set<String>` each paid that at start-up, a
/// tenth of a small download's CPU. The code is a little larger; what it does is the same.
let haulStartupSettings: [SwiftSetting] = [
    .unsafeFlags(["-Xfrontend", "-disable-concrete-type-metadata-mangled-name-accessors"])
]

let package = Package(
    name: "Haul",
    platforms: [.macOS(.v13), .iOS(.v16)],
    products: [
        .library(name: "Haul", targets: ["Haul"]),
        .library(name: "HaulTestSupport", targets: ["HaulTestSupport"]),
        .library(name: "HaulPostgres", targets: ["HaulPostgres"]),
        .executable(name: "haul", targets: ["haul"]),
    ],
    dependencies: [
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        // AsyncHTTPClient's HTTP/2 runs on it; Haul reads its stream errors (a stream the
        // server did not process is sent again at once).
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // `swift package generate-documentation`: the DocC catalogs (Sources/Haul/Haul.docc,
        // Sources/HaulPostgres/HaulPostgres.docc), built in CI with warnings as errors.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        .target(name: "CHaulShims"),
        .target(
            name: "Haul",
            dependencies: [
                "CHaulShims",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                // AES-128-CBC, for HLS segments encrypted as RFC 8216 gives them.
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "haul",
            dependencies: [
                "Haul", "HaulCommandSupport", "HaulServer", "HaulPostgres",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings + haulStartupSettings,
            linkerSettings: haulLinkerSettings
        ),
        // What a process that runs downloads adds around the library, for `haul get` and
        // `haul resume` as for `haul serve` and `haul worker`: the programs run after each
        // download (`--on-complete`, `--on-error`) and the log handler (`--log-format`).
        // Kept out of HaulServer so that a local `haul get` needs no service code.
        .target(
            name: "HaulCommandSupport",
            dependencies: [
                "Haul",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The service (`haul serve`): its rules as plain values (`Rules/`) and the HTTP API
        // on Hummingbird (`API/`); with `--queue`, the shared queue's jobs and workers too
        // (through HaulPostgres, which `haul` links anyway).
        .target(
            name: "HaulServer",
            dependencies: [
                "Haul", "HaulCommandSupport", "HaulPostgres",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            resources: [.copy("Dashboard")],
            swiftSettings: swiftSettings
        ),
        // The shared queue (`haul worker`): a job store on PostgreSQL through postgres-nio, kept
        // out of `Haul` so that the library stays free of it (and builds for iOS).
        .target(
            name: "HaulPostgres",
            dependencies: [
                "Haul",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "HaulTestSupport",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HaulTests",
            dependencies: [
                "Haul", "HaulCommandSupport", "HaulServer", "HaulTestSupport", "HaulPostgres",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            // The upgrade fixture (a journal and partial files), read from the source tree.
            exclude: ["Fixtures"],
            swiftSettings: swiftSettings
        ),
    ]
)

// Benchmarks are built only on request, so CI does not build them:
//     HAUL_BENCHMARKS=1 swift run -c release haul-queue-benchmark
if ProcessInfo.processInfo.environment["HAUL_BENCHMARKS"] == "1" {
    package.products.append(.executable(name: "haul-queue-benchmark", targets: ["QueueBenchmark"]))
    package.targets.append(
        .executableTarget(
            name: "QueueBenchmark",
            dependencies: ["Haul", "HaulTestSupport"],
            path: "Benchmarks/QueueBenchmark",
            swiftSettings: swiftSettings
        ))
    package.products.append(.executable(name: "haul-memory-benchmark", targets: ["MemoryBenchmark"]))
    package.targets.append(
        .executableTarget(
            name: "MemoryBenchmark",
            dependencies: ["Haul", "HaulTestSupport"],
            path: "Benchmarks/MemoryBenchmark",
            swiftSettings: swiftSettings
        ))
    package.products.append(.executable(name: "haul-sync-benchmark", targets: ["SyncPlanBenchmark"]))
    package.targets.append(
        .executableTarget(
            name: "SyncPlanBenchmark",
            dependencies: ["Haul", "HaulTestSupport", .product(name: "Crypto", package: "swift-crypto")],
            path: "Benchmarks/SyncPlanBenchmark",
            swiftSettings: swiftSettings
        ))
    package.products.append(.executable(name: "haul-worker-benchmark", targets: ["WorkerBenchmark"]))
    package.targets.append(
        .executableTarget(
            name: "WorkerBenchmark",
            dependencies: [
                "Haul", "HaulPostgres",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/WorkerBenchmark",
            swiftSettings: swiftSettings
        ))
    package.products.append(.executable(name: "haul-zsync-scan", targets: ["ZsyncScan"]))
    package.targets.append(
        .executableTarget(
            name: "ZsyncScan",
            dependencies: ["Haul"],
            path: "Benchmarks/ZsyncScan",
            swiftSettings: swiftSettings
        ))
    package.products.append(.executable(name: "haul-cache-benchmark", targets: ["CacheBenchmark"]))
    package.targets.append(
        .executableTarget(
            name: "CacheBenchmark",
            dependencies: ["Haul"],
            path: "Benchmarks/CacheBenchmark",
            swiftSettings: swiftSettings
        ))
    package.products.append(.executable(name: "haul-client-baseline", targets: ["ClientBaseline"]))
    package.targets.append(
        .executableTarget(
            name: "ClientBaseline",
            dependencies: [
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            path: "Benchmarks/ClientBaseline",
            swiftSettings: swiftSettings
        ))
}
