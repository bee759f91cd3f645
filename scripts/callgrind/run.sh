#!/usr/bin/env bash
# User-space instructions per request of sluice under callgrind (exact for a given
# binary; this VM has no hardware counters). Needs nginx, wrk and valgrind.
#
#   scripts/callgrind/run.sh target/release/sluice scripts/callgrind/pass.toml pass
#   scripts/callgrind/run.sh target/release/sluice scripts/callgrind/deny.toml deny
#   scripts/callgrind/run.sh target/release/sluice scripts/callgrind/sse-charged.toml sse-charged
#     (an 81 KB event stream per request with a json: charge; sse.toml without one)
#
# Starts an nginx upstream on 127.0.0.1:18380 and sluice (1 worker) on 18381, warms up,
# zeroes the counters, runs wrk -c64 for 5 s, and divides. Stops both by PID. KEEP=1
# keeps the callgrind output for callgrind_annotate. HEADER="Connection: keep-alive" makes
# wrk send that field too (as browsers do; wrk sends only Host by default). LUA=FILE gives
# wrk a script (keys100k.lua: 100k API keys at random, for keyed-*.toml). CGOPTS adds
# callgrind options (CGOPTS=--dump-instr=yes for scripts/callgrind/atomics.py). CACHE=1 adds
# valgrind's cache and branch simulation and prints every event per request (events.py:
# L1 and last-level misses, mispredicted branches); TOP="D1mw 20" adds the functions with
# the most of one event. scripts/callgrind/nginx.sh measures nginx + limit_req the same way.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${TMPDIR:-/tmp}
bin=$1; cfg=$2; label=$3
# The event stream upstream.conf serves on 18386 (scripts/answer-bench/stream.py).
mkdir -p /tmp/sluice-callgrind-sse
python3 "$here/../answer-bench/stream.py" /tmp/sluice-callgrind-sse/stream.sse >/dev/null
nginx -c "$here/upstream.conf" -p "$out" & ng=$!
sleep 0.5
cache=(); [ -n "${CACHE:-}" ] && cache=(--cache-sim=yes --branch-sim=yes)
valgrind --tool=callgrind "${cache[@]}" ${CGOPTS:-} --callgrind-out-file=$out/sluice-cg.$label.out "$bin" run --config "$cfg" 2>$out/sluice-cg.$label.log & sl=$!
# Valgrind starts slowly on a busy machine: wait until sluice answers (60 s at most).
for _ in $(seq 120); do
  curl -s -o /dev/null http://127.0.0.1:18381/ && break
  sleep 0.5
done
extra=(); [ -n "${HEADER:-}" ] && extra=(-H "$HEADER")
[ -n "${LUA:-}" ] && extra+=(-s "$LUA")
wrk -t1 -c64 -d2s "${extra[@]}" http://127.0.0.1:18381/ >/dev/null 2>&1   # warm-up
callgrind_control -z $sl >/dev/null 2>&1
result=$(wrk -t1 -c64 -d5s "${extra[@]}" http://127.0.0.1:18381/ 2>&1)
callgrind_control -d $sl >/dev/null 2>&1
sleep 1
reqs=$(echo "$result" | awk '/requests in/ {print $1}')
if [ -z "$reqs" ]; then echo "$label: wrk failed: $result" >&2; fi
kill -TERM $sl; wait $sl 2>/dev/null
kill -TERM $ng; wait $ng 2>/dev/null
ir=$(for f in $out/sluice-cg.$label.out.*; do callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}'; done | sort -n | tail -1)
echo "$label: requests=$reqs Ir=$ir per_req=$(python3 -c "print(round($ir/$reqs))")"
if [ -n "${CACHE:-}" ]; then
  top=(); [ -n "${TOP:-}" ] && top=(--top $TOP)
  python3 "$here/events.py" "$reqs" $out/sluice-cg.$label.out.* "${top[@]}"
fi
[ -n "${KEEP:-}" ] || rm -f $out/sluice-cg.$label.out*
