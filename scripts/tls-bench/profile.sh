#!/usr/bin/env bash
# What one request of the handshake load costs sluice (README.md, "Where a handshake's CPU
# goes"): every request a new TCP connection, a full TLS 1.3 handshake (the harness's ECDSA
# P-256 certificate, wrk with noresume.so so nothing resumes), one GET forwarded to a
# keep-alive nginx upstream, close.
#
#   scripts/tls-bench/profile.sh callgrind BIN [SECONDS=10]   user-space instructions per request
#   scripts/tls-bench/profile.sh perf      BIN [SECONDS=10]   CPU per request (user/system), top symbols
#   scripts/tls-bench/profile.sh syscalls  BIN [SECONDS=5]    system calls per request
#
# Run from the project root, as root for perf (nginx, wrk, openssl, cc, curl; valgrind or
# perf for their mode). System calls are counted by perf's tracepoints, at full speed:
# strace slows each call so much that it changes which reads find data waiting.
# The upstream listens on 127.0.0.1:18480, sluice on 18481
# (admin 18482): other ports than scripts/callgrind/run.sh's, so both can run at once. The
# certificate and noresume.so are the harness's (target/tls-bench/, made here if missing).
# Starts and stops everything it runs by PID. KEEP=1 keeps the raw output in $TMPDIR.
# CONNS sets wrk's connections (1 under callgrind, so a connection cut at either end of the
# count is one request at most of ~250; 64 otherwise, as the harness).
# WORKERS sets sluice's workers (1). CONFIG=FILE serves another sluice config template.
set -u
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:?"usage: $0 callgrind|perf|syscalls BIN [SECONDS]"}
bin=${2:?"usage: $0 callgrind|perf|syscalls BIN [SECONDS]"}
case "$mode" in
  callgrind|perf) seconds=${3:-10} ;;
  syscalls) seconds=${3:-5} ;;
  *) echo "unknown mode: $mode" >&2; exit 64 ;;
esac
case "$mode" in callgrind) conns=${CONNS:-1} ;; *) conns=${CONNS:-64} ;; esac
out=$(mktemp -d "${TMPDIR:-/tmp}/sluice-hs-$mode.XXXXXX")
up=18480; port=18481; admin=18482
url=https://127.0.0.1:$port/

# The harness's certificate and shim (tlsbench.py make_cert, build_shim).
certdir=target/tls-bench/cert
if [ ! -s $certdir/cert.pem ] || [ ! -s $certdir/key.pem ]; then
  mkdir -p $certdir
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $certdir/key.pem \
    -out $certdir/cert.pem -days 3650 -subj /CN=localhost \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>/dev/null || exit 1
fi
shim=target/tls-bench/noresume.so
if [ ! -s $shim ] || [ $shim -ot "$here/noresume.c" ]; then
  cc -O2 -shared -fPIC -o $shim "$here/noresume.c" -ldl || exit 1
fi
cert=$(realpath $certdir/cert.pem); key=$(realpath $certdir/key.pem); shim=$(realpath $shim)

cat > "$out/upstream.conf" <<EOF
worker_processes 1;
daemon off;
pid $out/nginx.pid;
error_log $out/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  server {
    listen 127.0.0.1:$up;
    keepalive_requests 1000000;
    location / { return 200 "ok\n"; }
  }
}
EOF
sed -e "s#{listen}#127.0.0.1:$port#" -e "s#{upstream}#127.0.0.1:$up#" -e "s#{workers}#${WORKERS:-1}#" \
    -e "s#{cert}#$cert#" -e "s#{key}#$key#" -e "s#127.0.0.1:18199#127.0.0.1:$admin#" \
    "${CONFIG:-$here/sluice-tls.toml.tpl}" > "$out/sluice.toml"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  [ -n "${KEEP:-}" ] || rm -rf "$out"
}
trap cleanup EXIT

taskset -c 0 nginx -c "$out/upstream.conf" -p "$out" & pids+=($!)
case "$mode" in
  callgrind)
    valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out" \
      "$bin" run --config "$out/sluice.toml" 2>"$out/sluice.log" & sl=$! ;;
  *)
    taskset -c 1 "$bin" run --config "$out/sluice.toml" 2>"$out/sluice.log" & sl=$! ;;
esac
pids=("$sl" "${pids[@]}")
for _ in $(seq 120); do
  curl -sk -o /dev/null --max-time 5 $url && break
  sleep 0.5
done

load() { # SECONDS: the close load, wrk on CPU 0; prints wrk's output
  LD_PRELOAD=$shim taskset -c 0 wrk -t1 -c"$conns" -d"$1"s -H 'Connection: close' $url 2>&1
}
requests() { awk '/requests in/ {print $1}'; }
stat_ticks() { awk '{print $14, $15}' /proc/$sl/stat; } # utime stime, in clock ticks

load 2 >/dev/null # warm-up: the pool's upstream connection, the allocator's caches
case "$mode" in
  callgrind)
    callgrind_control -z $sl >/dev/null 2>&1
    result=$(load "$seconds")
    callgrind_control -d $sl >/dev/null 2>&1
    sleep 1
    reqs=$(echo "$result" | requests)
    [ -n "$reqs" ] || { echo "wrk failed: $result" >&2; exit 1; }
    file=$(ls -S "$out"/callgrind.out* | head -1)
    ir=$(callgrind_annotate "$file" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}')
    echo "callgrind: requests=$reqs Ir=$ir per_req=$(python3 -c "print(round($ir/$reqs))")"
    # The 25 functions with the most instructions of their own, per request.
    callgrind_annotate --threshold=100 "$file" 2>/dev/null |
      awk -v n="$reqs" '/^ *[0-9,]+ .*[:]/ && ++k<=25 {x=$1; gsub(",","",x); $1=""; sub(/ \([^)]*\)$/,""); printf "%9d %s\n", x/n, $0}'
    # Inclusive, per request, of the phases named in README.md.
    callgrind_annotate --inclusive=yes --threshold=100 "$file" 2>/dev/null |
      grep -E "rustls::server::hs::ExpectClientHello|ExpectFinished as rustls::common_state::State|emit_ticket|tokio_rustls::common::handshake|Connection<.*>::serve|sluice::server::tls::TlsListener::accept|::tls::SniResolver|aws_lc_0_[0-9_]+_ECDSA_do_sign|X25519|Ticketer|__libc_malloc|_int_free|malloc|free" |
      awk -v n="$reqs" '{x=$1; gsub(",","",x); $1=""; sub(/ \([^)]*\)$/,""); printf "%9d incl %s\n", x/n, $0}' | head -30
    ;;
  perf)
    t0=$(stat_ticks)
    perf record -q -e cpu-clock -F 4999 -g -p $sl -o "$out/perf.data" -- sleep "$seconds" >/dev/null 2>&1 &
    pr=$!; pids+=($pr)
    result=$(load "$seconds")
    wait $pr
    t1=$(stat_ticks)
    reqs=$(echo "$result" | requests)
    [ -n "$reqs" ] || { echo "wrk failed: $result" >&2; exit 1; }
    read -r u0 s0 <<<"$t0"; read -r u1 s1 <<<"$t1"
    hz=$(getconf CLK_TCK)
    python3 - "$reqs" "$((u1-u0))" "$((s1-s0))" "$hz" <<'EOF'
import sys
n, u, s, hz = (int(x) for x in sys.argv[1:])
us = lambda t: 1e6 * t / hz / n
print("perf: requests=%d  sluice CPU per request: user %.1f us + system %.1f us = %.1f us" % (n, us(u), us(s), us(u + s)))
EOF
    perf report -i "$out/perf.data" --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -8
    echo "top symbols (self):"
    perf report -i "$out/perf.data" --no-children --sort sym --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -40
    ;;
  syscalls)
    perf stat -x, -e 'syscalls:sys_enter_*' -p $sl -o "$out/syscalls.csv" -- sleep "$seconds" >/dev/null 2>&1 &
    ps=$!; pids+=($ps)
    result=$(load "$seconds")
    wait $ps
    reqs=$(echo "$result" | requests)
    [ -n "$reqs" ] || { echo "wrk failed: $result" >&2; exit 1; }
    echo "syscalls: requests=$reqs"
    awk -F, -v n="$reqs" '$1 ~ /^[0-9]+$/ && $1 > 0 {sub("syscalls:sys_enter_", "", $3); t += $1; printf "%8.2f per request  %s\n", $1/n, $3} END {printf "%8.2f per request  total\n", t/n}' "$out/syscalls.csv" | sort -rn | head -25
    ;;
esac
