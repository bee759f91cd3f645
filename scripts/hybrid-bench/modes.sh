#!/usr/bin/env bash
# Memory, hybrid and strict mode side by side in the shared proxy harness,
# at 1k and 100k keys, beside nginx's keyed limit_req (BENCHMARKS.md).
#
#   scripts/hybrid-bench/modes.sh [ROUNDS=5] [extra proxybench.py flags...]
#
# Run from the project root after `cargo build --release --locked`. Starts its own
# redis-server on 127.0.0.1:16479 pinned to CPU 0, with wrk and the upstream, so the
# proxy under test is alone on CPU 1 and its CPU per request is its own (the harness's
# "CPU us/req" counts whatever else runs on CPU 1). Stops redis-server by PID.
# summary.py reads the results: each scenario's proxy-process CPU per request.
set -u
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-5}; shift || true
out=target/hybrid-bench/modes; mkdir -p "$out"
taskset -c 0 redis-server --port 16479 --bind 127.0.0.1 --save '' --appendonly no \
  --daemonize no >"$out/redis.log" 2>&1 & rp=$!
trap 'kill -TERM $rp 2>/dev/null; wait $rp 2>/dev/null' EXIT
sleep 0.5
python3 ../shared/bench/proxybench.py \
  --scenarios g \
  --candidate-spec "$here/modes.json" \
  --rounds "$rounds" --duration 5 --out-dir "$out" "$@"
python3 "$here/summary.py" "$out/results.json" | tee "$out/summary.md"
