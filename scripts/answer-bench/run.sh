#!/usr/bin/env bash
# What charging by the answer (`json:` pointers read from an event stream as
# it streams, docs/charging.md) costs sluice, in one run:
#
#   scripts/answer-bench/run.sh target/release/sluice [ROUNDS] [SECONDS]
#
# The stream (stream.py, written to OUT/stream.sse): an OpenAI
# chat-completions stream of 300 events, 81 kB: `chat.completion.chunk`s of
# one word each with `"usage":null`, the usage chunk (`"choices":[]`,
# prompt_tokens 57, completion_tokens 297), `data: [DONE]`. Two configs of
# one rule `tokens` (key global, token_bucket, 1e9/s: it never refuses):
#   charged   charge = { "json:/usage/prompt_tokens" = 1,
#             "json:/usage/completion_tokens" = 4 }: 57 + 4 x 297 = 1245
#             units a request (charged.toml.tpl);
#   baseline  the same rule without `charge` (baseline.toml.tpl).
#
# 1. CPU per request. nginx (upstream.conf.tpl, one worker) serves
#    stream.sse as text/event-stream (Content-Length, keep-alive) on
#    127.0.0.1:18780, as WRITES says: `event` (the default) in writes of
#    272 bytes, about one event each, without sendfile or coalescing, as
#    an LLM API flushes each event as it is made; `bulk` the whole file at
#    once (sendfile: sluice reads it in large pieces, the scanner's
#    share of the work at its largest); a sluice of each config (`workers = 1`) runs on
#    CPU 1 (charged on :18781, admin :18782; baseline :18783, admin :18784),
#    nginx and the load generator on CPU 0. First each sluice forwards one
#    request by curl (status 200, body == stream.sse; for charged, the
#    metrics below); then 3 s of warm-up each, which also sets N: SECONDS
#    (default 10) x the slower one's requests/s. Then ROUNDS (default 5)
#    rounds, each charged then baseline: `quiet 60` (scripts/lib/quiet.sh:
#    up to QUIET_WAIT s, default 60, for 3 idle seconds), then
#    `h2load --h1 -c16 -m1 -t1 -n N` (16 keep-alive HTTP/1.1 connections,
#    exactly N GETs, all of them finished: no answer is cut off at the end).
#    A round's line: requests/s; sluice's CPU µs per request (utime+stime
#    of the sluice process from /proc/PID/stat, clock ticks, over the
#    round, / N); CPU use of sluice, nginx and h2load (100 % = a core) and
#    of everything else on CPU 0 / CPU 1 (over 5 % on either: NOISY);
#    the checks: every answer 2xx (h2load's status codes) and N x 81018
#    body bytes received; sluice_responses_total{code_class="2xx"} grew by
#    N; and for charged, sluice_budget_charged_total{rule="tokens"} grew by
#    N x 1245 and sluice_charge_errors_total{rule="tokens"} by 0. A check
#    that fails prints FAILED (and the run exits 1). Last, the median CPU
#    µs per request of each config over its quiet rounds (all rounds if
#    none was quiet), and the ratio charged / baseline against the target
#    of at most 1.05 (PASS / FAIL). The two medians come from the same run:
#    compare only these, not figures from different runs.
#
# 2. The timeline (timeline.py; TIMELINE=0 skips it): after `quiet 60`, a
#    Python upstream on 127.0.0.1:18785 writes 20 events, the first 100 ms
#    after the request arrived and then one every 50 ms, each its own write
#    and chunk; a client in the same Python process (CPU 0, same monotonic
#    clock) reads them through a charged sluice (:18786, admin :18787),
#    through a baseline sluice (:18788) and directly, TIMELINE_ROUNDS
#    (default 10) requests each, interleaved. Printed per event: its write
#    and read times (ms after the request reached the upstream) and the
#    delay (µs), medians over the rounds, per path; then each path's first
#    event delay and median delay, and charged minus the others. The claim
#    it supports: charged - baseline is ~0 (within the run's noise, tens of
#    µs on this machine), i.e. the scanner delays no byte. The charged
#    sluice's metrics are checked as in 1 (CHARGE FAILED otherwise).
#
# Files: ${TMPDIR:-/tmp}/sluice-answer-bench (the configs, stream.sse,
# rounds.txt, timeline.csv, the processes' logs). Loopback only; every
# process it starts is stopped by its PID; bounded: each round at most
# QUIET_WAIT + 5 x SECONDS + 30 s (h2load runs under `timeout`), the
# timeline at most 60 + TIMELINE_ROUNDS x 3 x 12 s. Needs nginx, h2load, curl, python3
# (apt-get install -y nginx-light nghttp2-client).
set -u
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { sed -n '/^#   scripts\/answer-bench\/run.sh/p' "$0" | sed 's/^# *//' >&2; exit 2; }
bin=$1; rounds=${2:-5}; secs=${3:-10}
tl_rounds=${TIMELINE_ROUNDS:-10}
out=${TMPDIR:-/tmp}/sluice-answer-bench
[ -x "$bin" ] || { echo "$bin: not an executable" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "needs 2 CPUs (sluice on CPU 1, the rest on CPU 0)" >&2; exit 2; }
for tool in nginx h2load curl python3 taskset; do
  command -v "$tool" >/dev/null || { echo "needs $tool (apt-get install -y nginx-light nghttp2-client)" >&2; exit 2; }
done
mkdir -p "$out/nginx-tmp"
. "$here/../lib/quiet.sh"   # cpu_busy, quiet, tick, in_use

up=127.0.0.1:18780
ch_listen=127.0.0.1:18781 ch_admin=127.0.0.1:18782
bl_listen=127.0.0.1:18783 bl_admin=127.0.0.1:18784
tl_up=127.0.0.1:18785
tlc_listen=127.0.0.1:18786 tlc_admin=127.0.0.1:18787
tlb_listen=127.0.0.1:18788 tlb_admin=127.0.0.1:18789
fill() { # template, output, listen, admin, upstream
  sed -e "s|@LISTEN@|$3|g" -e "s|@ADMIN@|$4|g" -e "s|@UPSTREAM@|$5|g" -e "s|@OUT@|$out|g" "$1" >"$2"; }
fill "$here/charged.toml.tpl" "$out/charged.toml" "$ch_listen" "$ch_admin" "$up"
fill "$here/baseline.toml.tpl" "$out/baseline.toml" "$bl_listen" "$bl_admin" "$up"
fill "$here/charged.toml.tpl" "$out/timeline-charged.toml" "$tlc_listen" "$tlc_admin" "$tl_up"
fill "$here/baseline.toml.tpl" "$out/timeline-baseline.toml" "$tlb_listen" "$tlb_admin" "$tl_up"
fill "$here/upstream.conf.tpl" "$out/nginx.conf" "$up" - -
case "${WRITES:-event}" in
  event) writes="sendfile off; output_buffers 1 272; postpone_output 0; tcp_nodelay on;" ;;
  bulk) writes="" ;;
  *) echo "WRITES is event or bulk" >&2; exit 2 ;;
esac
sed -i "s|@WRITES@|$writes|" "$out/nginx.conf"
read -r prompt completion size < <(python3 "$here/stream.py" "$out/stream.sse")
expected=$((prompt + 4 * completion))

ng= chs= bls= tlc= tlb=
stop() { # by PID, only what this script started
  local p
  for p in $chs $bls $tlc $tlb $ng; do kill -TERM "$p" 2>/dev/null; done
  wait 2>/dev/null
  ng= chs= bls= tlc= tlb=
}
trap stop EXIT
trap 'exit 130' INT TERM HUP
for a in $up $ch_listen $ch_admin $bl_listen $bl_admin $tl_up $tlc_listen $tlc_admin $tlb_listen $tlb_admin; do
  if in_use "$a"; then echo "$a is already taken (by a process this script did not start): stop it first" >&2; exit 1; fi
done

start_sluice() { # variable, config, admin: starts sluice on CPU 1, its PID in the variable
  taskset -c 1 "$bin" run --config "$2" >>"$2.log" 2>&1 & local pid=$!
  printf -v "$1" %s "$pid"
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://$3/healthz" && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "sluice ($2) did not come up; $2.log:" >&2; tail "$2.log" >&2; return 1
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
metric() { # admin, series name, label filter: the sum of the matching series
  curl -s "http://$1/metrics" | awk -v n="$2" -v f="$3" 'index($0, n "{") == 1 && index($0, f) {s += $NF} END {printf "%d\n", s}'; }
charged() { metric "$1" sluice_budget_charged_total 'rule="tokens"'; }
errors() { metric "$1" sluice_charge_errors_total 'rule="tokens"'; }
ok2xx() { metric "$1" sluice_responses_total 'code_class="2xx"'; }
failed=0
fail() { echo "FAILED: $*"; failed=1; }

verify() { # name, listen, admin: one request by curl
  local c0 e0 code
  c0=$(charged "$3"); e0=$(errors "$3")
  code=$(curl -s -o "$out/$1.verify" -D "$out/$1.verify.head" -w '%{http_code}' "http://$2/v1/chat/completions")
  sleep 0.2
  local dc=$(( $(charged "$3") - c0 )) de=$(( $(errors "$3") - e0 ))
  echo "  $1: one request by curl: status $code, $(wc -c <"$out/$1.verify") body bytes, $(grep -i '^content-type' "$out/$1.verify.head" | tr -d '\r'); charged +$dc units, charge errors +$de"
  [ "$code" = 200 ] || fail "$1: status $code"
  cmp -s "$out/$1.verify" "$out/stream.sse" || fail "$1: the body is not stream.sse"
  if [ "$1" = charged ]; then
    [ "$dc" = "$expected" ] && [ "$de" = 0 ] || fail "$1: charged $dc units (expected $expected) with $de charge errors (expected 0)"
  else
    [ "$dc" = 0 ] && [ "$de" = 0 ] || fail "$1: the baseline charged $dc units, $de charge errors"
  fi
}

load() { # listen, n: h2load on CPU 0, then a line `h2load ticks: T` (its own CPU)
  (me=$BASHPID
   timeout $((5 * secs + 30)) taskset -c 0 h2load --h1 -c16 -m1 -t1 -n "$2" "http://$1/v1/chat/completions" 2>&1
   echo "h2load ticks: $(awk '{print $16 + $17}' "/proc/$me/stat")")
}

round() { # name, listen, admin, sluice pid, n
  local name=$1 listen=$2 admin=$3 pid=$4 n=$5
  quiet 60
  local c0 e0 r0 t0 ng0 cpu0 cpu1 w0 result
  c0=$(charged "$admin"); e0=$(errors "$admin"); r0=$(ok2xx "$admin")
  t0=$(ticks "$pid"); ng0=$(ticks "$ngw"); cpu0=$(cpu_busy 0); cpu1=$(cpu_busy 1); w0=$(date +%s.%N)
  result=$(load "$listen" "$n")
  local w1 t1 ng1
  w1=$(date +%s.%N); t1=$(ticks "$pid"); ng1=$(ticks "$ngw")
  cpu0=$(( $(cpu_busy 0) - cpu0 )); cpu1=$(( $(cpu_busy 1) - cpu1 ))
  sleep 0.2
  local dc=$(( $(charged "$admin") - c0 )) de=$(( $(errors "$admin") - e0 )) dr=$(( $(ok2xx "$admin") - r0 ))
  local done ok data rate hl
  done=$(echo "$result" | awk '/^requests:/ {print $8}')   # succeeded
  ok=$(echo "$result" | awk '/^status codes:/ {print $3}')
  data=$(echo "$result" | awk '/^traffic:/ {gsub(/[()]/, "", $(NF-1)); print $(NF-1)}')
  rate=$(echo "$result" | awk '/^finished in/ {print $4}')
  hl=$(echo "$result" | awk '/^h2load ticks:/ {print $3}')
  local checks=""
  [ "${done:-0}" = "$n" ] && [ "${ok:-0}" = "$n" ] || checks+=" answered ${ok:-0} 2xx of ${done:-0} done, $n sent;"
  [ "${data:-0}" = $((n * size)) ] || checks+=" body bytes ${data:-0}, expected $((n * size));"
  [ "$dr" = "$n" ] || checks+=" sluice counted $dr 2xx answers;"
  if [ "$name" = charged ]; then
    [ "$dc" = $((n * expected)) ] && [ "$de" = 0 ] || checks+=" charged $dc units (expected $((n * expected))), charge errors +$de (expected 0);"
  else
    [ "$dc" = 0 ] && [ "$de" = 0 ] || checks+=" the baseline charged $dc units, $de charge errors;"
  fi
  python3 - "$name" "${rate:-0}" "$n" $((t1 - t0)) $((ng1 - ng0)) "${hl:-0}" "$cpu0" "$cpu1" "$tick" "$w0" "$w1" \
    "$dc" "$de" "$checks" <<'PY'
import sys
name, rate, n, sl, ng, hl, cpu0, cpu1, hz, w0, w1, dc, de, checks = sys.argv[1:]
n, sl, ng, hl, cpu0, cpu1, hz = map(int, (n, sl, ng, hl, cpu0, cpu1, hz))
wall = float(w1) - float(w0)
pct = lambda t: 100 * t / hz / wall
o0, o1 = pct(max(0, cpu0 - ng - hl)), pct(max(0, cpu1 - sl))
noisy = "  NOISY" if max(o0, o1) > 5 else ""
check = f"  FAILED:{checks}" if checks else "  checks ok"
print(f"{name:8} {float(rate):7.0f} req/s  {sl / hz * 1e6 / n:7.1f} CPU us/req  "
      f"CPU: sluice {pct(sl):3.0f}% nginx {pct(ng):3.0f}% h2load {pct(hl):3.0f}% others {o0:2.0f}%/{o1:2.0f}%  "
      f"charged +{dc} errors +{de}{check}{noisy}")
PY
  [ -z "$checks" ] || failed=1
  echo "$result" | grep -E '^requests:' | grep -v ' 0 failed, 0 errored, 0 timeout' | sed 's/^/  h2load: /'
}

echo "sluice: $bin (built $(date -r "$bin" '+%F %T')); stream: $((completion + 3)) events, $size bytes, usage $prompt + $completion tokens: $expected units a charged request"
if [ "$rounds" -gt 0 ]; then
  taskset -c 0 nginx -c "$out/nginx.conf" -p "$out" >"$out/nginx.log" 2>&1 & ng=$!
  for _ in $(seq 50); do curl -s -o /dev/null "http://$up/" && break; sleep 0.1; done
  ngw=$(pgrep -P "$ng" | head -1)
  [ -n "$ngw" ] || { echo "nginx did not come up: $out/nginx-error.log" >&2; tail "$out/nginx-error.log" >&2; exit 1; }
  start_sluice chs "$out/charged.toml" "$ch_admin" || exit 1
  start_sluice bls "$out/baseline.toml" "$bl_admin" || exit 1
  echo "checks:"
  verify charged "$ch_listen" "$ch_admin"
  verify baseline "$bl_listen" "$bl_admin"
  echo "warm-up (3 s each, not counted):"
  rate() { timeout 30 taskset -c 0 h2load --h1 -c16 -m1 -t1 -D 3 "http://$1/v1/chat/completions" 2>&1 | awk '/^finished in/ {print int($4)}'; }
  r1=$(rate "$ch_listen"); r2=$(rate "$bl_listen")
  echo "  charged ${r1:-?} req/s, baseline ${r2:-?} req/s"
  [ -n "$r1" ] && [ -n "$r2" ] && [ "$r1" -gt 0 ] && [ "$r2" -gt 0 ] || { echo "the warm-up failed" >&2; exit 1; }
  n=$(( (r1 < r2 ? r1 : r2) * secs ))
  echo "$rounds rounds of $n requests (~$secs s) each, charged then baseline:"
  rm -f "$out/rounds.txt"
  for r in $(seq "$rounds"); do
    echo "round $r"
    round charged "$ch_listen" "$ch_admin" "$chs" "$n" | tee -a "$out/rounds.txt"
    round baseline "$bl_listen" "$bl_admin" "$bls" "$n" | tee -a "$out/rounds.txt"
  done
  grep -q FAILED "$out/rounds.txt" && failed=1
  python3 - "$out/rounds.txt" <<'PY'
import re, statistics, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if re.match(r"(charged|baseline) ", l)]
med = {}
for label in ("charged", "baseline"):
    rows = [l for l in lines if l.startswith(label + " ")]
    quiet = [l for l in rows if "NOISY" not in l]
    use = quiet or rows
    us = [float(re.search(r"([0-9.]+) CPU us/req", l).group(1)) for l in use]
    rps = [float(re.search(r"([0-9.]+) req/s", l).group(1)) for l in use]
    med[label] = statistics.median(us)
    print(f"{label:8} median of {len(use)} {'quiet ' if quiet else ''}rounds{'' if quiet else ' (none was quiet)'}: "
          f"{med[label]:7.1f} CPU us/req (min {min(us):.1f}, max {max(us):.1f}), {statistics.median(rps):.0f} req/s")
ratio = med["charged"] / med["baseline"]
print(f"ratio charged / baseline: {ratio:.3f}  (target <= 1.05: {'PASS' if ratio <= 1.05 else 'FAIL'})")
PY
  kill -TERM "$chs" "$bls" "$ng" 2>/dev/null; wait 2>/dev/null; chs= bls= ng=
fi

if [ "${TIMELINE:-1}" != 0 ]; then
  echo
  echo "timeline: 20 events 50 ms apart, through charged (:${tlc_listen##*:}), baseline (:${tlb_listen##*:}) and direct"
  start_sluice tlc "$out/timeline-charged.toml" "$tlc_admin" || exit 1
  start_sluice tlb "$out/timeline-baseline.toml" "$tlb_admin" || exit 1
  quiet 60
  timeout $((60 + tl_rounds * 3 * 12)) taskset -c 0 python3 "$here/timeline.py" --upstream-port "${tl_up##*:}" \
    --target "charged=$tlc_listen" --target "baseline=$tlb_listen" --target direct \
    --admin "charged=$tlc_admin" --rounds "$tl_rounds" --out "$out" || failed=1
fi
stop
[ "$failed" = 0 ] || { echo "FAILED: see the lines above"; exit 1; }
