#!/usr/bin/env bash
# User-space instructions per /v1/check under callgrind (exact for a given
# binary, whatever else the machine is doing). Needs wrk and valgrind.
#
#   scripts/check-bench/callgrind.sh target/release/sluice 100   # batches of 100
#   scripts/check-bench/callgrind.sh target/release/sluice 1     # single checks
#
# Starts sluice (1 worker) under callgrind, warms up, zeroes the counters,
# runs wrk for 5 s, and divides by the requests and by the checks. Stops
# sluice by its PID. KEEP=1 keeps the output for callgrind_annotate.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${TMPDIR:-/tmp}
bin=$1; batch=${2:-100}
url=http://127.0.0.1:18392/v1/check
rm -f "$out"/check-cg.out*
valgrind --tool=callgrind --callgrind-out-file="$out/check-cg.out" "$bin" run --config "$here/sluice.toml" 2>"$out/check-cg.log" & sl=$!
for _ in $(seq 120); do
  curl -s -o /dev/null http://127.0.0.1:18392/healthz && break
  sleep 0.5
done
BATCH=$batch wrk -t1 -c4 -d2s -s "$here/check.lua" "$url" >/dev/null 2>&1   # warm-up
callgrind_control -z $sl >/dev/null 2>&1
result=$(BATCH=$batch wrk -t1 -c4 -d5s -s "$here/check.lua" "$url" 2>&1)
callgrind_control -d $sl >/dev/null 2>&1
sleep 1
kill -TERM $sl; wait $sl 2>/dev/null
reqs=$(echo "$result" | awk '/requests in/ {print $1}')
if [ -z "$reqs" ]; then echo "wrk failed: $result" >&2; exit 1; fi
ir=$(for f in "$out"/check-cg.out.*; do callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}'; done | sort -n | tail -1)
echo "batch=$batch requests=$reqs Ir=$ir per_request=$((ir / reqs)) per_check=$((ir / reqs / batch))"
[ -n "${KEEP:-}" ] || rm -f "$out"/check-cg.out*
