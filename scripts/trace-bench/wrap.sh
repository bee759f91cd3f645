#!/usr/bin/env bash
# Runs a proxy command for proxybench.py and, when the harness stops it with
# SIGTERM, first saves the admin port's /metrics (the sluice_trace_spans_total
# lines and the requests counted) and the proxy's VmRSS/VmHWM, then stops it
# by PID (SIGTERM, SIGKILL after 4 s, inside the harness's 5 s).
#
#   wrap.sh RUN_DIR ADMIN_PORT CMD...    (RUN_DIR: the harness's {tmp})
#
# Appends to $TRACE_BENCH_METRICS (default /tmp/trace-bench-metrics.log) one
# block per run, headed by the run's directory name (scenario.rROUND.aATTEMPT).
run=$1; admin=$2; shift 2
out=${TRACE_BENCH_METRICS:-/tmp/trace-bench-metrics.log}
"$@" & pid=$!
stop() {
  {
    echo "== $(basename "$run") pid $pid"
    curl -s --max-time 1 "http://127.0.0.1:$admin/metrics" \
      | grep -E '^sluice_(trace_spans_total|requests_total)' || true
    grep -E '^(VmRSS|VmHWM)' "/proc/$pid/status" || true
  } >>"$out"
  kill -TERM $pid 2>/dev/null
  for _ in $(seq 40); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  kill -KILL $pid 2>/dev/null
  wait $pid 2>/dev/null
  exit 0
}
trap stop TERM INT
wait $pid
