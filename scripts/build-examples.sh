#!/usr/bin/env bash
# Builds every example package under Examples/ and runs each one with no arguments (each
# serves itself from a local server and ends in a few seconds). Exits non-zero if a build or
# a run fails.
#
#     scripts/build-examples.sh            # JOBS=N sets swift build's -j (default 2)
#
# The examples build in the package's own build directory, .build, beside Haul's debug
# build: Haul and its dependencies compiled by `swift build --build-tests` (or `swift
# test`) are not compiled again. In CI, after that build, the first example took 30 s where
# its own directory (Examples/.build, every dependency compiled once more) took 532 s.
# SCRATCH=DIR builds them elsewhere. Sharing a directory needs
# --disable-build-manifest-caching: otherwise SwiftPM reuses the build plan of the previous
# package, builds nothing and says "Build complete!".
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=${JOBS:-2}
scratch=${SCRATCH:-.build}
examples=()
for manifest in Examples/*/Package.swift; do
    examples+=("$(basename "$(dirname "$manifest")")")
done
[ "${#examples[@]}" -gt 0 ] || { echo "build-examples: no example under Examples/" >&2; exit 1; }

for example in "${examples[@]}"; do
    echo "== build $example"
    started=$SECONDS
    rm -f "$scratch/debug/$example"
    # Progress lines and a dependency's warning about its CMakeLists.txt are left out;
    # the build's own warnings and errors are kept. The pipe fails when the build does.
    if ! swift build -j "$jobs" --disable-build-manifest-caching \
        --package-path "Examples/$example" --scratch-path "$scratch" 2>&1 |
        { grep -v -e '^\[[0-9]*/[0-9]*\] ' -e "found 1 file(s) which are unhandled" \
            -e 'swift-distributed-tracing/Sources/.*/CMakeLists.txt' || true; }; then
        echo "build-examples: $example did not build" >&2
        exit 1
    fi
    # A build that says it is complete but left no executable is a failure too (the
    # executable was removed before it, so an old one cannot pass for it).
    if [ ! -x "$scratch/debug/$example" ]; then
        echo "build-examples: $example: no executable at $scratch/debug/$example" >&2
        exit 1
    fi
    echo "   built in $((SECONDS - started)) s"
done

for example in "${examples[@]}"; do
    echo "== run $example"
    started=$SECONDS
    # An example that hangs is ended (TERM after 120 s, KILL 10 s later) and fails the script.
    # Its output goes out line by line (stdbuf, where there is one), so that a hang shows
    # how far it got: a pipe's buffer would be lost with the killed process.
    line_buffered=()
    if command -v stdbuf > /dev/null; then line_buffered=(stdbuf -oL -eL); fi
    if ! timeout -k 10 120 ${line_buffered[@]+"${line_buffered[@]}"} "$scratch/debug/$example"; then
        echo "build-examples: $example failed" >&2
        exit 1
    fi
    echo "   ran in $((SECONDS - started)) s"
done
echo "build-examples: ${#examples[@]} examples built and run"
