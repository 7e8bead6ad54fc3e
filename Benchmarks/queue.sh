#!/usr/bin/env bash
# Queue benchmark: 100,000 URLs through a journaled manager against the in-process test
# server. Reports rows inserted per second, time to first byte and peak RSS.
# Goals (issue 3): peak RSS under 150 MB, first byte in under 5 s.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
export HAUL_BENCHMARKS=1
swift build "${BENCH_BUILD_FLAGS[@]}" --product haul-queue-benchmark
"$(swift build "${BENCH_BUILD_FLAGS[@]}" --show-bin-path)"/haul-queue-benchmark "${1:-100000}" ${2:-}
