#!/usr/bin/env bash
# Queue benchmark: 100,000 URLs through a journaled manager against the in-process test
# server. Reports rows inserted per second, time to first byte and peak RSS.
# Goals (issue 3): peak RSS under 150 MB, first byte in under 5 s.
set -euo pipefail
cd "$(dirname "$0")/.."
export HAUL_BENCHMARKS=1
swift build -c release --static-swift-stdlib --product haul-queue-benchmark --scratch-path .build-bench
.build-bench/release/haul-queue-benchmark "${1:-100000}" ${2:-}
