#!/usr/bin/env python3
"""Allocations per request from a callgrind output: the `calls=` lines whose callee is
`malloc`, summed by calling function and divided by the requests served.

    KEEP=1 scripts/callgrind/run.sh target/release/sluice scripts/callgrind/deny.toml deny
    python3 scripts/callgrind/allocs.py /tmp/sluice-cg.deny.out.1 REQUESTS
"""
import collections
import re
import sys

names = {}
by_caller = collections.Counter()
function = None
callee = None
with open(sys.argv[1], errors="replace") as profile:
    for line in profile:
        match = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?", line)
        if match:
            if match.group(3):
                names[match.group(2)] = match.group(3).strip()
            if match.group(1) == "fn":
                function, callee = names.get(match.group(2)), None
            else:
                callee = names.get(match.group(2))
        elif line.startswith("calls=") and callee:
            if callee == "malloc":
                by_caller[function] += int(line.split("=")[1].split()[0])
            callee = None
requests = int(sys.argv[2])
print(f"{sum(by_caller.values()) / requests:.2f} mallocs per request")
for caller, calls in by_caller.most_common(10):
    print(f"{calls / requests:6.2f}  {caller[:150]}")
