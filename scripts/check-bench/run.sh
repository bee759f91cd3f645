#!/usr/bin/env bash
# POST /v1/check decisions per second on ONE core: sluice (one worker thread)
# pinned to CPU 0, wrk pinned to CPU 1. Single checks, then batches of 100.
#
#   scripts/check-bench/run.sh target/release/sluice [SECONDS] [ROUNDS]
#
# Defaults: 10 s per run, 3 rounds of each. Prints requests/s and decisions/s
# per run, and decisions per CPU-second sluice used (from /proc/PID/stat): on a
# machine shared with other work, what one core would do if it were sluice's. Stops sluice by its PID when done.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=$1; secs=${2:-10}; rounds=${3:-3}
url=http://127.0.0.1:18392/v1/check
taskset -c 0 "$bin" run --config "$here/sluice.toml" 2>"${TMPDIR:-/tmp}/check-bench.log" & sl=$!
trap 'kill -TERM $sl 2>/dev/null; wait $sl 2>/dev/null' EXIT
for _ in $(seq 50); do
  curl -s -o /dev/null http://127.0.0.1:18392/healthz && break
  sleep 0.2
done
# sluice's CPU time so far (user + system), in clock ticks.
ticks() { awk '{print $14 + $15}' /proc/$sl/stat; }
hz=$(getconf CLK_TCK)
run() { # label batch connections
  local before after result
  before=$(ticks)
  result=$(BATCH=$2 taskset -c 1 wrk -t1 -c"$3" -d"${secs}s" -s "$here/check.lua" "$url" 2>&1)
  after=$(ticks)
  echo "$result" | awk -v label="$1" -v batch="$2" -v cpu="$(( after - before ))" -v hz="$hz" '
    /requests in/ {total = $1}
    /Requests\/sec/ {rate = $2}
    /Latency/ && !/Distribution/ {latency = "latency avg " $2 ", max " $4}
    /Non-2xx|unexpected|error/ {print "  " $0}
    END {
      secs = cpu / hz
      printf "%s: %.0f requests/s, %.0f decisions/s; sluice used %.2f CPU-s: %.0f decisions per CPU-s; %s\n",
        label, rate, rate * batch, secs, (secs > 0 ? total * batch / secs : 0), latency
    }'
}
BATCH=1 taskset -c 1 wrk -t1 -c32 -d2s -s "$here/check.lua" "$url" >/dev/null 2>&1   # warm-up
for round in $(seq "$rounds"); do
  run "round $round single" 1 32
  run "round $round batch100" 100 8
done
