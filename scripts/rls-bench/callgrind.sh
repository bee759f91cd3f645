#!/usr/bin/env bash
# User-space instructions per call under callgrind (exact for a given binary,
# whatever else the machine is doing): a ShouldRateLimit call over one h2c
# connection with 64 streams, or a POST /v1/check over 64 HTTP/1.1
# connections, as run.sh sends them. Needs h2load and valgrind.
#
#   scripts/rls-bench/callgrind.sh target/release/sluice rls [CALLS]
#   scripts/rls-bench/callgrind.sh target/release/sluice check [CALLS]
#
# Starts sluice (sluice.toml, 1 worker) under callgrind, warms up with 2,000
# calls, zeroes the counters, makes CALLS calls (default 20000), dumps, and
# divides. Stops sluice by its PID. CONFIG=FILE runs another config (same
# ports). KEEP=1 keeps the output for
# callgrind_annotate (its path is printed).
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${TMPDIR:-/tmp}/sluice-rls-bench
bin=$1; kind=${2:-rls}; calls=${3:-20000}
mkdir -p "$out"
rm -f "$out"/cg-"$kind".out*
python3 "$here/message.py" request "$out/call.bin" edge user alice
printf '{"rule":"users","key":"alice"}' > "$out/check.json"
valgrind --tool=callgrind --callgrind-out-file="$out/cg-$kind.out" "$bin" run --config "${CONFIG:-$here/sluice.toml}" \
  2>"$out/cg-$kind.log" & sl=$!
for _ in $(seq 120); do
  curl -s -o /dev/null http://127.0.0.1:18582/healthz && break
  sleep 0.5
done
load() { # calls
  if [ "$kind" = rls ]; then
    h2load -c1 -m64 -n"$1" -H 'content-type: application/grpc' -H 'te: trailers' -d "$out/call.bin" \
      http://127.0.0.1:18581/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit 2>&1
  else
    h2load --h1 -c64 -m1 -n"$1" -H 'content-type: application/json' -d "$out/check.json" \
      http://127.0.0.1:18582/v1/check 2>&1
  fi
}
load 2000 >/dev/null
callgrind_control -z $sl >/dev/null 2>&1
result=$(load "$calls")
callgrind_control -d $sl >/dev/null 2>&1
sleep 1
kill -TERM $sl; wait $sl 2>/dev/null
ok=$(echo "$result" | awk '/^status codes:/ {print $3}')
if [ "${ok:-0}" != "$calls" ]; then echo "h2load: $result" >&2; exit 1; fi
dump=$(ls -S "$out"/cg-"$kind".out.* | head -1)
ir=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}')
echo "$kind calls=$calls Ir=$ir per_call=$((ir / calls))"
if [ -n "${KEEP:-}" ]; then echo "kept: $dump"; else rm -f "$out"/cg-"$kind".out*; fi
