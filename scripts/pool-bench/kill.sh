#!/usr/bin/env bash
# A dead server costs nothing visible (issue 46): a closed loop of GETs
# (wrk, 32 connections, 10 s) through sluice to a pool of three nginx
# servers; with KILL=1 one of them is killed (SIGKILL) 3 s in. Prints wrk's
# summary (errors and non-2xx answers, latency percentiles) and, after a
# kill, how long after it sluice logged the server out.
#
#   scripts/pool-bench/kill.sh target/release/sluice          # no kill
#   KILL=1 scripts/pool-bench/kill.sh target/release/sluice   # one killed
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=$1
out=${TMPDIR:-/tmp}/sluice-pool-bench
mkdir -p "$out"
pids=()
for port in 18580 18581 18582; do
  sed "s/@PORT@/$port/g; s|@OUT@|$out|g" "$here/server.conf" > "$out/server-$port.conf"
  nginx -c "$out/server-$port.conf" -p "$out" & pids+=($!)
done
sleep 0.5
RUST_LOG=info "$bin" run --config "$here/pool.toml" 2>"$out/sluice.log" & sl=$!
for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18583/ && break; sleep 0.1; done
wrk -t1 -c32 -d10s --latency http://127.0.0.1:18583/ > "$out/wrk.txt" 2>&1 & load=$!
if [ -n "${KILL:-}" ]; then
  sleep 3
  victim=${pids[2]}
  killed=$(date +%s.%N)
  pkill -KILL -P "$victim"; kill -KILL "$victim"
fi
wait $load
cat "$out/wrk.txt"
if [ -n "${KILL:-}" ]; then
  out_at=$(grep -m1 'taken out by passive checks' "$out/sluice.log" | awk '{print $1}')
  python3 - "$killed" "$out_at" <<'PY'
import sys, datetime
killed = float(sys.argv[1])
if not sys.argv[2]:
    print("the server was never taken out")
else:
    out = datetime.datetime.fromisoformat(sys.argv[2].replace("Z", "+00:00")).timestamp()
    print(f"out {1000 * (out - killed):.1f} ms after the kill")
PY
  grep -c 'retrying' "$out/sluice.log" >/dev/null
fi
kill -TERM $sl 2>/dev/null; wait $sl 2>/dev/null
for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
wait 2>/dev/null
