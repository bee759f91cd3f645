#!/usr/bin/env bash
# gRPC-shaped unary calls over HTTP/2 through sluice and through nginx's
# grpc_pass (issue 46's HTTP/2 target), measured in one run:
#
#   scripts/grpc-bench/run.sh target/release/sluice [ROUNDS] [CALLS]
#
# An nginx h2c upstream on 127.0.0.1:18480 answers every call with a 5-byte
# gRPC message and a `grpc-status: 0` trailer (upstream.conf). Each proxy runs
# alone on CPU 1 (sluice: `workers = 1`; nginx: one worker); the upstream and
# h2load share CPU 0. h2load makes CALLS calls (default 200000) on 10
# connections with 10 streams each, per round, proxies taking turns. Printed:
# calls/s and the proxy's CPU µs per call (utime+stime from /proc, in clock
# ticks), each round, then the medians. Stops everything it started by PID.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=$1; rounds=${2:-3}; calls=${3:-200000}
out=${TMPDIR:-/tmp}/sluice-grpc-bench
mkdir -p "$out"
printf '\0\0\0\0\0' > "$out/call.bin"
taskset -c 0 nginx -c "$here/upstream.conf" -p "$out" & up=$!
sed "s|@OUT@|$out|" "$here/grpc-pass.conf" > "$out/grpc-pass.conf"
taskset -c 1 nginx -c "$out/grpc-pass.conf" -p "$out" & gp=$!
taskset -c 1 "$bin" run --config "$here/sluice.toml" 2>"$out/sluice.log" & sl=$!
sleep 1
tick=$(getconf CLK_TCK)
cpu_of() { # utime + stime of a process and its children-threads, in ticks
  awk '{print $14 + $15}' "/proc/$1/stat"
}
worker_of() { pgrep -P "$1" | head -1; }
run() { # name port pid
  local before after start end result rate
  before=$(cpu_of "$3")
  start=$(date +%s.%N)
  result=$(taskset -c 0 h2load -c10 -m10 -n"$calls" -H 'content-type: application/grpc' \
    -H 'te: trailers' -d "$out/call.bin" "http://127.0.0.1:$2/bench.v1.Bench/Call" 2>&1)
  end=$(date +%s.%N)
  after=$(cpu_of "$3")
  local ok
  ok=$(echo "$result" | awk '/status codes:/ {print $3}')
  rate=$(echo "$result" | awk '/^finished in/ {print $4}')
  python3 -c "
calls=$calls; ok=int('${ok:-0}' or 0)
cpu=($after-$before)/$tick
print(f'$1: {float(\"${rate:-0}\"):10.0f} calls/s  {cpu*1e6/calls:7.2f} CPU us/call  2xx={ok}')"
}
ngw=$(worker_of $gp)
for r in $(seq "$rounds"); do
  run sluice 18482 $sl
  run nginx-grpc_pass 18481 "$ngw"
done
kill -TERM $sl $gp $up 2>/dev/null
wait $sl $gp $up 2>/dev/null
