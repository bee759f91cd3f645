#!/usr/bin/env bash
# Soak: DURATION seconds (default 600) of mixed legitimate, over-limit and hostile
# traffic against sluice on loopback, sampling its RSS, open descriptors and the
# legitimate client's p99 at the start, every minute and at the end.
#
#   scripts/soak.sh                          # builds target/release/sluice first
#   SLUICE_BIN=path/to/sluice DURATION=60 scripts/soak.sh
#
# Starts an upstream (nginx if installed, else a small Python server), then sluice
# with scripts/soak/sluice.toml (per-ip, per-key, delay and concurrency rules,
# max_keys = 20000), then scripts/soak/load.py (standard library only), about
# 550 requests/s plus 50 slowloris and 100 idle connections. Everything binds
# 127.0.0.0/8 and stops by itself; on exit the script stops what it started, by
# PID. JSON=path keeps the summary; the exit status is load.py's (1 when sluice
# died or a legitimate request failed; 5xx answers to hostile requests are
# printed as findings).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
duration=${DURATION:-600}
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-soak.XXXXXX")
upstream_pid=""
sluice_pid=""

cleanup() {
    for pid in $sluice_pid $upstream_pid; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in $sluice_pid $upstream_pid; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for_port() {
    for _ in $(seq 100); do
        if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $1), 0.2)" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    echo "nothing listens on 127.0.0.1:$1" >&2
    exit 1
}

bin=${SLUICE_BIN:-}
if [ -z "$bin" ]; then
    (cd "$repo" && cargo build --release --locked --bin sluice >&2)
    bin="${CARGO_TARGET_DIR:-$repo/target}/release/sluice"
fi

upstream_port=$(free_port)
sluice_port=$(free_port)
admin_port=$(free_port)

if command -v nginx >/dev/null; then
    cat >"$work/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx-body;
  server {
    listen 127.0.0.1:$upstream_port;
    keepalive_requests 1000000;
    location / { return 200 "ok\n"; }
  }
}
EOF
    nginx -c "$work/nginx.conf" -p "$work" -e "$work/nginx-error.log" &
    upstream_pid=$!
    upstream="nginx"
else
    python3 "$here/soak/upstream.py" "$upstream_port" &
    upstream_pid=$!
    upstream="python"
fi
wait_for_port "$upstream_port"

sed -e "s/{listen}/127.0.0.1:$sluice_port/" -e "s/{admin}/127.0.0.1:$admin_port/" \
    -e "s/{upstream}/127.0.0.1:$upstream_port/" "$here/soak/sluice.toml" >"$work/sluice.toml"
"$bin" check --config "$work/sluice.toml" >/dev/null
RUST_LOG=warn "$bin" run --config "$work/sluice.toml" 2>"$work/sluice.log" &
sluice_pid=$!
wait_for_port "$sluice_port"
wait_for_port "$admin_port"

echo "soak: ${duration}s; sluice $("$bin" --version 2>/dev/null || echo "?") pid $sluice_pid on :$sluice_port (admin :$admin_port), upstream $upstream pid $upstream_pid on :$upstream_port"
status=0
python3 "$here/soak/load.py" --target "127.0.0.1:$sluice_port" --admin "127.0.0.1:$admin_port" \
    --pid "$sluice_pid" --duration "$duration" ${JSON:+--json "$JSON"} || status=$?
if ! kill -0 "$sluice_pid" 2>/dev/null; then
    echo "soak: sluice exited during the run; its log:" >&2
    tail -n 50 "$work/sluice.log" >&2
    status=1
fi
echo "soak: sluice log lines at warn or above: $(grep -c . "$work/sluice.log" || true); the most frequent:"
sed -E 's/^[^ ]+ +//' "$work/sluice.log" | cut -c1-160 | sort | uniq -c | sort -rn | head -5
exit $status
