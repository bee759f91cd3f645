#!/usr/bin/env bash
# Envoy's rate limit service on one core (issue 47's targets), beside
# POST /v1/check on the same rule, in one run:
#
#   scripts/rls-bench/run.sh target/release/sluice [ROUNDS] [SECONDS]
#
# sluice runs alone on CPU 1 (`workers = 1`, sluice.toml: one rule deciding
# the `user` descriptor of domain "edge" that never refuses); h2load runs on
# CPU 0. First one call of each kind is checked by hand (curl): the
# ShouldRateLimit answer must carry `grpc-status: 0` and overall_code OK,
# since h2load counts any HTTP 200. Then, each round, for SECONDS (default
# 10):
#
#   rls    h2load -c1 -m64: ONE h2c connection, 64 streams, each call
#          RateLimitRequest{domain "edge", [[user = alice]]} (message.py);
#   check  h2load --h1 -c64 -m1: 64 HTTP/1.1 connections, each POSTing
#          {"rule":"users","key":"alice"} to /v1/check on the admin port.
#
# Printed per run: calls/s; p50/p99/p99.9/max from h2load's --log-file
# (latency.py); sluice's CPU µs per call (utime+stime from /proc/PID/stat,
# in clock ticks); the calls answered 2xx of those h2load finished; the
# calls the `users` rule counted allowed (from /metrics: every call answered,
# plus the streams still in flight when h2load stopped; /v1/check is not
# counted there); how much CPU sluice and h2load used (100 % = a full core),
# and what else ran on CPU 0 / CPU 1 beside them (a run where either is over
# 5 % is marked NOISY). Each run first waits (up to QUIET_WAIT s, default
# 300) for three seconds in a row in which the machine is nearly idle. Then
# the medians of the quiet rounds.
#
# Last, a fresh sluice under 10,000 concurrent streams (MEMORY_CALLS calls,
# default 300000, with h2load -c10 -m1000: 10 connections of 1,000 streams):
# VmHWM and VmRSS before and after, and that every call was answered.
# MEMORY=0 skips it; ROUNDS 0 runs it alone. Stops what it started by PID.
# Its files are in ${TMPDIR:-/tmp}/sluice-rls-bench.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=$1; rounds=${2:-3}; secs=${3:-10}
memory_calls=${MEMORY_CALLS:-300000}
out=${TMPDIR:-/tmp}/sluice-rls-bench
mkdir -p "$out"
rls=http://127.0.0.1:18581/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
admin=http://127.0.0.1:18582
python3 "$here/message.py" request "$out/call.bin" edge user alice
printf '{"rule":"users","key":"alice"}' > "$out/check.json"
. "$here/../lib/quiet.sh"   # cpu_busy, quiet, tick
sl=
trap '[ -n "$sl" ] && kill -TERM $sl 2>/dev/null; wait 2>/dev/null' EXIT

start_sluice() {
  taskset -c 1 "$bin" run --config "$here/sluice.toml" 2>>"$out/sluice.log" & sl=$!
  for _ in $(seq 100); do
    curl -s -o /dev/null "$admin/healthz" && return 0
    sleep 0.1
  done
  echo "sluice did not come up; $out/sluice.log:" >&2; tail "$out/sluice.log" >&2; exit 1
}
stop_sluice() { kill -TERM $sl; wait $sl 2>/dev/null; sl=; }
ticks() { awk '{print $14 + $15}' "/proc/$sl/stat"; }
allowed() { # the users rule's allowed outcomes so far
  curl -s "$admin/metrics" | awk '/^sluice_requests_total\{/ && /rule="users"/ && /outcome="allowed"/ {n += $NF} END {print n + 0}'
}
memory() { grep -E '^(VmHWM|VmRSS)' "/proc/$sl/status" | awk '{printf "%s %s kB  ", $1, $2}'; }

verify() {
  echo "one ShouldRateLimit call by curl (h2c prior knowledge), headers and trailers:"
  curl -s --http2-prior-knowledge -H 'content-type: application/grpc' -H 'te: trailers' \
    --data-binary @"$out/call.bin" -D "$out/verify.head" -o "$out/verify.body" "$rls"
  sed 's/^/  /' "$out/verify.head"
  local answer; answer=$(python3 "$here/message.py" response "$out/verify.body")
  echo "  message: $answer"
  if ! grep -qi '^grpc-status: 0' "$out/verify.head" || ! echo "$answer" | grep -q 'overall_code=OK'; then
    echo "the call was not answered grpc-status 0 / OK: the load figures would not be decisions" >&2; exit 1
  fi
  echo "one POST /v1/check by curl: $(curl -s -H 'content-type: application/json' \
    --data-binary @"$out/check.json" "$admin/v1/check")"
}

run() { # label; then h2load's arguments
  local label=$1; shift
  local before after counted_before counted_after result t0 t1 cpu0 cpu1
  rm -f "$out/$label.log"
  quiet 300
  counted_before=$(allowed); before=$(ticks)
  cpu0=$(cpu_busy 0); cpu1=$(cpu_busy 1); t0=$(date +%s.%N)
  # h2load's own CPU: the subshell's waited-for children's (/proc, fields 16, 17).
  result=$(me=$BASHPID; taskset -c 0 h2load --log-file="$out/$label.log" "$@" 2>&1
           echo "h2load ticks: $(awk '{print $16 + $17}' "/proc/$me/stat")")
  t1=$(date +%s.%N); cpu0=$(( $(cpu_busy 0) - cpu0 )); cpu1=$(( $(cpu_busy 1) - cpu1 ))
  after=$(ticks); counted_after=$(allowed)
  local done rate ok lat load
  done=$(echo "$result" | awk '/^requests:/ {print $6}')
  ok=$(echo "$result" | awk '/^status codes:/ {print $3}')
  rate=$(echo "$result" | awk '/^finished in/ {print $4}')
  load=$(echo "$result" | awk '/^h2load ticks:/ {print $3}')
  lat=$(python3 "$here/latency.py" "$out/$label.log")
  python3 - "$label" "${rate:-0}" "${done:-0}" "${ok:-0}" $((after - before)) "$tick" \
    "$t0" "$t1" $((counted_after - counted_before)) "$lat" "$cpu0" "$cpu1" "${load:-0}" <<'PY'
import sys
label, rate, done, ok, ticks, hz, t0, t1, counted, lat, cpu0, cpu1, load = sys.argv[1:]
done, ticks, hz, load = int(done), int(ticks), int(hz), int(load)
wall = float(t1) - float(t0)
pct = lambda t: 100 * t / hz / wall
others0, others1 = pct(max(0, int(cpu0) - load)), pct(max(0, int(cpu1) - ticks))
noisy = "  NOISY" if max(others0, others1) > 5 else ""
print(f"{label:6} {float(rate):9.0f} calls/s  {ticks / hz * 1e6 / max(done, 1):6.2f} CPU us/call  "
      f"CPU: sluice {pct(ticks):3.0f}% h2load {pct(load):3.0f}% others {others0:2.0f}%/{others1:2.0f}%  "
      f"answered={ok}/{done} counted={counted if label != 'check' else '-'}  {lat}{noisy}")
PY
  echo "$result" | grep -E 'failed|errored|timeout' | grep -vE ' 0 failed, 0 errored, 0 timeout' | sed 's/^/  h2load: /'
}

rls_load() { run "$1" -c1 -m64 -D "$2" -H 'content-type: application/grpc' -H 'te: trailers' -d "$out/call.bin" "$rls"; }
check_load() { run "$1" --h1 -c64 -m1 -D "$2" -H 'content-type: application/json' -d "$out/check.json" "$admin/v1/check"; }

if [ "$rounds" -gt 0 ]; then
  rm -f "$out/rounds.txt"
  start_sluice
  verify
  echo "warm-up (2 s each, not counted):"
  rls_load rls 2 | sed 's/^/  /'; check_load check 2 | sed 's/^/  /'
  for r in $(seq "$rounds"); do
    echo "round $r"
    rls_load rls "$secs" | tee -a "$out/rounds.txt"
    check_load check "$secs" | tee -a "$out/rounds.txt"
  done
  python3 - "$out/rounds.txt" <<'PY'
import re, statistics, sys
lines = open(sys.argv[1]).read().splitlines()
for label in ("rls", "check"):
    rows = [l for l in lines if l.startswith(label + " ")]
    quiet = [l for l in rows if "NOISY" not in l]
    print(f"median of {label}'s {len(quiet)} quiet rounds:" if quiet else
          f"median of {label}'s {len(rows)} rounds (none was quiet):")
    rows = quiet or rows
    def col(pattern):
        return statistics.median(float(re.search(pattern, l).group(1)) for l in rows)
    print(f"  {label:6} {col(r'([0-9.]+) calls/s'):9.0f} calls/s  {col(r'([0-9.]+) CPU us/call'):6.2f} CPU us/call  "
          f"p50 {col(r'p50=([0-9.]+)'):.3f} ms  p99 {col(r'p99=([0-9.]+)'):.3f} ms  p99.9 {col(r'p99.9=([0-9.]+)'):.3f} ms")
PY
  stop_sluice
fi

if [ "${MEMORY:-1}" != 0 ]; then
  echo "10,000 concurrent streams (h2load -c10 -m1000, $memory_calls calls), a fresh sluice:"
  start_sluice
  echo "  before: $(memory)"
  run streams -c10 -m1000 -n"$memory_calls" -H 'content-type: application/grpc' -H 'te: trailers' \
    -d "$out/call.bin" "$rls" | sed 's/^/  /'
  echo "  after:  $(memory)"
  stop_sluice
fi
# h2load's per-call logs run to tens of MB: KEEP=1 keeps them.
[ -n "${KEEP:-}" ] || rm -f "$out/rls.log" "$out/check.log" "$out/streams.log"
