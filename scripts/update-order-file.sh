#!/usr/bin/env bash
# Writes scripts/haul.order: the functions of haul that common runs execute, which the
# release build (scripts/release-flags.sh) links together so that a run maps the pages of
# the code it uses and not 64 KiB around each of them. Run it after changes that move much
# of what a run executes (peak memory of a one-file `haul get` creeping up is the sign).
#
#     scripts/update-order-file.sh            # builds haul as a release does, then lists
#     HAUL_BIN=path scripts/update-order-file.sh   # lists from that binary (built with
#                                             # -function-sections, not stripped)
#
# Needs valgrind (callgrind lists every function a run executes, however briefly), nginx,
# openssl, python3, curl, nm and strip. The runs, against nginx on 127.0.0.1 with a throwaway
# certificate authority, each twice: one small file over http, over HTTPS with HTTP/2 and
# with HTTP/1.1, the same file again (a conditional request), a list of 20 files over http
# and over HTTPS, a 4 MiB file in 4 segments, `haul list`, `--version` and a usage error.
# The list is sorted by name (modules stay together, and a new list reads as a diff).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
die() { printf 'update-order-file.sh: error: %s\n' "$*" >&2; exit 1; }
for tool in valgrind nginx openssl python3 strip curl nm; do
    command -v "$tool" >/dev/null || die "$tool not found"
done
# shellcheck source=Benchmarks/lib.sh
source Benchmarks/lib.sh
haul=$(haul_binary) || exit 1

work=$(mktemp -d "${TMPDIR:-/tmp}/haul-order.XXXXXX")
nginx_pid=
cleanup() {
    [[ -z $nginx_pid ]] || kill "$nginx_pid" 2>/dev/null || true
    rm -rf -- "$work"
}
trap cleanup EXIT
[[ -z ${KEEP:-} ]] || trap - EXIT # KEEP=1: leave the traces and logs in $work

# Valgrind gives up on the binary's DWARF; its symbol table is all that is needed.
strip --strip-debug -o "$work/haul" "$haul"
TLS_DIR=$work/tls CA_FILE=$work/tls/ca.pem
make_certificates
mkdir -p "$work/www" "$work/nginx/tmp"
chmod 755 "$work" "$work/www" # nginx's workers may run as another user
head -c 16384 /dev/urandom >"$work/www/small.bin"
for i in $(seq -w 1 20); do head -c 16384 /dev/urandom >"$work/www/f$i.bin"; done
head -c $((4 << 20)) /dev/urandom >"$work/www/big.bin"
http=$(free_port) https=$(free_port)
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes 1;
pid $work/nginx/nginx.pid;
daemon off;
error_log $work/nginx/error.log;
events { worker_connections 256; }
http {
$(nginx_http_basics "$work/nginx")
    server { listen 127.0.0.1:$http; root $work/www; }
    server {
        listen 127.0.0.1:$https ssl http2;
        ssl_certificate $TLS_DIR/server.pem; ssl_certificate_key $TLS_DIR/server.key;
        root $work/www;
    }
}
CONF
nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" >/dev/null 2>&1 &
nginx_pid=$!
up=
for _ in {1..100}; do
    if curl -sf -o /dev/null "http://127.0.0.1:$http/small.bin"; then up=1; break; fi
    kill -0 "$nginx_pid" 2>/dev/null || break
    sleep 0.05
done
[[ -n $up ]] || { cat "$work/nginx/error.log" >&2; die "nginx did not start"; }
for i in $(seq -w 1 20); do printf 'http://127.0.0.1:%s/f%s.bin\n' "$http" "$i"; done >"$work/list.txt"
sed "s#http://127.0.0.1:$http#https://127.0.0.1:$https#" "$work/list.txt" >"$work/list-tls.txt"

run=0
trace() {
    run=$((run + 1))
    local out=$work/run$run
    mkdir -p "$out"
    # A failing run (the usage error) is traced all the same.
    valgrind --tool=callgrind --demangle=no --callgrind-out-file="$out/callgrind.out" \
        "$work/haul" "$@" >/dev/null 2>"$out/valgrind.log" || true
    [[ -s $out/callgrind.out ]] || { cat "$out/valgrind.log" >&2; die "callgrind traced nothing: haul $*"; }
}
# Each set of runs twice, in directories of its own: what a run executes depends a little
# on timing (which thread finishes first), and the list is their union.
for pass in 1 2; do
    p=$work/pass$pass
    J=(--journal "$p/journal.sqlite" -q)
    trace get "http://127.0.0.1:$http/small.bin" -d "$p/d1" "${J[@]}"
    trace get "http://127.0.0.1:$http/small.bin" -d "$p/d1" "${J[@]}"
    trace get "https://127.0.0.1:$https/small.bin" -d "$p/d2" --ca-certificate "$CA_FILE" "${J[@]}"
    trace get "https://127.0.0.1:$https/small.bin" -d "$p/d3" --http1.1 --ca-certificate "$CA_FILE" "${J[@]}"
    trace get -i "$work/list.txt" -j 16 -d "$p/d4" "${J[@]}"
    trace get -i "$work/list-tls.txt" -j 16 -d "$p/d5" --ca-certificate "$CA_FILE" "${J[@]}"
    trace get "http://127.0.0.1:$http/big.bin" -x 4 -d "$p/d6" "${J[@]}"
    trace list --journal "$p/journal.sqlite"
    trace --version
    trace get --checksum nonsense "http://127.0.0.1:$http/small.bin"
    for d in d1 d2 d3 d6; do
        [[ -s $p/$d/small.bin || -s $p/$d/big.bin ]] || die "a traced download did not complete ($p/$d)"
    done
    [[ $(find "$p/d4" "$p/d5" -name 'f*.bin' | wc -l) == 40 ]] || die "a traced list did not complete ($p)"
done

# Names the list leaves out: a name that several objects define locally (a merged
# metadata accessor, an outlined copy) when one of them is in the toolchain's static
# libraries, which have one section for a whole library's code (libswiftCore's 1.6 MB,
# _RegexParser's, JSONDecoder's): lld gives every section defining a listed name its
# place, and one such name would bring a whole library's code in among the code a run uses.
toolchain_lib=$(dirname "$(readlink -f "$(command -v "${SWIFT:-swift}")")")/../lib/swift_static/linux
[[ -d $toolchain_lib ]] || die "no static Swift libraries at $toolchain_lib"
nm "$work/haul" | awk '{ print $NF }' | sort | uniq -d >"$work/defined-twice"
for archive in "$toolchain_lib"/*.a; do
    nm --defined-only "$archive" 2>/dev/null | awk '$2 ~ /^[trd]$/ { print $3 }'
done | sort -u >"$work/toolchain-local"
comm -12 "$work/defined-twice" "$work/toolchain-local" >"$work/left-out"

# Every function executed in haul's own object (fn= lines under ob= of the binary),
# names given once and then by number, as callgrind compresses them.
python3 - "$work" >scripts/haul.order <<'PY'
import glob, re, sys
left_out = set(open(sys.argv[1] + "/left-out").read().split())
names = set()
for path in glob.glob(sys.argv[1] + "/run*/callgrind.out"):
    objects, functions, current = {}, {}, None
    def name(table, text):
        m = re.match(r"\((\d+)\)(?: (.*))?$", text)
        if not m:
            return text
        if m.group(2) is not None:
            table[m.group(1)] = m.group(2)
        return table.get(m.group(1))
    for line in open(path, errors="replace"):
        if line.startswith("ob="):
            current = name(objects, line[3:].rstrip("\n"))
        elif line.startswith("cob="):
            name(objects, line[4:].rstrip("\n"))
        elif line.startswith("fn="):
            fn = name(functions, line[3:].rstrip("\n"))
            if current and current.endswith("/haul") and fn and not fn.startswith("0x"):
                names.add(fn.split(" ")[0].split("'")[0])
        elif line.startswith("cfn="):
            name(functions, line[4:].rstrip("\n"))
print("\n".join(sorted(names - left_out)))
PY
printf 'scripts/haul.order: %s functions\n' "$(wc -l <scripts/haul.order)"
