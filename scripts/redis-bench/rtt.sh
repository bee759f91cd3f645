#!/usr/bin/env bash
# One Redis round trip, for comparison with the p50 the Redis store adds: PING and the very
# EVALSHA sluice sends for one request of strict-redis.toml (captured with MONITOR), each
# timed by redis-benchmark with one client (-c 1) pinned to CPU 1, redis-server on CPU 0.
#
#   scripts/redis-bench/rtt.sh target/release/sluice
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=$1; RP=16479; out=${TMPDIR:-/tmp}
taskset -c 0 redis-server --port $RP --bind 127.0.0.1 --save '' --appendonly no --daemonize no >/dev/null 2>&1 & rp=$!
taskset -c 0 nginx -c "$here/upstream.conf" -p "$out" & ng=$!
sleep 0.5
taskset -c 1 "$bin" run --config "$here/strict-redis.toml" >$out/sluice-rbench-rtt.log 2>&1 & sl=$!
for _ in $(seq 100); do curl -s -o /dev/null -H 'X-Key: k0' http://127.0.0.1:18481/ && break; sleep 0.1; done
redis-cli -p $RP MONITOR >$out/sluice-rbench-monitor.txt & mp=$!
sleep 0.3; curl -s -o /dev/null -H 'X-Key: k1' http://127.0.0.1:18481/; sleep 0.3
kill $mp; wait $mp 2>/dev/null
kill -TERM $sl; wait $sl 2>/dev/null
line=$(grep '"EVALSHA"' $out/sluice-rbench-monitor.txt | head -1)
echo "captured: $line"
# MONITOR quotes every argument: turn it into an argv.
mapfile -t args < <(python3 -c 'import shlex,sys; l=sys.argv[1]; print("\n".join(shlex.split(l[l.index("\"EVALSHA\""):])))' "$line")
redis-cli -p $RP CONFIG RESETSTAT >/dev/null
for i in 1 2 3; do
  taskset -c 1 redis-benchmark -p $RP -c 1 -n 20000 -q -t ping 2>/dev/null | tr '\r' '\n' | grep -E '^PING_MBULK.*p50'
  taskset -c 1 redis-benchmark -p $RP -c 1 -n 20000 -q "${args[@]}" 2>/dev/null | tr '\r' '\n' | grep -E 'p50' | sed 's/^.*: \([0-9.]* requests\)/EVALSHA (sluice'"'"'s call): \1/'
done
redis-cli -p $RP INFO commandstats | tr -d '\r' | grep -E '^cmdstat_(evalsha|ping)'
kill -TERM $ng $rp; wait $ng $rp 2>/dev/null
