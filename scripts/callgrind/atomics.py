#!/usr/bin/env python3
"""Atomic read-modify-write instructions (`lock`-prefixed, or `xchg` with memory) executed
per request, by function, from a callgrind output made with `--dump-instr=yes` and the
binary's disassembly. Each costs about 20 cycles even uncontended, which instruction counts
do not show.

    CGOPTS=--dump-instr=yes KEEP=1 scripts/callgrind/run.sh target/release/sluice \\
        scripts/callgrind/deny.toml deny
    python3 scripts/callgrind/atomics.py /tmp/sluice-cg.deny.out.1 target/release/sluice REQUESTS
"""
import collections
import os
import re
import subprocess
import sys

profile_path, binary, requests = sys.argv[1], sys.argv[2], int(sys.argv[3])

# Addresses of the atomic instructions, with the function each is in. `xchg` between two
# registers is not atomic (`xchg %ax,%ax` is a two-byte no-op).
disassembly = subprocess.run(
    ["objdump", "-d", "--no-show-raw-insn", binary], capture_output=True, text=True, check=True
).stdout
atomic = {}
function = None
for line in disassembly.splitlines():
    match = re.match(r"^([0-9a-f]+) <(.*)>:$", line)
    if match:
        function = match.group(2)
        continue
    match = re.match(r"^\s+([0-9a-f]+):\s+((lock|xchg)\b.*)$", line)
    if match and not re.match(r"xchg\s+%\w+,%\w+$", match.group(2)):
        atomic[int(match.group(1), 16)] = function

# Cost lines are "address line Ir", addresses absolute (0x…) or relative (+n, -n, *) to
# the previous one; the line after `calls=` is a call's inclusive cost, not an execution.
# Only lines of the binary's own object count (its addresses are the disassembly's).
objects = {}
in_binary = False
address = 0
call_cost_next = False
executed = collections.Counter()
with open(profile_path, errors="replace") as profile:
    for line in profile:
        match = re.match(r"c?ob=\((\d+)\) (.*)", line.strip())
        if match:
            objects[match.group(1)] = match.group(2)
        if line.startswith("ob="):
            number = re.match(r"ob=\((\d+)\)", line).group(1)
            in_binary = os.path.basename(objects.get(number, "")) == os.path.basename(binary)
            continue
        if line.startswith("calls="):
            call_cost_next = True
            continue
        fields = line.split()
        if not fields or not (fields[0].startswith(("0x", "+", "-")) or fields[0] == "*"):
            continue
        if fields[0].startswith("0x"):
            address = int(fields[0], 16)
        elif fields[0] != "*":
            address += int(fields[0])
        if call_cost_next:
            call_cost_next = False
            continue
        if in_binary and address in atomic and len(fields) >= 3:
            executed[address] += int(fields[2])

by_function = collections.Counter()
for address, count in executed.items():
    by_function[atomic[address]] += count
names = list(by_function)
readable = subprocess.run(
    ["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True
).stdout.splitlines()
print(f"{sum(executed.values()) / requests:.1f} atomic instructions per request")
for name, shown in sorted(zip(names, readable), key=lambda pair: -by_function[pair[0]]):
    per_request = by_function[name] / requests
    if per_request >= 0.5:
        print(f"{per_request:6.2f}  {shown[:140]}")
