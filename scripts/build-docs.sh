#!/usr/bin/env bash
# Builds the DocC catalogs of the library (Haul) and the shared queue (HaulPostgres) with
# swift-docc-plugin, warnings as errors, and checks that every public symbol has its `///`
# documentation. CI runs it after the tests; run it after changing a public API or an article.
#
#     scripts/build-docs.sh            # archives in .build/plugins/Swift-DocC/outputs/
#     scripts/build-docs.sh --preview  # also prints how to preview the Haul catalog
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(Haul HaulPostgres HaulTestSupport)
for target in "${targets[@]}"; do
    echo "== docs: $target"
    # The plugin builds the target's symbol graph (reusing the debug build) and runs
    # `docc convert`; any warning (an unresolved link, an undocumented parameter) fails it.
    swift package --disable-sandbox generate-documentation --target "$target" --warnings-as-errors \
        2>&1 | grep -v "found 1 file(s) which are unhandled\|swift-distributed-tracing/Sources/.*/CMakeLists.txt"
done

# Every public symbol declared in our sources carries a doc comment. (DocC does not warn
# about undocumented symbols: it renders them with an empty abstract.)
python3 - "${targets[@]}" <<'EOF'
import glob, json, os, sys

root = os.getcwd() + "/Sources/"
missing = []
for target in sys.argv[1:]:
    graphs = glob.glob(f".build/*/extracted-symbols/*/{target}/{target}*.symbols.json")
    if not graphs:
        sys.exit(f"no symbol graph for {target}: did generate-documentation run?")
    for graph in graphs:
        for symbol in json.load(open(graph))["symbols"]:
            uri = symbol.get("location", {}).get("uri", "")
            if root not in uri or symbol.get("docComment"):
                continue
            path = uri.split(root, 1)[1]
            line = symbol["location"]["position"]["line"] + 1
            missing.append(f"Sources/{path}:{line}: {'.'.join(symbol['pathComponents'])} has no /// documentation")
for line in sorted(set(missing)):
    print(line)
if missing:
    sys.exit(f"{len(set(missing))} public symbols lack documentation")
print("every public symbol of " + ", ".join(sys.argv[1:]) + " is documented")
EOF

if [ "${1:-}" = --preview ]; then
    echo "preview: swift package --disable-sandbox preview-documentation --target Haul"
fi
