#!/usr/bin/env bash
# Regenerates docs/cli.md from the parser (`haul --experimental-dump-help`), through the
# test that checks it: run after changing any command's help text or options.
set -euo pipefail
cd "$(dirname "$0")/.."
HAUL_UPDATE_CLI_DOCS=1 swift test --filter CLIReferenceTests
git --no-pager diff --stat -- docs/cli.md
