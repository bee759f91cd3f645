#!/usr/bin/env bash
# trace-bench: what OpenTelemetry tracing costs sluice, against the build before it
# (ba16c5b). Run from the repository's root, each binary built in a worktree with its own
# target directory and copied out (never this tree's target/):
#
#   scripts/trace-bench/run.sh callgrind BASE NEW
#       instructions per request with tracing off (scripts/callgrind/run.sh, pass.toml and
#       deny.toml, labels base-pass/new-pass/base-deny/new-deny), then NEW traced:
#       cg-pass-sample001.toml / cg-pass-sample1.toml exporting to the sink (new-pass-s001,
#       new-pass-s1). KEEP=1 keeps the outputs; cgdiff.py diffs two of them by function
#       (self instructions per request, from `callgrind_annotate --inclusive=no`).
#   scripts/trace-bench/run.sh harness [ROUNDS] [DURATION]        (default 5 5)
#       ../shared/bench/proxybench.py with tracing.json (its cmd names target/release/sluice: no [tracing],
#       sample = 0.01, sample = 1, exporting to the sink collector sink.conf on 18390)
#       beside nginx_rl_pass, one run: CPU-busy us per request on the proxy's CPU. wrap.sh
#       saves each sluice run's sluice_trace_spans_total and VmRSS to
#       /tmp/trace-bench-metrics.log when the harness stops it.
#   scripts/trace-bench/run.sh allocs NEW [N1 N2]                 (default 1000 5000)
#       valgrind --tool=dhat: heap blocks allocated over N1 and N2 sequential keep-alive
#       GETs (curl's URL glob: an exact count), off.toml vs sink.toml (sample = 1);
#       blocks per request = (blocks(N2) - blocks(N1)) / (N2 - N1), so start-up cancels.
#   scripts/trace-bench/run.sh hang NEW [SECONDS]                 (default 10)
#       wrk -t1 -c16 -dSECONDS --latency through sluice (sample = 1, pinned to CPU 1; wrk and
#       the servers on CPU 0) exporting to the sink (sink.toml), then to a collector that
#       accepts and never answers (hang.py on 18491, hang.toml): req/s, p50, p99,
#       sluice_trace_spans_total and VmRSS/VmHWM after each run.
#
# Needs nginx, wrk, valgrind, curl, taskset. Ports: sink 18390, upstream 18480, sluice
# 18481 (admin 18482), hanging collector 18491; callgrind/run.sh uses 18380-18386 and the
# harness 18080-18199. Every process started here is stopped by its PID; loads are
# loopback only and bounded in time.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; pids=(); }
trap cleanup EXIT

start_bg() { "$@" & last=$!; pids+=($last); }   # sets $last
stop_pid() {
  kill -TERM "$1" 2>/dev/null; wait "$1" 2>/dev/null
  local kept=(); for p in "${pids[@]}"; do [ "$p" != "$1" ] && kept+=("$p"); done; pids=("${kept[@]}")
}
listening() { # wait until something listens on 127.0.0.1:$1 (no request sent), 60 s at most
  for _ in $(seq 240); do
    ss -Hltn "sport = :$1" | grep -q LISTEN && return 0
    sleep 0.25
  done
  echo "nothing listens on $1" >&2; return 1
}
free_port() { if ss -Hltn "sport = :$1" | grep -q LISTEN; then echo "port $1 is in use" >&2; exit 1; fi; }
sink() { free_port 18390; start_bg taskset -c 0 nginx -c "$here/sink.conf" -p /tmp; sink_pid=$last; listening 18390; }
upstream() { free_port 18480; start_bg taskset -c 0 nginx -c "$here/upstream.conf" -p /tmp; up_pid=$last; listening 18480; }
spans() { curl -s --max-time 2 http://127.0.0.1:18482/metrics | grep '^sluice_trace_spans_total' | tr '\n' ' '; }

part=${1:-}; shift || true
case "$part" in
callgrind)
  base=$1; new=$2
  cd "$root"
  for cfg in pass deny; do
    for which in base new; do
      bin=$base; [ $which = new ] && bin=$new
      echo "\$ scripts/callgrind/run.sh $bin scripts/callgrind/$cfg.toml $which-$cfg"
      scripts/callgrind/run.sh "$bin" "scripts/callgrind/$cfg.toml" "$which-$cfg"
    done
  done
  # And the new build traced (pass.toml + [tracing]), exporting to the sink.
  sink
  for s in 001 1; do
    echo "\$ scripts/callgrind/run.sh $new scripts/trace-bench/cg-pass-sample$s.toml new-pass-s$s"
    scripts/callgrind/run.sh "$new" "scripts/trace-bench/cg-pass-sample$s.toml" "new-pass-s$s"
  done
  stop_pid "$sink_pid"
  ;;
harness)
  rounds=${1:-5}; duration=${2:-5}
  cd "$root"
  sink
  : > "${TRACE_BENCH_METRICS:-/tmp/trace-bench-metrics.log}"
  echo "\$ python3 ../shared/bench/proxybench.py --scenarios nginx_rl_pass --candidate-spec scripts/trace-bench/tracing.json --rounds $rounds --duration $duration --out-dir /tmp/trace-bench-harness"
  python3 ../shared/bench/proxybench.py \
    --scenarios nginx_rl_pass \
    --candidate-spec scripts/trace-bench/tracing.json \
    --rounds "$rounds" --duration "$duration" --out-dir /tmp/trace-bench-harness
  stop_pid "$sink_pid"
  echo "spans and RSS per run (wrap.sh): ${TRACE_BENCH_METRICS:-/tmp/trace-bench-metrics.log}"
  ;;
allocs)
  bin=$1; n1=${2:-1000}; n2=${3:-5000}
  upstream; sink
  declare -A blocks
  for cfg in off sink; do
    for n in $n1 $n2; do
      free_port 18481
      log=/tmp/trace-bench-dhat.$cfg.$n.log
      start_bg valgrind --tool=dhat --dhat-out-file=/tmp/trace-bench-dhat.$cfg.$n.json \
        "$bin" run --config "$here/$cfg.toml" 2>"$log"; sl=$last
      listening 18481
      ok=$(curl -s -w '%{http_code}\n' "http://127.0.0.1:18481/r[1-$n]" | grep -c '^200$')
      sleep 1
      sp=$(spans)
      stop_pid "$sl"
      b=$(awk '/Total:/ {gsub(",","",$(NF-1)); print $(NF-1)}' "$log")
      blocks[$cfg.$n]=$b
      echo "$cfg n=$n: 200s=$ok blocks=$b  $sp"
      [ "$ok" = "$n" ] || echo "WARNING: $ok of $n answered 200" >&2
    done
  done
  for cfg in off sink; do
    python3 -c "print('$cfg: blocks per request', round((${blocks[$cfg.$n2]} - ${blocks[$cfg.$n1]}) / ($n2 - $n1), 2))"
  done
  python3 -c "print('tracing (sample = 1) - off: blocks per request', round(((${blocks[sink.$n2]} - ${blocks[sink.$n1]}) - (${blocks[off.$n2]} - ${blocks[off.$n1]})) / ($n2 - $n1), 2))"
  ;;
hang)
  bin=$1; secs=${2:-10}
  upstream; sink
  free_port 18491
  start_bg taskset -c 0 python3 "$here/hang.py" 18491; hang_pid=$last; listening 18491
  for cfg in sink hang; do
    free_port 18481
    start_bg taskset -c 1 "$bin" run --config "$here/$cfg.toml" 2>/tmp/trace-bench-$cfg.log; sl=$last
    listening 18481
    rss0=$(awk '/VmRSS/ {print $2}' /proc/$sl/status)
    echo "== $cfg.toml: \$ taskset -c 0 wrk -t1 -c16 -d${secs}s --latency http://127.0.0.1:18481/"
    taskset -c 0 wrk -t1 -c16 -d${secs}s --latency http://127.0.0.1:18481/ \
      | grep -E 'Requests/sec|requests in|Non-2xx|Socket errors| (50|90|99)%'
    echo "after: $(spans)"
    echo "VmRSS before ${rss0} kB, after $(awk '/VmRSS/ {print $2}' /proc/$sl/status) kB, VmHWM $(awk '/VmHWM/ {print $2}' /proc/$sl/status) kB"
    sleep 11
    echo "11 s later: $(spans) VmRSS $(awk '/VmRSS/ {print $2}' /proc/$sl/status) kB"
    echo "export failures logged: $(grep -c 'trace export failed' /tmp/trace-bench-$cfg.log)"
    t0=$(date +%s.%N); stop_pid "$sl"
    echo "SIGTERM to exit: $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s"
  done
  ;;
*)
  sed -n '2,31p' "$0"; exit 2
  ;;
esac
