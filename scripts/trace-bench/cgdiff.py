#!/usr/bin/env python3
"""Which functions grew: self instructions per request of two callgrind outputs,
side by side (callgrind_annotate --inclusive=no), largest change first.

    KEEP=1 scripts/trace-bench/run.sh callgrind /tmp/sluice-base /tmp/sluice-new
    python3 scripts/trace-bench/cgdiff.py /tmp/sluice-cg.base-pass.out.1 REQS_BASE \
        /tmp/sluice-cg.new-pass.out.1 REQS_NEW [TOP]

Lines of 99 % or more (main, the runtime's entry: callgrind's inclusive rows) are left
out; the worktree's directory (wt-base/, wt-new/) is taken off each file name.
"""
import collections
import re
import subprocess
import sys

# BY=file keeps callgrind's file:function rows (inlined code is charged to the
# function it was inlined into, under the file it came from); the default sums them
# by function, so code that moved between files of one function cancels.
BY_FUNCTION = __import__("os").environ.get("BY", "function") != "file"


def self_costs(path, requests):
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--auto=no", "--threshold=100", path],
                         capture_output=True, text=True).stdout
    costs = collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*([\d.]+)%\)\s+(.*)", line)
        if not m or "=>" in line or "PROGRAM TOTALS" in line or float(m.group(2)) >= 99.0:
            continue
        name = re.sub(r"\b(/tmp/)?wt-(base|new)/", "", m.group(3))
        name = re.sub(r" \[/tmp/sluice-(base|new)\]", "", name)
        if BY_FUNCTION:
            name = re.sub(r"^(.*?\.(rs|S|c|h)|\?\?\?):", "", name)
        costs[name] += int(m.group(1).replace(",", "")) / requests
    return costs


a = self_costs(sys.argv[1], int(sys.argv[2]))
b = self_costs(sys.argv[3], int(sys.argv[4]))
top = int(sys.argv[5]) if len(sys.argv) > 5 else 25
rows = sorted(set(a) | set(b), key=lambda k: -abs(b[k] - a[k]))
print(f"total (rows): {sum(a.values()):.0f} -> {sum(b.values()):.0f} per request")
print(f"{'base':>8} {'new':>8} {'delta':>7}  function")
for k in rows[:top]:
    print(f"{a[k]:8.1f} {b[k]:8.1f} {b[k] - a[k]:+7.1f}  {k[:160]}")
