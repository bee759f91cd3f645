#!/usr/bin/env bash
# The proxy harness with the Redis store beside the memory store and nginx limit_req.
#
#   scripts/redis-bench/proxybench.sh [ROUNDS=5] [extra proxybench.py flags...]
#
# (--scenarios names built-in scenarios only: the spec's candidates, sluice_mem and
# sluice_redis, are always added and an explicit name of theirs is refused as unknown.)
# Run from the project root after `cargo build --release --locked`. Starts its own
# redis-server on 127.0.0.1:16479 pinned to CPU 0 (with wrk and the upstream; the proxy under
# test is alone on CPU 1), scrapes the Redis scenario's admin /metrics every second (store
# errors, fallback), and reads redis-server's CPU time (/proc) and cmdstat_evalsha before and
# after: Redis CPU per EVALSHA. Stops redis-server by PID.
set -u
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-5}; shift || true
out=target/proxybench-redis; mkdir -p "$out"
RP=16479; hz=$(getconf CLK_TCK)
taskset -c 0 redis-server --port $RP --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  >"$out/redis.log" 2>&1 & rp=$!
poll() { while :; do
  m=$(curl -s -m 1 http://127.0.0.1:18499/metrics) && echo "$(date +%T) $(echo "$m" | grep -E '^sluice_store_(errors_total|fallback_active)' | tr '\n' ' ')"
  sleep 1; done; }
poll >"$out/redis-metrics.log" 2>&1 & pp=$!
cleanup() { kill $pp 2>/dev/null; kill -TERM $rp 2>/dev/null; wait $pp $rp 2>/dev/null; }
trap cleanup EXIT
sleep 0.5
evalsha() { redis-cli -p $RP INFO commandstats | tr -d '\r' | grep '^cmdstat_evalsha:' || echo none; }
e0=$(evalsha); c0=$(awk '{print $14 + $15}' /proc/$rp/stat); s0=$(date +%s.%N)
python3 /work/shared/bench/proxybench.py \
  --scenarios nginx_rl_pass \
  --candidate-spec "$here/proxybench.json" \
  --rounds "$rounds" --duration 5 --port-base 18600 --keep-tmp --out-dir "$out" "$@"
e1=$(evalsha); c1=$(awk '{print $14 + $15}' /proc/$rp/stat); s1=$(date +%s.%N)
{
  echo "redis-server pid $rp on CPU 0; wall $(python3 -c "print(round($s1-$s0,1))") s"
  echo "before: $e0"; echo "after:  $e1"
  echo "redis-server CPU (user+sys) during the run: $(python3 -c "print(round(($c1-$c0)/$hz,2))") s"
  python3 - "$e0" "$e1" "$c0" "$c1" "$hz" <<'PY'
import re, sys
e0, e1, c0, c1, hz = sys.argv[1:]
calls = lambda e: int(re.search(r"calls=(\d+)", e).group(1)) if "calls=" in e else 0
n = calls(e1) - calls(e0); cpu = (int(c1) - int(c0)) / int(hz)
print("EVALSHA calls during the run: %d" % n)
print("redis-server CPU per EVALSHA (incl. idle housekeeping): %.2f us" % (cpu * 1e6 / max(1, n)))
PY
} | tee "$out/redis-cpu.txt"
