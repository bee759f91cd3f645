#!/usr/bin/env bash
# Strict-mode Redis store vs memory store, wall clock, on loopback.
#
#   scripts/redis-bench/strict.sh target/release/sluice [ROUNDS=3] [DURATION=10] [CONNS="1 16 256"]
#
# BACKENDS="memory redis redis-t1s" adds the Redis config with a 1 s timeout; REDIS_CPU=1 pins
# redis-server beside sluice instead of beside wrk and nginx.
# Starts its own redis-server on 127.0.0.1:16479 (--save '' --appendonly no) and an nginx
# upstream on 127.0.0.1:18480, both pinned to CPU 0 with wrk; sluice (workers = 1) pinned
# alone to CPU 1 on 18481 (admin 18482). For every connection count and round, alternating
# memory then redis: start sluice, wait until it answers, 2 s warm-up, snapshot (Redis
# cmdstat_evalsha, sluice_requests_total, sluice's CPU time), `wrk -t1 -cN -dDs --latency`
# with keys1000.lua (X-Key cycling over 1,000 values), snapshot again, read the store
# metrics, stop sluice by PID. One TSV line per run on stdout (results.tsv in $OUT too).
# Every process it starts is stopped by PID at the end.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=$1; rounds=${2:-3}; dur=${3:-10}; conns=${4:-"1 16 256"}
backends=${BACKENDS:-"memory redis"}   # configs strict-<backend>.toml, alternated in this order
out=${OUT:-/tmp/sluice-rbench}; mkdir -p "$out"
RP=16479; ADMIN=127.0.0.1:18482; URL=http://127.0.0.1:18481/
tsv=$out/results.tsv
taskset -c ${REDIS_CPU:-0} redis-server --port $RP --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  >"$out/redis.log" 2>&1 & rp=$!
taskset -c 0 nginx -c "$here/upstream.conf" -p "$out" & ng=$!
cleanup() { kill -TERM $ng 2>/dev/null; kill -TERM $rp 2>/dev/null; wait $ng $rp 2>/dev/null; }
trap cleanup EXIT
sleep 0.5
redis-cli -p $RP ping >/dev/null || { echo "redis did not start" >&2; exit 1; }
evalsha() { redis-cli -p $RP INFO commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_evalsha:/ {print $3; f=1} END {if (!f) print 0}'; }
metric() { # metric NAME-REGEX: sum of the matching samples on /metrics
  curl -s http://$ADMIN/metrics | awk -v re="$1" '$0 !~ /^#/ && $1 ~ re {s += $NF} END {printf "%d\n", s}'; }
cpu_ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
hz=$(getconf CLK_TCK)
# Redis round trip for comparison (idle machine part of CPU 0), 1 client, 20k PINGs.
taskset -c 1 redis-benchmark -p $RP -t ping -c 1 -n 20000 -q 2>/dev/null | tr '\r' '\n' | grep -E '^PING.*p50' >"$out/redis-ping.txt"
echo -e "conns\tround\tbackend\treq_s\tp50_ms\tp99_ms\twrk_reqs\tnon2xx_or_err\tsluice_reqs\tevalsha\tfallback\tstore_errors\tcpu_us_per_req\tload1" | tee "$tsv"
for c in $conns; do
  for r in $(seq "$rounds"); do
    for b in $backends; do
      taskset -c 1 "$bin" run --config "$here/strict-$b.toml" >"$out/sluice-$b-$c-$r.log" 2>&1 & sl=$!
      for _ in $(seq 100); do curl -s -o /dev/null -H 'X-Key: k0' $URL && break; sleep 0.1; done
      taskset -c 0 wrk -t1 -c"$c" -d2s -s "$here/keys1000.lua" $URL >/dev/null 2>&1
      e0=$(evalsha); q0=$(metric '^sluice_requests_total'); t0=$(cpu_ticks $sl)
      res=$(taskset -c 0 wrk -t1 -c"$c" -d"${dur}s" --latency -s "$here/keys1000.lua" $URL 2>&1)
      t1=$(cpu_ticks $sl); e1=$(evalsha); q1=$(metric '^sluice_requests_total')
      fb=$(metric '^sluice_store_fallback_active'); se=$(metric '^sluice_store_errors_total')
      echo "$res" >"$out/wrk-$b-$c-$r.txt"
      kill -TERM $sl; wait $sl 2>/dev/null
      rps=$(echo "$res" | awk '/^Requests\/sec/ {print $2}')
      n=$(echo "$res" | awk '/requests in/ {print $1}')
      p50=$(echo "$res" | awk '$1=="50%" {print $2}'); p99=$(echo "$res" | awk '$1=="99%" {print $2}')
      bad=$(echo "$res" | awk '/Non-2xx|Socket errors/ {s = s $0 ";"} END {print (s == "" ? 0 : s)}')
      ms() { python3 -c "import sys; v=sys.argv[1]; u={'us':1e-3,'ms':1,'s':1e3}; import re; m=re.match(r'([0-9.]+)(us|ms|s)$', v); print(round(float(m.group(1))*u[m.group(2)],3) if m else v)" "$1"; }
      cpu=$(python3 -c "print(round(($t1-$t0)/$hz*1e6/max(1,$q1-$q0),1))")
      echo -e "$c\t$r\t$b\t$rps\t$(ms "$p50")\t$(ms "$p99")\t$n\t$bad\t$((q1-q0))\t$((e1-e0))\t$fb\t$se\t$cpu\t$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$tsv"
      sleep 0.5
    done
  done
done
echo "redis PING, redis-benchmark -c 1 -n 20000: $(cat "$out/redis-ping.txt")"
redis-cli -p $RP INFO commandstats | tr -d '\r' | grep -E 'evalsha|eval:|ping' >"$out/commandstats.txt"
echo "redis-cli --latency, 5 s (min max avg ms, samples; ms resolution): $(timeout -s INT 5 taskset -c 1 redis-cli -p $RP --latency 2>/dev/null | tr '\r' '\n' | grep -v '^$' | tail -1)"
