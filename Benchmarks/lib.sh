#!/usr/bin/env bash
# Benchmarks/lib.sh: what the benchmark scripts share. Sourced, from the repository's root,
# by compare.sh, serve.sh, rate-limit.sh and the others.

# The flags of every release build the benchmarks make: haul as scripts/install.sh builds it
# (scripts/release-flags.sh says what they are), and the benchmark programs (queue,
# sync-plan, workers, cache, the client-baseline floors of compare.sh) the same way. One
# set, so that a floor is built as the haul it is compared with, and building one program
# never rebuilds every module of .build-bench for another.
# shellcheck source=scripts/release-flags.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/release-flags.sh"
haul_release_flags "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_BUILD_FLAGS=("${HAUL_RELEASE_FLAGS[@]}" --scratch-path .build-bench)

# The haul binary to measure: $HAUL_BIN (a relative path is taken from CALLER_DIR, else the
# current directory), or haul built as scripts/install.sh builds it (release, the Swift
# runtime linked statically: what users run, and it starts about 10 ms sooner than a build
# that loads the toolchain's shared libraries) into .build-bench, a scratch path of its own
# so that it never disturbs .build. Prints the path; fails, saying why on stderr, when the
# build fails or there is no binary.
haul_binary() {
    local haul build_log
    if [[ -n ${HAUL_BIN:-} ]]; then
        haul=$HAUL_BIN
        if [[ $haul != /* ]]; then haul=${CALLER_DIR:-$PWD}/$haul; fi
    else
        printf 'building haul (release, static Swift runtime, .build-bench)\n' >&2
        build_log=$(mktemp)
        if ! swift build "${BENCH_BUILD_FLAGS[@]}" --product haul >"$build_log" 2>&1; then
            tail -n 40 "$build_log" >&2
            rm -f "$build_log"
            printf 'error: swift build failed (set HAUL_BIN to use an existing binary)\n' >&2
            return 1
        fi
        rm -f "$build_log"
        haul=$(swift build "${BENCH_BUILD_FLAGS[@]}" --show-bin-path)/haul
    fi
    if [[ ! -x $haul ]]; then
        printf 'error: no haul binary at %s\n' "$haul" >&2
        return 1
    fi
    printf '%s\n' "$haul"
}

# The settings every benchmark's nginx has in its http block, with its temporary paths under
# PREFIX: serve from the page cache with sendfile, keep connections open for as many requests
# as a client wants, log nothing (a server block may log what it needs). Debian's nginx has
# absolute compile-time temporary paths under /var/lib/nginx, hence the paths.
nginx_http_basics() {
    local prefix=$1
    cat <<CONF
    default_type application/octet-stream;
    types { }
    sendfile on; tcp_nopush on;
    keepalive_requests 100000; keepalive_timeout 65s;
    access_log off;
    client_body_temp_path $prefix/tmp/body; proxy_temp_path $prefix/tmp/proxy;
    fastcgi_temp_path $prefix/tmp/fastcgi; uwsgi_temp_path $prefix/tmp/uwsgi; scgi_temp_path $prefix/tmp/scgi;
CONF
}

# A throwaway certificate authority and a certificate for 127.0.0.1 and localhost signed by
# it (P-256 keys), in $TLS_DIR; the authority's certificate goes to $CA_FILE, the server's
# to $TLS_DIR/server.pem and server.key. The caller sets TLS_DIR and CA_FILE and has `die`.
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

# free_port: a TCP port free on 127.0.0.1 now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_far_link UPSTREAM RTT_MS LOG: Benchmarks/relay.py on a free port of 127.0.0.1 in
# front of 127.0.0.1:UPSTREAM, holding each direction RTT_MS/2 (its messages go to LOG).
# Sets FAR_PORT and adds its pid to RELAYS, which the caller's clean-up kills; the caller
# has `die`.
start_far_link() {
    local out
    out=$(mktemp)
    python3 "$(dirname "${BASH_SOURCE[0]}")/relay.py" --listen 0 --upstream "$1" --rtt-ms "$2" >"$out" 2>"$3" &
    RELAYS+=("$!")
    for _ in {1..100}; do
        FAR_PORT=$(head -n 1 "$out")
        if [[ -n $FAR_PORT ]]; then rm -f "$out"; return 0; fi
        kill -0 "${RELAYS[-1]}" 2>/dev/null || break
        sleep 0.05
    done
    rm -f "$out"
    cat "$3" >&2
    die "relay.py did not start"
}
