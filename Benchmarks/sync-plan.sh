#!/usr/bin/env bash
# Sync planning benchmark: a manifest of 100,000 entries (issue 4 goal: plan in under 2 s).
# See Benchmarks/SyncPlanBenchmark/main.swift for what is timed.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
export HAUL_BENCHMARKS=1
swift build "${BENCH_BUILD_FLAGS[@]}" --product haul-sync-benchmark
"$(swift build "${BENCH_BUILD_FLAGS[@]}" --show-bin-path)"/haul-sync-benchmark "${1:-100000}"
