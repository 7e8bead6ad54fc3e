#!/usr/bin/env bash
# Sync planning benchmark: a manifest of 100,000 entries (issue 4 goal: plan in under 2 s).
# See Benchmarks/SyncPlanBenchmark/main.swift for what is timed.
set -euo pipefail
cd "$(dirname "$0")/.."
export HAUL_BENCHMARKS=1
swift build -c release --static-swift-stdlib --product haul-sync-benchmark --scratch-path .build-bench
.build-bench/release/haul-sync-benchmark "${1:-100000}"
