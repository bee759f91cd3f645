#!/usr/bin/env bash
# The adaptive concurrency limit (`algorithm = "adaptive"`) against a
# synthetic upstream whose capacity the limit has to learn from latency:
#
#   scripts/adaptive-bench/run.sh target/release/sluice SCENARIO
#   scripts/adaptive-bench/run.sh target/release/sluice all     # the seven below, in turn
#   scripts/adaptive-bench/run.sh none SCENARIO                 # clients straight at the upstream
#
# The upstream (upstream.py, Python asyncio) has c workers and one FIFO
# queue: each request holds a worker for the service time (20 ms), so past c
# requests in flight latency grows by queueing. The clients (clients.rs, a
# thread and one keep-alive connection each; run.sh builds it with rustc -O)
# are closed-loop: each sends its next request when the last is answered,
# and after a refusal keeps the connection and sleeps BACKOFF_MS (default
# 50) give or take JITTER (default 0.5, i.e. 25-75 ms; 0 for exactly 50).
# sluice runs alone on CPU 1 (`workers = 1`); the upstream, the clients and
# the sampler (load.py) share CPU 0. Every 100 ms the sampler reads the
# limit (the admin port's gauge `sluice_adaptive_limit{rule="adaptive"}`)
# and the upstream's in-flight (accepted and not answered, the queued
# included; GET /stats, which also gives its time-average since the last
# sample), and changes c when the scenario says (POST /control, body `c=5`).
#
#   converge  adaptive.toml; c = 10, 50 clients, 30 s. Targets: the
#             upstream's in-flight settles within 1.5c = 15 within 10 s
#             (every 1 s mean from then on, and the mean over 10-30 s);
#             goodput (2xx/s) over 10-30 s >= 80 % of c/service = 400/s;
#             refusals answered in < 1 ms at p99 (client-measured, the whole
#             run); a refusal is a 503 with Retry-After and a problem+json
#             `type` ending in "overloaded".
#   baseline  baseline.toml (a plain concurrency rule, max_in_flight 1000);
#             otherwise as converge. Shows what the limit saves the upstream:
#             its mean in-flight over 10-30 s ~ the 50 clients (>= 45), no
#             refusal.
#   degrade   adaptive.toml; c = 10 for 15 s, 5 for 15 s, 10 again for 20 s;
#             50 clients. Targets: before the halving as converge; after it
#             every 1 s mean in-flight <= 1.5 x 5 within 5 s (and the mean
#             over 20-30 s); goodput over 40-50 s (10 s after c is back)
#             >= 400/s; refusal p99 < 1 ms. Also printed: when the limit's
#             own 1 s mean falls under 7.5, when goodput first reaches
#             400/s again, the goodput while halved (c/service = 250/s).
#   delay     delay.toml (the rule of converge with min_in_flight 2,
#             on_limit = "delay", max_delay 5s, max_queue 5); c = 10, 50
#             clients, 30 s. Targets: the upstream never holds more than the
#             limit's start (20: the most in flight between two samples); the
#             mean in-flight of every 4 s window after the first second
#             <= 1.5c; the limit's swing (max - min over 10-30 s) no wider
#             than converge's, when converge.csv from the same OUT is there
#             (`all` runs converge first).
#   light     adaptive.toml; c = 100, 10 clients that think 100 ms between
#             requests, 60 s. Target: no refusal at all.
#   noise     adaptive.toml; exponential service times (mean 20 ms), c = 20,
#             15 clients, 30 s. Targets: refusals <= 1 % of the answers; the
#             sampled limit never at its floor (the rule's min_in_flight).
#   overload-noise  converge with exponential service times (mean 20 ms):
#             c = 10, 50 clients, 30 s. Targets: mean in-flight over 10-30 s
#             <= 1.5c; the limit never at its floor (noise must not read as
#             a queue); refusal p99 < 1 ms. Goodput is printed against
#             converge's 80 % of c/service, as information.
#   upstream  no sluice (pass `none`): the upstream's own capacity, c =
#             100000 and no service time, 50 clients on CPU 1, 10 s. Target:
#             >= 2,000 requests/s per core of the upstream's CPU (requests
#             over its CPU seconds).
#
# Refusals are the 503s sluice writes (and 429s, which a plain concurrency
# rule answers: CONFIG=scripts/adaptive-bench/concurrency.toml runs any
# scenario against a fixed limit of 15 on a build without the adaptive
# algorithm, to test the harness; the limit panel then says the gauge is
# missing). CONFIG=FILE replaces the scenario's sluice config (the ports are
# read from it; `all` passes it to baseline too); RULE names the rule whose
# gauge is sampled (default: the config's adaptive rule, else its first);
# PYCLIENTS=1 runs the clients in load.py's event loop instead (cheaper to
# read, but its batching puts a 0.1 ms refusal at ~3 ms p99: not for the
# latency target).
#
# Each run first waits (up to QUIET_WAIT s, default 120) for three seconds in
# a row in which the machine is nearly idle, then prints each process's CPU
# share and what else ran on the two CPUs: a run where that is over 5 % of a
# CPU is marked NOISY (a cargo build beside it puts the refusals' p99 at
# several ms). Written to ${OUT:-/tmp/sluice-adaptive-bench}: SCENARIO.csv
# (one row per 100 ms: t, limit, upstream_in_flight, upstream_c,
# lat_2xx_mean_ms, lat_503_p99_ms, goodput_per_s, refused_per_s, then
# upstream_in_flight_avg, upstream_queued, lat_2xx_p99_ms, other_per_s),
# SCENARIO.txt (the summary, each target PASS/FAIL with its figure; also
# printed) and SCENARIO.png (4 panels over time: limit and c; upstream
# in-flight; 2xx mean and refusal p99 latency; goodput and refusals), beside
# the raw files (SCENARIO.requests.csv: every answer; .samples.csv; the
# processes' logs), from which analyze.py redraws them. matplotlib is
# pip-installed into the user site if missing (without it there is no PNG).
# Each run checks its ports are free, sends traffic to loopback only, is
# bounded (QUIET_WAIT, then the scenario's length plus at most 20 s), and
# stops what it started by PID.
set -u
here=$(cd "$(dirname "$0")" && pwd)
usage() { sed -n '/^#   scripts\/adaptive-bench\/run.sh/p' "$0" | sed 's/^# *//' >&2
          echo "SCENARIO: converge, baseline, degrade, delay, light, noise, overload-noise, upstream, all" >&2; exit 2; }
[ $# -eq 2 ] || usage
bin=$1; scenario=$2
out=${OUT:-/tmp/sluice-adaptive-bench}
mkdir -p "$out"

if [ "$scenario" = all ]; then
  for s in converge baseline degrade delay light noise overload-noise; do "$0" "$bin" "$s" || exit $?; echo; done
  exit 0
fi

clients=50 think=0 c=10 dist=fixed service=20 duration=30 changes= config=$here/adaptive.toml load_cpu=0
case $scenario in
  converge) ;;
  baseline) config=$here/baseline.toml ;;
  degrade) duration=50 changes=15:5,30:10 ;;
  delay) config=$here/delay.toml ;;
  light) c=100 clients=10 think=100 duration=60 ;;
  noise) c=20 clients=15 dist=exp ;;
  overload-noise) dist=exp ;;
  upstream) c=100000 service=0 duration=10 load_cpu=1
    [ "$bin" = none ] || { echo "the upstream scenario runs without sluice: pass none" >&2; exit 2; } ;;
  *) usage ;;
esac
config=${CONFIG:-$config}
backoff=${BACKOFF_MS:-50}
jitter=${JITTER:-0.5}
[ "$bin" = none ] || [ -x "$bin" ] || { echo "$bin: not an executable" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "needs 2 CPUs (sluice on CPU 1, the rest on CPU 0)" >&2; exit 2; }

# listen, admin, upstream (host:port), the sampled rule and its min_in_flight, from the config
read -r listen admin upstream rule floor < <(python3 - "$config" "${RULE:-}" <<'PY'
import sys, tomllib, urllib.parse
cfg = tomllib.load(open(sys.argv[1], "rb"))
up = urllib.parse.urlsplit(cfg["server"]["upstream"])
rules = cfg.get("rule", [])
pick = [r for r in rules if r.get("name") == sys.argv[2]] or [r for r in rules if r.get("algorithm") == "adaptive"] or rules or [{}]
print(cfg["server"]["listen"], cfg.get("admin", {}).get("listen", "-"), f"{up.hostname}:{up.port or 80}",
      pick[0].get("name", "adaptive"), pick[0].get("min_in_flight", 1))
PY
) || { echo "cannot read $config" >&2; exit 2; }
for a in "$listen" "$admin" "$upstream"; do
  case $a in 127.*|localhost:*|-) ;; *) echo "$config: $a is not a loopback address" >&2; exit 2 ;; esac
done
up_port=${upstream##*:}
prefix=$out/$scenario
rm -f "$prefix".*

up= sl= ld= sm=
stop() { # by PID, only what this script started
  [ -n "$ld" ] && kill -TERM "$ld" 2>/dev/null
  [ -n "$sm" ] && kill -TERM "$sm" 2>/dev/null
  [ -n "$sl" ] && kill -TERM "$sl" 2>/dev/null
  [ -n "$up" ] && kill -TERM "$up" 2>/dev/null
  wait 2>/dev/null
  ld= sm= sl= up=
}
trap stop EXIT
trap 'exit 130' INT TERM HUP

. "$here/../lib/quiet.sh"   # cpu_busy, quiet, tick, in_use
ports=$upstream; [ "$bin" = none ] || ports="$ports $listen $admin"
for a in $ports; do
  if in_use "$a"; then echo "$a is already taken (by a process this script did not start): stop it first" >&2; exit 1; fi
done

clients_bin=${TMPDIR:-/tmp}/sluice-adaptive-bench-clients
if [ -z "${PYCLIENTS:-}" ] && ! [ "$clients_bin" -nt "$here/clients.rs" ]; then
  echo "building the clients: rustc -O $here/clients.rs -o $clients_bin"
  rustc -O --edition 2021 -o "$clients_bin" "$here/clients.rs" || exit 1
fi
if ! python3 -c 'import matplotlib' 2>/dev/null; then
  echo "matplotlib is missing: installing it into the user site (pip install --user matplotlib) for the plot"
  python3 -m pip install --user --quiet matplotlib >"$out/pip.log" 2>&1 \
    || echo "  pip failed ($out/pip.log): no PNG this time, the CSV and summary still come"
fi

taskset -c 0 python3 "$here/upstream.py" --port "$up_port" --c "$c" --service-ms "$service" --dist "$dist" \
  >"$prefix.upstream.log" 2>&1 & up=$!
for _ in $(seq 50); do curl -s -o /dev/null "http://$upstream/stats" && break; sleep 0.1; done
curl -s -o /dev/null "http://$upstream/stats" || { echo "the upstream did not come up:" >&2; cat "$prefix.upstream.log" >&2; exit 1; }

target=$upstream metrics=
if [ "$bin" != none ]; then
  taskset -c 1 "$bin" run --config "$config" >"$prefix.sluice.log" 2>&1 & sl=$!
  code=
  for _ in $(seq 100); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://$listen/probe")
    [ "$code" = 200 ] && break
    kill -0 "$sl" 2>/dev/null || break
    sleep 0.1
  done
  if [ "$code" != 200 ]; then
    echo "sluice did not forward a request (last answer: ${code:-none}); $prefix.sluice.log:" >&2
    tail "$prefix.sluice.log" >&2; exit 1
  fi
  target=$listen
  [ "$admin" = - ] || metrics=$admin
fi

ticks() { [ -n "$1" ] && awk '{print $14 + $15}' "/proc/$1/stat" || echo 0; }
echo "$scenario: $( [ "$bin" = none ] && echo "no sluice" || echo "$bin, $(basename "$config")"), c=$c ($dist $service ms${changes:+, changes $changes}), $clients clients$( [ "$think" = 0 ] || echo " (think $think ms)"), ${duration} s"
quiet 120
up0=$(ticks "$up"); sl0=$(ticks "$sl"); c00=$(cpu_busy 0); c10=$(cpu_busy 1); t0=$(date +%s.%N)
schedule=$(echo "$changes" | sed 's/:/:c=/g')
bound=$((${duration%.*} + 20))
if [ -n "${PYCLIENTS:-}" ]; then # the clients and the sampler in one Python process
  taskset -c "$load_cpu" timeout "$bound" python3 "$here/load.py" --target "$target" \
    --clients "$clients" --duration "$duration" --think-ms "$think" --backoff-ms "$backoff" \
    --stats "$upstream" ${metrics:+--metrics "$metrics"} --rule "$rule" ${schedule:+--schedule "$schedule"} \
    --out "$prefix" & ld=$!
  wait "$ld"; rc=$?; ld=
else # clients.rs's threads, and load.py sampling alone, from one instant
  start=$(( $(date +%s%N) + 1000000000 ))
  taskset -c 0 timeout "$bound" python3 "$here/load.py" --target "$target" --clients 0 --duration "$duration" \
    --stats "$upstream" ${metrics:+--metrics "$metrics"} --rule "$rule" ${schedule:+--schedule "$schedule"} \
    --start-unix-ns "$start" --out "$prefix" & sm=$!
  taskset -c "$load_cpu" timeout "$bound" "$clients_bin" --target "$target" --clients "$clients" \
    --duration "$duration" --think-ms "$think" --backoff-ms "$backoff" --jitter "$jitter" \
    --start-unix-ns "$start" --out "$prefix" & ld=$!
  wait "$ld"; rc=$?; ld=
  wait "$sm"; src=$?; sm=
  [ "$src" = 0 ] || rc=$src
fi
[ "$rc" = 0 ] || { echo "the load ended with status $rc" >&2; exit 1; }
t1=$(date +%s.%N); up1=$(ticks "$up"); sl1=$(ticks "$sl"); c01=$(cpu_busy 0); c11=$(cpu_busy 1)
[ -z "$sl" ] || kill -0 "$sl" 2>/dev/null || echo "  sluice is gone: see $prefix.sluice.log"
stop

# the clients' CPU seconds: load.py writes cpu_s, clients.rs cpu_ticks; plus the sampler's
ld_cpu=$(cat "$prefix.load.txt" "$prefix.sampler.txt" 2>/dev/null |
  awk -v hz="$tick" '$1 == "cpu_s" {s += $2} $1 == "cpu_ticks" {s += $2 / hz} END {print s + 0}')
cpu=$(python3 -c 'import sys
hz, wall = int(sys.argv[1]), float(sys.argv[3]) - float(sys.argv[2])
up, sl, c0, c1 = (int(x) / hz for x in sys.argv[4:8])
ld = float(sys.argv[8])
pct = lambda s: 100 * s / wall
o0, o1 = pct(max(0, c0 - up - ld)), pct(max(0, c1 - sl))
if sys.argv[9] == "1":  # the clients ran on CPU 1
    o0, o1 = pct(max(0, c0 - up)), pct(max(0, c1 - ld))
print(f"CPU over the run: upstream {pct(up):.0f} %, clients {pct(ld):.0f} %, sluice {pct(sl):.0f} %; "
      f"CPU 0 busy {pct(c0):.0f} %, CPU 1 {pct(c1):.0f} %; others {o0:.0f} % / {o1:.0f} %|{up:.3f}|{pct(c0):.0f}|{max(o0, o1):.0f}")' \
  "$tick" "$t0" "$t1" $((up1 - up0)) $((sl1 - sl0)) $((c01 - c00)) $((c11 - c10)) "${ld_cpu:-0}" "$load_cpu")
IFS='|' read -r cpu_line up_cpu_s cpu0_pct others_pct <<<"$cpu"
info=(--info "sluice: $bin$( [ "$bin" = none ] || echo " (built $(date -r "$bin" '+%F %T')), config $config")"
      --info "upstream: c=$c${changes:+ then $changes (t:c)}, $dist service $service ms; $clients clients, think $think ms, backoff $backoff ms; ${duration} s"
      --info "$cpu_line")
[ "${cpu0_pct:-0}" -le 85 ] || [ "$scenario" = upstream ] || info+=(--info "WARNING: CPU 0 was ${cpu0_pct} % busy: the clients' and the upstream's timing may be off")
[ "${others_pct:-0}" -le 5 ] || info+=(--info "NOISY: other processes took ${others_pct} % of a CPU the run used: latencies are not to be trusted")
python3 "$here/analyze.py" --scenario "$scenario" --prefix "$prefix" --c "$c" --changes "$changes" \
  --clients "$clients" --duration "$duration" --service-ms "$service" --min-in-flight "$floor" \
  --rule "$rule" --upstream-cpu-s "$up_cpu_s" \
  --title "$( [ "$bin" = none ] && echo "no sluice" || basename "$config"); c=$c${changes:+ then $changes}, $dist ${service} ms, $clients clients" \
  "${info[@]}"
