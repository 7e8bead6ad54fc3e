#!/usr/bin/env bash
# Benchmarks/compare.sh: Haul against curl, wget2 and aria2c, downloading from nginx on
# 127.0.0.1. Runs up to seven workloads, each RUNS times, writing to tmpfs and then (unless
# SKIP_DISK=1) to the real disk, and writes a Markdown report of the medians to
# Benchmarks/results/compare-YYYY-MM-DD.md and Benchmarks/results/latest.md (the raw
# per-run numbers go next to it as compare-YYYY-MM-DD.tsv).
#
#   1. One SIZE file (default 1 GiB), one connection: haul, curl, wget2, aria2c -x1 -s1.
#   2. The same over 4 and 8 connections: haul -x N (once `haul get` has it; until then
#      its rows say "n/a (no -x yet)") and aria2c -x N -s N -k 1M; as a reference, N curls
#      fetching a range each into separate files (the machine's ceiling for N connections).
#   3. SMALL_COUNT (5,000) files of 16 KiB, at each number in flight of TUNED (16 and 64):
#      haul -j N --per-host N, curl --parallel --parallel-max N, wget2 --max-threads=N,
#      aria2c -j N -x1.
#   4. QUEUE_COUNT (100,000) queued URLs: time to first byte and peak RSS, haul against
#      aria2c -i, both 16 in flight, over a capped window (see the workload).
#   5. Resume: a SIZE file interrupted at about half (SIGTERM), then continued: haul (the
#      same command again), curl -C -, wget2 -c, aria2c -c. Time of the second run and
#      the bytes nginx sent for it.
#   6. One LIMITED_SIZE file (default 256 MiB) from a server that allows LIMIT_RATE (20m:
#      20 MB/s) per connection (nginx limit_rate), over 8 connections: haul -x 8 (its
#      per-host cap left at the default, 6) and aria2c -x 8 -s 8 -k 1M. Not in the default
#      ONLY: each run takes about 13 s per tool at best (50 s with the rows at defaults).
#   8. One 16 KiB file per process, ONE_PER_RUN (6) times per tool in each run (30 with
#      RUNS=5), the tools interleaved: what a script that calls a tool once per file pays.
#      Every tool at its defaults; Haul with a fresh journal and with a copy of one holding
#      ONE_JOURNAL_ROWS (10,000) finished rows. Wall, CPU and peak RSS per process. Before
#      each run's rows, the haul binary's pages are dropped from the page cache and one
#      untimed haul run reads back what a run needs (see the report's notes: a binary
#      just built is all in the page cache, and its peak RSS reads 3-4 MiB higher).
#      Not in the default ONLY.
#   7. A flaky link: FLAKY_COUNT (200) files of FLAKY_SIZE (1 MiB), FLAKY_JOBS (10) in
#      flight, through Benchmarks/relay.py with a FLAKY_RTT_MS (10 ms) round trip that
#      resets the connection before FLAKY_RESET_RATE (0.02) of the server's 64 KiB pieces;
#      every tool told to retry and resume where it can (the flags and what each tool does
#      are at workload_flaky below). Per run: wall time, the files whose sha256 matches
#      the corpus, the body bytes nginx served ($body_bytes_sent), the relay's resets; the
#      report gives them against aria2c's. Not in the default ONLY.
#
# Rows at each tool's defaults (DEFAULTS=1, the default; 0 leaves them out): workloads 1, 3
# and 6 also run every tool with only what it needs to run at all (the URL or list, the
# output directory, the test CA, quiet output; Haul its journal path): `haul get URL` /
# `haul get -i LIST` (10 downloads, 6 per host, 4 connections per big file), `curl URL` /
# `curl --parallel -K LIST` (50 in flight: plain curl over a list is one at a time),
# `wget2 URL` / `wget2 -i LIST` (5 threads), `aria2c URL` / `aria2c -i LIST` (5 at once, one
# connection each), and over HTTPS no protocol option: each negotiates what it does by
# default, and the row says what nginx logged. These are what people type.
#
# RTT_MS (default 0) puts a far link in front of nginx: for each value above 0, a relay
# (Benchmarks/relay.py, a TCP relay on 127.0.0.1 that holds each direction's bytes for
# RTT/2 ms, pipelined, no bandwidth cap) stands in front of every nginx listener the
# workloads use (plain HTTP and, with HTTPS=1, both TLS listeners), and every tool is
# pointed at the relay's port: all of them meet the same link. RTT_MS="0 40" runs the
# chosen workloads once per value within each run (interleaved), and the report has a
# section per value ("round trip 40 ms"); the raw rows carry it as "@40" after the
# workload ("3-h2@40"). 0 is nginx directly, with no relay. What the relay models and
# what not (TCP's window over the far link) is in relay.py's header and the README.
#
# With HTTPS=1, workloads 1, 2, 3 and 6 (those of them in ONLY) run again over HTTPS, same
# corpus and same commands: nginx also listens with TLS on two more ports, one offering
# HTTP/1.1 only and one offering HTTP/2 as well (ALPN), with a certificate signed by a
# throwaway certificate authority that the script makes with openssl. Every tool is given
# that authority through its own option (haul --ca-certificate, curl --cacert, wget2
# --ca-certificate, aria2c --ca-certificate); nothing turns verification off. The HTTP/1.1
# rows run every tool (haul with --http1.1 once `haul get --help` lists it); the HTTP/2
# rows run haul --http2 (its default since issue 42), curl --http2 and wget2 when it was
# built with HTTP/2 (aria2c has none: its row says so); the rows at defaults run every
# tool with no protocol option. nginx logs the protocol of every TLS request, and a run
# served over another protocol than its row's is reported as a problem. Off by default:
# it roughly triples the time of those workloads.
#
# Usage (from anywhere; needs root or sudo the first time, to install packages):
#   Benchmarks/compare.sh
#   RUNS=5 SIZE=256M SMALL_COUNT=2000 QUEUE_COUNT=20000 SKIP_DISK=1 ONLY="1,3" Benchmarks/compare.sh
#   HAUL_BIN=/path/to/haul Benchmarks/compare.sh        # skip the release build
#   HTTPS=1 ONLY="1,3" Benchmarks/compare.sh            # add workloads 1 and 3 over HTTPS
#   HTTPS=1 RTT_MS="0 40" ONLY="1,2,3,6" Benchmarks/compare.sh   # the far link, HTTP and HTTPS
#   ONLY=7 SKIP_DISK=1 Benchmarks/compare.sh            # the flaky link
#   NOTE="a Swift build ran at the same time" Benchmarks/compare.sh   # added to the report
#   AHC_BIN=.build-bench/release/haul-client-baseline Benchmarks/compare.sh
#       # adds two reference rows to workload 3 (and its HTTPS runs): a plain
#       # AsyncHTTPClient loop, the client Haul is built on, that only collects the bodies
#       # in memory ("ahc-memory": the client's own cost), and the same loop writing each
#       # body with one thread-pool hop (open a temporary file, write, close, rename:
#       # "ahc-1hop", the lightest file writing that never shows a partial file), from
#       # Benchmarks/ClientBaseline (build it with HAUL_BENCHMARKS=1 swift build "${BENCH_BUILD_FLAGS[@]}"
#       # --product haul-client-baseline, the flags of lib.sh, as haul is built), and a third,
#       # "ahc-journal": the same writing with the least a journal that loses nothing
#       # must do (each URL a row of an SQLite journal before it is fetched, each file
#       # fsynced before its rename, one directory fsync and one transaction marking the
#       # rows completed per batch of files). Floors for Haul's cost per file, not peers:
#       # never the "best peer" of the summary. The report then gives Haul's own CPU per
#       # file above the ahc-1hop and ahc-journal floors. (At 16 in flight only.)
#
# Other knobs: QUEUE_STOP_FILES (2000) and QUEUE_MAX_SECONDS (20) end workload 4's window;
# TUNED ("16 64") the numbers in flight of workload 3's tuned rows; FLAKY_SEED (1) seeds
# workload 7's resets (run N uses FLAKY_SEED + N, for every tool alike) and FLAKY_TIMEOUT
# (300 s) stops a run of it that has not ended;
# RESULTS_DIR (Benchmarks/results) is where the report goes; KEEP_WORK=1 keeps the temporary
# directory's logs (every command's output, nginx's logs) for a look afterwards.
#
# Every command is timed from the outside: wall time with bash's EPOCHREALTIME around
# `/usr/bin/time -f '%U %S %M'`, which gives user and system CPU time and the peak RSS.
# That gives per-run CPU and RSS for every row, which hyperfine does not, so a plain loop
# is used instead of hyperfine. Runs are interleaved (run 1 of every tool, then run 2...)
# so a burst of background load hits every tool alike, and only medians are reported.
set -euo pipefail
export LC_ALL=C
umask 022

CALLER_DIR=$PWD
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
cd "$REPO"
# shellcheck source=Benchmarks/lib.sh
source "$SCRIPT_DIR/lib.sh"

RUNS=${RUNS:-3}
SIZE=${SIZE:-1G}
SMALL_COUNT=${SMALL_COUNT:-5000}
QUEUE_COUNT=${QUEUE_COUNT:-100000}
QUEUE_STOP_FILES=${QUEUE_STOP_FILES:-2000}
QUEUE_MAX_SECONDS=${QUEUE_MAX_SECONDS:-20}
SKIP_DISK=${SKIP_DISK:-0}
HTTPS=${HTTPS:-0}
ONLY=${ONLY:-1,2,3,4,5}
NOTE=${NOTE:-}
LIMITED_SIZE=${LIMITED_SIZE:-256M}
LIMIT_RATE=${LIMIT_RATE:-20m}
RESULTS_DIR=${RESULTS_DIR:-$REPO/Benchmarks/results}
SMALL_SIZE=16384 # workload 3 and 4 file size
RTT_MS=${RTT_MS:-0}
DEFAULTS=${DEFAULTS:-1}
TUNED=${TUNED:-16 64}
FLAKY_COUNT=${FLAKY_COUNT:-200}
FLAKY_SIZE=${FLAKY_SIZE:-1M}
FLAKY_RTT_MS=${FLAKY_RTT_MS:-10}
FLAKY_RESET_RATE=${FLAKY_RESET_RATE:-0.02}
FLAKY_JOBS=${FLAKY_JOBS:-10}
FLAKY_SEED=${FLAKY_SEED:-1}
FLAKY_TIMEOUT=${FLAKY_TIMEOUT:-300}
ONE_PER_RUN=${ONE_PER_RUN:-6}
ONE_JOURNAL_ROWS=${ONE_JOURNAL_ROWS:-10000}

log() { printf '[compare %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }
want() { [[ ",${ONLY// /}," == *",$1,"* ]]; }

SIZE_BYTES=$(numfmt --from=iec "$SIZE") || die "SIZE=$SIZE is not a size like 1G or 256M"
HALF_BYTES=$((SIZE_BYTES / 2))
LIMITED_BYTES=$(numfmt --from=iec "$LIMITED_SIZE") || die "LIMITED_SIZE=$LIMITED_SIZE is not a size like 256M"
[[ $LIMIT_RATE =~ ^[0-9]+[km]?$ ]] || die "LIMIT_RATE must be an nginx rate such as 20m"
# nginx's m is 1024 * 1024 bytes: LIMIT_RATE in bytes per second, for the report.
LIMIT_BYTES=$(numfmt --from=iec "${LIMIT_RATE^^}")
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"
[[ $HTTPS == 0 || $HTTPS == 1 ]] || die "HTTPS must be 0 or 1"
[[ $DEFAULTS == 0 || $DEFAULTS == 1 ]] || die "DEFAULTS must be 0 or 1"
read -r -a RTTS <<<"${RTT_MS//,/ }"
((${#RTTS[@]})) || RTTS=(0)
for rtt in "${RTTS[@]}"; do [[ $rtt =~ ^[0-9]+$ ]] || die "RTT_MS must be whole milliseconds, such as 0 or \"0 40\""; done
read -r -a TUNED_N <<<"${TUNED//,/ }"
TUNED_TEXT=$(printf '%s\n' "${TUNED_N[@]}" | paste -sd, - | sed 's/,\([^,]*\)$/ and \1/; s/,/, /g') # "16 and 64"
((${#TUNED_N[@]})) || die "TUNED must name at least one number of downloads in flight, such as \"16 64\""
for n in "${TUNED_N[@]}"; do [[ $n =~ ^[1-9][0-9]*$ ]] || die "TUNED must be numbers of downloads in flight, such as \"16 64\""; done
FLAKY_BYTES=$(numfmt --from=iec "$FLAKY_SIZE") || die "FLAKY_SIZE=$FLAKY_SIZE is not a size like 1M"
[[ $FLAKY_COUNT =~ ^[1-9][0-9]*$ && $FLAKY_JOBS =~ ^[1-9][0-9]*$ && $FLAKY_RTT_MS =~ ^[0-9]+$ && $FLAKY_SEED =~ ^[0-9]+$ ]] ||
    die "FLAKY_COUNT, FLAKY_JOBS, FLAKY_RTT_MS and FLAKY_SEED must be whole numbers"
[[ $FLAKY_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "FLAKY_TIMEOUT must be whole seconds"
[[ $FLAKY_RESET_RATE =~ ^(0|1|0?\.[0-9]+)$ ]] || die "FLAKY_RESET_RATE must be a probability such as 0.02"
# A relay (Benchmarks/relay.py) is needed for a round trip above 0 and for workload 7.
NEED_RELAY=0
for rtt in "${RTTS[@]}"; do ((rtt > 0)) && NEED_RELAY=1; done
if want 7; then NEED_RELAY=1; fi

SUDO=()
if [[ $EUID -ne 0 ]]; then SUDO=(sudo); fi

# ---------------------------------------------------------------------------------------
# Clean-up: whatever was started or created is stopped and removed on any exit.

WORK="" DISK_ROOT="" TMPFS_ROOT="" MOUNTED_TMPFS="" NGINX_PID_FILE="" POLICY_RC_CREATED=""
BG_PIDS=()
forget_bg() { # PID: no longer needs killing at exit
    local pid kept=()
    for pid in "${BG_PIDS[@]}"; do [[ $pid == "$1" ]] || kept+=("$pid"); done
    BG_PIDS=("${kept[@]}")
}
cleanup() {
    local pid
    for pid in "${BG_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    if [[ -n $NGINX_PID_FILE && -s $NGINX_PID_FILE ]]; then
        pid=$(<"$NGINX_PID_FILE")
        kill -QUIT "$pid" 2>/dev/null || true
        for _ in {1..50}; do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    if [[ -n $POLICY_RC_CREATED ]]; then "${SUDO[@]}" rm -f /usr/sbin/policy-rc.d; fi
    if [[ -n $MOUNTED_TMPFS ]]; then "${SUDO[@]}" umount "$MOUNTED_TMPFS" 2>/dev/null || true; fi
    if [[ -n $TMPFS_ROOT && -d $TMPFS_ROOT ]]; then rm -rf "$TMPFS_ROOT"; fi
    if [[ -n $WORK && -d $WORK ]]; then
        if [[ ${KEEP_WORK:-0} == 1 ]]; then
            rm -rf "$WORK/www" "$DISK_ROOT"
            log "kept the logs and lists in $WORK"
        else
            rm -rf "$WORK"
        fi
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------------------
# 1. Tools: install from Debian only what is missing.

install_tools() {
    local -A package_for=([nginx]=nginx [curl]=curl [wget2]=wget2 [aria2c]=aria2 [/usr/bin/time]=time [openssl]=openssl
        [python3]=python3 [timeout]=coreutils [sha256sum]=coreutils)
    local missing=() tool tools=(nginx curl wget2 aria2c /usr/bin/time)
    if [[ $HTTPS == 1 ]]; then tools+=(openssl); fi
    if ((NEED_RELAY)); then tools+=(python3); fi
    if want 7; then tools+=(timeout sha256sum); fi
    for tool in "${tools[@]}"; do
        command -v "$tool" >/dev/null 2>&1 || missing+=("${package_for[$tool]}")
    done
    [[ ${#missing[@]} -eq 0 ]] && return
    log "installing ${missing[*]}"
    # Keep nginx's postinst from starting the system service (and taking port 80).
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
        "${SUDO[@]}" chmod 755 /usr/sbin/policy-rc.d
        POLICY_RC_CREATED=1
    fi
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
    if [[ -n $POLICY_RC_CREATED ]]; then "${SUDO[@]}" rm -f /usr/sbin/policy-rc.d; POLICY_RC_CREATED=""; fi
}
PATH=$PATH:/usr/sbin # nginx lives in /usr/sbin, not always on a non-root PATH
install_tools

# ---------------------------------------------------------------------------------------
# 2. Haul, release build (a scratch path of its own so it never disturbs .build).

HAUL=$(haul_binary) || die "no haul to measure"
"$HAUL" get --help >/dev/null 2>&1 || die "$HAUL get --help failed"
AHC=
SMALL_TOOLS=(haul curl wget2 aria2c)
if [[ -n ${AHC_BIN:-} ]]; then
    AHC=$AHC_BIN
    if [[ $AHC != /* ]]; then AHC=$CALLER_DIR/$AHC; fi
    [[ -x $AHC ]] || die "no haul-client-baseline binary at $AHC"
    SMALL_TOOLS+=(ahc-memory ahc-1hop ahc-journal)
fi

# Segmented downloads: `-x N` / `--connections N` once `haul get` has them.
HAUL_HAS_X=0
if "$HAUL" get --help 2>&1 | grep -q -- '--connections'; then HAUL_HAS_X=1; fi
HAUL_ONE=() # workloads 1 and 5 ask for one connection explicitly (haul's default is 4)
if ((HAUL_HAS_X)); then HAUL_ONE=(-x 1); fi

# ---------------------------------------------------------------------------------------
# 3. Work directories and corpus.
#
# WORK is on the real disk (mktemp -d under /tmp, or /var/tmp when /tmp is a tmpfs): it
# holds nginx's root and logs and the "disk" output directory. Output for the "tmpfs"
# table goes to /dev/shm (or to a tmpfs mounted for the purpose).

fs_type() { stat -f -c %T "$1"; }
base=${TMPDIR:-/tmp}
if [[ $(fs_type "$base") == tmpfs ]]; then base=/var/tmp; fi
WORK=$(mktemp -d -p "$base" haul-compare.XXXXXX)
chmod 755 "$WORK" # nginx workers (user nobody when started as root) read the corpus here
WWW=$WORK/www
LOGS=$WORK/logs
RAW=$WORK/raw.tsv
mkdir -p "$WWW/small" "$LOGS" "$WORK/nginx/tmp"
: >"$RAW"

if [[ -d /dev/shm && $(fs_type /dev/shm) == tmpfs && -w /dev/shm ]]; then
    TMPFS_ROOT=$(mktemp -d -p /dev/shm haul-compare.XXXXXX)
else
    mkdir -p "$WORK/tmpfs"
    "${SUDO[@]}" mount -t tmpfs -o size=$((SIZE_BYTES * 3 + 1073741824)),mode=1777 tmpfs "$WORK/tmpfs"
    MOUNTED_TMPFS=$WORK/tmpfs
    TMPFS_ROOT=$(mktemp -d -p "$WORK/tmpfs" haul-compare.XXXXXX)
fi
DISK_ROOT=$WORK/disk
mkdir -p "$DISK_ROOT"
TARGETS=(tmpfs)
if [[ $SKIP_DISK != 1 ]]; then TARGETS+=(disk); fi
target_root() { if [[ $1 == tmpfs ]]; then echo "$TMPFS_ROOT"; else echo "$DISK_ROOT"; fi; }

log "corpus in $WWW: one $SIZE file, $SMALL_COUNT x 16 KiB files, one 16 KiB file for $QUEUE_COUNT queued URLs"
if want 1 || want 2 || want 5; then
    # Random data, so nothing along the way can compress it. openssl's AES-CTR keystream
    # is several times faster than /dev/urandom; fall back to urandom without openssl.
    if command -v openssl >/dev/null 2>&1; then
        openssl enc -aes-128-ctr -nosalt -pass pass:haul-compare -pbkdf2 </dev/zero 2>/dev/null |
            head -c "$SIZE_BYTES" >"$WWW/big.bin" || true
    fi
    if [[ ! -s $WWW/big.bin || $(stat -c %s "$WWW/big.bin") -ne $SIZE_BYTES ]]; then
        head -c "$SIZE_BYTES" /dev/urandom >"$WWW/big.bin"
    fi
fi
if want 6; then
    if command -v openssl >/dev/null 2>&1; then
        openssl enc -aes-128-ctr -nosalt -pass pass:haul-limited -pbkdf2 </dev/zero 2>/dev/null |
            head -c "$LIMITED_BYTES" >"$WWW/limited.bin" || true
    fi
    if [[ ! -s $WWW/limited.bin || $(stat -c %s "$WWW/limited.bin") -ne $LIMITED_BYTES ]]; then
        head -c "$LIMITED_BYTES" /dev/urandom >"$WWW/limited.bin"
    fi
fi
if want 7; then
    # Workload 7: FLAKY_COUNT files of FLAKY_SIZE, and their sha256 sums to check against.
    mkdir -p "$WWW/flaky"
    head -c $((FLAKY_COUNT * FLAKY_BYTES)) /dev/urandom |
        (cd "$WWW/flaky" && split -b "$FLAKY_BYTES" -a 4 -d --additional-suffix=.bin - f)
    (cd "$WWW/flaky" && sha256sum -- *.bin) >"$WORK/flaky.sha256"
    [[ $(wc -l <"$WORK/flaky.sha256") -eq $FLAKY_COUNT ]] || die "expected $FLAKY_COUNT flaky files"
fi
if want 3; then
    head -c $((SMALL_COUNT * SMALL_SIZE)) /dev/urandom |
        (cd "$WWW/small" && split -b "$SMALL_SIZE" -a 6 -d --additional-suffix=.bin - f)
fi
head -c "$SMALL_SIZE" /dev/urandom >"$WWW/q.bin"
chmod -R a+rX "$WWW"

# ---------------------------------------------------------------------------------------
# 4. nginx on 127.0.0.1, a free port, its own configuration (Benchmarks/compare/nginx.conf.in).

# For HTTPS=1: a certificate authority and a certificate for 127.0.0.1 and localhost
# signed by it (P-256 keys), in $WORK/tls (make_certificates, in lib.sh). CA_FILE is what
# every tool is told to trust.
TLS_DIR=$WORK/tls
CA_FILE=$TLS_DIR/ca.pem

# The TLS servers (HTTPS=1), included by nginx.conf: TLS_PORT offers HTTP/1.1 only,
# TLS_PORT + 1 HTTP/2 as well. `listen ... ssl http2`, not nginx 1.25's `http2 on`, so
# Debian 12's nginx 1.22 takes it. TLS 1.3 is offered (1.22 offers up to TLS 1.2 unless
# told): it is what servers people meet speak, and its handshake is one round trip where
# TLS 1.2's is two, which a far link shows. Each logs the protocol of every request to
# TLS_LOG, and serves workload 6's /limited/ as the plain server does.
TLS_LOG=$WORK/nginx/tls.log
write_tls_conf() { # FILE
    if [[ $HTTPS != 1 ]]; then : >"$1"; return; fi
    local h2 listen
    {
        echo "log_format protocol '\$server_protocol';"
        echo "ssl_session_cache shared:haul_tls:10m;"
        echo "ssl_protocols TLSv1.2 TLSv1.3;"
        for h2 in 0 1; do
            listen="127.0.0.1:$((TLS_PORT + h2)) ssl"
            ((h2)) && listen+=" http2"
            cat <<CONF
server {
    listen $listen;
    root $WWW;
    ssl_certificate $TLS_DIR/server.pem;
    ssl_certificate_key $TLS_DIR/server.key;
    access_log $TLS_LOG protocol;
    location /limited/ {
        alias $WWW/;
        limit_rate $LIMIT_RATE;
    }
}
CONF
        done
    } >"$1"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_nginx() {
    local conf=$WORK/nginx/nginx.conf attempt
    NGINX_PID_FILE=$WORK/nginx/nginx.pid
    for attempt in {1..20}; do
        PORT=$((20000 + RANDOM % 40000))
        TLS_PORT=$((PORT + 1))
        # Something already answering there? Pick another.
        port_free "$PORT" || continue
        if [[ $HTTPS == 1 ]]; then port_free "$TLS_PORT" && port_free $((TLS_PORT + 1)) || continue; fi
        write_tls_conf "$WORK/nginx/tls.conf"
        sed -e "s|@PREFIX@|$WORK/nginx|g" -e "s|@ROOT@|$WWW|g" -e "s|@PORT@|$PORT|g" -e "s|@LIMIT_RATE@|$LIMIT_RATE|g" \
            "$SCRIPT_DIR/compare/nginx.conf.in" >"$conf"
        if nginx -c "$conf" -p "$WORK/nginx" -e "$WORK/nginx/error.log" 2>>"$WORK/nginx/start.log"; then
            for _ in {1..50}; do [[ -s $NGINX_PID_FILE ]] && break; sleep 0.1; done
            if curl -sf -o /dev/null "http://127.0.0.1:$PORT/q.bin"; then
                if [[ $HTTPS != 1 ]]; then return 0; fi
                if curl -sf --cacert "$CA_FILE" -o /dev/null "https://127.0.0.1:$TLS_PORT/q.bin" &&
                    curl -sf --http2 --cacert "$CA_FILE" -o /dev/null "https://127.0.0.1:$((TLS_PORT + 1))/q.bin"; then
                    return 0
                fi
            fi
            # Started but not answering: stop it before trying other ports.
            if [[ -s $NGINX_PID_FILE ]]; then kill -QUIT "$(<"$NGINX_PID_FILE")" 2>/dev/null || true; sleep 0.5; fi
        fi
    done
    cat "$WORK/nginx/start.log" "$WORK/nginx/error.log" >&2 2>/dev/null || true
    die "nginx did not start"
}
if [[ $HTTPS == 1 ]]; then make_certificates; fi
start_nginx
RESUME_LOG=$WORK/nginx/resume.log
FLAKY_LOG=$WORK/nginx/flaky.log
log "nginx on http://127.0.0.1:$PORT$( [[ $HTTPS == 1 ]] && echo " and https://127.0.0.1:$TLS_PORT (HTTP/1.1), :$((TLS_PORT + 1)) (HTTP/2)")"

# ---------------------------------------------------------------------------------------
# Relays (Benchmarks/relay.py) for RTT_MS above 0: one in front of each nginx listener the
# workloads use, for each round trip, started once for the whole run. Every tool is given
# the relay's port instead of nginx's, so all of them meet the same far link.
# RELAY_PORTS[VARIANT@RTT] is the port to use; VARIANT http, h1 or h2.

declare -A RELAY_PORTS=()
RELAY_PY=$SCRIPT_DIR/relay.py
# start_relay NAME UPSTREAM ARGS...: starts relay.py, waits for its port (R_PORT) and
# keeps its pid (R_PID) for the clean-up; its standard error goes to LOGS/relay-NAME.log.
start_relay() {
    local name=$1 upstream=$2 out=$WORK/relay-$1.port
    shift 2
    : >"$out"
    python3 "$RELAY_PY" --listen 0 --upstream "$upstream" "$@" >"$out" 2>>"$LOGS/relay-$name.log" &
    R_PID=$!
    disown "$R_PID" # (no "Killed" line from bash when the clean-up ends it)
    BG_PIDS+=("$R_PID")
    for _ in {1..100}; do
        R_PORT=$(head -n 1 "$out")
        [[ -n $R_PORT ]] && return 0
        kill -0 "$R_PID" 2>/dev/null || break
        sleep 0.05
    done
    cat "$LOGS/relay-$name.log" >&2
    die "relay.py ($name) did not start"
}
# stop_relay PID: SIGTERM (it then logs its counts) and wait (at most 5 s) until it is gone.
stop_relay() {
    kill -TERM "$1" 2>/dev/null || true
    for _ in {1..100}; do kill -0 "$1" 2>/dev/null || break; nap 0.05; done
    kill -KILL "$1" 2>/dev/null || true
    forget_bg "$1"
}
for rtt in "${RTTS[@]}"; do
    variants=(http)
    if [[ $HTTPS == 1 ]]; then variants+=(h1 h2); fi
    for v in "${variants[@]}"; do
        case $v in http) upstream=$PORT ;; h1) upstream=$TLS_PORT ;; h2) upstream=$((TLS_PORT + 1)) ;; esac
        if ((rtt == 0)); then RELAY_PORTS[$v@$rtt]=$upstream; continue; fi
        start_relay "$v-$rtt" "$upstream" --rtt-ms "$rtt"
        RELAY_PORTS[$v@$rtt]=$R_PORT
        # A first request through it, so a relay that does not forward stops the run here.
        probe=(curl -sf -o /dev/null "http://127.0.0.1:$R_PORT/q.bin")
        [[ $v == http ]] || probe=(curl -sf --cacert "$CA_FILE" -o /dev/null "https://127.0.0.1:$R_PORT/q.bin")
        "${probe[@]}" ||
            die "no answer through the relay on port $R_PORT (round trip $rtt ms, $v)"
        log "relay for $v with a round trip of $rtt ms on 127.0.0.1:$R_PORT"
    done
done

# URL lists, made on first use for each variant and round trip (list_for). Haul and wget2
# and aria2c read one URL per line; curl reads a config file.
mkdir -p "$WORK/lists"
if want 3; then
    (cd "$WWW/small" && ls) | awk '{ print "small/" $0 }' >"$WORK/lists/small.paths"
    [[ $(wc -l <"$WORK/lists/small.paths") -eq $SMALL_COUNT ]] || die "expected $SMALL_COUNT small files"
fi
# list_for NAME BASE: prints the path of the list of NAME's URLs under BASE, making it
# (and the curl configuration next to it, same name with .curl) if it is not there yet.
list_for() {
    local name=$1 base=$2 file
    file=$WORK/lists/$name-${base//[^0-9a-z]/_}.txt
    if [[ ! -e $file ]]; then
        case $name in
        small) awk -v b="$base/" '{ print b $0 }' "$WORK/lists/small.paths" >"$file" ;;
        queue) awk -v b="$base/q/" -v n="$QUEUE_COUNT" 'BEGIN { for (i = 0; i < n; i++) printf "%sq%07d.bin\n", b, i }' >"$file" ;;
        flaky) awk -v b="$base/flaky/" '{ print b $2 }' "$WORK/flaky.sha256" >"$file" ;;
        esac
        awk '{ print "url = \"" $0 "\"" }' "$file" >"${file%.txt}.curl"
    fi
    echo "$file"
}

# Warm the page cache, so every run reads the corpus from memory.
cat "$WWW"/*.bin >/dev/null
if want 3; then cat "$WWW"/small/* >/dev/null; fi
if want 7; then cat "$WWW"/flaky/* >/dev/null; fi

# ---------------------------------------------------------------------------------------
# Measurement helpers.

# A sleep without a fork, for tight polling loops: read with a timeout from a FIFO that
# never gets data.
mkfifo "$WORK/never"
exec {SLEEP_FD}<>"$WORK/never"
nap() { read -r -t "$1" -u "$SLEEP_FD" _ || true; }

now() { echo "$EPOCHREALTIME"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

# Clears the output and state directories of a target; on the disk target also flushes
# what earlier runs left dirty, so one run's writeback does not land in the next.
OUT="" STATE=""
prepare() {
    local root
    root=$(target_root "$1")
    OUT=$root/out
    STATE=$root/state
    rm -rf "$OUT" "$STATE"
    mkdir -p "$OUT" "$STATE"
    if [[ $1 == disk ]]; then sync; fi
}

# run_timed LOG CMD...: runs CMD under /usr/bin/time. Sets R_RC, R_WALL (s), R_CPU
# (user + system s), R_RSS (peak, KiB).
run_timed() {
    local logfile=$1 t0 t1 last
    shift
    R_RC=0
    t0=$(now)
    /usr/bin/time -f '%U %S %M' -o "$WORK/time.out" "$@" >"$logfile" 2>&1 || R_RC=$?
    t1=$(now)
    R_WALL=$(elapsed "$t0" "$t1")
    last=$(tail -n 1 "$WORK/time.out") # GNU time puts "Command exited..." lines before it
    read -r R_CPU R_RSS <<<"$(awk '{ printf "%.3f %d\n", $1 + $2, $3 }' <<<"$last")"
}

# sample_anon PARENT OUT: waits for the next /usr/bin/time that PARENT starts, then
# samples the anonymous memory (RssAnon: private pages, without the binary and libraries
# mapped from files) of the command it runs every 5 ms until it exits, and writes the
# peak (KiB) to OUT. Reads /proc and sleeps on a pipe: no process is started per sample.
sample_anon() {
    local parent=$1 out=$2 timer="" child="" peak=0 key value never i
    # A FIFO opened for reading and writing never has data: reading it with a timeout
    # sleeps without starting a process.
    [[ -p $WORK/never ]] || mkfifo "$WORK/never"
    exec {never}<>"$WORK/never"
    for ((i = 0; i < 2000; i++)); do
        timer=$(pgrep -P "$parent" -x time | head -n 1 || true)
        [[ -n $timer ]] && break
        read -r -t 0.002 -u "$never" || true
    done
    for ((i = 0; i < 2000; i++)); do
        [[ -n $timer ]] || break
        read -r child _ 2>/dev/null <"/proc/$timer/task/$timer/children" || true
        [[ -n $child ]] && break
        read -r -t 0.001 -u "$never" || true
    done
    while [[ -n $child && -r /proc/$child/status ]]; do
        while read -r key value _; do
            if [[ $key == RssAnon: ]]; then
                ((value > peak)) && peak=$value
                break
            fi
        done 2>/dev/null <"/proc/$child/status" || true
        read -r -t 0.005 -u "$never" || true
    done
    exec {never}<&-
    echo "$peak" >"$out"
}

# On the disk target, how long fsyncing the run's output files takes right after it
# (`sync FILE...`): the writeback that a tool which does not fsync (curl, wget2, aria2c)
# left behind, and that Haul (which fsyncs every file before renaming it into place) has
# already paid for inside its wall time. Per file rather than a global `sync`, so other
# work on the machine does not land in it.
R_SYNC=0
after_run() {
    R_SYNC=0
    if [[ $1 == disk ]]; then
        local t0
        t0=$(now)
        find "$OUT" -type f -print0 | xargs -0 -r sync --
        R_SYNC=$(elapsed "$t0" "$(now)")
    fi
}

# record WORKLOAD TARGET TOOL RUN STATUS WALL CPU RSS SYNC [X1 X2 X3]: the workload is
# recorded with the round trip's suffix (SFX, "@40"; none at 0).
record() {
    local IFS=$'\t' w=$1
    shift
    echo "$w$SFX$IFS$*" >>"$RAW"
}
NOTES=()
note_failure() { # workload target tool run status log
    local first
    first=$(grep -m1 -v '^\s*$' "$6" 2>/dev/null | cut -c1-200 || true)
    NOTES+=("workload $1$SFX, $2, $3, run $4: $5${first:+ — \`$first\`}")
    log "workload $1$SFX $2 $3 run $4: $5 ${first}"
}

# The status of a run: ok, or what went wrong.
status_of() { if [[ $1 -ne 0 ]]; then echo "exit $1"; else echo ok; fi; }

check_big() { # file: right size, and (first run only) the same bytes
    local file=$1 run=$2
    [[ -f $file ]] || { echo "no output file"; return; }
    [[ $(stat -c %s "$file") -eq $SIZE_BYTES ]] || { echo "wrong size $(stat -c %s "$file")"; return; }
    if [[ $run -eq 1 ]] && ! cmp -s "$file" "$WWW/big.bin"; then echo "content differs"; return; fi
    echo ok
}

# ---------------------------------------------------------------------------------------
# Variants and round trips. use_variant http|h1|h2 RTT points every workload's URLs and
# lists at the plain server or at one of the TLS servers (HTTPS=1: workloads 1, 2, 3 and
# 6), directly (RTT 0) or through the relay with that round trip, and sets each tool's
# extra options: the CA (TLS_*_CA: all of them) and the protocol asked for (TLS_*: the
# CA and the protocol, for the tuned rows; the rows at each tool's defaults get the CA
# alone and negotiate what they will). On the HTTP/1.1 server nginx offers only http/1.1
# by ALPN, so every tool speaks HTTP/1.1 there; on the other the tools that can speak
# HTTP/2 do. Results are recorded under workload "1-h1", "3-h2" and so on, and with
# "@RTT" after it for a round trip above 0 ("3-h2@40"): SFX is that suffix.

WGET2_HAS_H2=0
if [[ $HTTPS == 1 ]] && wget2 --version 2>/dev/null | grep -q -- '+http2'; then WGET2_HAS_H2=1; fi
# Haul's HTTP/1.1 rows pass --http1.1 once `haul get` has it (when HTTP/2 becomes its
# default); today HTTP/1.1 is the default and --http2 asks for HTTP/2.
HAUL_H1=()
if "$HAUL" get --help 2>&1 | grep -q -- '--http1\.1'; then HAUL_H1=(--http1.1); fi
VARIANT=http RTT=0 SFX=""
BASE_URL="" BIG_URL="" RESUME_URL="" LIMITED_URL="" SMALL_LIST="" SMALL_CURL="" QUEUE_LIST=""
TLS_HAUL=() TLS_CURL=() TLS_WGET2=() TLS_ARIA2C=() TLS_CA=
TLS_HAUL_CA=() TLS_CURL_CA=() TLS_WGET2_CA=()
use_variant() { # VARIANT RTT
    VARIANT=$1 RTT=$2 SFX=""
    if ((RTT > 0)); then SFX=@$RTT; fi
    local port=${RELAY_PORTS[$1@$2]} scheme=https
    [[ $1 == http ]] && scheme=http
    BASE_URL=$scheme://127.0.0.1:$port
    BIG_URL=$BASE_URL/big.bin
    RESUME_URL=$BASE_URL/resume/big.bin
    LIMITED_URL=$BASE_URL/limited/limited.bin
    if want 3; then SMALL_LIST=$(list_for small "$BASE_URL") SMALL_CURL=${SMALL_LIST%.txt}.curl; fi
    if want 4 && [[ $1 == http ]]; then QUEUE_LIST=$(list_for queue "$BASE_URL"); fi
    TLS_HAUL=() TLS_CURL=() TLS_WGET2=() TLS_ARIA2C=() TLS_CA=
    TLS_HAUL_CA=() TLS_CURL_CA=() TLS_WGET2_CA=()
    if [[ $1 == http ]]; then return; fi
    # Every tool trusts this authority alone, as `curl --cacert` does: Haul's
    # `--ca-certificate` adds to the system's authorities unless `--no-system-ca`. (With
    # the system's too, AsyncHTTPClient 1.37 loads them once per connection that starts
    # before the first TLS context is cached: 16 copies, about 15 MiB, here.)
    TLS_HAUL_CA=(--ca-certificate "$CA_FILE" --no-system-ca)
    TLS_CURL_CA=(--cacert "$CA_FILE")
    TLS_WGET2_CA=(--ca-certificate="$CA_FILE")
    TLS_ARIA2C=(--ca-certificate="$CA_FILE")
    TLS_CA=$CA_FILE
    if [[ $1 == h1 ]]; then
        TLS_HAUL=("${TLS_HAUL_CA[@]}" "${HAUL_H1[@]}")
        TLS_CURL=("${TLS_CURL_CA[@]}" --http1.1)
        TLS_WGET2=("${TLS_WGET2_CA[@]}" --no-http2)
    else
        # (An older haul speaks HTTP/1.1 unless told; a newer one offers HTTP/2 anyway.)
        TLS_HAUL=("${TLS_HAUL_CA[@]}" --http2)
        TLS_CURL=("${TLS_CURL_CA[@]}" --http2)
        TLS_WGET2=("${TLS_WGET2_CA[@]}" --http2)
    fi
}
# "HTTPS, HTTP/2" and so on, for titles; the round trip after it when above 0.
variant_name() { # VARIANT
    case $1 in http) printf 'HTTP' ;; h1) printf 'HTTPS, HTTP/1.1' ;; h2) printf 'HTTPS, HTTP/2' ;; esac
}
rtt_name() { if (($1 > 0)); then printf ', %s ms round trip' "$1"; fi; }

# Why TOOL has no row in the current variant, if it has none. MODE "defaults": the row at
# the tool's defaults, which runs whatever protocol the tool negotiates.
variant_gap() { # TOOL [MODE]
    if [[ $VARIANT != h2 || ${2:-} == defaults ]]; then return; fi
    case $1 in
    aria2c) echo "n/a (aria2c has no HTTP/2)" ;;
    wget2) ((WGET2_HAS_H2)) || echo "n/a (this wget2 has no HTTP/2)" ;;
    esac
}

# Before a TLS run: empty nginx's protocol log. After it: check_protocol says ok if nginx
# served every request of the run over the variant's protocol (any, for MODE defaults),
# else what it did; run_protocols lists the protocols nginx logged ("HTTP/2.0",
# "HTTP/1.1+HTTP/2.0"; "-" for plain HTTP), which the rows at defaults report.
reset_protocol_log() { if [[ $VARIANT != http ]]; then : >"$TLS_LOG"; fi; }
run_protocols() {
    if [[ $VARIANT == http ]]; then echo -; return; fi
    local seen
    seen=$(awk '{ print $1 }' "$TLS_LOG" | sort -u | paste -sd+ -)
    echo "${seen:-none}"
}
check_protocol() { # [MODE]
    if [[ $VARIANT == http ]]; then echo ok; return; fi
    local want=HTTP/1.1
    if [[ $VARIANT == h2 ]]; then want=HTTP/2.0; fi
    if [[ ${1:-} == defaults ]]; then want=any; fi
    awk -v want="$want" '{ n++; if (want != "any" && $1 != want) { bad++; got = $1 } }
        END { if (n == 0) print "nginx logged no TLS request"; else if (bad) printf "%d of %d requests over %s\n", bad, n, got; else print "ok" }' "$TLS_LOG"
}

# ---------------------------------------------------------------------------------------
# Workloads 1 and 2: one big file, one connection and then 4 and 8. Measured: wall time,
# CPU time (user + sys) and peak RSS of the downloading process.

big_cmd() { # TOOL CONNECTIONS [MODE] -> CMD; MODE defaults: the tool at its defaults
    local tool=$1 n=$2 mode=${3:-}
    if [[ $mode == defaults ]]; then
        # Only what it takes to run: the URL, where to write, the test CA, and quiet
        # output (Haul: its journal next to the output, as in every row).
        case $tool in
        haul) CMD=("$HAUL" get "$BIG_URL" -d "$OUT" -q --journal "$STATE/journal.sqlite" "${TLS_HAUL_CA[@]}") ;;
        curl) CMD=(curl -sS --fail "${TLS_CURL_CA[@]}" -o "$OUT/big.bin" "$BIG_URL") ;;
        wget2) CMD=(wget2 -q --no-hsts --no-hpkp "${TLS_WGET2_CA[@]}" -P "$OUT" "$BIG_URL") ;;
        aria2c) CMD=(aria2c -q "${TLS_ARIA2C[@]}" -d "$OUT" "$BIG_URL") ;;
        esac
        return
    fi
    case $tool in
    haul)
        if ((n == 1)); then CMD=("$HAUL" get "$BIG_URL" -d "$OUT" -q --journal "$STATE/journal.sqlite" "${HAUL_ONE[@]}" "${TLS_HAUL[@]}")
        # (-x N gives N connections: the default per-host cap, 6, does not clamp it.)
        else CMD=("$HAUL" get "$BIG_URL" -d "$OUT" -q --journal "$STATE/journal.sqlite" -x "$n" "${TLS_HAUL[@]}"); fi ;;
    curl) CMD=(curl -sS --fail "${TLS_CURL[@]}" -o "$OUT/big.bin" "$BIG_URL") ;;
    wget2) CMD=(wget2 -q --no-hsts --no-hpkp "${TLS_WGET2[@]}" -P "$OUT" "$BIG_URL") ;;
    aria2c)
        # -k 1M: aria2c splits only pieces of at least --min-split-size (default 20M).
        if ((n == 1)); then CMD=(aria2c -q -x1 -s1 "${TLS_ARIA2C[@]}" -d "$OUT" -o big.bin "$BIG_URL")
        else CMD=(aria2c -q -x "$n" -s "$n" -k 1M "${TLS_ARIA2C[@]}" -d "$OUT" -o big.bin "$BIG_URL"); fi ;;
    curl-ranges)
        # A reference, not a peer: N curls at once, each fetching 1/N of the file into a
        # file of its own (nothing joins them). What this machine allows N connections
        # writing to this target, with no download manager at all.
        CMD=(bash -c 'n=$1 url=$2 out=$3 size=$4 part=$(( ($4 + $1 - 1) / $1 )) failed=0
            shift 4
            for ((i = 0; i < n; i++)); do
                a=$((i * part)) b=$(((i + 1) * part - 1)); ((b >= size)) && b=$((size - 1))
                curl -sS --fail "$@" -r "$a-$b" -o "$out/part.$i" "$url" &
            done
            for job in $(jobs -p); do wait "$job" || failed=1; done
            exit $failed' _ "$n" "$BIG_URL" "$OUT" "$SIZE_BYTES" "${TLS_CURL[@]}") ;;
    esac
}

workload_big() { # WORKLOAD TARGET RUN TOOL CONNECTIONS LABEL [MODE]
    local w=$1 target=$2 run=$3 tool=$4 n=$5 label=$6 mode=${7:-} logfile status proto
    logfile=$LOGS/w$w$SFX-$target-${label//[ ()]/_}-$run.log
    if [[ $tool == haul && $n -gt 1 && $HAUL_HAS_X -eq 0 ]]; then
        record "$w" "$target" "$label" "$run" "n/a (no -x yet)" 0 0 0 0
        return
    fi
    status=$(variant_gap "$tool" "$mode")
    if [[ -n $status ]]; then record "$w" "$target" "$label" "$run" "$status" 0 0 0 0; return; fi
    prepare "$target"
    big_cmd "$tool" "$n" "$mode"
    reset_protocol_log
    run_timed "$logfile" "${CMD[@]}"
    after_run "$target"
    status=$(status_of "$R_RC")
    if [[ $status == ok && $tool == curl-ranges ]]; then
        local parts
        parts=$(find "$OUT" -name 'part.*' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
        ((parts == SIZE_BYTES)) || status="parts hold $parts bytes"
    elif [[ $status == ok ]]; then
        status=$(check_big "$OUT/big.bin" "$run")
    fi
    if [[ $status == ok ]]; then status=$(check_protocol "$mode"); fi
    proto=$(run_protocols)
    [[ $status == ok ]] || note_failure "$w" "$target" "$label" "$run" "$status" "$logfile"
    record "$w" "$target" "$label" "$run" "$status" "$R_WALL" "$R_CPU" "$R_RSS" "$R_SYNC" "" "$proto"
}

# ---------------------------------------------------------------------------------------
# Workload 6: one LIMITED_SIZE file at LIMIT_RATE per connection, over 8 connections.

# The tuned rows: haul -x 8 (its per-host cap left at the default, 6) and aria2c -x 8
# -s 8 -k 1M; the rows at defaults (DEFAULTS=1): every tool with only the URL, where to
# write and the CA.
workload_limited() { # WORKLOAD TARGET RUN TOOL [MODE]
    local w=$1 target=$2 run=$3 tool=$4 mode=${5:-} logfile status label proto
    label="$tool -x8"
    [[ $mode == defaults ]] && label="$tool (defaults)"
    logfile=$LOGS/w$w$SFX-$target-${label//[ ()]/_}-$run.log
    status=$(variant_gap "$tool" "$mode")
    if [[ -n $status ]]; then record "$w" "$target" "$label" "$run" "$status" 0 0 0 0; return; fi
    prepare "$target"
    if [[ $mode == defaults ]]; then
        case $tool in
        haul) CMD=("$HAUL" get "$LIMITED_URL" -d "$OUT" -q --journal "$STATE/journal.sqlite" "${TLS_HAUL_CA[@]}") ;;
        curl) CMD=(curl -sS --fail "${TLS_CURL_CA[@]}" -o "$OUT/limited.bin" "$LIMITED_URL") ;;
        wget2) CMD=(wget2 -q --no-hsts --no-hpkp "${TLS_WGET2_CA[@]}" -P "$OUT" "$LIMITED_URL") ;;
        aria2c) CMD=(aria2c -q "${TLS_ARIA2C[@]}" -d "$OUT" "$LIMITED_URL") ;;
        esac
    else
        case $tool in
        haul) CMD=("$HAUL" get "$LIMITED_URL" -d "$OUT" -q --journal "$STATE/journal.sqlite" -x 8 "${TLS_HAUL[@]}") ;;
        aria2c) CMD=(aria2c -q -x 8 -s 8 -k 1M "${TLS_ARIA2C[@]}" -d "$OUT" -o limited.bin "$LIMITED_URL") ;;
        esac
    fi
    reset_protocol_log
    run_timed "$logfile" "${CMD[@]}"
    after_run "$target"
    status=$(status_of "$R_RC")
    if [[ $status == ok ]]; then
        if [[ ! -f $OUT/limited.bin ]]; then
            status="no output file"
        elif [[ $(stat -c %s "$OUT/limited.bin") -ne $LIMITED_BYTES ]]; then
            status="wrong size $(stat -c %s "$OUT/limited.bin")"
        elif [[ $run -eq 1 ]] && ! cmp -s "$OUT/limited.bin" "$WWW/limited.bin"; then
            status="content differs"
        fi
    fi
    if [[ $status == ok ]]; then status=$(check_protocol "$mode"); fi
    proto=$(run_protocols)
    [[ $status == ok ]] || note_failure "$w" "$target" "$label" "$run" "$status" "$logfile"
    record "$w" "$target" "$label" "$run" "$status" "$R_WALL" "$R_CPU" "$R_RSS" "$R_SYNC" "" "$proto"
}

# ---------------------------------------------------------------------------------------
# Workload 3: SMALL_COUNT files of 16 KiB, 16 in flight, all to one host. Measured: wall
# time (so files/s), CPU time and peak RSS.

# Rows: every tool at each number in flight of TUNED (16 and 64; the client floors at 16
# only), then (DEFAULTS=1) every tool at its own defaults. A row's label is the tool at 16
# ("haul", as in reports before TUNED), "haul (64)" at another number, "haul (defaults)".
small_label() { # TOOL N MODE
    if [[ $3 == defaults ]]; then echo "$1 (defaults)"; elif (($2 == 16)); then echo "$1"; else echo "$1 ($2)"; fi
}
SMALL_ROWS=() # "TOOL N MODE", MODE tuned or defaults
for n in "${TUNED_N[@]}"; do
    for tool in "${SMALL_TOOLS[@]}"; do
        [[ $tool == ahc-* && $n -ne 16 ]] && continue
        SMALL_ROWS+=("$tool $n tuned")
    done
done
if ((DEFAULTS)); then
    for tool in haul curl wget2 aria2c; do SMALL_ROWS+=("$tool 0 defaults"); done
fi

small_cmd() { # TOOL N MODE
    local n=$2
    if [[ $3 == defaults ]]; then
        # Only what it takes to run over a list: the list, where to write, the test CA, quiet
        # output (Haul: its journal next to the output, as in every row). curl without
        # --parallel would fetch the list one URL at a time; `curl --parallel` (50 in
        # flight) is what its manual offers for many URLs, so that is its row. By default
        # Haul runs 10 downloads, at most 6 to one host; wget2 5 threads; aria2c 5 at once.
        case $1 in
        haul) CMD=("$HAUL" get -i "$SMALL_LIST" -d "$OUT" -q --journal "$STATE/journal.sqlite" "${TLS_HAUL_CA[@]}") ;;
        curl) CMD=(curl -sS --fail "${TLS_CURL_CA[@]}" --parallel --output-dir "$OUT" --remote-name-all -K "$SMALL_CURL") ;;
        wget2) CMD=(wget2 -q --no-hsts --no-hpkp "${TLS_WGET2_CA[@]}" -P "$OUT" -i "$SMALL_LIST") ;;
        aria2c) CMD=(aria2c -q "${TLS_ARIA2C[@]}" -d "$OUT" -i "$SMALL_LIST") ;;
        esac
        return
    fi
    case $1 in
    haul) CMD=("$HAUL" get -i "$SMALL_LIST" -d "$OUT" -q --journal "$STATE/journal.sqlite" -j "$n" --per-host "$n" "${TLS_HAUL[@]}") ;;
    curl) CMD=(curl -sS --fail "${TLS_CURL[@]}" --parallel --parallel-max "$n" --output-dir "$OUT" --remote-name-all -K "$SMALL_CURL") ;;
    # wget2 --max-threads=N alone is N connections with up to 30 streams each over HTTP/2
    # (--http2-request-window, default 30): nginx's log showed 993 of the 1,000 requests
    # arriving within one 40 ms round trip. One stream a connection keeps it at N in
    # flight, as the other tools are; it is also wget2's fastest way there (2 threads of
    # 32 streams took 5.5 s, one of 64 took 10.6 s, against 0.8 s).
    wget2) CMD=(wget2 -q --no-hsts --no-hpkp "${TLS_WGET2[@]}" --max-threads="$n" --http2-request-window=1 -P "$OUT" -i "$SMALL_LIST") ;;
    aria2c) CMD=(aria2c -q -j "$n" -x1 "${TLS_ARIA2C[@]}" -d "$OUT" -i "$SMALL_LIST") ;;
    ahc-memory) CMD=(env "CA_FILE=${TLS_CA:-}" MODE=memory "$AHC" "$SMALL_LIST" "$OUT" "$n") ;;
    ahc-1hop) CMD=(env "CA_FILE=${TLS_CA:-}" MODE=onehop "$AHC" "$SMALL_LIST" "$OUT" "$n") ;;
    ahc-journal) CMD=(env "CA_FILE=${TLS_CA:-}" MODE=journal "JOURNAL=$STATE/baseline-journal.sqlite" "$AHC" "$SMALL_LIST" "$OUT" "$n") ;;
    esac
}

workload_small() { # WORKLOAD TARGET RUN TOOL N MODE
    local w=$1 target=$2 run=$3 tool=$4 n=$5 mode=$6 logfile status count bytes label proto
    label=$(small_label "$tool" "$n" "$mode")
    logfile=$LOGS/w$w$SFX-$target-${label//[ ()]/_}-$run.log
    status=$(variant_gap "$tool" "$mode")
    if [[ -n $status ]]; then record "$w" "$target" "$label" "$run" "$status" 0 0 0 0; return; fi
    prepare "$target"
    small_cmd "$tool" "$n" "$mode"
    reset_protocol_log
    # (The shell's own number, taken here: a background command expands its arguments in
    # its own subshell.)
    local shell=$BASHPID sampler
    sample_anon "$shell" "$WORK/anon.out" &
    sampler=$!
    run_timed "$logfile" "${CMD[@]}"
    wait "$sampler" || true
    R_ANON=$(<"$WORK/anon.out")
    after_run "$target"
    status=$(status_of "$R_RC")
    if [[ $status == ok && $tool != ahc-memory ]]; then
        count=$(find "$OUT" -type f -name 'f*.bin' | wc -l)
        bytes=$(find "$OUT" -type f -name 'f*.bin' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
        if ((count != SMALL_COUNT || bytes != SMALL_COUNT * SMALL_SIZE)); then
            status="got $count files, $bytes bytes"
        fi
    fi
    if [[ $status == ok ]]; then status=$(check_protocol "$mode"); fi
    proto=$(run_protocols)
    [[ $status == ok ]] || note_failure "$w" "$target" "$label" "$run" "$status" "$logfile"
    record "$w" "$target" "$label" "$run" "$status" "$R_WALL" "$R_CPU" "$R_RSS" "$R_SYNC" "$R_ANON" "$proto"
}

# ---------------------------------------------------------------------------------------
# Workload 4: QUEUE_COUNT URLs handed over at once (a list file), 16 in flight.
#
# Time to first byte: from the start of the command until the first entry appears in the
# output directory (aria2c's file, created once the first response has arrived; Haul's
# first finished file, since Haul keeps a body of 64 KiB or less in memory and writes it
# once, complete, which makes its number slightly pessimistic), found by a watcher
# polling without forking every 1 ms.
# It includes reading and checking the list and, for Haul, journaling it.
#
# The run is capped: it is stopped with SIGKILL once QUEUE_STOP_FILES files are complete
# or QUEUE_MAX_SECONDS have passed, whichever is first, so the peak RSS reported
# (/usr/bin/time's, of the killed process) is the peak over that window: list read, queue
# built, and the first few thousand downloads running. Files completed in the window are
# reported too, for a rough files/s.

queue_cmd() {
    case $1 in
    haul) CMD=("$HAUL" get -i "$QUEUE_LIST" -d "$OUT" -q --journal "$STATE/journal.sqlite" -j 16 --per-host 16) ;;
    aria2c) CMD=(aria2c -q -j 16 -x1 -d "$OUT" -i "$QUEUE_LIST") ;;
    esac
}

count_done() { find "$OUT" -maxdepth 1 -type f ! -name '*.haul-*' ! -name '*.aria2' | wc -l; }

workload_queue() { # TARGET RUN TOOL
    local target=$1 run=$2 tool=$3 logfile status t0 tpid child ttfb="" done_files=0 window t
    logfile=$LOGS/w4$SFX-$target-$tool-$run.log
    prepare "$target"
    queue_cmd "$tool"
    R_RC=0
    t0=$(now)
    /usr/bin/time -f '%U %S %M' -o "$WORK/time.out" "${CMD[@]}" >"$logfile" 2>&1 &
    tpid=$!
    BG_PIDS+=("$tpid")
    # Time to first byte.
    while kill -0 "$tpid" 2>/dev/null; do
        if compgen -G "$OUT/*" >/dev/null; then ttfb=$(elapsed "$t0" "$(now)"); break; fi
        t=$(now)
        if (( ${t%.*} - ${t0%.*} >= QUEUE_MAX_SECONDS )); then break; fi
        nap 0.001
    done
    # The window: until QUEUE_STOP_FILES are complete or QUEUE_MAX_SECONDS have passed.
    while kill -0 "$tpid" 2>/dev/null; do
        done_files=$(count_done)
        t=$(now)
        if ((done_files >= QUEUE_STOP_FILES || ${t%.*} - ${t0%.*} >= QUEUE_MAX_SECONDS)); then break; fi
        nap 0.05
    done
    window=$(elapsed "$t0" "$(now)")
    # Kill the tool itself (time's child), so time still reports on it.
    child=$(pgrep -P "$tpid" || true)
    if [[ -n $child ]]; then kill -KILL "$child" 2>/dev/null || true; fi
    wait "$tpid" || R_RC=$?
    forget_bg "$tpid"
    done_files=$(count_done)
    read -r R_CPU R_RSS <<<"$(tail -n 1 "$WORK/time.out" | awk '{ printf "%.3f %d\n", $1 + $2, $3 }')"
    after_run "$target"
    status=ok
    if [[ -z $ttfb ]]; then status="no file within ${QUEUE_MAX_SECONDS}s (exit $R_RC)"; ttfb=0; fi
    # Finishing every URL inside the window is fine (small QUEUE_COUNT); exiting with an
    # error is not.
    if [[ -z $child && $R_RC -ne 0 ]]; then status="exit $R_RC"; fi
    [[ $status == ok ]] || note_failure 4 "$target" "$tool" "$run" "$status" "$logfile"
    record 4 "$target" "$tool" "$run" "$status" "$window" "$R_CPU" "$R_RSS" "$R_SYNC" "$ttfb" "$done_files"
}

# ---------------------------------------------------------------------------------------
# Workload 5: resume. The first run is stopped with SIGTERM (which every tool here treats
# as an interruption: curl and wget2 die leaving a partial file, aria2c and Haul save
# their state and exit) once the process has written half the file, by its write counter
# in /proc/PID/io (wchar), polled without forking: this works whatever the partial file is
# called and whether or not it was preallocated. The second run continues it and is the
# one timed. nginx logs this workload to its own file, so the bytes it sent in each run
# ($bytes_sent, headers included) are known exactly. SIGTERM rather than SIGINT: a
# background job of a non-interactive shell ignores SIGINT, and curl keeps that. wget2
# 1.99 answers SIGTERM with abort() (exit 134); its partial file is intact all the same.

resume_cmds() { # TOOL -> CMD1 (first run), CMD2 (the continuation)
    case $1 in
    haul)
        CMD1=("$HAUL" get "$RESUME_URL" -d "$OUT" -q --journal "$STATE/journal.sqlite" "${HAUL_ONE[@]}")
        CMD2=("${CMD1[@]}") ;;
    curl)
        CMD1=(curl -sS --fail -o "$OUT/big.bin" "$RESUME_URL")
        CMD2=(curl -sS --fail -C - -o "$OUT/big.bin" "$RESUME_URL") ;;
    wget2)
        CMD1=(wget2 -q --no-hsts --no-hpkp -P "$OUT" "$RESUME_URL")
        CMD2=(wget2 -q --no-hsts --no-hpkp -c -P "$OUT" "$RESUME_URL") ;;
    aria2c)
        CMD1=(aria2c -q -x1 -s1 -d "$OUT" -o big.bin "$RESUME_URL")
        CMD2=(aria2c -q -c -x1 -s1 -d "$OUT" -o big.bin "$RESUME_URL") ;;
    esac
}

# Waits until process PID has written BYTES; fails if it exits first.
wait_written() {
    local pid=$1 want=$2 key value
    while kill -0 "$pid" 2>/dev/null; do
        while read -r key value; do
            if [[ $key == wchar: ]]; then
                if ((value >= want)); then return 0; fi
                break
            fi
        done 2>/dev/null <"/proc/$pid/io" || true
        nap 0.0005
    done
    return 1
}

log_lines() { wc -l <"$RESUME_LOG"; }
# Waits (at most 3 s) until nginx has logged more than N lines: it logs a request when
# the connection ends, which may be a moment after the client has gone.
wait_log_lines() { for _ in {1..30}; do (($(log_lines) > $1)) && return 0; sleep 0.1; done; return 1; }
sent_after() { awk -v skip="$1" 'NR > skip { s += $3 } END { print s + 0 }' "$RESUME_LOG"; }

workload_resume() { # TARGET RUN TOOL
    local target=$1 run=$2 tool=$3 log1 log2 pid rc1=0 lines1 sent1 sent2 status=ok
    log1=$LOGS/w5$SFX-$target-$tool-$run-first.log
    log2=$LOGS/w5$SFX-$target-$tool-$run-second.log
    prepare "$target"
    resume_cmds "$tool"
    : >"$RESUME_LOG"
    "${CMD1[@]}" >"$log1" 2>&1 &
    pid=$!
    BG_PIDS+=("$pid")
    if wait_written "$pid" "$HALF_BYTES"; then
        kill -TERM "$pid" 2>/dev/null || true
    fi
    { wait "$pid"; } 2>/dev/null || rc1=$? # (quiet: wget2 dies of SIGABRT, see above)
    forget_bg "$pid"
    if ((rc1 == 0)); then status="finished before the interrupt"; fi
    wait_log_lines 0 || true
    lines1=$(log_lines)
    sent1=$(sent_after 0)
    run_timed "$log2" "${CMD2[@]}"
    after_run "$target"
    wait_log_lines "$lines1" || true
    sent2=$(sent_after "$lines1")
    if [[ $status == ok ]]; then status=$(status_of "$R_RC"); fi
    if [[ $status == ok ]]; then status=$(check_big "$OUT/big.bin" 1); fi # every run: cmp
    [[ $status == ok ]] || note_failure 5 "$target" "$tool" "$run" "$status" "$log2"
    record 5 "$target" "$tool" "$run" "$status" "$R_WALL" "$R_CPU" "$R_RSS" "$R_SYNC" "$sent1" "$sent2"
}

# ---------------------------------------------------------------------------------------
# Workload 7: a flaky link. FLAKY_COUNT (200) files of FLAKY_SIZE (1 MiB), FLAKY_JOBS (10)
# in flight, through a relay with a FLAKY_RTT_MS (10 ms) round trip that resets the
# connection before FLAKY_RESET_RATE (2%) of the server's 64 KiB pieces, every tool told
# to retry (and resume, where it can):
#   haul get -j 10 --per-host 10 --retries 100: Haul resumes a file with a Range request
#     from what it has, after its own backoff (0.5 s, doubling).
#   curl --parallel --parallel-max 10 --retry 100 --retry-all-errors --retry-delay 1: a
#     reset is no "transient" error to curl without --retry-all-errors; --retry-delay 1 is
#     the shortest fixed wait (0 means its doubling backoff from 1 s). curl 7.88 starts the
#     file over on a retry (no Range; -C - does not change that), so every retry costs
#     the whole file again.
#   wget2 --max-threads=10 --tries=100 --retry-connrefused --waitretry=0 --continue: wget2
#     1.99 retries a failed connection but not a body cut short: it says "Just got N of M
#     bytes", keeps the short file and exits 0, so its files are checked, not its status.
#   aria2c -j 10 -x1 --max-tries=0 --retry-wait=0 -c: tries without end, no wait, resumes
#     with a Range request.
# The relay is restarted for every run with the seed FLAKY_SEED + run, so each tool's n-th
# connection meets the same resets as the others' n-th. Each run is stopped after
# FLAKY_TIMEOUT (300) seconds. Measured: wall time, the files whose sha256 matches the
# corpus, and the body bytes nginx handed to the connections ($body_bytes_sent of every
# request, reset ones included, from a log of this workload only). On loopback nginx hands
# the rest of a 1 MiB response to the kernel at once, so a request the relay resets
# counts whole from where it started: "bytes served" is what each tool asked for.

HAUL_RETRIES=()
if "$HAUL" get --help 2>&1 | grep -q -- '--retries'; then HAUL_RETRIES=(--retries 100); fi

flaky_cmd() { # TOOL LIST -> CMD
    local list=$2
    case $1 in
    haul) CMD=("$HAUL" get -i "$list" -d "$OUT" -q --journal "$STATE/journal.sqlite" -j "$FLAKY_JOBS" --per-host "$FLAKY_JOBS" "${HAUL_RETRIES[@]}") ;;
    curl) CMD=(curl -sS --fail --parallel --parallel-max "$FLAKY_JOBS" --retry 100 --retry-all-errors --retry-delay 1 --output-dir "$OUT" --remote-name-all -K "${list%.txt}.curl") ;;
    wget2) CMD=(wget2 -q --no-hsts --no-hpkp --max-threads="$FLAKY_JOBS" --tries=100 --retry-connrefused --waitretry=0 --continue -P "$OUT" -i "$list") ;;
    aria2c) CMD=(aria2c -q -j "$FLAKY_JOBS" -x1 --max-tries=0 --retry-wait=0 -c -d "$OUT" -i "$list") ;;
    esac
}

# Waits (at most 5 s) until nginx's workload 7 log stops growing for 0.3 s: it logs a
# request when its connection ends, a moment after the client or the relay has gone.
settle_flaky_log() {
    local last=-1 lines stable=0
    for _ in {1..50}; do
        lines=$(wc -l <"$FLAKY_LOG")
        if ((lines == last)); then ((++stable >= 3)) && return 0; else stable=0; fi
        last=$lines
        sleep 0.1
    done
}

workload_flaky() { # TARGET RUN TOOL
    local target=$1 run=$2 tool=$3 logfile status relay_pid list right served resets
    logfile=$LOGS/w7-$target-$tool-$run.log
    prepare "$target"
    start_relay "flaky-$target-$tool-$run" "$PORT" --rtt-ms "$FLAKY_RTT_MS" --reset-rate "$FLAKY_RESET_RATE" \
        --seed $((FLAKY_SEED + run))
    relay_pid=$R_PID
    list=$(list_for flaky "http://127.0.0.1:$R_PORT")
    flaky_cmd "$tool" "$list"
    : >"$FLAKY_LOG"
    run_timed "$logfile" timeout -s TERM "$FLAKY_TIMEOUT" "${CMD[@]}"
    stop_relay "$relay_pid"
    after_run "$target"
    settle_flaky_log
    served=$(awk '{ s += $1 } END { print s + 0 }' "$FLAKY_LOG")
    resets=$(sed -n 's/.* \([0-9][0-9]*\) resets.*/\1/p' "$LOGS/relay-flaky-$target-$tool-$run.log" | tail -n 1)
    right=$( (cd "$OUT" && sha256sum -c "$WORK/flaky.sha256" 2>/dev/null) | grep -c ': OK$' || true)
    status=ok
    if ((R_RC == 124)); then
        status="stopped after ${FLAKY_TIMEOUT} s"
    elif ((R_RC != 0)); then
        status="exit $R_RC"
    fi
    if ((right != FLAKY_COUNT)); then
        if [[ $status == ok ]]; then status="$right of $FLAKY_COUNT files right"; else status+="; $right of $FLAKY_COUNT files right"; fi
    fi
    [[ $status == ok ]] || note_failure 7 "$target" "$tool" "$run" "$status" "$logfile"
    record 7 "$target" "$tool" "$run" "$status" "$R_WALL" "$R_CPU" "$R_RSS" "$R_SYNC" "$right" "$served" "${resets:-0}"
}

# ---------------------------------------------------------------------------------------
# Workload 8: one 16 KiB file ($BASE_URL/q.bin) per process. Rows: haul (a fresh
# journal), "haul (10k rows)" (a copy of a journal holding ONE_JOURNAL_ROWS finished rows,
# made once over plain HTTP and copied before each run, outside the timing), curl, wget2,
# aria2c; each with only the URL, where to write, quiet output and (HTTPS) the test CA.

ONE_TOOLS=(haul "haul (10k rows)" curl wget2 aria2c)
ONE_TEMPLATE=$WORK/one-journal.sqlite
make_one_template() {
    [[ -s $ONE_TEMPLATE ]] && return
    local list=$WORK/one-journal.txt dir=$WORK/one-journal-out
    awk -v n="$ONE_JOURNAL_ROWS" -v u="http://127.0.0.1:$PORT/q.bin" \
        'BEGIN { for (i = 0; i < n; i++) printf "%s?row=%d\n  out=r%d.bin\n", u, i, i }' >"$list"
    log "workload 8: a journal of $ONE_JOURNAL_ROWS finished rows"
    "$HAUL" get -q -i "$list" -d "$dir" -j 16 --per-host 16 --journal "$ONE_TEMPLATE" >"$LOGS/w8-template.log" 2>&1 ||
        die "could not make the journal of $ONE_JOURNAL_ROWS rows (see $LOGS/w8-template.log)"
    rm -rf "$dir"
}
# Drops the haul binary's pages from the page cache, then runs it once (untimed), so that
# every run measures it as installed and used now and then, not as just built.
settle_haul_binary() {
    python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$HAUL"
    prepare tmpfs
    "$HAUL" get "$BASE_URL/q.bin" -d "$OUT" -q --journal "$STATE/journal.sqlite" "${TLS_HAUL_CA[@]}" >/dev/null 2>&1 || true
}
one_cmd() { # TOOL
    case $1 in
    haul*) CMD=("$HAUL" get "$BASE_URL/q.bin" -d "$OUT" -q --journal "$STATE/journal.sqlite" "${TLS_HAUL_CA[@]}") ;;
    curl) CMD=(curl -sS --fail "${TLS_CURL_CA[@]}" -o "$OUT/q.bin" "$BASE_URL/q.bin") ;;
    wget2) CMD=(wget2 -q --no-hsts --no-hpkp "${TLS_WGET2_CA[@]}" -P "$OUT" "$BASE_URL/q.bin") ;;
    aria2c) CMD=(aria2c -q "${TLS_ARIA2C[@]}" -d "$OUT" "$BASE_URL/q.bin") ;;
    esac
}
workload_one() { # WORKLOAD TARGET RUN TOOL
    local w=$1 target=$2 run=$3 tool=$4 logfile status size
    logfile=$LOGS/w$w$SFX-$target-${tool//[ ()]/_}-$run.log
    prepare "$target"
    if [[ $tool == "haul (10k rows)" ]]; then cp "$ONE_TEMPLATE" "$STATE/journal.sqlite"; fi
    one_cmd "$tool"
    run_timed "$logfile" "${CMD[@]}"
    status=$(status_of "$R_RC")
    if [[ $status == ok ]]; then
        size=$(stat -c %s "$OUT/q.bin" 2>/dev/null || echo 0)
        ((size == SMALL_SIZE)) || status="the file has $size bytes"
    fi
    [[ $status == ok ]] || note_failure "$w" "$target" "$tool" "$run" "$status" "$logfile"
    record "$w" "$target" "$tool" "$run" "$status" "$R_WALL" "$R_CPU" "$R_RSS" 0
}

# ---------------------------------------------------------------------------------------
# Run everything: for each target and run, every round trip of RTT_MS (its workloads over
# plain HTTP, then with HTTPS=1 workloads 1, 2, 3 and 6 over HTTP/1.1 and HTTP/2), then
# workload 7 (its own relay).

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(now)
for target in "${TARGETS[@]}"; do
    for run in $(seq 1 "$RUNS"); do
        for rtt in "${RTTS[@]}"; do
            variants=(http)
            if [[ $HTTPS == 1 ]]; then variants+=(h1 h2); fi
            for variant in "${variants[@]}"; do
                use_variant "$variant" "$rtt"
                # Workload keys: 1, 1-h1, 1-h2 (and @RTT, added by record).
                key() { if [[ $variant == http ]]; then echo "$1"; else echo "$1-$variant"; fi; }
                where="$target run $run/$RUNS$(rtt_name "$rtt")"
                if [[ $variant != http ]]; then where+=", $(variant_name "$variant")"; fi
                if want 1; then
                    log "$where: workload 1 (one $SIZE file, one connection)"
                    for tool in haul curl wget2 aria2c; do workload_big "$(key 1)" "$target" "$run" "$tool" 1 "$tool"; done
                    if ((DEFAULTS)); then
                        for tool in haul curl wget2 aria2c; do workload_big "$(key 1)" "$target" "$run" "$tool" 1 "$tool (defaults)" defaults; done
                    fi
                fi
                if want 2; then
                    log "$where: workload 2 (one $SIZE file, 4 and 8 connections)"
                    for n in 4 8; do
                        for tool in haul aria2c curl-ranges; do workload_big "$(key 2)" "$target" "$run" "$tool" "$n" "$tool -x$n"; done
                    done
                fi
                if want 3; then
                    log "$where: workload 3 ($SMALL_COUNT x 16 KiB; $TUNED_TEXT in flight$( ((DEFAULTS)) && echo ', defaults'))"
                    for row in "${SMALL_ROWS[@]}"; do
                        read -r tool n mode <<<"$row"
                        workload_small "$(key 3)" "$target" "$run" "$tool" "$n" "$mode"
                    done
                fi
                if want 4 && [[ $variant == http ]]; then
                    log "$where: workload 4 ($QUEUE_COUNT queued URLs)"
                    for tool in haul aria2c; do workload_queue "$target" "$run" "$tool"; done
                fi
                if want 6; then
                    log "$where: workload 6 ($LIMITED_SIZE at $LIMIT_RATE per connection, 8 connections)"
                    for tool in haul aria2c; do workload_limited "$(key 6)" "$target" "$run" "$tool"; done
                    if ((DEFAULTS)); then
                        for tool in haul curl wget2 aria2c; do workload_limited "$(key 6)" "$target" "$run" "$tool" defaults; done
                    fi
                fi
                if want 8; then
                    log "$where: workload 8 (one 16 KiB file per process, $ONE_PER_RUN times per tool)"
                    make_one_template
                    settle_haul_binary
                    for ((i = 1; i <= ONE_PER_RUN; i++)); do
                        for tool in "${ONE_TOOLS[@]}"; do
                            workload_one "$(key 8)" "$target" "$(((run - 1) * ONE_PER_RUN + i))" "$tool"
                        done
                    done
                fi
                if want 5 && [[ $variant == http ]]; then
                    log "$where: workload 5 (resume at ~50%)"
                    for tool in haul curl wget2 aria2c; do workload_resume "$target" "$run" "$tool"; done
                fi
            done
        done
        if want 7; then
            use_variant http 0
            log "$target run $run/$RUNS: workload 7 ($FLAKY_COUNT x $FLAKY_SIZE, $FLAKY_JOBS in flight, ${FLAKY_RTT_MS} ms round trip, resets before $FLAKY_RESET_RATE of 64 KiB pieces)"
            for tool in haul curl wget2 aria2c; do workload_flaky "$target" "$run" "$tool"; done
        fi
    done
done
T_TOTAL=$(elapsed "$T_START" "$(now)")
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------------------
# 6. Report. Fields of raw.tsv: workload (with "@RTT" for a round trip above 0), target,
# tool, run, status, wall s, CPU s, peak RSS KiB, sync s, then per workload: (3) anonymous
# memory peak KiB; (1, 2, 3, 6) in field 11 the protocols nginx logged ("-" for plain
# HTTP); (4) TTFB s, files done; (5) bytes sent in the first run, bytes sent in the second;
# (7) files right, body bytes served, the relay's resets.

# med W TARGET TOOL FIELD: the median of FIELD over the runs that went right. W is taken
# with the current round trip's suffix (SFX), as record wrote it; so are the helpers below.
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
med() {
    awk -F'\t' -v w="$1$SFX" -v t="$2" -v tool="$3" -v f="$4" \
        '$1 == w && $2 == t && $3 == tool && $5 == "ok" { print $f }' "$RAW" | median
}
# med_all W TARGET TOOL FIELD: the same over every run that measured something.
med_all() {
    awk -F'\t' -v w="$1$SFX" -v t="$2" -v tool="$3" -v f="$4" \
        '$1 == w && $2 == t && $3 == tool && $6 > 0 { print $f }' "$RAW" | median
}
# row_proto W TARGET TOOL: the protocols nginx logged for the row's runs ("HTTP/2.0").
row_proto() {
    local seen
    seen=$(awk -F'\t' -v w="$1$SFX" -v t="$2" -v tool="$3" '$1 == w && $2 == t && $3 == tool && $11 != "" && $11 != "-" { print $11 }' "$RAW" |
        sort -u | paste -sd/ -)
    echo "${seen:-–}"
}
# The status to show for a row: empty when every run went right.
row_status() {
    awk -F'\t' -v w="$1$SFX" -v t="$2" -v tool="$3" '$1 == w && $2 == t && $3 == tool {
            n++; if ($5 == "ok") ok++; else bad = $5 }
        END { if (n > 0 && ok < n) printf "%s%s", (ok ? ok "/" n " ok; " : ""), bad }' "$RAW"
}
fmt() { [[ -z $2 ]] && { echo "–"; return; }; awk -v v="$2" -v p="$1" 'BEGIN { printf "%." p "f", v }'; }
calc() { awk "BEGIN { x = $1; printf \"%.6f\", x }"; }
ratio() { # A B: A ÷ B as "1.23×"
    [[ -z $1 || -z $2 ]] && { echo "–"; return; }
    awk -v a="$1" -v b="$2" 'BEGIN { if (b <= 0) print "–"; else printf "%.2f×", a / b }'
}
GIB=$(calc "$SIZE_BYTES / 1073741824")
MIB_BIG=$(calc "$SIZE_BYTES / 1048576")

# Workload W's CPU per file, in microseconds, split against the ahc-memory, ahc-1hop and
# ahc-journal floors: the client's own, file writing, the least journal, and Haul's own
# (what Haul spends above ahc-1hop, and above ahc-journal).
small_floor() { # W TARGET
    local haul mem hop jrn
    haul=$(med "$1" "$2" haul 7) mem=$(med "$1" "$2" ahc-memory 7) hop=$(med "$1" "$2" ahc-1hop 7)
    jrn=$(med "$1" "$2" ahc-journal 7)
    [[ -n $haul && -n $mem && -n $hop ]] || return 0
    echo
    echo "CPU per file: the client alone (ahc-memory) $(fmt 0 "$(calc "$mem * 1000000 / $SMALL_COUNT")") µs;" \
        "writing each file in one pool hop (ahc-1hop − ahc-memory) $(fmt 0 "$(calc "($hop - $mem) * 1000000 / $SMALL_COUNT")") µs;" \
        "**Haul's own work (haul − ahc-1hop) $(fmt 0 "$(calc "($haul - $hop) * 1000000 / $SMALL_COUNT")") µs**."
    [[ -n $jrn ]] || return 0
    echo "The least journal that loses nothing, with a file fsync each (ahc-journal − ahc-1hop)" \
        "$(fmt 0 "$(calc "($jrn - $hop) * 1000000 / $SMALL_COUNT")") µs; Haul above that floor (haul − ahc-journal)" \
        "$(fmt 0 "$(calc "($haul - $jrn) * 1000000 / $SMALL_COUNT")") µs."
}

# Best peer: the non-Haul tool with the lowest median of FIELD. Prints "tool<TAB>value".
best_peer() { # W TARGET FIELD TOOLS...
    local w=$1 t=$2 f=$3 tool v best="" bestv=""
    shift 3
    for tool in "$@"; do
        v=$(med "$w" "$t" "$tool" "$f")
        [[ -z $v ]] && continue
        if [[ -z $bestv ]] || awk -v a="$v" -v b="$bestv" 'BEGIN { exit !(a < b) }'; then best=$tool bestv=$v; fi
    done
    printf '%s\t%s\n' "$best" "$bestv"
}

# summary_line W LABEL HAULTOOL FIELD DIGITS UNIT DIVISOR PEERS...: one line of the
# summary table for $target; the ratios use the undivided medians.
summary_line() {
    local w=$1 label=$2 haultool=$3 f=$4 d=$5 unit=$6 div=$7 h c bpt="" bpv="" st="" hs bs cs
    shift 7
    h=$(med "$w" "$target" "$haultool" "$f")
    if [[ -z $h ]]; then st=$(row_status "$w" "$target" "$haultool"); fi
    IFS=$'\t' read -r bpt bpv <<<"$(best_peer "$w" "$target" "$f" "$@")" || true
    local p
    c=""
    for p in "$@"; do
        if [[ $p == curl || $p == "curl ("* ]]; then c=$(med "$w" "$target" "$p" "$f"); break; fi
    done
    hs=${st:-–} bs="–" cs="–"
    [[ -n $h ]] && hs="$(fmt "$d" "$(calc "$h / $div")") $unit"
    [[ -n $bpv ]] && bs="$(fmt "$d" "$(calc "$bpv / $div")") $unit ($bpt)"
    [[ -n $c ]] && cs="$(fmt "$d" "$(calc "$c / $div")") $unit"
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$w" "$label" "$hs" "$bs" "$(ratio "$h" "$bpv")" "$cs" \
        "$( [[ -n $c ]] && ratio "$h" "$c" || echo "–")"
}

REPORT=$WORK/report.md
DATE=$(date +%F)
cpu_model=$(lscpu | awk -F: '/^Model name/ { sub(/^ +/, "", $2); print $2; exit }')
mem_total=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
haul_version=$("$HAUL" --version 2>/dev/null || echo "?")
git_rev=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo "?")
git_dirty=$(git -C "$REPO" --no-optional-locks status --porcelain --untracked-files=no 2>/dev/null | head -c1 | wc -c)
disk_fs=$(fs_type "$DISK_ROOT")

{
    echo "# Haul against curl, wget2 and aria2c, $DATE"
    echo
    echo "Medians of $RUNS runs, downloading from nginx on 127.0.0.1 (sendfile, page-cached corpus)."
    echo "Generated by \`Benchmarks/compare.sh\` in ${T_TOTAL%.*} s."
    echo
    echo "| | |"
    echo "|---|---|"
    echo "| date | $(date -u '+%Y-%m-%d %H:%M UTC') |"
    echo "| machine | $(nproc) CPUs ($cpu_model), $mem_total RAM |"
    echo "| kernel | $(uname -sr) |"
    if [[ -n ${HAUL_BIN:-} ]]; then
        # A binary given by HAUL_BIN may be of any commit: the repository's is not its own.
        echo "| haul | $haul_version, $HAUL_BIN (HAUL_BIN: its commit is not known here; the repository stood at $git_rev); segmented (\`-x\`): $( ((HAUL_HAS_X)) && echo yes || echo 'not yet') |"
    else
        echo "| haul | $haul_version, commit $git_rev$( ((git_dirty)) && echo ' with uncommitted changes'), release build; segmented (\`-x\`): $( ((HAUL_HAS_X)) && echo yes || echo 'not yet') |"
    fi
    echo "| curl | $(curl --version | head -n1 | cut -d' ' -f1-2) |"
    echo "| wget2 | $(wget2 --version 2>/dev/null | head -n1 | sed 's/^GNU Wget2 //; s/ - .*//') |"
    echo "| aria2c | $(aria2c --version | head -n1 | sed 's/^aria2 version //') |"
    echo "| nginx | $(nginx -v 2>&1 | sed 's/^nginx version: nginx\///') |"
    echo "| settings | RUNS=$RUNS SIZE=$SIZE SMALL_COUNT=$SMALL_COUNT QUEUE_COUNT=$QUEUE_COUNT QUEUE_STOP_FILES=$QUEUE_STOP_FILES QUEUE_MAX_SECONDS=$QUEUE_MAX_SECONDS ONLY=$ONLY SKIP_DISK=$SKIP_DISK HTTPS=$HTTPS RTT_MS=\"$RTT_MS\" DEFAULTS=$DEFAULTS TUNED=\"$TUNED\"$(want 6 && echo " LIMITED_SIZE=$LIMITED_SIZE LIMIT_RATE=$LIMIT_RATE")$(want 8 && echo " ONE_PER_RUN=$ONE_PER_RUN ONE_JOURNAL_ROWS=$ONE_JOURNAL_ROWS")$(want 7 && echo " FLAKY_COUNT=$FLAKY_COUNT FLAKY_SIZE=$FLAKY_SIZE FLAKY_JOBS=$FLAKY_JOBS FLAKY_RTT_MS=$FLAKY_RTT_MS FLAKY_RESET_RATE=$FLAKY_RESET_RATE FLAKY_SEED=$FLAKY_SEED") |"
    if ((NEED_RELAY)); then
        echo "| far link | Benchmarks/relay.py ($(python3 --version 2>&1)) in front of nginx: each direction held RTT/2, pipelined, no bandwidth cap; a connection's first bytes held one RTT (the handshake); TCP's window over the far link not modelled |"
    fi
    if [[ $HTTPS == 1 ]]; then
        echo "| https | $(openssl version | cut -d' ' -f1-2), P-256 certificate from a throwaway CA; wget2 HTTP/2: $( ((WGET2_HAS_H2)) && echo yes || echo no); aria2c: no HTTP/2 |"
    fi
    echo "| targets | tmpfs ($TMPFS_ROOT)$( [[ $SKIP_DISK != 1 ]] && echo ", disk ($disk_fs, $DISK_ROOT)") |"
    echo "| load average (1, 5, 15 min) | $LOAD_START at the start, $LOAD_END at the end |"
    if [[ -n $NOTE ]]; then echo "| note | $NOTE |"; fi
    echo
    echo "Ratios divide Haul's median by the other's, for times and for peak RSS alike: above 1×"
    echo "means Haul took longer or used more memory. \"Best peer\" is the fastest (or"
    echo "smallest) of the other tools on that line. CPU is user + system time of the"
    echo "downloading process."
    if [[ $SKIP_DISK != 1 ]]; then
        echo "On the disk target, Haul fsyncs each file before renaming it into place and the"
        echo "others do not: their data may still be in the page cache when they exit. The"
        echo "\"sync\" column is how long fsyncing the run's output files (\`sync FILE...\`) right"
        echo "after it took, i.e. the writeback a tool left behind; \"wall + sync\" is the fairer"
        echo "comparison there (for Haul the sync is close to zero: it has already paid)."
    fi

    for target in "${TARGETS[@]}"; do
      for rtt in "${RTTS[@]}"; do
        SFX=""
        if ((rtt > 0)); then SFX=@$rtt; fi
        echo
        if ((${#RTTS[@]} > 1 || rtt > 0)); then
            echo "## Output to $target, round trip $rtt ms$( ((rtt > 0)) && echo ' (through relay.py)' || echo ' (direct)')"
        else
            echo "## Output to $target"
        fi
        # Summary
        echo
        echo "### Summary"
        echo
        echo "| workload | metric | Haul | best peer | Haul ÷ best peer | curl | Haul ÷ curl |"
        echo "|---|---|---|---|---|---|---|"
        variants=(http)
        if [[ $HTTPS == 1 ]]; then variants+=(h1 h2); fi
        for v in "${variants[@]}"; do
            k="" proto=""
            if [[ $v != http ]]; then k=-$v proto=", $(variant_name "$v")"; fi
            if want 1; then
                summary_line "1$k" "one $SIZE file, 1 connection$proto: wall" haul 6 2 s 1 curl wget2 aria2c
                summary_line "1$k" "… CPU" haul 7 2 s 1 curl wget2 aria2c
                if ((DEFAULTS)); then
                    summary_line "1$k" "one $SIZE file$proto, each tool at its defaults: wall" "haul (defaults)" 6 2 s 1 "curl (defaults)" "wget2 (defaults)" "aria2c (defaults)"
                fi
            fi
            if want 2; then
                if ((HAUL_HAS_X)); then
                    summary_line "2$k" "one $SIZE file, 4 connections$proto: wall" "haul -x4" 6 2 s 1 "aria2c -x4"
                    summary_line "2$k" "one $SIZE file, 8 connections$proto: wall" "haul -x8" 6 2 s 1 "aria2c -x8"
                    summary_line "2$k" "… 4 connections against the ceiling (4 curls on ranges, unjoined)" "haul -x4" 6 2 s 1 "curl-ranges -x4"
                    summary_line "2$k" "… 8 connections against the ceiling (8 curls on ranges, unjoined)" "haul -x8" 6 2 s 1 "curl-ranges -x8"
                else
                    echo "| 2$k | one $SIZE file, 4 and 8 connections$proto | n/a (no -x yet) | $(fmt 2 "$(med "2$k" "$target" "aria2c -x4" 6)") s / $(fmt 2 "$(med "2$k" "$target" "aria2c -x8" 6)") s (aria2c -x4 / -x8) | – | – | – |"
                fi
            fi
            if want 3; then
                for n in "${TUNED_N[@]}"; do
                    peers=("$(small_label curl "$n" tuned)" "$(small_label wget2 "$n" tuned)" "$(small_label aria2c "$n" tuned)")
                    summary_line "3$k" "$SMALL_COUNT × 16 KiB, $n in flight$proto: wall" "$(small_label haul "$n" tuned)" 6 2 s 1 "${peers[@]}"
                    summary_line "3$k" "… CPU" "$(small_label haul "$n" tuned)" 7 2 s 1 "${peers[@]}"
                    if ((n == 16)); then summary_line "3$k" "… peak RSS" haul 8 1 MiB 1024 "${peers[@]}"; fi
                    summary_line "3$k" "… anonymous memory peak" "$(small_label haul "$n" tuned)" 10 1 MiB 1024 "${peers[@]}"
                done
                if ((DEFAULTS)); then
                    peers=("curl (defaults)" "wget2 (defaults)" "aria2c (defaults)")
                    summary_line "3$k" "$SMALL_COUNT × 16 KiB$proto, each tool at its defaults: wall" "haul (defaults)" 6 2 s 1 "${peers[@]}"
                    summary_line "3$k" "… CPU" "haul (defaults)" 7 2 s 1 "${peers[@]}"
                    summary_line "3$k" "… anonymous memory peak" "haul (defaults)" 10 1 MiB 1024 "${peers[@]}"
                fi
            fi
            if want 4 && [[ $v == http ]]; then
                summary_line 4 "$QUEUE_COUNT queued URLs: time to first byte" haul 10 2 s 1 aria2c
                summary_line 4 "… peak RSS (capped window)" haul 8 1 MiB 1024 aria2c
            fi
            if want 6; then
                summary_line "6$k" "one $LIMITED_SIZE file at $LIMIT_RATE per connection, 8 connections$proto: wall" "haul -x8" 6 2 s 1 "aria2c -x8"
                if ((DEFAULTS)); then
                    summary_line "6$k" "… each tool at its defaults: wall" "haul (defaults)" 6 2 s 1 "curl (defaults)" "wget2 (defaults)" "aria2c (defaults)"
                fi
            fi
            if want 8; then
                summary_line "8$k" "one 16 KiB file per process$proto, fresh journal: wall" haul 6 3 s 1 curl wget2 aria2c
                summary_line "8$k" "… with $ONE_JOURNAL_ROWS finished rows: wall" "haul (10k rows)" 6 3 s 1 curl wget2 aria2c
                summary_line "8$k" "… peak RSS" haul 8 1 MiB 1024 curl wget2 aria2c
            fi
            if want 5 && [[ $v == http ]]; then
                summary_line 5 "resume from ~50%: second run wall" haul 6 2 s 1 curl wget2 aria2c
                summary_line 5 "… MiB sent in the second run" haul 11 0 MiB 1048576 curl wget2 aria2c
            fi
        done

        if want 1 || want 2; then
            for v in "${variants[@]}"; do
                k="" title="" plain_col=""
                if [[ $v != http ]]; then k=-$v title=" over $(variant_name "$v")" plain_col=1; fi
                echo
                echo "### Workloads 1 and 2$title: one $SIZE file"
                echo
                head="| tool | wall s | MiB/s | CPU s per GiB | peak RSS MiB"
                [[ $target == disk ]] && head+=" | sync s | wall + sync s | MiB/s incl. sync"
                [[ -n $plain_col ]] && head+=" | protocol | wall ÷ plain HTTP"
                head+=" | problems |"
                echo "$head"
                echo "$head" | sed 's/[^|]\+/---/g'
                rows=()
                if want 1; then
                    rows+=(1:haul 1:curl 1:wget2 1:aria2c)
                    if ((DEFAULTS)); then rows+=("1:haul (defaults)" "1:curl (defaults)" "1:wget2 (defaults)" "1:aria2c (defaults)"); fi
                fi
                if want 2; then rows+=("2:haul -x4" "2:aria2c -x4" "2:curl-ranges -x4" "2:haul -x8" "2:aria2c -x8" "2:curl-ranges -x8"); fi
                for row in "${rows[@]}"; do
                    w=${row%%:*}$k tool=${row#*:}
                    wall=$(med "$w" "$target" "$tool" 6)
                    cpu=$(med "$w" "$target" "$tool" 7)
                    rss=$(med "$w" "$target" "$tool" 8)
                    syn=$(med "$w" "$target" "$tool" 9)
                    st=$(row_status "$w" "$target" "$tool")
                    mibs="" cpug="" rssm="" ws="" mibs2=""
                    [[ -n $wall ]] && mibs=$(calc "$MIB_BIG / $wall")
                    [[ -n $cpu ]] && cpug=$(calc "$cpu / $GIB")
                    [[ -n $rss ]] && rssm=$(calc "$rss / 1024")
                    [[ -n $wall && -n $syn ]] && ws=$(calc "$wall + $syn") && mibs2=$(calc "$MIB_BIG / $ws")
                    line="| $tool | $(fmt 2 "$wall") | $(fmt 0 "$mibs") | $(fmt 2 "$cpug") | $(fmt 1 "$rssm")"
                    [[ $target == disk ]] && line+=" | $(fmt 2 "$syn") | $(fmt 2 "$ws") | $(fmt 0 "$mibs2")"
                    [[ -n $plain_col ]] && line+=" | $(row_proto "$w" "$target" "$tool") | $(ratio "$wall" "$(med "${row%%:*}" "$target" "$tool" 6)")"
                    echo "$line | $st |"
                done
            done
        fi

        if want 3; then
            for v in "${variants[@]}"; do
                k="" title="" plain_col=""
                if [[ $v != http ]]; then k=-$v title=" over $(variant_name "$v")" plain_col=1; fi
                echo
                echo "### Workload 3$title: $SMALL_COUNT files of 16 KiB ($TUNED_TEXT in flight$( ((DEFAULTS)) && echo ', and each tool at its defaults'))"
                echo
                head="| tool | wall s | files/s | CPU s | CPU ms per 1,000 files | peak RSS MiB | anonymous peak MiB | sync s"
                [[ -n $plain_col ]] && head+=" | protocol | wall ÷ plain HTTP"
                head+=" | problems |"
                echo "$head"
                echo "$head" | sed 's/[^|]\+/---/g'
                for row in "${SMALL_ROWS[@]}"; do
                    read -r tool n mode <<<"$row"
                    label=$(small_label "$tool" "$n" "$mode")
                    w=3$k
                    wall=$(med "$w" "$target" "$label" 6)
                    cpu=$(med "$w" "$target" "$label" 7)
                    rss=$(med "$w" "$target" "$label" 8)
                    syn=$(med "$w" "$target" "$label" 9)
                    anon=$(med "$w" "$target" "$label" 10)
                    st=$(row_status "$w" "$target" "$label")
                    fps="" cpk="" rssm="" anonm=""
                    [[ -n $wall ]] && fps=$(calc "$SMALL_COUNT / $wall")
                    [[ -n $cpu ]] && cpk=$(calc "$cpu * 1000000 / $SMALL_COUNT")
                    [[ -n $rss ]] && rssm=$(calc "$rss / 1024")
                    [[ -n $anon ]] && anonm=$(calc "$anon / 1024")
                    line="| $label | $(fmt 2 "$wall") | $(fmt 0 "$fps") | $(fmt 2 "$cpu") | $(fmt 0 "$cpk") | $(fmt 1 "$rssm") | $(fmt 1 "$anonm") | $( [[ $target == disk ]] && fmt 2 "$syn" || echo –)"
                    [[ -n $plain_col ]] && line+=" | $(row_proto "$w" "$target" "$label") | $(ratio "$wall" "$(med 3 "$target" "$label" 6)")"
                    echo "$line | $st |"
                done
                if [[ -n $AHC ]]; then
                    line=$(small_floor "3$k" "$target")
                    if [[ -n $line ]]; then
                        if [[ -n $k ]]; then echo "${line/CPU per file:/CPU per file over $v:}"; else echo "$line"; fi
                    fi
                fi
            done
        fi

        if want 6; then
            for v in "${variants[@]}"; do
                k="" title="" plain_col=""
                if [[ $v != http ]]; then k=-$v title=" over $(variant_name "$v")" plain_col=1; fi
                echo
                echo "### Workload 6$title: one $LIMITED_SIZE file at $LIMIT_RATE per connection"
                echo
                head="| tool | wall s | MiB/s | CPU s | peak RSS MiB"
                [[ -n $plain_col ]] && head+=" | protocol | wall ÷ plain HTTP"
                head+=" | problems |"
                echo "$head"
                echo "$head" | sed 's/[^|]\+/---/g'
                rows=("haul -x8" "aria2c -x8")
                if ((DEFAULTS)); then rows+=("haul (defaults)" "curl (defaults)" "wget2 (defaults)" "aria2c (defaults)"); fi
                for tool in "${rows[@]}"; do
                    w=6$k
                    wall=$(med "$w" "$target" "$tool" 6)
                    cpu=$(med "$w" "$target" "$tool" 7)
                    rss=$(med "$w" "$target" "$tool" 8)
                    st=$(row_status "$w" "$target" "$tool")
                    mibs="" rssm=""
                    [[ -n $wall ]] && mibs=$(calc "$LIMITED_BYTES / 1048576 / $wall")
                    [[ -n $rss ]] && rssm=$(calc "$rss / 1024")
                    line="| $tool | $(fmt 2 "$wall") | $(fmt 1 "$mibs") | $(fmt 2 "$cpu") | $(fmt 1 "$rssm")"
                    [[ -n $plain_col ]] && line+=" | $(row_proto "$w" "$target" "$tool") | $(ratio "$wall" "$(med 6 "$target" "$tool" 6)")"
                    echo "$line | $st |"
                done
            done
        fi

        if want 8; then
            for v in "${variants[@]}"; do
                k="" title=""
                if [[ $v != http ]]; then k=-$v title=" over $(variant_name "$v")"; fi
                echo
                echo "### Workload 8$title: one 16 KiB file per process ($((RUNS * ONE_PER_RUN)) runs per row)"
                echo
                # (No CPU column: /usr/bin/time counts it in 10 ms steps, as long as a run.)
                echo "| tool | wall ms | wall ÷ aria2c | peak RSS MiB | peak RSS ÷ curl | problems |"
                echo "|---|---|---|---|---|---|"
                aria_wall=$(med "8$k" "$target" aria2c 6)
                curl_rss=$(med "8$k" "$target" curl 8)
                for tool in "${ONE_TOOLS[@]}"; do
                    wall=$(med "8$k" "$target" "$tool" 6)
                    rss=$(med "8$k" "$target" "$tool" 8)
                    st=$(row_status "8$k" "$target" "$tool")
                    wms="" rssm=""
                    [[ -n $wall ]] && wms=$(calc "$wall * 1000")
                    [[ -n $rss ]] && rssm=$(calc "$rss / 1024")
                    echo "| $tool | $(fmt 1 "$wms") | $(ratio "$wall" "$aria_wall") | $(fmt 1 "$rssm") | $(ratio "$rss" "$curl_rss") | $st |"
                done
            done
        fi

        if want 4; then
            echo
            echo "### Workload 4: $QUEUE_COUNT queued URLs (window: until $QUEUE_STOP_FILES files are complete or ${QUEUE_MAX_SECONDS} s)"
            echo
            echo "| tool | time to first byte s | window s | files complete in the window | files/s in the window | peak RSS MiB | CPU s in the window | problems |"
            echo "|---|---|---|---|---|---|---|---|"
            for tool in haul aria2c; do
                ttfb=$(med 4 "$target" "$tool" 10)
                win=$(med 4 "$target" "$tool" 6)
                files=$(med 4 "$target" "$tool" 11)
                rss=$(med 4 "$target" "$tool" 8)
                cpu=$(med 4 "$target" "$tool" 7)
                st=$(row_status 4 "$target" "$tool")
                fps="" rssm=""
                [[ -n $win && -n $files ]] && fps=$(calc "$files / $win")
                [[ -n $rss ]] && rssm=$(calc "$rss / 1024")
                echo "| $tool | $(fmt 2 "$ttfb") | $(fmt 1 "$win") | $(fmt 0 "$files") | $(fmt 0 "$fps") | $(fmt 1 "$rssm") | $(fmt 2 "$cpu") | $st |"
            done
        fi

        if want 5; then
            echo
            echo "### Workload 5: one $SIZE file interrupted at ~50% (SIGTERM), then continued"
            echo
            echo "| tool | first run: MiB sent | second run: wall s | second run: MiB sent | second run MiB/s | both runs ÷ file size | second run: CPU s | problems |"
            echo "|---|---|---|---|---|---|---|---|"
            for tool in haul curl wget2 aria2c; do
                s1=$(med 5 "$target" "$tool" 10)
                s2=$(med 5 "$target" "$tool" 11)
                wall=$(med 5 "$target" "$tool" 6)
                cpu=$(med 5 "$target" "$tool" 7)
                st=$(row_status 5 "$target" "$tool")
                # Total over the same run (not the sum of two medians).
                tot=$(awk -F'\t' -v w="5$SFX" -v t="$target" -v tool="$tool" '$1 == w && $2 == t && $3 == tool && $5 == "ok" { print ($10 + $11) }' "$RAW" |
                    sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
                m1="" m2="" mibs="" over=""
                [[ -n $s1 ]] && m1=$(calc "$s1 / 1048576")
                [[ -n $s2 ]] && m2=$(calc "$s2 / 1048576")
                [[ -n $s2 && -n $wall ]] && mibs=$(calc "$s2 / 1048576 / $wall")
                [[ -n $tot ]] && over=$(calc "$tot / $SIZE_BYTES")
                echo "| $tool | $(fmt 0 "$m1") | $(fmt 2 "$wall") | $(fmt 0 "$m2") | $(fmt 0 "$mibs") | $(fmt 3 "$over") | $(fmt 2 "$cpu") | $st |"
            done
        fi
      done # rtt

        SFX=""
        if want 7; then
            echo
            echo "## Output to $target: workload 7, a flaky link"
            echo
            echo "$FLAKY_COUNT files of $FLAKY_SIZE, $FLAKY_JOBS in flight, through relay.py with a ${FLAKY_RTT_MS} ms round trip that resets the connection before $FLAKY_RESET_RATE of the server's 64 KiB pieces; every tool told to retry (see below). Wall time is the median of the runs that got every file right; files right and bytes served are per run."
            echo
            echo "| tool | wall s | wall ÷ aria2c | files right (each run) | MiB served (median) | served ÷ corpus | served ÷ aria2c | resets (median) | problems |"
            echo "|---|---|---|---|---|---|---|---|---|"
            aria_wall=$(med 7 "$target" aria2c 6)
            aria_served=$(med_all 7 "$target" aria2c 11)
            for tool in haul curl wget2 aria2c; do
                wall=$(med 7 "$target" "$tool" 6)
                served=$(med_all 7 "$target" "$tool" 11)
                resets=$(med_all 7 "$target" "$tool" 12)
                right=$(awk -F'\t' -v t="$target" -v tool="$tool" '$1 == 7 && $2 == t && $3 == tool { printf "%s%s", (n++ ? ", " : ""), $10 }' "$RAW")
                st=$(row_status 7 "$target" "$tool")
                mib="" over=""
                [[ -n $served ]] && mib=$(calc "$served / 1048576") && over=$(calc "$served / ($FLAKY_COUNT * $FLAKY_BYTES)")
                echo "| $tool | $(fmt 2 "$wall") | $(ratio "$wall" "$aria_wall") | ${right:-–} | $(fmt 1 "$mib") | $(fmt 3 "$over") | $(ratio "$served" "$aria_served") | $(fmt 0 "$resets") | $st |"
            done
        fi
    done

    echo
    echo "## How it was measured"
    echo
    echo "- Each command runs under \`/usr/bin/time\` (user + system CPU, peak RSS); wall time is taken around it. Runs are interleaved across tools; the output directory (and Haul's journal, kept next to it on the same file system) is deleted before every run."
    echo "- Workload 3 also samples each process's anonymous memory (\`RssAnon\` in \`/proc/PID/status\`: its private pages, without the binary and shared libraries mapped from files) every 5 ms, and reports the highest sample: \"anonymous peak\". Peak RSS counts the mapped binary too, which for a Swift program is most of it."
    echo "- Commands: \`haul get URL -d OUT -q --journal J\`, \`curl -sS --fail -o OUT/big.bin URL\`, \`wget2 -q -P OUT URL\`, \`aria2c -q -x1 -s1 -d OUT -o big.bin URL\`; Haul with \`-x 1\` when it has \`-x\` (its default is 4 connections), in workload 5 too; workload 2: \`haul get -x N\`, \`aria2c -x N -s N -k 1M\`, and as a reference (a ceiling, not a peer) \`curl-ranges -xN\`: N \`curl -r A-B\` at once, each into a file of its own, never joined."
    echo "- Workload 3: \`haul get -i LIST -j 16 --per-host 16\`, \`curl --parallel --parallel-max 16 --output-dir OUT --remote-name-all -K CONFIG\`, \`wget2 --max-threads=16 -i LIST\`, \`aria2c -i LIST -j 16 -x1\`. Every run checks the file count and total size."
    echo "- Workload 4: the same haul and aria2c commands with a list of $QUEUE_COUNT distinct URLs that nginx serves from one 16 KiB file. Time to first byte is the time until the first entry appears in the output directory (a watcher polls every millisecond; for Haul that is its first finished file, as it writes bodies of 64 KiB or less once, complete); the tool is killed (SIGKILL) once $QUEUE_STOP_FILES files are complete or after ${QUEUE_MAX_SECONDS} s, so peak RSS is over that window."
    echo "- Workload 5: the first run gets SIGTERM once the process has written half the file (its wchar in /proc/PID/io); the second (\`haul get\` again, \`curl -C -\`, \`wget2 -c\`, \`aria2c -c\`) is timed. Bytes sent are nginx's \`\$bytes_sent\` (headers included) from a log of this workload only. Every run compares the result with the original."
    if [[ $HTTPS == 1 ]]; then
        echo "- HTTPS (\`HTTPS=1\`): workloads 1, 2, 3 and 6 again, same corpus and commands, against two more nginx servers with a certificate signed by a certificate authority the script makes with openssl: one offering only HTTP/1.1 by ALPN, one HTTP/2 as well. The authority is given to every tool, alone: \`haul --ca-certificate CA --no-system-ca\` (with \`--http2\` against the HTTP/2 server, which a haul from before issue 42 needs, and \`--http1.1\` against the other when it has it), \`curl --cacert CA\` (with \`--http1.1\` or \`--http2\`), \`wget2 --ca-certificate=CA\` (with \`--no-http2\` or \`--http2\`), \`aria2c --ca-certificate=CA\`. nginx logs each TLS request's protocol, and a run that was not served entirely over its row's protocol is listed as a problem. \"wall ÷ plain HTTP\" divides by the same tool's median over plain HTTP."
    fi
    if want 6; then
        echo "- Workload 6: nginx serves the file under \`/limited/\` with \`limit_rate $LIMIT_RATE\` (per connection); \`haul get URL -x 8\` (the per-host cap left at its default, 6) and \`aria2c -x 8 -s 8 -k 1M\`. Eight connections at $LIMIT_RATE each can at best take $(fmt 1 "$(calc "$LIMITED_BYTES / ($LIMIT_BYTES * 8)")") s, six $(fmt 1 "$(calc "$LIMITED_BYTES / ($LIMIT_BYTES * 6)")") s."
    fi
    if ((DEFAULTS)); then
        echo "- Rows at defaults (\"(defaults)\"): every tool with only what it needs to run: \`haul get URL\` / \`haul get -i LIST\` (10 downloads, 6 per host, 4 connections for a big file), \`curl URL\` / \`curl --parallel -K CONFIG\` (50 in flight), \`wget2 URL\` / \`wget2 -i LIST\` (5 threads), \`aria2c URL\` / \`aria2c -i LIST\` (5 at once), plus the output directory, quiet output and (HTTPS) the CA; no protocol option, so over HTTPS each negotiates what it does by default (the protocol column says what nginx logged)."
    fi
    if want 3; then
        echo "- Workload 3 at $TUNED_TEXT in flight: rows \"tool\" (16) and \"tool (N)\" run \`haul get -j N --per-host N\`, \`curl --parallel --parallel-max N\`, \`wget2 --max-threads=N\`, \`aria2c -j N -x1\`."
    fi
    if [[ $HTTPS == 1 ]]; then
        echo "- Haul's HTTP/1.1 rows pass $( ((${#HAUL_H1[@]})) && echo "\`${HAUL_H1[*]}\`" || echo "no protocol option (HTTP/1.1 is its default)"); workload 2's and 6's \`-x N\` rows take the same TLS options as workload 1's."
    fi
    for rtt in "${RTTS[@]}"; do
        if ((rtt > 0)); then
            echo "- Round trip $rtt ms: every tool downloads through \`Benchmarks/relay.py --rtt-ms $rtt\`, one relay per nginx listener (started once): each direction's bytes are held $((rtt / 2)) ms (read, timestamped, written at read time + $((rtt / 2)) ms, in order, while later ones are read), and a new connection's first bytes are held one round trip more (the TCP handshake the relay completed at once). No bandwidth cap and no loss; each TCP connection is on loopback, so TCP's window over the far link (window ÷ RTT) is not modelled, while HTTP/2's flow-control windows are. The relay's own ceiling, measured with curl at no delay, is in Benchmarks/README.md: rows near it measure the relay."
        fi
    done
    if want 7; then
        echo "- Workload 7: \`haul get -i LIST -j $FLAKY_JOBS --per-host $FLAKY_JOBS ${HAUL_RETRIES[*]}\`, \`curl --parallel --parallel-max $FLAKY_JOBS --retry 100 --retry-all-errors --retry-delay 1 -K CONFIG\` (curl starts a file over on a retry), \`wget2 --max-threads=$FLAKY_JOBS --tries=100 --retry-connrefused --waitretry=0 --continue -i LIST\` (wget2 does not retry a body cut short: it keeps the short file), \`aria2c -j $FLAKY_JOBS -x1 --max-tries=0 --retry-wait=0 -c -i LIST\`, each stopped after ${FLAKY_TIMEOUT} s. The relay (\`--rtt-ms $FLAKY_RTT_MS --reset-rate $FLAKY_RESET_RATE --seed FLAKY_SEED+run\`) is restarted for each run, so every tool's n-th connection meets the same resets. Files right: sha256 against the corpus. Bytes served: the sum of nginx's \`\$body_bytes_sent\` over the run's requests (reset ones included; on loopback nginx hands a 1 MiB response to the kernel at once, so a reset request counts whole from where it started)."
    fi
    if want 8; then
        echo "- Workload 8: \`haul get URL -d OUT -q --journal J\` (J new each run, or a copy of a journal of $ONE_JOURNAL_ROWS finished rows made by Haul itself), \`curl -sS --fail -o OUT/q.bin URL\`, \`wget2 -q -P OUT URL\`, \`aria2c -q -d OUT URL\`, each with the test CA over HTTPS; $ONE_PER_RUN rounds per run, each round every tool once. Before each run's rounds the haul binary's pages are dropped from the page cache (\`posix_fadvise(DONTNEED)\`) and one untimed haul run reads back what a run needs: a freshly built binary is all in the page cache, so that the kernel maps 64 KiB around every page a run touches, and its peak RSS reads 3-4 MiB higher than the same binary's once installed. Peak RSS counts the mapped binary and libraries. Every run checks the file's size."
    fi
    echo "- Workloads 1, 2, 5 and 6 check the file's size (and its bytes on the first run, in workload 5 every run)."
    if ((${#NOTES[@]})); then
        echo
        echo "## Problems"
        echo
        for n in "${NOTES[@]}"; do echo "- $n"; done
    fi
} >"$REPORT"

mkdir -p "$RESULTS_DIR"
cp "$REPORT" "$RESULTS_DIR/compare-$DATE.md"
cp "$REPORT" "$RESULTS_DIR/latest.md"
{
    printf 'workload\ttarget\ttool\trun\tstatus\twall_s\tcpu_s\tpeak_rss_kib\tsync_s\tx1\tx2\tx3\n'
    cat "$RAW"
} >"$RESULTS_DIR/compare-$DATE.tsv"
cat "$REPORT"
log "report: $RESULTS_DIR/compare-$DATE.md (and latest.md); raw runs: compare-$DATE.tsv"
