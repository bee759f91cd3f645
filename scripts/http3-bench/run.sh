#!/usr/bin/env bash
# HTTP/3 at the edge against HTTP/2 over TLS, through the release binary on
# loopback:
#
#   scripts/http3-bench/run.sh SLUICE LOADER FLOODER [ROUNDS] [SECONDS]
#
# SLUICE is the sluice binary; LOADER and FLOODER the examples built by
# `cargo build --release --example h3_load --example quic_initial_flood`
# (target/release/examples/h3_load, .../quic_initial_flood). One ECDSA
# P-256 certificate (CN and SAN localhost, SAN 127.0.0.1), made afresh with
# openssl, serves every TLS and QUIC listener. sluice (`[server.tls]` with
# `http3 = true`: TCP and UDP 18690, admin 18691) runs alone on CPU 1
# (`workers = 1`, docs/configuration.md); the upstream, nginx answering
# `200 ok` on 18692, and every client share CPU 0. Four measures:
#
# (a) CPU per request: keep-alive GETs of /, CONNS connections (default 8)
#     × STREAMS requests in flight on each (default 8), SECONDS s (default
#     10) a run, over HTTP/3 and over HTTP/2 + TLS, ROUNDS rounds (default
#     5), which goes first alternating. One sluice for all rounds, with one
#     per-IP rule that never limits (a decision per request, as the TLS
#     benchmarks have: scripts/tls-bench/README.md). sluice's utime+stime
#     (/proc/PID/stat) µs per request, and the ratio h3/h2 per round.
# (b) The same loads against Debian's caddy (`apt-get install caddy`;
#     skipped with a message without it) on 18693, alone on CPU 1
#     (GOMAXPROCS=1), `protocols h1 h2 h3`, the same certificate, a
#     reverse_proxy to the same upstream: caddy's CPU per request, and
#     sluice's h3 (from (a)) over caddy's.
# (c) A flood of INITIALS client Initials (default 100,000) from SOURCES
#     loopback addresses (default 1,000), FLOOD_RATE a second (default
#     20,000; 0: as fast as they go), none ever going on with its handshake,
#     at a sluice with `quic_retry = "always"` and a per-IP rule, while a
#     real HTTP/3 client (1 connection, REAL_RATE GETs/s, default 200) keeps
#     asking. sluice's CPU is read over a quiet window of BASE s (default 5,
#     the real client alone) and over the flood; the flood's CPU per Initial
#     is reported raw and net of the real client's requests at the quiet
#     window's cost each, and per Retry sluice counted (fewer Retries than
#     Initials: its socket overflowed, FLOOD_RATE is too high for it). Also
#     sluice_quic_retries_total's move, the Retries the flooder saw, the
#     real client's requests and errors, and sluice_requests_total before
#     the client starts and after it ends: the flood itself is never a
#     request, so the total moves by the client's requests only.
# (d) Idle memory: IDLE connections (default 1,000) each way, HTTP/3 and
#     TLS + HTTP/1.1, each having carried one GET, a fresh sluice per set,
#     MEM_ROUNDS rounds (default 3), which goes first alternating. sluice's
#     VmRSS after one warm-up connection and SETTLE s (default 12) after
#     they are all open: KiB per connection, and the sluice_connections
#     gauge for the protocol then.
#
# Results in $TMPDIR/sluice-http3-bench/results.txt (also printed), logs
# beside it. Every client run is bounded by `timeout`; stops only what it
# started, by PID. Ports 18690-18699.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/quiet.sh
. "$here/../lib/quiet.sh"
[ $# -ge 3 ] || { echo "usage: $0 SLUICE LOADER FLOODER [ROUNDS] [SECONDS]" >&2; exit 64; }
bin=$(realpath "$1"); loader=$(realpath "$2"); flooder=$(realpath "$3")
rounds=${4:-5}; seconds=${5:-10}
conns=${CONNS:-8}; streams=${STREAMS:-8}
initials=${INITIALS:-100000}; sources=${SOURCES:-1000}; flood_rate=${FLOOD_RATE:-20000}
real_rate=${REAL_RATE:-200}; base=${BASE:-5}
idle=${IDLE:-1000}; settle=${SETTLE:-12}; mem_rounds=${MEM_ROUNDS:-3}
out=${TMPDIR:-/tmp}/sluice-http3-bench
mkdir -p "$out"
: > "$out/results.txt"
addr=127.0.0.1:18690; admin=127.0.0.1:18691; upstream=127.0.0.1:18692; caddy_addr=127.0.0.1:18693
cert=$out/cert.pem; key=$out/key.pem

for tool in nginx openssl curl taskset python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install $tool)" >&2; exit 1; }
done
# The idle sets: 1,000 UDP sockets or TCP connections at the client, as
# many in sluice and its upstream connections, all inheriting this limit.
ulimit -n "$(ulimit -Hn)" || true
[ "$(ulimit -n)" -ge 8192 ] || { echo "ulimit -n is $(ulimit -n): 8192 wanted" >&2; exit 1; }
udp_in_use() { python3 -c 'import socket, sys
h, p = sys.argv[1].rsplit(":", 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try: s.bind((h, int(p)))
except OSError: sys.exit(0)
sys.exit(1)' "$1"; }
for port in $(seq 18690 18699); do
  in_use "127.0.0.1:$port" && { echo "127.0.0.1:$port (TCP) is already in use" >&2; exit 1; }
  udp_in_use "127.0.0.1:$port" && { echo "127.0.0.1:$port (UDP) is already in use" >&2; exit 1; }
done

started=()
stop() { # pid: TERM, then KILL if it outlives 5 s
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}
cleanup() { for pid in "${started[@]}"; do stop "$pid"; done; }
trap cleanup EXIT
trap 'exit 130' INT TERM

record() { echo "$*" | tee -a "$out/results.txt"; }
die() { echo "$*" >&2; exit 1; }
field() { # name line: the value of name=... in line
  echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -1
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
vmrss_kib() { awk '$1 == "VmRSS:" {print $2}' "/proc/$1/status"; }
metrics() { curl -sf --max-time 5 "http://$admin/metrics"; }
# The sum of a metric's samples, whatever their labels.
metric_sum() { metrics | awk -v m="$1" 'index($1, m "{") == 1 || $1 == m {s += $NF} END {printf "%d", s}'; }
# sluice_connections for one protocol.
connections_gauge() {
  metrics | awk -v p="protocol=\"$1\"" 'index($1, "sluice_connections{") == 1 && index($1, p) {print $NF}'
}
per() { # numerator denominator scale: numerator × scale / denominator, 2 decimals
  awk -v n="$1" -v d="$2" -v s="$3" 'BEGIN {if (d > 0) printf "%.2f", n * s / d; else print "nan"}'
}

# ------------------------------------------------------------------ setup

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$key" \
  -out "$cert" -days 30 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>"$out/openssl.log" \
  || die "openssl could not make the certificate ($out/openssl.log)"

mkdir -p "$out/nginx"
cat > "$out/nginx/nginx.conf" <<EOF
# The upstream: 200 "ok" to everything, keep-alive without end.
daemon off; master_process off; worker_processes 1;
pid $out/nginx/nginx.pid; error_log $out/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $out/nginx/b; proxy_temp_path $out/nginx/p;
  fastcgi_temp_path $out/nginx/f; uwsgi_temp_path $out/nginx/u; scgi_temp_path $out/nginx/s;
  server {
    listen $upstream;
    keepalive_requests 1000000;
    keepalive_timeout 600s;
    location / { return 200 "ok\n"; }
  }
}
EOF
taskset -c 0 nginx -c "$out/nginx/nginx.conf" -p "$out/nginx" 2>"$out/nginx/stderr.log" & up=$!
started+=("$up")
for _ in $(seq 50); do curl -sf -o /dev/null "http://$upstream/" && break; sleep 0.1; done
curl -sf -o /dev/null "http://$upstream/" || die "nginx did not start ($out/nginx/)"

config() { # name retry extra: writes $out/sluice-NAME.toml, quic_retry = RETRY
  cat > "$out/sluice-$1.toml" <<EOF
# scripts/http3-bench/run.sh: sluice on HTTP/3 and TLS, one never-limiting
# per-IP rule.
[server]
listen = "$addr"
upstream = "http://$upstream"
workers = 1
max_connections = 100000
# Each client connection carries all of its run's requests: no GOAWAY
# after the default 10,000 (docs/configuration.md).
max_requests_per_connection = 1000000000
shutdown_grace = "1s"
$3

[server.tls]
certs = [{ cert = "$cert", key = "$key" }]
http3 = true
quic_retry = $2

[admin]
listen = "$admin"

[[rule]]
name = "per-ip"
key = ["ip"]
rate = "1000000000/s"
EOF
}
ready() { # /readyz answers 200 within 10 s
  for _ in $(seq 100); do
    curl -sf --max-time 1 "http://$admin/readyz" >/dev/null && return 0
    sleep 0.1
  done
  return 1
}
sluice() { # config log: starts sluice on CPU 1, sets $pid
  taskset -c 1 "$bin" run --config "$out/sluice-$1.toml" >/dev/null 2>"$out/$2" & pid=$!
  started+=("$pid")
  ready || die "sluice did not become ready ($out/$2)"
}

# One run of LOADER's MODE at ADDR, sets $line (its line plus the proxy's
# CPU per request); warm-ups go through it too.
load_run() { # proxy-pid mode addr seconds
  local c0 c1 requests
  c0=$(cpu_ticks "$1")
  line=$(timeout $(($4 + 60)) taskset -c 0 "$loader" "$2" "$3" "$cert" "$conns" "$streams" \
    "$4" / 2>>"$out/loader.err") || die "$2 at $3 failed: $line (see $out/loader.err)"
  c1=$(cpu_ticks "$1")
  requests=$(field requests "$line")
  line="$line cpu_ticks=$((c1 - c0)) cpu_us_per_req=$(per $((c1 - c0)) "$requests" $((1000000 / tick)))"
}
rounds_of() { # part proxy-name pid addr
  for mode in h3 h2; do load_run "$3" "$mode" "$4" 2; done   # warm-up
  for r in $(seq "$rounds"); do
    order="h3 h2"; [ $((r % 2)) = 0 ] && order="h2 h3"
    for mode in $order; do
      load_run "$3" "$mode" "$4" "$seconds"
      record "part=$1 round=$r proxy=$2 $line"
    done
  done
}

# ------------------------------------------------------------------ (a)

echo "== (a) CPU per request, h3 against h2 + TLS, through sluice"
config load 100 ""
quiet 30
sluice load sluice-a.log
rounds_of a sluice "$pid" "$addr"
stop "$pid"

# ------------------------------------------------------------------ (b)

echo "== (b) the same against caddy"
if command -v caddy >/dev/null; then
  mkdir -p "$out/caddy"
  cat > "$out/caddy/Caddyfile" <<EOF
{
	admin off
	auto_https off
	servers {
		protocols h1 h2 h3
	}
}
https://localhost:${caddy_addr##*:} {
	bind 127.0.0.1
	tls $cert $key
	reverse_proxy $upstream
}
EOF
  quiet 30
  XDG_DATA_HOME=$out/caddy XDG_CONFIG_HOME=$out/caddy GOMAXPROCS=1 taskset -c 1 \
    caddy run --config "$out/caddy/Caddyfile" --adapter caddyfile >"$out/caddy/log" 2>&1 & pid=$!
  started+=("$pid")
  for _ in $(seq 100); do
    curl -sfk --max-time 1 -o /dev/null "https://$caddy_addr/" && break; sleep 0.1
  done
  curl -sfk --max-time 1 -o /dev/null "https://$caddy_addr/" || die "caddy did not start ($out/caddy/log)"
  rounds_of b caddy "$pid" "$caddy_addr"
  stop "$pid"
else
  record "part=b skipped: no caddy (apt-get install -y caddy)"
fi

# ------------------------------------------------------------------ (c)

echo "== (c) a flood of Initials with quic_retry = \"always\""
config flood '"always"' ""
quiet 30
sluice flood sluice-c.log
if [ "$flood_rate" = 0 ]; then flood_secs=30; else flood_secs=$((initials / flood_rate + 1)); fi
requests0=$(metric_sum sluice_requests_total)
retries0=$(metric_sum sluice_quic_retries_total)
# Room for the flooder to build its Initials (its stderr says how long).
client_secs=$((2 + base + 20 + flood_secs + 5))
timeout $((client_secs + 30)) taskset -c 0 "$loader" h3 "$addr" "$cert" 1 1 "$client_secs" / \
  "$real_rate" >"$out/real-client.txt" 2>"$out/real-client.err" & client=$!
started+=("$client")
sleep 2
c0=$(cpu_ticks "$pid"); q0=$(metric_sum sluice_requests_total)
sleep "$base"
c1=$(cpu_ticks "$pid"); q1=$(metric_sum sluice_requests_total)
# The flooder builds its Initials before it sends (seconds with sluice
# idle but for the real client, whose requests are counted out below).
flood=$(timeout $((flood_secs + 120)) taskset -c 0 "$flooder" "$addr" "$initials" "$flood_rate" \
  "$sources" 2 2>"$out/flood.err" | tee "$out/flood.txt" | grep '^flood ') \
  || die "the flooder failed ($out/flood.err)"
c2=$(cpu_ticks "$pid"); q2=$(metric_sum sluice_requests_total)
retries1=$(metric_sum sluice_quic_retries_total)
wait "$client" || die "the real client failed ($out/real-client.err)"
real=$(cat "$out/real-client.txt")
requests1=$(metric_sum sluice_requests_total)
stop "$pid"
us_tick=$((1000000 / tick))
base_us_per_req=$(per $((c1 - c0)) $((q1 - q0)) "$us_tick")
net_ticks=$(awk -v c=$((c2 - c1)) -v q=$((q2 - q1)) -v b="$base_us_per_req" -v t="$us_tick" \
  'BEGIN {n = c - (b == "nan" ? 0 : q * b / t); print (n > 0 ? n : 0)}')
record "part=c initials=$initials sources=$sources sent=$(field sent "$flood")" \
  "flood_seconds=$(field seconds "$flood") retries_seen=$(field retries "$flood")" \
  "other_seen=$(field other "$flood") sluice_quic_retries=$((retries1 - retries0))" \
  "cpu_ticks=$((c2 - c1)) cpu_us_per_initial_raw=$(per $((c2 - c1)) "$initials" "$us_tick")" \
  "cpu_us_per_initial=$(per "$net_ticks" "$initials" "$us_tick")" \
  "cpu_us_per_retry=$(per "$net_ticks" $((retries1 - retries0)) "$us_tick")" \
  "quiet_cpu_us_per_req=$base_us_per_req real_requests_in_flood=$((q2 - q1))"
record "part=c real_client requests=$(field requests "$real") errors=$(field errors "$real")" \
  "p50_us=$(field p50_us "$real") p99_us=$(field p99_us "$real")" \
  "requests_total_before=$requests0 requests_total_after=$requests1" \
  "requests_total_delta=$((requests1 - requests0))"

# ------------------------------------------------------------------ (d)

echo "== (d) idle memory, $idle connections each way"
config memory 100 'header_read_timeout = "120s"
idle_timeout = "120s"'
quiet 30
for r in $(seq "$mem_rounds"); do
  order="idle idle-tls"; [ $((r % 2)) = 0 ] && order="idle-tls idle"
  for mode in $order; do
    sluice memory "sluice-d-$r-$mode.log"
    timeout 30 taskset -c 0 "$loader" "$mode" "$addr" "$cert" 1 0 / >/dev/null 2>>"$out/loader.err" \
      || die "the warm-up connection failed ($out/loader.err)"
    sleep 1
    rss0=$(vmrss_kib "$pid")
    timeout $((settle + 180)) taskset -c 0 "$loader" "$mode" "$addr" "$cert" "$idle" \
      $((settle + 3)) / >"$out/idle-$r-$mode.txt" 2>>"$out/loader.err" & client=$!
    started+=("$client")
    for _ in $(seq 1500); do grep -q '^ready' "$out/idle-$r-$mode.txt" && break; sleep 0.1; done
    grep -q '^ready' "$out/idle-$r-$mode.txt" || die "$mode: not all open in 150 s"
    sleep "$settle"
    rss1=$(vmrss_kib "$pid")
    protocol=h3; [ "$mode" = idle-tls ] && protocol=http1
    gauge=$(connections_gauge "$protocol")
    wait "$client" || die "$mode: the client failed ($out/loader.err)"
    stop "$pid"
    opened=$(field connections "$(grep '^ready' "$out/idle-$r-$mode.txt")")
    record "part=d round=$r mode=$mode connections=$opened" \
      "failed=$(field failed "$(grep '^ready' "$out/idle-$r-$mode.txt")")" \
      "closed=$(field closed "$(grep '^done' "$out/idle-$r-$mode.txt")")" \
      "gauge_$protocol=${gauge:-none} rss_before_kib=$rss0 rss_after_kib=$rss1" \
      "kib_per_conn=$(per $((rss1 - rss0)) "$opened" 1)"
  done
done

# ------------------------------------------------------------------ summary

python3 - "$out/results.txt" <<'EOF' | tee -a "$out/results.txt"
import re, statistics, sys
rows = [dict(re.findall(r'(\w+)=(\S+)', l)) for l in open(sys.argv[1]).read().splitlines()]
def cpu(part, proxy, mode):
    return {r["round"]: float(r["cpu_us_per_req"]) for r in rows
            if r.get("part") == part and r.get("proxy") == proxy and r.get("mode") == mode}
def median(v):
    return statistics.median(v) if v else float("nan")
print("\n== summary: sluice's CPU µs per request (utime+stime), median of rounds")
found = {}
for part, proxy in (("a", "sluice"), ("b", "caddy")):
    h3, h2 = cpu(part, proxy, "h3"), cpu(part, proxy, "h2")
    if not h3:
        continue
    found[proxy] = median(list(h3.values()))
    ratios = [h3[k] / h2[k] for k in h3 if h2.get(k)]
    print(f"{proxy}: h3 {sorted(h3.values())} median {median(list(h3.values())):.2f}; "
          f"h2 {sorted(h2.values())} median {median(list(h2.values())):.2f}; "
          f"h3/h2 per round {[round(x, 2) for x in ratios]} median {median(ratios):.2f}")
if "caddy" in found:
    print(f"h3, sluice/caddy: {found['sluice'] / found['caddy']:.2f}")
for mode in ("idle", "idle-tls"):
    v = [float(r["kib_per_conn"]) for r in rows if r.get("part") == "d" and r.get("mode") == mode]
    print(f"memory {mode}: KiB per connection {v} median {median(v):.2f}")
EOF
