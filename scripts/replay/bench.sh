#!/usr/bin/env bash
# How fast does `sluice replay` decide? A synthetic day of LINES access log
# lines from 100,000 API keys (synthetic_log.py), replayed with five rules
# (scripts/replay/five-rules.toml) on one core: lines per second, best of
# ROUNDS, and the instructions per line callgrind counts on 100,000 lines.
# Each round also says its lines per CPU second (user + system, from GNU
# time): on a machine other work shares, the wall clock measures the share
# the replay got, the CPU time what it cost.
#
# Usage: scripts/replay/bench.sh [LINES] [ROUNDS] [SLUICE_BINARY]
set -euo pipefail
lines=${1:-2000000}
rounds=${2:-3}
sluice=${3:-target/release/sluice}
here=$(dirname "$0")
work=$(mktemp -d /tmp/sluice-replay-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 "$here/synthetic_log.py" "$lines" 100000 86400 >"$work/day.log"
best=0
best_cpu=0
for round in $(seq "$rounds"); do
    /usr/bin/time -f "%e %U %S" -o "$work/time.txt" \
        taskset -c 0 "$sluice" replay --config "$here/five-rules.toml" "$work/day.log" >/dev/null
    read -r wall user system <"$work/time.txt"
    rate=$(python3 -c "print(int($lines / $wall))")
    cpu=$(python3 -c "print(int($lines / ($user + $system)))")
    echo "round $round: $rate lines/s ($cpu lines per CPU second)"
    (( rate > best )) && best=$rate
    (( cpu > best_cpu )) && best_cpu=$cpu
done
echo "best: $best lines/s, $best_cpu lines per CPU second ($lines lines, 100000 keys, five rules, one core)"
if command -v valgrind >/dev/null; then
    head -100000 "$work/day.log" >"$work/100k.log"
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
        "$sluice" replay --config "$here/five-rules.toml" "$work/100k.log" >/dev/null 2>"$work/cg.err"
    total=$(grep -o 'Collected : [0-9]*' "$work/cg.err" | grep -o '[0-9]*$')
    echo "callgrind: $((total / 100000)) instructions per line (100,000 lines, start-up included)"
fi
