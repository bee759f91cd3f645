#!/usr/bin/env bash
# Does `sluice replay` hold a long line whole? Replays 1,000 synthetic lines
# with one line of MEGABYTES MB among them (a path that long), plain and
# gzipped, with scripts/replay/five-rules.toml, and prints the peak resident
# memory of each run (GNU time's "Maximum resident set size"). The line is
# skipped and counted; memory stays the same whatever its length.
#
# Usage: scripts/replay/memory.sh [MEGABYTES] [SLUICE_BINARY]
set -euo pipefail
megabytes=${1:-100}
sluice=${2:-target/release/sluice}
here=$(dirname "$0")
work=$(mktemp -d /tmp/sluice-replay-memory.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 "$here/synthetic_log.py" 1000 100 60 >"$work/lines.log"
python3 - "$work" "$megabytes" <<'PY'
import gzip, sys
work, megabytes = sys.argv[1], int(sys.argv[2])
lines = open(f"{work}/lines.log").read().splitlines()
long = lines[0].replace('"/v1/orders"', '"/' + "a" * (megabytes << 20) + '"', 1)
text = "\n".join(lines[:500] + [long] + lines[500:]) + "\n"
open(f"{work}/day.log", "w").write(text)
with gzip.open(f"{work}/day.log.gz", "wt", compresslevel=6) as out:
    out.write(text)
PY
for log in day.log day.log.gz; do
    /usr/bin/time -v "$sluice" replay --config "$here/five-rules.toml" "$work/$log" \
        >"$work/out.txt" 2>"$work/time.txt"
    peak=$(grep -o 'Maximum resident set size (kbytes): [0-9]*' "$work/time.txt" | grep -o '[0-9]*$')
    echo "$log ($(du -h "$work/$log" | cut -f1), a ${megabytes} MB line): peak RSS $((peak / 1024)) MiB; $(head -1 "$work/out.txt")"
done
