#!/usr/bin/env bash
# gRPC message limits under load, through the release binary on loopback:
#
#   scripts/grpc-stream-bench/run.sh SLUICE LOADER [ROUNDS] [HELD_ROUNDS] [PER_FRAME...]
#
# SLUICE is the sluice binary, LOADER the example built by
# `cargo build --release --example grpc_stream_load`
# (target/release/examples/grpc_stream_load). Its `serve` mode is the
# upstream, an h2c echo server on 127.0.0.1:18590 that checks each call's
# sequence numbers and prints a line as each call ends. Three measures:
#
# 1. Held to the rate (held.toml): one call on /bench.Load/Held sends 64-byte
#    messages for 30 s as fast as flow control lets it; a message rule delays
#    them to 1000/s. The upstream counts what arrived and checks the order;
#    the client reads sluice's VmRSS (and its anonymous and file-backed
#    parts) before the call and every 250 ms during, both paths' code warmed
#    up first.
# 2. The neighbour: on the same connection, from 2 s to 27 s, a ping-pong
#    call on /bench.Load/Ping (no rule); its latencies, then the same run
#    without the held call. HELD_ROUNDS rounds (default 5), each a fresh
#    sluice (so that each run's RSS starts from the same level), with and
#    without the held call in turn.
# 3. CPU per message: 16 calls on one connection each send 25000 messages
#    (PER_FRAME to a DATA frame; not yet echoed, at most 32 messages, or 4
#    frames' worth when PER_FRAME > 8) through sluice with a message rule
#    that never limits (pass.toml) and with none (none.toml), ROUNDS rounds
#    (default 5), the two in turn, which goes first alternating; sluice's utime+stime (clock ticks,
#    /proc/PID/stat) per message. Once for each PER_FRAME given (default:
#    1, then 16: a frame per message, and messages batched as a client
#    that writes faster than its socket drains sends them). The depth is
#    kept well below what h2 0.4.20 lets a peer have buffered in small DATA
#    frames (half the connection window, a frame under 256 bytes counting
#    256 minus its length; then GOAWAY ENHANCE_YOUR_CALM
#    "too_many_data_frames"): 16 streams × 512 one-message frames in flight
#    made sluice's HTTP/2 server send the client that GOAWAY.
#
# Each sluice runs alone on CPU 1 (`workers = 1`); the upstream and the
# client share CPU 0. Prints each run's lines, then the medians and ratios;
# keeps logs in $TMPDIR/sluice-grpc-stream-bench. Every client run is
# bounded by `timeout`; stops only what it started, by PID.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=$1; loader=$2; rounds=${3:-5}; held_rounds=${4:-5}
shift $(( $# < 4 ? $# : 4 ))
frames=${*:-1 16}
out=${TMPDIR:-/tmp}/sluice-grpc-stream-bench
mkdir -p "$out"
: > "$out/results.txt"
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

ready() { # admin port: /readyz answers 200 within 10 s
  for _ in $(seq 100); do
    curl -sf --max-time 1 "http://127.0.0.1:$1/readyz" >/dev/null && return 0
    sleep 0.1
  done
  echo "sluice on admin port $1 did not become ready" >&2; return 1
}
sluice() { # config log: starts sluice on CPU 1, sets $pid
  taskset -c 1 "$bin" run --config "$here/$1" 2>"$out/$2" & pid=$!
  started+=("$pid")
}
record() { echo "$*" | tee -a "$out/results.txt"; }

taskset -c 0 "$loader" serve 18590 >"$out/upstream.log" 2>&1 & up=$!
started+=("$up")
for _ in $(seq 100); do grep -q '^serving' "$out/upstream.log" && break; sleep 0.1; done
grep -q '^serving' "$out/upstream.log" || { echo "the upstream did not start" >&2; exit 1; }

# The machine's load: other work on either CPU shows in the latencies.
record "loadavg before parts 1 and 2: $(cut -d' ' -f1-3 /proc/loadavg)"
# Parts 1 and 2.
for r in $(seq "$held_rounds"); do
  for mode in held alone; do
    sluice held.toml "sluice-held-$r-$mode.log"; ready 18593 || exit 1
    flag=(); [ "$mode" = alone ] && flag=(--no-held)
    result=$(timeout 200 taskset -c 0 "$loader" held 127.0.0.1:18592 --sluice-pid "$pid" \
      "${flag[@]}" 2>&1) || { echo "$result" >&2; echo "held run $r $mode failed" >&2; exit 1; }
    # The upstream's line for the held call ends as its answer does, before
    # the client exits.
    upstream=$(grep '^call path=/bench.Load/Held' "$out/upstream.log" | tail -1)
    stop "$pid"
    while IFS= read -r line; do record "round=$r $line"; done <<<"$result"
    [ "$mode" = held ] && record "round=$r upstream $upstream"
  done
done

record "loadavg before part 3: $(cut -d' ' -f1-3 /proc/loadavg)"
# Part 3: both sluices up at once, each alone on CPU 1 while it is loaded.
sluice pass.toml sluice-pass.log; pass=$pid; ready 18595 || exit 1
sluice none.toml sluice-none.log; none=$pid; ready 18597 || exit 1
load() { # name port pid per_frame [messages]: one run, its line or its error
  timeout 300 taskset -c 0 "$loader" load "127.0.0.1:$2" --sluice-pid "$3" --streams 16 \
    --messages "${5:-25000}" --depth "$(( $4 > 8 ? 4 * $4 : 32 ))" --per-frame "$4" 2>&1 | tail -1
  return "${PIPESTATUS[0]}"
}
# A run that fails (a call reset: see PER_FRAME above) is recorded as
# such, its CPU left out, and the round tried again once.
measure() { # round name port pid per_frame
  local line try
  for try in 1 2; do
    if line=$(load "$2" "$3" "$4" "$5"); then
      record "round=$1 config=$2 $line"; return 0
    fi
    record "round=$1 config=$2 per_frame=$5 try=$try FAILED: $line"
  done
}
for per_frame in $frames; do
  # A round each, not counted: connections, pools and allocators warmed.
  load pass 18594 "$pass" "$per_frame" 5000 >/dev/null || echo "warm-up pass failed" >&2
  load none 18596 "$none" "$per_frame" 5000 >/dev/null || echo "warm-up none failed" >&2
  for r in $(seq "$rounds"); do
    order="pass none"; [ $((r % 2)) = 0 ] && order="none pass"
    for name in $order; do
      if [ "$name" = pass ]; then port=18594; p=$pass; else port=18596; p=$none; fi
      measure "$r" "$name" "$port" "$p" "$per_frame"
    done
  done
done
stop "$pass"; stop "$none"
record "loadavg after part 3: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$out/results.txt" <<'EOF'
import re, statistics, sys
lines = open(sys.argv[1]).read().splitlines()
def fields(line):
    return dict(re.findall(r'(\w+)=(\S+)', line))
def med(values):
    return statistics.median(values) if values else float('nan')
rows = [fields(l) for l in lines]
print("\n== 1. held to the rate (upstream)")
up = [f for l, f in zip(lines, rows) if ' upstream call ' in l]
for key in ("rate_first_30s", "rate_5_to_25s"):
    values = [float(f[key]) for f in up]
    print(f"{key}: {values} median {med(values):.1f} (target 1000 ± 5 %)")
print("out_of_order:", [f["out_of_order"] for f in up], " partial_bytes:",
      [f["partial_bytes"] for f in up], " end:", [f["end"] for f in up])
sent = [f for l, f in zip(lines, rows) if ' held sent=' in l]
print("sent:", [f["sent"] for f in sent], " upstream messages:", [f["messages"] for f in up])
print("\n== 1. RSS growth during the run (KiB; target for the held stream ≤ 256 KiB + one message)")
for held in ("true", "false"):
    rss = [f for l, f in zip(lines, rows) if l.split()[1:2] == ["rss"] and f["held"] == held]
    for part in ("", "anon_", "file_"):
        g = [int(f[part + "growth_max_kib"]) for f in rss]
        m = [int(f[part + "growth_median_kib"]) for f in rss]
        print(f"held={held} {part or 'vmrss_'}growth: max {g} (median {med(g)}); "
              f"median {m} (median {med(m)})")
print("\n== 2. neighbour latency (µs)")
for key in ("p50_us", "p99_us"):
    w = [float(f[key]) for l, f in zip(lines, rows) if l.split()[1:2] == ["neighbour"] and f["held"] == "true"]
    wo = [float(f[key]) for l, f in zip(lines, rows) if l.split()[1:2] == ["neighbour"] and f["held"] == "false"]
    print(f"{key}: with {w} median {med(w):.1f}; without {wo} median {med(wo):.1f}; "
          f"ratio {med(w) / med(wo):.3f}")
print("\n== 3. sluice CPU per message (µs)")
for l in lines:
    if "FAILED" in l:
        print(l)
for per_frame in sorted({f.get("per_frame") for f in rows if "per_frame" in f}, key=int):
    for key in ("cpu_us_per_message", "schedstat_us_per_message"):
        got = {}
        for name in ("pass", "none"):
            got[name] = [float(f[key]) for f in rows
                         if f.get("config") == name and f.get("per_frame") == per_frame
                         and key in f]
        rates = {name: med([float(f["messages_per_s"]) for f in rows
                            if f.get("config") == name and f.get("per_frame") == per_frame
                            and "messages_per_s" in f])
                 for name in ("pass", "none")}
        print(f"per_frame={per_frame} {key}: rule {got['pass']} median {med(got['pass']):.3f}; "
              f"none {got['none']} median {med(got['none']):.3f}; "
              f"ratio {med(got['pass']) / med(got['none']):.3f} (target ≤ 1.05); "
              f"messages/s medians {rates['pass']:.0f} / {rates['none']:.0f}")
        # Each round's pair, run back to back: the ratio within a round
        # is steadier than the medians' while other work comes and goes.
        paired = {}
        for f in rows:
            if f.get("per_frame") == per_frame and key in f:
                paired.setdefault(f["round"], {})[f["config"]] = float(f[key])
        ratios = [p["pass"] / p["none"] for p in paired.values() if len(p) == 2]
        print(f"  paired ratios {[round(r, 3) for r in ratios]} median {med(ratios):.3f}")
EOF
