#!/usr/bin/env bash
# WebSockets over HTTP/2 (RFC 8441) against WebSockets over HTTP/1.1, through
# the release binary on loopback (docs/conversation.md, "WebSockets over
# HTTP/2"):
#
#   scripts/websocket-h2-bench/run.sh SLUICE LOADER [MEM_ROUNDS] [ROUNDS] [SECONDS] [RATE] [SWEEPS]
#
# SLUICE is the sluice binary, LOADER the example built by
# `cargo build --release --example websocket_h2_load`
# (target/release/examples/websocket_h2_load). Its `upstream` mode is the
# upstream, an HTTP/1.1 WebSocket echo server on 127.0.0.1:18682; sluice
# (sluice.toml, no rule) listens on 18680. 1,000 WebSockets each way: (a)
# 4 HTTP/2 connections × 250 extended CONNECT streams (250 is sluice's
# bound on concurrent streams, docs/edge-behaviour.md), (b) 1,000 HTTP/1.1
# upgrades. Three measures:
#
# 1. Memory: MEM_ROUNDS rounds (default 3), each a fresh sluice per set,
#    h2 and h1 in turn (which goes first alternating). sluice's VmRSS before
#    the tunnels open and 12 s after they all have (each echoed one message;
#    12 s: past the 10 s after which a quiet connection gives back its
#    request buffers, docs/edge-behaviour.md, "Slow clients and deadlines"),
#    KiB per tunnel.
# 2. Echo latency and CPU at a steady rate: one sluice holding both sets,
#    ROUNDS rounds (default 5) of SECONDS s (default 10), the h2 set then the
#    h1 set or the other way round, alternating; in a round every tunnel of
#    the set sends one masked 64-byte text message and waits for its echo,
#    RATE messages/s over the set (default 5000: each tunnel every 200 ms,
#    their starts spread evenly). p50/p99 per round; sluice's utime+stime
#    (/proc/PID/stat) and its threads' run time (schedstat) per message.
# 3. The same with all the set's tunnels sending at once: SWEEPS sweeps
#    (default 50) per round, a sweep ending at the last echo.
#
# sluice runs alone on CPU 1 (`workers = 1`); the upstream and the client
# share CPU 0. Prints each run's lines; keeps logs and results in
# $TMPDIR/sluice-websocket-h2-bench. Every client run is bounded by
# `timeout`; stops only what it started, by PID.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/quiet.sh"
bin=$1; loader=$2; mem_rounds=${3:-3}; rounds=${4:-5}; seconds=${5:-10}; rate=${6:-5000}
sweeps=${7:-50}
out=${TMPDIR:-/tmp}/sluice-websocket-h2-bench
mkdir -p "$out"
: > "$out/results.txt"
# Each tunnel is a socket at the client, two in sluice and one at the
# upstream, all inheriting this limit: 2,000 tunnels need about 4,000.
ulimit -n "$(ulimit -Hn)" || true
[ "$(ulimit -n)" -ge 8192 ] || { echo "ulimit -n is $(ulimit -n): 8192 wanted" >&2; exit 1; }
for port in 18680 18681 18682; do
  in_use "127.0.0.1:$port" && { echo "127.0.0.1:$port is already in use" >&2; exit 1; }
done
started=()
stop() { # pid: TERM, then KILL if it outlives 5 s
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}
cleanup() { for pid in "${started[@]}"; do stop "$pid"; done; }
trap cleanup EXIT
trap 'exit 130' INT TERM

ready() { # /readyz answers 200 within 10 s
  for _ in $(seq 100); do
    curl -sf --max-time 1 "http://127.0.0.1:18681/readyz" >/dev/null && return 0
    sleep 0.1
  done
  echo "sluice did not become ready" >&2; return 1
}
sluice() { # log: starts sluice on CPU 1, sets $pid
  taskset -c 1 "$bin" run --config "$here/sluice.toml" >/dev/null 2>"$out/$1" & pid=$!
  started+=("$pid")
  ready || exit 1
}
record() { echo "$*" | tee -a "$out/results.txt"; }

taskset -c 0 "$loader" upstream 18682 >"$out/upstream.log" 2>&1 & up=$!
started+=("$up")
for _ in $(seq 100); do grep -q '^serving' "$out/upstream.log" && break; sleep 0.1; done
grep -q '^serving' "$out/upstream.log" || { echo "the upstream did not start" >&2; exit 1; }

echo "== 1. memory"
quiet 30
for r in $(seq "$mem_rounds"); do
  order="h2 h1"; [ $((r % 2)) = 0 ] && order="h1 h2"
  for mode in $order; do
    sluice "sluice-memory-$r-$mode.log"
    line=$(timeout 120 taskset -c 0 "$loader" memory 127.0.0.1:18680 --sluice-pid "$pid" \
      --mode "$mode" --tunnels 1000 --streams 250 --settle 12 2>&1) \
      || { echo "$line" >&2; echo "memory round $r $mode failed" >&2; exit 1; }
    stop "$pid"
    record "round=$r $line"
  done
done

echo "== 2. echo at a steady rate"
quiet 30
sluice sluice-echo-steady.log
timeout $((60 + 2 * rounds * (seconds + 5) + 30)) taskset -c 0 "$loader" echo 127.0.0.1:18680 \
  --sluice-pid "$pid" --tunnels 1000 --streams 250 --rounds "$rounds" --seconds "$seconds" \
  --rate "$rate" --settle 12 2>"$out/echo-steady.err" | sed 's/^/steady /' | tee -a "$out/results.txt"
[ "${PIPESTATUS[0]}" = 0 ] || { cat "$out/echo-steady.err" >&2; echo "the steady run failed" >&2; exit 1; }
stop "$pid"

echo "== 3. echo, all tunnels at once"
quiet 30
sluice sluice-echo-burst.log
timeout $((60 + 2 * rounds * 120 + 30)) taskset -c 0 "$loader" echo 127.0.0.1:18680 \
  --sluice-pid "$pid" --tunnels 1000 --streams 250 --rounds "$rounds" --rate 0 \
  --sweeps "$sweeps" --settle 12 2>"$out/echo-burst.err" | sed 's/^/burst /' | tee -a "$out/results.txt"
[ "${PIPESTATUS[0]}" = 0 ] || { cat "$out/echo-burst.err" >&2; echo "the burst run failed" >&2; exit 1; }
stop "$pid"

python3 - "$out/results.txt" <<'EOF'
import re, statistics, sys
rows = [dict(re.findall(r'(\w+)=(\S+)', l)) for l in open(sys.argv[1]).read().splitlines()]
print("\n== memory: KiB of sluice's RSS per tunnel (target for h2 ≤ 10)")
for mode in ("h2", "h1"):
    v = [float(r["kib_per_tunnel"]) for r in rows if r.get("mode") == mode and "kib_per_tunnel" in r]
    print(f"{mode}: {v} median {statistics.median(v):.2f}" if v else f"{mode}: none")
EOF
