#!/usr/bin/env bash
# How fast does `sluice replay` decide? A synthetic day of LINES access log
# lines from 100,000 API keys (synthetic_log.py), replayed with five rules
# (scripts/replay/five-rules.toml) on one core: lines per second, best of
# ROUNDS, and the instructions per line callgrind counts on 100,000 lines.
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
for round in $(seq "$rounds"); do
    start=$(date +%s.%N)
    taskset -c 0 "$sluice" replay --config "$here/five-rules.toml" "$work/day.log" >/dev/null
    end=$(date +%s.%N)
    rate=$(python3 -c "print(int($lines / ($end - $start)))")
    echo "round $round: $rate lines/s"
    (( rate > best )) && best=$rate
done
echo "best: $best lines/s ($lines lines, 100000 keys, five rules, one core)"
if command -v valgrind >/dev/null; then
    head -100000 "$work/day.log" >"$work/100k.log"
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
        "$sluice" replay --config "$here/five-rules.toml" "$work/100k.log" >/dev/null 2>"$work/cg.err"
    total=$(grep -o 'Collected : [0-9]*' "$work/cg.err" | grep -o '[0-9]*$')
    echo "callgrind: $((total / 100000)) instructions per line (100,000 lines, start-up included)"
fi
