#!/usr/bin/env bash
# Instructions per call of tower's p2c balancer (see src/main.rs), by
# callgrind: each mode run with 0 and N calls, the difference over N.
#   scripts/tower-p2c/run.sh [N]
set -eu
cd "$(dirname "$0")"
cargo build --release --quiet
n=${1:-100000}
ir() {
  valgrind --tool=callgrind --callgrind-out-file=/tmp/tower-p2c.out ./target/release/tower-p2c-cost "$1" "$2" 2>&1 \
    | awk '/Collected/ {gsub(",","",$4); print $4}'
}
for mode in direct balance buffer; do
  zero=$(ir $mode 0); many=$(ir $mode $n)
  echo "$mode: $(( (many - zero) / n )) instructions per call"
done
rm -f /tmp/tower-p2c.out
