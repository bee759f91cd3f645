#!/usr/bin/env bash
# User-space instructions per request (callgrind) of sluice on the Redis store vs memory,
# the same load as scripts/callgrind/run.sh (1 worker, wrk -c64, 2 s warm-up, counters
# zeroed, 5 s measured) but on ports 18480-18482 and with its own redis-server on 16479
# (pinned to CPU 0, not under valgrind: only sluice's instructions are counted).
#
#   scripts/redis-bench/callgrind.sh target/release/sluice [ROUNDS=1]
#
# KEEP=1 keeps the callgrind outputs (/tmp/sluice-rbench-cg.*) for callgrind_annotate.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=$1; rounds=${2:-1}
out=${TMPDIR:-/tmp}; RP=16479; URL=http://127.0.0.1:18481/
taskset -c 0 redis-server --port $RP --bind 127.0.0.1 --save '' --appendonly no --daemonize no >/dev/null 2>&1 & rp=$!
nginx -c "$here/upstream.conf" -p "$out" & ng=$!
cleanup() { kill -TERM $ng 2>/dev/null; kill -TERM $rp 2>/dev/null; wait $ng $rp 2>/dev/null; }
trap cleanup EXIT
sleep 0.5
evalsha() { redis-cli -p $RP INFO commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_evalsha:/ {print $3; f=1} END {if (!f) print 0}'; }
for r in $(seq "$rounds"); do
  for b in memory redis; do
    label=$b-$r
    valgrind --tool=callgrind --callgrind-out-file=$out/sluice-rbench-cg.$label.out "$bin" run --config "$here/cg-pass-$b.toml" 2>$out/sluice-rbench-cg.$label.log & sl=$!
    for _ in $(seq 120); do curl -s -o /dev/null $URL && break; sleep 0.5; done
    wrk -t1 -c64 -d2s $URL >/dev/null 2>&1   # warm-up
    callgrind_control -z $sl >/dev/null 2>&1
    e0=$(evalsha)
    result=$(wrk -t1 -c64 -d5s $URL 2>&1)
    e1=$(evalsha)
    callgrind_control -d $sl >/dev/null 2>&1
    m=$(curl -s http://127.0.0.1:18482/metrics | grep -E '^sluice_store_(errors_total|fallback_active)' | tr '\n' ' ')
    sleep 1
    reqs=$(echo "$result" | awk '/requests in/ {print $1}')
    [ -n "$reqs" ] || echo "$label: wrk failed: $result" >&2
    kill -TERM $sl; wait $sl 2>/dev/null
    ir=$(for f in $out/sluice-rbench-cg.$label.out.*; do callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}'; done | sort -n | tail -1)
    echo "$label: requests=$reqs evalsha=$((e1-e0)) Ir=$ir per_req=$(python3 -c "print(round($ir/$reqs))") store: ${m:-none}"
    [ -n "${KEEP:-}" ] || rm -f $out/sluice-rbench-cg.$label.out*
  done
done
