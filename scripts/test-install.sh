#!/usr/bin/env bash
# Checks scripts/install.sh end to end: installs into a temporary prefix (building the
# release binary first, in .build-install, unless it is already built there), then runs the
# installed haul with no Swift toolchain in reach (a scrubbed environment, and, where this
# machine allows it, a chroot holding only the binary and the system libraries ldd names):
# --version, --help, a verified download from a local HTTP server and the service's
# dashboard; checks the completions and the man page; installs again (idempotent), stages
# with DESTDIR, and uninstalls.
#
#     scripts/test-install.sh
#
# From clean, the release build takes about 20 minutes on 2 cores, so swift test does not run
# this. .ci/run does, after the tests, with HAUL_BUILD_CONFIGURATION=debug and
# HAUL_BUILD_PATH=.build: the install of a debug build relinked with the runtime static, from
# the objects the tests were built with.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

failures=0
pass() { printf 'ok    %s\n' "$*"; }
fail() {
    printf 'FAIL  %s\n' "$*" >&2
    failures=$((failures + 1))
}
skip() { printf 'skip  %s\n' "$*"; }
die() {
    printf 'test-install.sh: error: %s\n' "$*" >&2
    exit 1
}
check() { # check DESCRIPTION COMMAND...: passes when the command succeeds
    local what=$1
    shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}
has() { printf '%s\n' "$2" | grep -Eq -- "$1"; } # has REGEX TEXT
lacks() { ! has "$@"; }
file_has() { grep -Eq -- "$1" "$2"; } # file_has REGEX FILE

for tool in python3 readelf ldd sha256sum; do
    command -v "$tool" >/dev/null || die "$tool is needed for this test"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/haul-test-install.XXXXXX")
pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf -- "$work"
}
trap cleanup EXIT
prefix=$work/prefix
home=$work/home
mkdir -p "$home"

# A PATH and environment with no Swift toolchain in them: the system's directories only.
clean_env=(env -i "HOME=$home" "PATH=/usr/bin:/bin" "LANG=C.UTF-8" "LD_LIBRARY_PATH=")
if "${clean_env[@]}" sh -c 'command -v swift' >/dev/null; then
    die "swift is in /usr/bin or /bin here, so the clean PATH would still have a toolchain"
fi

# 1. Install.
started=$SECONDS
# Its output as it comes (a clean build is long, and should not look like a hang).
if ! "$repo/scripts/install.sh" --prefix "$prefix" 2>&1 | tee "$work/install.log" | sed 's/^/      /'; then
    die "scripts/install.sh failed (its output is above)"
fi
install_seconds=$((SECONDS - started))
pass "scripts/install.sh --prefix $prefix (${install_seconds} s)"
haul=$prefix/bin/haul
expected_files=(
    bin/haul share/man/man1/haul.1 share/bash-completion/completions/haul
    share/zsh/site-functions/_haul share/fish/vendor_completions.d/haul.fish
    share/haul/Haul_HaulServer.resources
)
for file in "${expected_files[@]}"; do check "installed $file" test -e "$prefix/$file"; done
check "bin/haul is executable" test -x "$haul"
check "PATH warning for a prefix not on PATH" grep -q "is not on your PATH" "$work/install.log"

# 2. The binary needs nothing from the Swift toolchain.
needed=$(readelf -d "$haul" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
printf '      needs: %s\n' "$(printf '%s' "$needed" | tr '\n' ' ')"
check "no Swift runtime or Foundation shared library needed" \
    lacks '^lib(swift|Foundation|_FoundationICU|dispatch|BlocksRuntime)' "$needed"
ldd_out=$("${clean_env[@]}" ldd "$haul" 2>&1) || true
printf '%s\n' "$ldd_out" | sed 's/^/      ldd: /'
check "ldd resolves every library from the system" lacks 'not found' "$ldd_out"
check "ldd names no toolchain path" lacks '/opt/swift|swift/linux|\.swiftpm|\.build' "$ldd_out"
# How it is linked (Package.swift's haulLinkerSettings): position-independent, so ASLR applies
# to it, and without the program's own symbols in its dynamic symbol table (the static
# runtime's --export-dynamic put about 55,000 there, read at every start).
# (readelf before binutils 2.36 calls a PIE "DYN (Shared object file)"; a non-PIE is "EXEC".)
check "bin/haul is a position-independent executable" has 'Type: +DYN ' "$(readelf -h "$haul")"
exported=$(readelf --dyn-syms -W "$haul" | grep -c ' GLOBAL ' || true)
check "bin/haul exports no symbols of its own ($exported global dynamic symbols)" test "$exported" -lt 2000

# 3. Run it with no toolchain on PATH or the library path.
version=$(sed -n 's/^ *version: "\(.*\)",$/\1/p' Sources/haul/HaulCommand.swift)
out=$("${clean_env[@]}" "$haul" --version 2>&1) || true
check "haul --version prints $version (got '$out')" test "$out" = "$version"
"${clean_env[@]}" "$haul" --help >"$work/help.txt" 2>&1 || true
help=$(cat "$work/help.txt")
check "haul --help: usage and subcommands" has '^USAGE: haul' "$help"
for sub in get resume list pause cancel retry clean manifest sync serve; do
    check "haul --help lists $sub" has "^ +$sub( |$)" "$help"
done

# A local HTTP server with a 3 MiB file.
mkdir -p "$work/www" "$work/downloads"
head -c 3145728 /dev/urandom >"$work/www/payload.bin"
digest=$(sha256sum "$work/www/payload.bin" | cut -d' ' -f1)
python3 -u -m http.server --bind 127.0.0.1 --directory "$work/www" 0 >"$work/http.log" 2>&1 &
pids+=($!)
port=
for _ in $(seq 100); do
    port=$(sed -n 's/.*port \([0-9][0-9]*\).*/\1/p' "$work/http.log" | head -1)
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || die "the local HTTP server did not start: $(cat "$work/http.log")"
url=http://127.0.0.1:$port/payload.bin

if "${clean_env[@]}" "$haul" get "$url" -d "$work/downloads" --checksum "sha-256=$digest" >"$work/get.log" 2>&1; then
    got=$(sha256sum "$work/downloads/payload.bin" 2>/dev/null | cut -d' ' -f1) || true
    check "haul get from 127.0.0.1 with a clean environment: the file and its digest" test "$got" = "$digest"
else
    sed 's/^/      /' "$work/get.log" >&2
    fail "haul get from 127.0.0.1 with a clean environment"
fi

# The service finds the dashboard installed in PREFIX/share/haul.
http_get() { python3 -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], timeout=10).read())' "$1"; }
serve_dashboard() { # serve_dashboard HAUL: the dashboard's / answers 200 with its HTML
    local haul=$1 log=$work/serve.log address pid status
    : >"$log"
    "${clean_env[@]}" "$haul" serve --listen 127.0.0.1:0 --journal "$work/serve.sqlite" -d "$work/downloads" \
        >"$log" 2>&1 &
    pid=$!
    pids+=("$pid")
    address=
    for _ in $(seq 100); do
        address=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$log" | head -1)
        [ -n "$address" ] && break
        sleep 0.1
    done
    status=1
    if [ -n "$address" ] && http_get "$address/" >"$work/index.html" && grep -qi '<html' "$work/index.html"; then
        status=0
    else
        sed 's/^/      /' "$log" >&2
    fi
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return "$status"
}
check "haul serve (installed) serves its dashboard from share/haul" serve_dashboard "$haul"
mv "$prefix/share/haul" "$work/share-haul.aside"
if serve_dashboard "$haul" 2>/dev/null; then fail "without share/haul, the dashboard is missing"; else pass "without share/haul, the dashboard is missing"; fi
mv "$work/share-haul.aside" "$prefix/share/haul"

# A chroot holding only the binary, the libraries ldd lists, /proc and four device nodes:
# the binary on a machine with those system libraries and nothing else. (/proc is needed:
# the statically linked Swift runtime reads the command line from /proc/self/cmdline.)
# Needs root for chroot and mount; the mounts live in a private mount namespace, so
# nothing outlives the test.
jail=$work/jail
in_jail() { # in_jail ARGS...: runs the jail's /bin/haul with ARGS
    # shellcheck disable=SC2016 # expanded by the inner sh
    unshare --mount sh -c '
        jail=$1
        shift
        mount --bind /proc "$jail/proc" || exit 125
        for node in null zero urandom random; do mount --bind "/dev/$node" "$jail/dev/$node" || exit 125; done
        exec env -i HOME=/home PATH=/bin "$0" "$jail" /bin/haul "$@"
    ' "$(command -v chroot)" "$jail" "$@"
}
jail_reason=
if [ "$(id -u)" -ne 0 ]; then
    jail_reason="not root"
elif ! command -v chroot >/dev/null || ! command -v unshare >/dev/null; then
    jail_reason="chroot or unshare missing"
else
    mkdir -p "$jail/bin" "$jail/dev" "$jail/proc" "$jail/home" "$jail/tmp"
    chmod 1777 "$jail/tmp"
    cp "$haul" "$jail/bin/haul"
    for lib in $(printf '%s\n' "$ldd_out" | grep -o '/[^ ]*' | sort -u); do
        mkdir -p "$jail$(dirname "$lib")"
        cp -L "$lib" "$jail$lib"
    done
    for node in null zero urandom random; do touch "$jail/dev/$node"; done
    out=$(in_jail --version 2>&1) && status=0 || status=$?
    if [ "$status" -eq 125 ] || printf '%s' "$out" | grep -qi 'operation not permitted'; then
        jail_reason="not permitted here: $out"
    fi
fi
if [ -n "$jail_reason" ]; then
    skip "chroot runs ($jail_reason)"
else
    printf '      chroot holds: %s\n' "$(cd "$jail" && find . -type f ! -path './dev/*' | sort | tr '\n' ' ')"
    check "chroot with only those libraries: haul --version prints $version (got '$out')" test "$out" = "$version"
    in_jail get "$url" -d /tmp/downloads --checksum "sha-256=$digest" >"$work/jail-get.log" 2>&1 || sed 's/^/      /' "$work/jail-get.log" >&2
    got=$(sha256sum "$jail/tmp/downloads/payload.bin" 2>/dev/null | cut -d' ' -f1) || true
    check "chroot with only those libraries: haul get from 127.0.0.1, digest verified" test "$got" = "$digest"
fi

# 4. Completions.
bash_completion=$prefix/share/bash-completion/completions/haul
out=$(bash --norc --noprofile -c 'source "$1" && complete -p haul' - "$bash_completion" 2>&1) || true
check "bash: sourcing the completion registers it ($out)" has '^complete .* haul$' "$out"
out=$(bash --norc --noprofile -c '
    source "$1"
    fn=$(complete -p haul | sed -n "s/.* -F \([^ ]*\) .*/\1/p")
    COMP_WORDS=(haul se); COMP_CWORD=1; COMP_LINE="haul se"; COMP_POINT=${#COMP_LINE}
    "$fn" haul se haul 2>/dev/null
    printf "%s\n" "${COMPREPLY[@]}"
' - "$bash_completion" 2>&1) || true
check "bash: 'haul se<TAB>' completes to serve (got: $(printf '%s' "$out" | tr '\n' ' '))" has '^serve$' "$out"
if command -v zsh >/dev/null; then
    check "zsh: _haul parses" zsh -n "$prefix/share/zsh/site-functions/_haul"
else
    check "zsh: _haul is a zsh completion function" grep -q '^#compdef haul' "$prefix/share/zsh/site-functions/_haul"
    skip "zsh: not installed, not loaded"
fi
if command -v fish >/dev/null; then
    check "fish: haul.fish parses" fish --no-execute "$prefix/share/fish/vendor_completions.d/haul.fish"
else
    check "fish: haul.fish holds complete -c haul lines" grep -Eq "^complete -c '?haul'? " "$prefix/share/fish/vendor_completions.d/haul.fish"
    skip "fish: not installed, not loaded"
fi

# 5. The man page.
page=$prefix/share/man/man1/haul.1
check "man page: an mdoc page titled HAUL 1" grep -q '^\.Dt HAUL 1' "$page"
if command -v groff >/dev/null; then
    groff -mandoc -Tutf8 -ww -z "$page" 2>"$work/groff.log" || true
    check "man page: groff reads it without warnings" test ! -s "$work/groff.log"
    if [ -s "$work/groff.log" ]; then sed 's/^/      /' "$work/groff.log" >&2; fi
    # Plain text, without overstriking: what `man haul` shows.
    groff -mandoc -Tutf8 -P-cbou -rLL=100n "$page" >"$work/man.txt" 2>/dev/null || true
    for section in NAME SYNOPSIS DESCRIPTION; do check "man page: $section" file_has "^$section" "$work/man.txt"; done
    for sub in get resume list pause cancel retry clean manifest sync serve; do
        check "man page: haul $sub" file_has "^ +haul $sub\b|^ +$sub\b" "$work/man.txt"
    done
else
    skip "man page: groff not installed, not rendered"
fi
if command -v man >/dev/null; then
    MANPATH=$prefix/share/man man -w haul >"$work/man-w.txt" 2>&1 || true
    check "man finds it through MANPATH=PREFIX/share/man" grep -qx "$page" "$work/man-w.txt"
fi

# 6. Install again: same files, nothing left behind.
(cd "$prefix" && find . | sort) >"$work/files.1"
"$repo/scripts/install.sh" --prefix "$prefix" >"$work/install2.log" 2>&1 || {
    cat "$work/install2.log" >&2
    die "the second install failed"
}
(cd "$prefix" && find . | sort) >"$work/files.2"
check "installing again leaves the same files" cmp -s "$work/files.1" "$work/files.2"
check "installing again puts the binary back" test -x "$haul"

# 7. DESTDIR staging.
DESTDIR=$work/stage "$repo/scripts/install.sh" --prefix /usr/local >"$work/stage.log" 2>&1 || {
    cat "$work/stage.log" >&2
    die "the DESTDIR install failed"
}
check "DESTDIR=... --prefix /usr/local stages under DESTDIR/usr/local" \
    test -x "$work/stage/usr/local/bin/haul" -a -f "$work/stage/usr/local/share/man/man1/haul.1"
check "DESTDIR: nothing outside DESTDIR/usr/local" test "$(ls -A "$work/stage")" = usr

# 8. Uninstall.
"$repo/scripts/install.sh" --prefix "$prefix" --uninstall >"$work/uninstall.log" 2>&1 || {
    cat "$work/uninstall.log" >&2
    die "--uninstall failed"
}
left=$(cd "$prefix" && find . -type f | sort | tr '\n' ' ')
check "--uninstall removes every file it installed (left: '$left')" test -z "$left"
check "--uninstall again is fine" "$repo/scripts/install.sh" --prefix "$prefix" --uninstall

# 9. Fails loudly.
out=$(PREFIX=$prefix SWIFT=/nonexistent/swift "$repo/scripts/install.sh" 2>&1) && status=0 || status=$?
check "a missing swift fails with a message (status $status)" has 'Swift toolchain' "$status $out"
check "a missing swift fails (status $status)" test "$status" -ne 0
out=$("$repo/scripts/install.sh" --bogus 2>&1) && status=0 || status=$?
check "an unknown option fails with a message (status $status)" has 'unknown argument' "$out"
check "an unknown option fails (status $status)" test "$status" -ne 0

if [ "$failures" -gt 0 ]; then
    printf '\n%d check(s) failed\n' "$failures" >&2
    exit 1
fi
printf '\nall install checks passed\n'
