#!/usr/bin/env bash
# Benchmarks/compare.sh: Haul against curl, wget2 and aria2c, downloading from nginx on
# 127.0.0.1. Runs five workloads, each RUNS times, writing to tmpfs and then (unless
# SKIP_DISK=1) to the real disk, and writes a Markdown report of the medians to
# Benchmarks/results/compare-YYYY-MM-DD.md and Benchmarks/results/latest.md (the raw
# per-run numbers go next to it as compare-YYYY-MM-DD.tsv).
#
#   1. One SIZE file (default 1 GiB), one connection: haul, curl, wget2, aria2c -x1 -s1.
#   2. The same over 4 and 8 connections: haul -x N (once `haul get` has it; until then
#      its rows say "n/a (no -x yet)") and aria2c -x N -s N -k 1M; as a reference, N curls
#      fetching a range each into separate files (the machine's ceiling for N connections).
#   3. SMALL_COUNT (5,000) files of 16 KiB, 16 in flight: haul -j 16 --per-host 16,
#      curl --parallel --parallel-max 16, wget2 --max-threads=16, aria2c -j 16 -x1.
#   4. QUEUE_COUNT (100,000) queued URLs: time to first byte and peak RSS, haul against
#      aria2c -i, both 16 in flight, over a capped window (see the workload).
#   5. Resume: a SIZE file interrupted at about half (SIGTERM), then continued: haul (the
#      same command again), curl -C -, wget2 -c, aria2c -c. Time of the second run and
#      the bytes nginx sent for it.
#   6. One LIMITED_SIZE file (default 256 MiB) from a server that allows LIMIT_RATE (20m:
#      20 MB/s) per connection (nginx limit_rate), over 8 connections: haul -x 8 (its
#      per-host cap left at the default, 6) and aria2c -x 8 -s 8 -k 1M. Not in the default
#      ONLY: each run takes about 13 s per tool at best.
#
# With HTTPS=1, workloads 1 and 3 (those of them in ONLY) run again over HTTPS, same corpus
# and same commands: nginx also listens with TLS on two more ports, one offering HTTP/1.1
# only and one offering HTTP/2 as well (ALPN), with a certificate signed by a throwaway
# certificate authority that the script makes with openssl. Every tool is given that
# authority through its own option (haul --ca-certificate, curl --cacert, wget2
# --ca-certificate, aria2c --ca-certificate); nothing turns verification off. The HTTP/1.1
# rows run every tool; the HTTP/2 rows run haul --http2 (Haul's default is HTTP/1.1),
# curl --http2 and wget2 when it was built with HTTP/2 (aria2c has none: its row says so). nginx logs the protocol of every TLS
# request, and a run served over another protocol than its row's is reported as a problem.
# Off by default: it roughly doubles the time of workloads 1 and 3.
#
# Usage (from anywhere; needs root or sudo the first time, to install packages):
#   Benchmarks/compare.sh
#   RUNS=5 SIZE=256M SMALL_COUNT=2000 QUEUE_COUNT=20000 SKIP_DISK=1 ONLY="1,3" Benchmarks/compare.sh
#   HAUL_BIN=/path/to/haul Benchmarks/compare.sh        # skip the release build
#   HTTPS=1 ONLY="1,3" Benchmarks/compare.sh            # add workloads 1 and 3 over HTTPS
#   NOTE="a Swift build ran at the same time" Benchmarks/compare.sh   # added to the report
#   AHC_BIN=.build-bench/release/haul-client-baseline Benchmarks/compare.sh
#       # adds two reference rows to workload 3 (and its HTTPS runs): a plain
#       # AsyncHTTPClient loop, the client Haul is built on, that only collects the bodies
#       # in memory ("ahc-memory": the client's own cost), and the same loop writing each
#       # body with one thread-pool hop (open a temporary file, write, close, rename:
#       # "ahc-1hop", the lightest file writing that never shows a partial file), from
#       # Benchmarks/ClientBaseline (build it with HAUL_BENCHMARKS=1 swift build -c release --static-swift-stdlib
#       # --scratch-path .build-bench --product haul-client-baseline), and a third,
#       # "ahc-journal": the same writing with the least a journal that loses nothing
#       # must do (each URL a row of an SQLite journal before it is fetched, each file
#       # fsynced before its rename, one directory fsync and one transaction marking the
#       # rows completed per batch of files). Floors for Haul's cost per file, not peers:
#       # never the "best peer" of the summary. The report then gives Haul's own CPU per
#       # file above the ahc-1hop and ahc-journal floors.
#
# Other knobs: QUEUE_STOP_FILES (2000) and QUEUE_MAX_SECONDS (20) end workload 4's window;
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
    local -A package_for=([nginx]=nginx [curl]=curl [wget2]=wget2 [aria2c]=aria2 [/usr/bin/time]=time [openssl]=openssl)
    local missing=() tool tools=(nginx curl wget2 aria2c /usr/bin/time)
    if [[ $HTTPS == 1 ]]; then tools+=(openssl); fi
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
if want 3; then
    head -c $((SMALL_COUNT * SMALL_SIZE)) /dev/urandom |
        (cd "$WWW/small" && split -b "$SMALL_SIZE" -a 6 -d --additional-suffix=.bin - f)
fi
head -c "$SMALL_SIZE" /dev/urandom >"$WWW/q.bin"
chmod -R a+rX "$WWW"

# ---------------------------------------------------------------------------------------
# 4. nginx on 127.0.0.1, a free port, its own configuration (Benchmarks/compare/nginx.conf.in).

# For HTTPS=1: a certificate authority and a certificate for 127.0.0.1 and localhost
# signed by it (P-256 keys), in $WORK/tls. CA_FILE is what every tool is told to trust.
TLS_DIR=$WORK/tls
CA_FILE=$TLS_DIR/ca.pem
make_certificates() {
    mkdir -p "$TLS_DIR"
    cat >"$TLS_DIR/openssl.cnf" <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = Haul benchmark CA
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
CNF
    local key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    {
        openssl req -x509 -config "$TLS_DIR/openssl.cnf" -extensions ca "${key[@]}" \
            -keyout "$TLS_DIR/ca.key" -out "$CA_FILE" -days 2 &&
            openssl req -new -config "$TLS_DIR/openssl.cnf" -subj /CN=localhost "${key[@]}" \
                -keyout "$TLS_DIR/server.key" -out "$TLS_DIR/server.csr" &&
            openssl x509 -req -in "$TLS_DIR/server.csr" -CA "$CA_FILE" -CAkey "$TLS_DIR/ca.key" -set_serial 2 \
                -days 2 -extfile "$TLS_DIR/openssl.cnf" -extensions server -out "$TLS_DIR/server.pem"
    } >"$TLS_DIR/openssl.log" 2>&1 || { cat "$TLS_DIR/openssl.log" >&2; die "openssl could not make the certificates"; }
}

# The TLS servers (HTTPS=1), included by nginx.conf: TLS_PORT offers HTTP/1.1 only,
# TLS_PORT + 1 HTTP/2 as well. `listen ... ssl http2`, not nginx 1.25's `http2 on`, so
# Debian 12's nginx 1.22 takes it. Each logs the protocol of every request to TLS_LOG.
TLS_LOG=$WORK/nginx/tls.log
write_tls_conf() { # FILE
    if [[ $HTTPS != 1 ]]; then : >"$1"; return; fi
    local h2 listen
    {
        echo "log_format protocol '\$server_protocol';"
        echo "ssl_session_cache shared:haul_tls:10m;"
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
BASE=http://127.0.0.1:$PORT
BIG_URL=$BASE/big.bin
RESUME_URL=$BASE/resume/big.bin
RESUME_LOG=$WORK/nginx/resume.log
log "nginx on $BASE"

# URL lists. Haul and wget2 and aria2c read one URL per line; curl reads a config file.
SMALL_LIST=$WORK/small.txt
SMALL_CURL=$WORK/small.curl
QUEUE_LIST=$WORK/queue.txt
if want 3; then
    (cd "$WWW/small" && ls) | awk -v b="$BASE/small/" '{ print b $0 }' >"$SMALL_LIST"
    awk '{ print "url = \"" $0 "\"" }' "$SMALL_LIST" >"$SMALL_CURL"
    [[ $(wc -l <"$SMALL_LIST") -eq $SMALL_COUNT ]] || die "expected $SMALL_COUNT small files"
fi
# HTTPS=1: the same lists for the two TLS servers (small-h1.txt, small-h2.curl, ...).
if [[ $HTTPS == 1 ]] && want 3; then
    for v in h1 h2; do
        port=$TLS_PORT
        [[ $v == h2 ]] && port=$((TLS_PORT + 1))
        sed "s|^$BASE/|https://127.0.0.1:$port/|" "$SMALL_LIST" >"$WORK/small-$v.txt"
        awk '{ print "url = \"" $0 "\"" }' "$WORK/small-$v.txt" >"$WORK/small-$v.curl"
    done
fi
if want 4; then
    awk -v b="$BASE/q/" -v n="$QUEUE_COUNT" 'BEGIN { for (i = 0; i < n; i++) printf "%sq%07d.bin\n", b, i }' >"$QUEUE_LIST"
fi

# Warm the page cache, so every run reads the corpus from memory.
cat "$WWW"/*.bin >/dev/null
if want 3; then cat "$WWW"/small/* >/dev/null; fi

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
        read -r child _ <"/proc/$timer/task/$timer/children" 2>/dev/null || true
        [[ -n $child ]] && break
        read -r -t 0.001 -u "$never" || true
    done
    while [[ -n $child && -r /proc/$child/status ]]; do
        while read -r key value _; do
            if [[ $key == RssAnon: ]]; then
                ((value > peak)) && peak=$value
                break
            fi
        done <"/proc/$child/status" 2>/dev/null || true
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

# record WORKLOAD TARGET TOOL RUN STATUS WALL CPU RSS SYNC [X1 X2 X3]
record() {
    local IFS=$'\t'
    echo "$*" >>"$RAW"
}
NOTES=()
note_failure() { # workload target tool run status log
    local first
    first=$(grep -m1 -v '^\s*$' "$6" 2>/dev/null | cut -c1-200 || true)
    NOTES+=("workload $1, $2, $3, run $4: $5${first:+ — \`$first\`}")
    log "workload $1 $2 $3 run $4: $5 ${first}"
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
# HTTPS variants of workloads 1 and 3 (HTTPS=1). use_variant http|h1|h2 points their URLs
# and lists at the plain server or at one of the TLS servers, and sets each tool's extra
# options: the CA (all of them) and, for curl and wget2, the protocol asked for. On the
# HTTP/1.1 server nginx offers only http/1.1 by ALPN, so every tool speaks HTTP/1.1
# there; on the other the tools that can speak HTTP/2 do. Results are recorded under
# workload "1-h1", "3-h2" and so on.

WGET2_HAS_H2=0
if [[ $HTTPS == 1 ]] && wget2 --version 2>/dev/null | grep -q -- '+http2'; then WGET2_HAS_H2=1; fi
PLAIN_BIG_URL=$BIG_URL PLAIN_SMALL_LIST=$SMALL_LIST PLAIN_SMALL_CURL=$SMALL_CURL
VARIANT=http
TLS_HAUL=() TLS_CURL=() TLS_WGET2=() TLS_ARIA2C=() TLS_CA=
use_variant() {
    VARIANT=$1
    TLS_HAUL=() TLS_CURL=() TLS_WGET2=() TLS_ARIA2C=() TLS_CA=
    if [[ $1 == http ]]; then
        BIG_URL=$PLAIN_BIG_URL SMALL_LIST=$PLAIN_SMALL_LIST SMALL_CURL=$PLAIN_SMALL_CURL
        return
    fi
    local port=$TLS_PORT
    if [[ $1 == h2 ]]; then port=$((TLS_PORT + 1)); fi
    BIG_URL=https://127.0.0.1:$port/big.bin
    SMALL_LIST=$WORK/small-$1.txt SMALL_CURL=$WORK/small-$1.curl
    # Every tool trusts this authority alone, as `curl --cacert` does: Haul's
    # `--ca-certificate` adds to the system's authorities unless `--no-system-ca`. (With
    # the system's too, AsyncHTTPClient 1.37 loads them once per connection that starts
    # before the first TLS context is cached: 16 copies, about 15 MiB, here.)
    TLS_HAUL=(--ca-certificate "$CA_FILE" --no-system-ca)
    TLS_ARIA2C=(--ca-certificate="$CA_FILE")
    TLS_CA=$CA_FILE
    if [[ $1 == h1 ]]; then
        TLS_CURL=(--cacert "$CA_FILE" --http1.1)
        TLS_WGET2=(--ca-certificate="$CA_FILE" --no-http2)
    else
        TLS_CURL=(--cacert "$CA_FILE" --http2)
        TLS_WGET2=(--ca-certificate="$CA_FILE" --http2)
        # Haul speaks HTTP/1.1 unless told otherwise (it is faster on AsyncHTTPClient).
        TLS_HAUL+=(--http2)
    fi
}

# Why TOOL has no row in the current variant, if it has none.
variant_gap() {
    if [[ $VARIANT != h2 ]]; then return; fi
    case $1 in
    aria2c) echo "n/a (aria2c has no HTTP/2)" ;;
    wget2) ((WGET2_HAS_H2)) || echo "n/a (this wget2 has no HTTP/2)" ;;
    esac
}

# Before a TLS run: empty nginx's protocol log. After it: ok if nginx served every
# request of the run over the variant's protocol, else what it did.
reset_protocol_log() { if [[ $VARIANT != http ]]; then : >"$TLS_LOG"; fi; }
check_protocol() {
    if [[ $VARIANT == http ]]; then echo ok; return; fi
    local want=HTTP/1.1
    if [[ $VARIANT == h2 ]]; then want=HTTP/2.0; fi
    awk -v want="$want" '{ n++; if ($1 != want) { bad++; got = $1 } }
        END { if (n == 0) print "nginx logged no TLS request"; else if (bad) printf "%d of %d requests over %s\n", bad, n, got; else print "ok" }' "$TLS_LOG"
}

# ---------------------------------------------------------------------------------------
# Workloads 1 and 2: one big file, one connection and then 4 and 8. Measured: wall time,
# CPU time (user + sys) and peak RSS of the downloading process.

big_cmd() { # TOOL CONNECTIONS -> CMD
    local tool=$1 n=$2
    case $tool in
    haul)
        if ((n == 1)); then CMD=("$HAUL" get "$BIG_URL" -d "$OUT" -q --journal "$STATE/journal.sqlite" "${HAUL_ONE[@]}" "${TLS_HAUL[@]}")
        # (-x N gives N connections: the default per-host cap, 6, does not clamp it.)
        else CMD=("$HAUL" get "$BIG_URL" -d "$OUT" -q --journal "$STATE/journal.sqlite" -x "$n"); fi ;;
    curl) CMD=(curl -sS --fail "${TLS_CURL[@]}" -o "$OUT/big.bin" "$BIG_URL") ;;
    wget2) CMD=(wget2 -q --no-hsts --no-hpkp "${TLS_WGET2[@]}" -P "$OUT" "$BIG_URL") ;;
    aria2c)
        # -k 1M: aria2c splits only pieces of at least --min-split-size (default 20M).
        if ((n == 1)); then CMD=(aria2c -q -x1 -s1 "${TLS_ARIA2C[@]}" -d "$OUT" -o big.bin "$BIG_URL")
        else CMD=(aria2c -q -x "$n" -s "$n" -k 1M -d "$OUT" -o big.bin "$BIG_URL"); fi ;;
    curl-ranges)
        # A reference, not a peer: N curls at once, each fetching 1/N of the file into a
        # file of its own (nothing joins them). What this machine allows N connections
        # writing to this target, with no download manager at all.
        CMD=(bash -c 'n=$1 url=$2 out=$3 size=$4 part=$(( ($4 + $1 - 1) / $1 )) failed=0
            for ((i = 0; i < n; i++)); do
                a=$((i * part)) b=$(((i + 1) * part - 1)); ((b >= size)) && b=$((size - 1))
                curl -sS --fail -r "$a-$b" -o "$out/part.$i" "$url" &
            done
            for job in $(jobs -p); do wait "$job" || failed=1; done
            exit $failed' _ "$n" "$BIG_URL" "$OUT" "$SIZE_BYTES") ;;
    esac
}

workload_big() { # WORKLOAD TARGET RUN TOOL CONNECTIONS LABEL
    local w=$1 target=$2 run=$3 tool=$4 n=$5 label=$6 logfile status
    logfile=$LOGS/w$w-$target-${label// /_}-$run.log
    if [[ $tool == haul && $n -gt 1 && $HAUL_HAS_X -eq 0 ]]; then
        record "$w" "$target" "$label" "$run" "n/a (no -x yet)" 0 0 0 0
        return
    fi
    status=$(variant_gap "$tool")
    if [[ -n $status ]]; then record "$w" "$target" "$label" "$run" "$status" 0 0 0 0; return; fi
    prepare "$target"
    big_cmd "$tool" "$n"
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
    if [[ $status == ok ]]; then status=$(check_protocol); fi
    [[ $status == ok ]] || note_failure "$w" "$target" "$label" "$run" "$status" "$logfile"
    record "$w" "$target" "$label" "$run" "$status" "$R_WALL" "$R_CPU" "$R_RSS" "$R_SYNC"
}

# ---------------------------------------------------------------------------------------
# Workload 6: one LIMITED_SIZE file at LIMIT_RATE per connection, over 8 connections.

workload_limited() { # TARGET RUN TOOL
    local target=$1 run=$2 tool=$3 logfile status url label
    label="$tool -x8"
    logfile=$LOGS/w6-$target-$tool-$run.log
    url="http://127.0.0.1:$PORT/limited/limited.bin"
    prepare "$target"
    case $tool in
    haul) CMD=("$HAUL" get "$url" -d "$OUT" -q --journal "$STATE/journal.sqlite" -x 8) ;;
    aria2c) CMD=(aria2c -q -x 8 -s 8 -k 1M -d "$OUT" -o limited.bin "$url") ;;
    esac
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
    [[ $status == ok ]] || note_failure 6 "$target" "$label" "$run" "$status" "$logfile"
    record 6 "$target" "$label" "$run" "$status" "$R_WALL" "$R_CPU" "$R_RSS" "$R_SYNC"
}

# ---------------------------------------------------------------------------------------
# Workload 3: SMALL_COUNT files of 16 KiB, 16 in flight, all to one host. Measured: wall
# time (so files/s), CPU time and peak RSS.

small_cmd() {
    case $1 in
    haul) CMD=("$HAUL" get -i "$SMALL_LIST" -d "$OUT" -q --journal "$STATE/journal.sqlite" -j 16 --per-host 16 "${TLS_HAUL[@]}") ;;
    curl) CMD=(curl -sS --fail "${TLS_CURL[@]}" --parallel --parallel-max 16 --output-dir "$OUT" --remote-name-all -K "$SMALL_CURL") ;;
    wget2) CMD=(wget2 -q --no-hsts --no-hpkp "${TLS_WGET2[@]}" --max-threads=16 -P "$OUT" -i "$SMALL_LIST") ;;
    aria2c) CMD=(aria2c -q -j 16 -x1 "${TLS_ARIA2C[@]}" -d "$OUT" -i "$SMALL_LIST") ;;
    ahc-memory) CMD=(env "CA_FILE=${TLS_CA:-}" MODE=memory "$AHC" "$SMALL_LIST" "$OUT" 16) ;;
    ahc-1hop) CMD=(env "CA_FILE=${TLS_CA:-}" MODE=onehop "$AHC" "$SMALL_LIST" "$OUT" 16) ;;
    ahc-journal) CMD=(env "CA_FILE=${TLS_CA:-}" MODE=journal "JOURNAL=$STATE/baseline-journal.sqlite" "$AHC" "$SMALL_LIST" "$OUT" 16) ;;
    esac
}

workload_small() { # TARGET RUN TOOL [WORKLOAD, default 3]
    local target=$1 run=$2 tool=$3 w=${4:-3} logfile status count bytes
    logfile=$LOGS/w$w-$target-$tool-$run.log
    status=$(variant_gap "$tool")
    if [[ -n $status ]]; then record "$w" "$target" "$tool" "$run" "$status" 0 0 0 0; return; fi
    prepare "$target"
    small_cmd "$tool"
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
    if [[ $status == ok ]]; then status=$(check_protocol); fi
    [[ $status == ok ]] || note_failure "$w" "$target" "$tool" "$run" "$status" "$logfile"
    record "$w" "$target" "$tool" "$run" "$status" "$R_WALL" "$R_CPU" "$R_RSS" "$R_SYNC" "$R_ANON"
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
    logfile=$LOGS/w4-$target-$tool-$run.log
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
    log1=$LOGS/w5-$target-$tool-$run-first.log
    log2=$LOGS/w5-$target-$tool-$run-second.log
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
# Run everything.

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(now)
for target in "${TARGETS[@]}"; do
    for run in $(seq 1 "$RUNS"); do
        if want 1; then
            log "$target run $run/$RUNS: workload 1 (one $SIZE file, one connection)"
            for tool in haul curl wget2 aria2c; do workload_big 1 "$target" "$run" "$tool" 1 "$tool"; done
        fi
        if want 2; then
            log "$target run $run/$RUNS: workload 2 (one $SIZE file, 4 and 8 connections)"
            for n in 4 8; do
                for tool in haul aria2c curl-ranges; do workload_big 2 "$target" "$run" "$tool" "$n" "$tool -x$n"; done
            done
        fi
        if want 3; then
            log "$target run $run/$RUNS: workload 3 ($SMALL_COUNT x 16 KiB, 16 in flight)"
            for tool in "${SMALL_TOOLS[@]}"; do workload_small "$target" "$run" "$tool"; done
        fi
        if want 4; then
            log "$target run $run/$RUNS: workload 4 ($QUEUE_COUNT queued URLs)"
            for tool in haul aria2c; do workload_queue "$target" "$run" "$tool"; done
        fi
        if want 6; then
            log "$target run $run/$RUNS: workload 6 ($LIMITED_SIZE at $LIMIT_RATE per connection, 8 connections)"
            for tool in haul aria2c; do workload_limited "$target" "$run" "$tool"; done
        fi
        if want 5; then
            log "$target run $run/$RUNS: workload 5 (resume at ~50%)"
            for tool in haul curl wget2 aria2c; do workload_resume "$target" "$run" "$tool"; done
        fi
        if [[ $HTTPS == 1 ]]; then
            for variant in h1 h2; do
                use_variant "$variant"
                if want 1; then
                    log "$target run $run/$RUNS: workload 1 over HTTPS ($variant)"
                    for tool in haul curl wget2 aria2c; do workload_big "1-$variant" "$target" "$run" "$tool" 1 "$tool"; done
                fi
                if want 3; then
                    log "$target run $run/$RUNS: workload 3 over HTTPS ($variant)"
                    for tool in "${SMALL_TOOLS[@]}"; do workload_small "$target" "$run" "$tool" "3-$variant"; done
                fi
            done
            use_variant http
        fi
    done
done
T_TOTAL=$(elapsed "$T_START" "$(now)")
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------------------
# 6. Report. Fields of raw.tsv: workload, target, tool, run, status, wall s, CPU s,
# peak RSS KiB, sync s, then per workload: (3) anonymous memory peak KiB; (4) TTFB s, files
# done; (5) bytes sent in the first run, bytes sent in the second.

# med W TARGET TOOL FIELD: the median of FIELD over the runs that went right.
med() {
    awk -F'\t' -v w="$1" -v t="$2" -v tool="$3" -v f="$4" \
        '$1 == w && $2 == t && $3 == tool && $5 == "ok" { print $f }' "$RAW" |
        sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
# The status to show for a row: empty when every run went right.
row_status() {
    awk -F'\t' -v w="$1" -v t="$2" -v tool="$3" '$1 == w && $2 == t && $3 == tool {
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
    c=""
    if [[ " $* " == *" curl "* ]]; then c=$(med "$w" "$target" curl "$f"); fi
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
    echo "| haul | $haul_version, commit $git_rev$( ((git_dirty)) && echo ' with uncommitted changes'), release build; segmented (\`-x\`): $( ((HAUL_HAS_X)) && echo yes || echo 'not yet') |"
    echo "| curl | $(curl --version | head -n1 | cut -d' ' -f1-2) |"
    echo "| wget2 | $(wget2 --version 2>/dev/null | head -n1 | sed 's/^GNU Wget2 //; s/ - .*//') |"
    echo "| aria2c | $(aria2c --version | head -n1 | sed 's/^aria2 version //') |"
    echo "| nginx | $(nginx -v 2>&1 | sed 's/^nginx version: nginx\///') |"
    echo "| settings | RUNS=$RUNS SIZE=$SIZE SMALL_COUNT=$SMALL_COUNT QUEUE_COUNT=$QUEUE_COUNT QUEUE_STOP_FILES=$QUEUE_STOP_FILES QUEUE_MAX_SECONDS=$QUEUE_MAX_SECONDS ONLY=$ONLY SKIP_DISK=$SKIP_DISK HTTPS=$HTTPS |"
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
        echo
        echo "## Output to $target"
        # Summary
        echo
        echo "### Summary"
        echo
        echo "| workload | metric | Haul | best peer | Haul ÷ best peer | curl | Haul ÷ curl |"
        echo "|---|---|---|---|---|---|---|"
        if want 1; then
            summary_line 1 "one $SIZE file, 1 connection: wall" haul 6 2 s 1 curl wget2 aria2c
            summary_line 1 "… CPU" haul 7 2 s 1 curl wget2 aria2c
        fi
        if want 2; then
            if ((HAUL_HAS_X)); then
                summary_line 2 "one $SIZE file, 4 connections: wall" "haul -x4" 6 2 s 1 "aria2c -x4"
                summary_line 2 "one $SIZE file, 8 connections: wall" "haul -x8" 6 2 s 1 "aria2c -x8"
                summary_line 2 "… 4 connections against the ceiling (4 curls on ranges, unjoined)" "haul -x4" 6 2 s 1 "curl-ranges -x4"
                summary_line 2 "… 8 connections against the ceiling (8 curls on ranges, unjoined)" "haul -x8" 6 2 s 1 "curl-ranges -x8"
            else
                echo "| 2 | one $SIZE file, 4 and 8 connections | n/a (no -x yet) | $(fmt 2 "$(med 2 "$target" "aria2c -x4" 6)") s / $(fmt 2 "$(med 2 "$target" "aria2c -x8" 6)") s (aria2c -x4 / -x8) | – | – | – |"
            fi
        fi
        if want 3; then
            summary_line 3 "$SMALL_COUNT × 16 KiB, 16 in flight: wall" haul 6 2 s 1 curl wget2 aria2c
            summary_line 3 "… CPU" haul 7 2 s 1 curl wget2 aria2c
            summary_line 3 "… peak RSS" haul 8 1 MiB 1024 curl wget2 aria2c
            summary_line 3 "… anonymous memory peak" haul 10 1 MiB 1024 curl wget2 aria2c
        fi
        if [[ $HTTPS == 1 ]]; then
            for v in h1 h2; do
                proto="HTTPS, HTTP/1.1" peers=(curl wget2 aria2c)
                if [[ $v == h2 ]]; then proto="HTTPS, HTTP/2" peers=(curl wget2); fi
                if want 1; then
                    summary_line "1-$v" "one $SIZE file, 1 connection, $proto: wall" haul 6 2 s 1 "${peers[@]}"
                    summary_line "1-$v" "… CPU" haul 7 2 s 1 "${peers[@]}"
                fi
                if want 3; then
                    summary_line "3-$v" "$SMALL_COUNT × 16 KiB, 16 in flight, $proto: wall" haul 6 2 s 1 "${peers[@]}"
                    summary_line "3-$v" "… CPU" haul 7 2 s 1 "${peers[@]}"
                    summary_line "3-$v" "… peak RSS" haul 8 1 MiB 1024 "${peers[@]}"
                    summary_line "3-$v" "… anonymous memory peak" haul 10 1 MiB 1024 "${peers[@]}"
                fi
            done
        fi
        if want 4; then
            summary_line 4 "$QUEUE_COUNT queued URLs: time to first byte" haul 10 2 s 1 aria2c
            summary_line 4 "… peak RSS (capped window)" haul 8 1 MiB 1024 aria2c
        fi
        if want 6; then
            summary_line 6 "one $LIMITED_SIZE file at $LIMIT_RATE per connection, 8 connections: wall" "haul -x8" 6 2 s 1 "aria2c -x8"
        fi
        if want 5; then
            summary_line 5 "resume from ~50%: second run wall" haul 6 2 s 1 curl wget2 aria2c
            summary_line 5 "… MiB sent in the second run" haul 11 0 MiB 1048576 curl wget2 aria2c
        fi

        if want 1 || want 2; then
            echo
            echo "### Workloads 1 and 2: one $SIZE file"
            echo
            if [[ $target == disk ]]; then
                echo "| tool | wall s | MiB/s | CPU s per GiB | peak RSS MiB | sync s | wall + sync s | MiB/s incl. sync | problems |"
                echo "|---|---|---|---|---|---|---|---|---|"
            else
                echo "| tool | wall s | MiB/s | CPU s per GiB | peak RSS MiB | problems |"
                echo "|---|---|---|---|---|---|"
            fi
            rows=()
            if want 1; then rows+=(1:haul 1:curl 1:wget2 1:aria2c); fi
            if want 2; then rows+=("2:haul -x4" "2:aria2c -x4" "2:curl-ranges -x4" "2:haul -x8" "2:aria2c -x8" "2:curl-ranges -x8"); fi
            for row in "${rows[@]}"; do
                w=${row%%:*} tool=${row#*:}
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
                if [[ $target == disk ]]; then
                    echo "| $tool | $(fmt 2 "$wall") | $(fmt 0 "$mibs") | $(fmt 2 "$cpug") | $(fmt 1 "$rssm") | $(fmt 2 "$syn") | $(fmt 2 "$ws") | $(fmt 0 "$mibs2") | $st |"
                else
                    echo "| $tool | $(fmt 2 "$wall") | $(fmt 0 "$mibs") | $(fmt 2 "$cpug") | $(fmt 1 "$rssm") | $st |"
                fi
            done
        fi

        if want 3; then
            echo
            echo "### Workload 3: $SMALL_COUNT files of 16 KiB, 16 in flight"
            echo
            echo "| tool | wall s | files/s | CPU s | CPU ms per 1,000 files | peak RSS MiB | anonymous peak MiB | sync s | problems |"
            echo "|---|---|---|---|---|---|---|---|---|"
            for tool in "${SMALL_TOOLS[@]}"; do
                wall=$(med 3 "$target" "$tool" 6)
                cpu=$(med 3 "$target" "$tool" 7)
                rss=$(med 3 "$target" "$tool" 8)
                syn=$(med 3 "$target" "$tool" 9)
                anon=$(med 3 "$target" "$tool" 10)
                st=$(row_status 3 "$target" "$tool")
                fps="" cpk="" rssm="" anonm=""
                [[ -n $wall ]] && fps=$(calc "$SMALL_COUNT / $wall")
                [[ -n $cpu ]] && cpk=$(calc "$cpu * 1000000 / $SMALL_COUNT")
                [[ -n $rss ]] && rssm=$(calc "$rss / 1024")
                [[ -n $anon ]] && anonm=$(calc "$anon / 1024")
                echo "| $tool | $(fmt 2 "$wall") | $(fmt 0 "$fps") | $(fmt 2 "$cpu") | $(fmt 0 "$cpk") | $(fmt 1 "$rssm") | $(fmt 1 "$anonm") | $( [[ $target == disk ]] && fmt 2 "$syn" || echo –) | $st |"
            done
            if [[ -n $AHC ]]; then small_floor 3 "$target"; fi
        fi

        if [[ $HTTPS == 1 ]] && want 1; then
            echo
            echo "### Workload 1 over HTTPS: one $SIZE file, 1 connection"
            echo
            echo "| protocol | tool | wall s | MiB/s | CPU s per GiB | peak RSS MiB | wall ÷ plain HTTP | problems |"
            echo "|---|---|---|---|---|---|---|---|"
            for v in h1 h2; do
                proto=HTTP/1.1
                if [[ $v == h2 ]]; then proto=HTTP/2; fi
                for tool in "${SMALL_TOOLS[@]}"; do
                    wall=$(med "1-$v" "$target" "$tool" 6)
                    cpu=$(med "1-$v" "$target" "$tool" 7)
                    rss=$(med "1-$v" "$target" "$tool" 8)
                    plain=$(med 1 "$target" "$tool" 6)
                    st=$(row_status "1-$v" "$target" "$tool")
                    mibs="" cpug="" rssm=""
                    [[ -n $wall ]] && mibs=$(calc "$MIB_BIG / $wall")
                    [[ -n $cpu ]] && cpug=$(calc "$cpu / $GIB")
                    [[ -n $rss ]] && rssm=$(calc "$rss / 1024")
                    echo "| $proto | $tool | $(fmt 2 "$wall") | $(fmt 0 "$mibs") | $(fmt 2 "$cpug") | $(fmt 1 "$rssm") | $(ratio "$wall" "$plain") | $st |"
                done
            done
        fi

        if [[ $HTTPS == 1 ]] && want 3; then
            echo
            echo "### Workload 3 over HTTPS: $SMALL_COUNT files of 16 KiB, 16 in flight"
            echo
            echo "| protocol | tool | wall s | files/s | CPU s | CPU ms per 1,000 files | peak RSS MiB | anonymous peak MiB | wall ÷ plain HTTP | problems |"
            echo "|---|---|---|---|---|---|---|---|---|---|"
            for v in h1 h2; do
                proto=HTTP/1.1
                if [[ $v == h2 ]]; then proto=HTTP/2; fi
                for tool in "${SMALL_TOOLS[@]}"; do
                    wall=$(med "3-$v" "$target" "$tool" 6)
                    cpu=$(med "3-$v" "$target" "$tool" 7)
                    rss=$(med "3-$v" "$target" "$tool" 8)
                    anon=$(med "3-$v" "$target" "$tool" 10)
                    plain=$(med 3 "$target" "$tool" 6)
                    st=$(row_status "3-$v" "$target" "$tool")
                    fps="" cpk="" rssm="" anonm=""
                    [[ -n $wall ]] && fps=$(calc "$SMALL_COUNT / $wall")
                    [[ -n $cpu ]] && cpk=$(calc "$cpu * 1000000 / $SMALL_COUNT")
                    [[ -n $rss ]] && rssm=$(calc "$rss / 1024")
                    [[ -n $anon ]] && anonm=$(calc "$anon / 1024")
                    echo "| $proto | $tool | $(fmt 2 "$wall") | $(fmt 0 "$fps") | $(fmt 2 "$cpu") | $(fmt 0 "$cpk") | $(fmt 1 "$rssm") | $(fmt 1 "$anonm") | $(ratio "$wall" "$plain") | $st |"
                done
            done
            if [[ -n $AHC ]]; then
                for v in h1 h2; do
                    line=$(small_floor "3-$v" "$target")
                    [[ -n $line ]] && echo "${line/CPU per file:/CPU per file over $v:}"
                done
            fi
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
                tot=$(awk -F'\t' -v t="$target" -v tool="$tool" '$1 == 5 && $2 == t && $3 == tool && $5 == "ok" { print ($10 + $11) }' "$RAW" |
                    sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
                m1="" m2="" mibs="" over=""
                [[ -n $s1 ]] && m1=$(calc "$s1 / 1048576")
                [[ -n $s2 ]] && m2=$(calc "$s2 / 1048576")
                [[ -n $s2 && -n $wall ]] && mibs=$(calc "$s2 / 1048576 / $wall")
                [[ -n $tot ]] && over=$(calc "$tot / $SIZE_BYTES")
                echo "| $tool | $(fmt 0 "$m1") | $(fmt 2 "$wall") | $(fmt 0 "$m2") | $(fmt 0 "$mibs") | $(fmt 3 "$over") | $(fmt 2 "$cpu") | $st |"
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
        echo "- HTTPS (\`HTTPS=1\`): workloads 1 and 3 again, same corpus and commands, against two more nginx servers with a certificate signed by a certificate authority the script makes with openssl: one offering only HTTP/1.1 by ALPN, one HTTP/2 as well. The authority is given to every tool, alone: \`haul --ca-certificate CA --no-system-ca\` (with \`--http2\` against the HTTP/2 server: Haul speaks HTTP/1.1 unless told), \`curl --cacert CA\` (with \`--http1.1\` or \`--http2\`), \`wget2 --ca-certificate=CA\` (with \`--no-http2\` or \`--http2\`), \`aria2c --ca-certificate=CA\`. nginx logs each TLS request's protocol, and a run that was not served entirely over its row's protocol is listed as a problem. \"wall ÷ plain HTTP\" divides by the same tool's median over plain HTTP."
    fi
    if want 6; then
        echo "- Workload 6: nginx serves the file under \`/limited/\` with \`limit_rate $LIMIT_RATE\` (per connection); \`haul get URL -x 8\` (the per-host cap left at its default, 6) and \`aria2c -x 8 -s 8 -k 1M\`. Eight connections at $LIMIT_RATE each can at best take $(fmt 1 "$(calc "$LIMITED_BYTES / ($LIMIT_BYTES * 8)")") s, six $(fmt 1 "$(calc "$LIMITED_BYTES / ($LIMIT_BYTES * 6)")") s."
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
    printf 'workload\ttarget\ttool\trun\tstatus\twall_s\tcpu_s\tpeak_rss_kib\tsync_s\tx1\tx2\n'
    cat "$RAW"
} >"$RESULTS_DIR/compare-$DATE.tsv"
cat "$REPORT"
log "report: $RESULTS_DIR/compare-$DATE.md (and latest.md); raw runs: compare-$DATE.tsv"
