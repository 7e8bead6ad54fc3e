#!/usr/bin/env bash
# Builds a release `haul` with the Swift runtime linked in (--static-swift-stdlib) and installs
# it under a prefix, with its bash, zsh and fish completions, its man page and the service's
# dashboard files. No root needed: the default prefix is ~/.local.
#
#     scripts/install.sh                      # into ~/.local (bin/haul, share/...)
#     scripts/install.sh --prefix /opt/haul   # or PREFIX=/opt/haul scripts/install.sh
#     DESTDIR=/tmp/stage scripts/install.sh --prefix /usr/local   # staged, for packaging
#     scripts/install.sh --uninstall          # removes what an install put there
#
# Run it again to update: every file is replaced, none is left over.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: scripts/install.sh [--prefix DIR] [--destdir DIR] [--no-strip] [--uninstall]

Builds a release haul with the Swift standard library and Foundation linked statically
and installs, under PREFIX (default: $PREFIX, else ~/.local):
  bin/haul                                      the command (stripped unless --no-strip)
  share/haul/Haul_HaulServer.resources/         the dashboard of `haul serve`
  share/man/man1/haul.1                         the man page
  share/bash-completion/completions/haul        bash completion
  share/zsh/site-functions/_haul                zsh completion
  share/fish/vendor_completions.d/haul.fish     fish completion

Options:
  --prefix DIR    where to install (default ~/.local)
  --destdir DIR   stage the files under DIR+PREFIX, for packaging (also: DESTDIR=DIR)
  --no-strip      keep the symbols in the installed binary
  --uninstall     remove the installed files instead (nothing is built)
  -h, --help      show this help

Environment: PREFIX, DESTDIR, SWIFT (the swift to build with, default: swift),
HAUL_BUILD_PATH (the build directory, default: .build-install in the repository),
HAUL_BUILD_CONFIGURATION (release, the default, or debug: for checking this script
against an existing debug build, as CI does; not for use).
EOF
}

die() {
    printf 'install.sh: error: %s\n' "$*" >&2
    exit 1
}
note() { printf '%s\n' "$*"; }

prefix=${PREFIX:-$HOME/.local}
destdir=${DESTDIR:-}
strip=1
action=install
while [ $# -gt 0 ]; do
    case $1 in
    --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    --destdir) [ $# -ge 2 ] || die "--destdir needs a directory"; destdir=$2; shift 2 ;;
    --destdir=*) destdir=${1#--destdir=}; shift ;;
    --no-strip) strip=; shift ;;
    --uninstall) action=uninstall; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
    esac
done
[ -n "$prefix" ] || die "the prefix is empty"
# A relative prefix or destdir is taken from where the script was started.
case $prefix in /*) ;; *) prefix=$PWD/$prefix ;; esac
if [ -n "$destdir" ]; then case $destdir in /*) ;; *) destdir=$PWD/$destdir ;; esac; fi
prefix=${prefix%/}
[ -n "$prefix" ] || prefix=/

root=$destdir$prefix
bin_dir=$root/bin
share_dir=$root/share
resources_dir=$share_dir/haul
man_dir=$share_dir/man/man1
bash_dir=$share_dir/bash-completion/completions
zsh_dir=$share_dir/zsh/site-functions
fish_dir=$share_dir/fish/vendor_completions.d
# Everything an install puts down, for --uninstall and for the summary.
installed_files=(
    "$bin_dir/haul"
    "$man_dir/haul.1"
    "$bash_dir/haul"
    "$zsh_dir/_haul"
    "$fish_dir/haul.fish"
)

if [ "$action" = uninstall ]; then
    removed=0
    for file in "${installed_files[@]}"; do
        if [ -e "$file" ] || [ -L "$file" ]; then
            rm -f -- "$file"
            note "removed $file"
            removed=$((removed + 1))
        fi
    done
    if [ -d "$resources_dir" ]; then
        rm -rf -- "$resources_dir"
        note "removed $resources_dir"
        removed=$((removed + 1))
    fi
    [ "$removed" -gt 0 ] || note "nothing of haul's was installed under $root"
    exit 0
fi

cd "$(dirname "$0")/.."
repo=$PWD
if [ ! -f Package.swift ] || [ ! -d Sources/haul ]; then
    die "run this from a Haul checkout ($repo has no Package.swift or Sources/haul)"
fi
# On Apple platforms the Swift runtime is part of the OS and is never linked statically;
# this script is for Linux (on macOS, `swift build -c release` gives a binary that runs on
# any Mac with the deployment target's OS).
[ "$(uname -s)" = Linux ] || die "this script installs on Linux only ($(uname -s) here)"
for tool in readelf strip; do
    command -v "$tool" >/dev/null || die "$tool not found: install binutils"
done
swift=${SWIFT:-swift}
command -v "$swift" >/dev/null ||
    die "'$swift' not found: installing builds haul from source, which needs a Swift toolchain (https://swift.org/install)"
build_path=${HAUL_BUILD_PATH:-$repo/.build-install}
configuration=${HAUL_BUILD_CONFIGURATION:-release}
case $configuration in
release)
    # scripts/release-flags.sh says what they are and why; the benchmarks build with the same.
    # shellcheck source=scripts/release-flags.sh
    source "$repo/scripts/release-flags.sh"
    haul_release_flags "$repo"
    build_args=("${HAUL_RELEASE_FLAGS[@]}" --scratch-path "$build_path")
    ;;
debug)
    build_args=(-c debug --scratch-path "$build_path" --static-swift-stdlib)
    # A debug build is not dead-stripped, so the linker (gold, which reads each archive
    # once, in order) pulls in parts of Foundation's static archives that need archives it
    # has already passed (their C halves, ICU, libxml2). Name the whole family again at the
    # end as a group, which gold reads until nothing more resolves. Package.swift's
    # haulLinkerSettings leave --export-dynamic out of release builds only; leave it out
    # here too. The objects of an existing debug build in the same directory are used, the
    # few that depend on the runtime's linking compiled again.
    build_args+=(-Xlinker --start-group)
    for library in Foundation FoundationEssentials FoundationInternationalization FoundationXML CoreFoundation \
        _CFXMLInterface _FoundationCShims _FoundationCollections _FoundationICU xml2; do
        build_args+=(-Xlinker "-l$library")
    done
    build_args+=(-Xlinker --end-group -Xlinker --no-export-dynamic)
    ;;
*) die "HAUL_BUILD_CONFIGURATION is release or debug, not '$configuration'" ;;
esac

# SwiftPM's notes about files it does not handle in some dependencies are noise here.
quiet() { grep -v -e 'found [0-9]* file(s) which are unhandled' -e 'swift-distributed-tracing/Sources/.*/CMakeLists.txt' || true; }

started=$SECONDS
note "Building haul ($configuration, Swift runtime linked statically) in $build_path ..."
if ! "$swift" build "${build_args[@]}" --product haul 2>&1 | quiet; then
    die "swift build failed (see above)"
fi
built_bin=$("$swift" build "${build_args[@]}" --show-bin-path)/haul
[ -x "$built_bin" ] || die "the build did not produce $built_bin"
note "Built $built_bin in $((SECONDS - started)) s"

# The point of the static build: no shared library of the Swift toolchain is needed.
toolchain_libs=$(readelf -d "$built_bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' |
    grep -E '^lib(swift|Foundation|FoundationEssentials|FoundationInternationalization|_FoundationICU|dispatch|BlocksRuntime|XCTest)' || true)
[ -z "$toolchain_libs" ] || die "$built_bin still needs the toolchain's shared libraries: $toolchain_libs"

stage=$(mktemp -d "${TMPDIR:-/tmp}/haul-install.XXXXXX")
trap 'rm -rf -- "$stage"' EXIT

# Completions, from ArgumentParser.
for shell in bash zsh fish; do
    "$built_bin" --generate-completion-script "$shell" >"$stage/completion.$shell" ||
        die "haul --generate-completion-script $shell failed"
    [ -s "$stage/completion.$shell" ] || die "haul --generate-completion-script $shell wrote nothing"
done

# The man page, from ArgumentParser's generate-manual tool: the tool behind its
# generate-manual plugin, from the same swift-argument-parser, built in the same build
# directory (its ArgumentParser is already compiled) and run on the binary just built, as
# the plugin runs it. (`swift package plugin generate-manual` itself would build every
# product again without --static-swift-stdlib, which `swift package` does not take, and so
# compile the whole package a second time.) mdoc wants .Pp between paragraphs, not the
# blank lines the tool leaves in multi-paragraph discussions.
note "Building ArgumentParser's generate-manual tool ..."
if ! "$swift" build "${build_args[@]}" --product generate-manual 2>&1 | quiet; then
    die "swift build --product generate-manual failed (see above)"
fi
manual_date=$(git -C "$repo" log -1 --format=%cs 2>/dev/null || date +%Y-%m-%d)
mkdir -p "$stage/man"
"$(dirname "$built_bin")/generate-manual" "$built_bin" --date "$manual_date" --output-directory "$stage/man" ||
    die "generate-manual failed on $built_bin"
[ -s "$stage/man/haul.1" ] || die "generate-manual wrote no haul.1"
sed 's/^$/.Pp/' "$stage/man/haul.1" >"$stage/haul.1"

# The dashboard's files, which `haul serve` looks for in ../share/haul next to its binary.
resources_src=$(dirname "$built_bin")/Haul_HaulServer.resources
[ -f "$resources_src/Dashboard/index.html" ] || [ -f "$resources_src/index.html" ] ||
    die "the build has no dashboard resources at $resources_src"

# Install. Each file goes in under a temporary name and is renamed into place, so a running
# haul keeps its old binary and nobody sees half a file.
put() { # put SOURCE DEST MODE
    local dir tmp
    dir=$(dirname "$2")
    mkdir -p "$dir" || die "cannot create $dir"
    tmp=$(mktemp "$dir/.haul-install.XXXXXX") || die "cannot write in $dir"
    if ! { cp -- "$1" "$tmp" && chmod "$3" "$tmp" && mv -f -- "$tmp" "$2"; }; then
        rm -f -- "$tmp"
        die "cannot install $2"
    fi
}
cp -- "$built_bin" "$stage/haul"
if [ -n "$strip" ]; then
    strip --strip-unneeded "$stage/haul" || die "strip failed"
fi
put "$stage/haul" "$bin_dir/haul" 755
put "$stage/haul.1" "$man_dir/haul.1" 644
put "$stage/completion.bash" "$bash_dir/haul" 644
put "$stage/completion.zsh" "$zsh_dir/_haul" 644
put "$stage/completion.fish" "$fish_dir/haul.fish" 644
mkdir -p "$resources_dir" || die "cannot create $resources_dir"
rm -rf -- "$resources_dir/.Haul_HaulServer.resources.new"
cp -R -- "$resources_src" "$resources_dir/.Haul_HaulServer.resources.new"
rm -rf -- "$resources_dir/Haul_HaulServer.resources"
mv -- "$resources_dir/.Haul_HaulServer.resources.new" "$resources_dir/Haul_HaulServer.resources"

size() { wc -c <"$1" | awk '{ printf "%.1f MB", $1 / 1000000 }'; }
note ""
note "Installed haul $("$bin_dir/haul" --version 2>/dev/null || echo '(version unknown)') into $root:"
note "  $bin_dir/haul ($(size "$bin_dir/haul")$([ -n "$strip" ] && echo ", stripped; unstripped $(size "$built_bin")"))"
note "  $resources_dir/Haul_HaulServer.resources (the dashboard of haul serve)"
note "  $man_dir/haul.1"
note "  $bash_dir/haul"
note "  $zsh_dir/_haul"
note "  $fish_dir/haul.fish"
note "in $((SECONDS - started)) s."

if [ -z "$destdir" ]; then
    case ":$PATH:" in
    *":$bin_dir:"* | *":$bin_dir/:"*) ;;
    *) note "" && note "warning: $bin_dir is not on your PATH; add it, e.g. in ~/.profile: export PATH=\"$bin_dir:\$PATH\"" >&2 ;;
    esac
    case $prefix in
    "$HOME/.local" | /usr/local | /usr) ;;
    *)
        note ""
        note "For the man page and completions under a custom prefix:"
        note "  man:  export MANPATH=\"$share_dir/man:\$MANPATH\" (man finds it alone when $bin_dir is on PATH)"
        note "  bash: source $bash_dir/haul"
        note "  zsh:  fpath=($zsh_dir \$fpath) before compinit"
        note "  fish: set -p fish_complete_path $fish_dir"
        ;;
    esac
    if [ "$prefix" = "$HOME/.local" ]; then
        note ""
        note "zsh looks for completions in fpath only: add fpath=($zsh_dir \$fpath) before compinit in ~/.zshrc."
    fi
fi
