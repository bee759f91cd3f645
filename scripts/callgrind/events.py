#!/usr/bin/env python3
"""Events per request from a callgrind run (scripts/callgrind/run.sh and nginx.sh call it).

    events.py REQUESTS OUT_FILE... [--top EVENT N]

Of the output files given (one per thread), the one with the most instructions is the
thread that served the requests; its program totals are divided by REQUESTS. With a cache
and branch simulation (`--cache-sim=yes --branch-sim=yes`), that is the L1 and last-level
misses and the mispredicted branches a request costs, as docs/benchmarks-history.md,
"Cycles, not instructions (issue 84)" reads them. `--top D1mw 15` adds the 15 functions
with the most of one event per request, each function's own cost (not its callees').
"""
import subprocess
import sys

NAMES = {
    "Ir": "instructions", "I1mr": "L1 instruction misses", "ILmr": "LL instruction misses",
    "Dr": "data reads", "D1mr": "L1 data read misses", "DLmr": "LL data read misses",
    "Dw": "data writes", "D1mw": "L1 data write misses", "DLmw": "LL data write misses",
    "Bc": "conditional branches", "Bcm": "mispredicted conditional branches",
    "Bi": "indirect branches", "Bim": "mispredicted indirect branches",
}


def annotate(path):
    args = ["callgrind_annotate", "--inclusive=no", path]
    return subprocess.run(args, capture_output=True, text=True).stdout


def totals(text):
    events, values = None, None
    for line in text.splitlines():
        if line.startswith("Events shown:") or line.startswith("Events recorded:"):
            events = line.split(":", 1)[1].split()
        if "PROGRAM TOTALS" in line:
            numbers = [v for v in line.split() if not v.startswith("(")]
            values = [int(v.replace(",", "")) for v in numbers[: len(events)]]
            break
    return dict(zip(events, values)) if values else {}


def main():
    argv = sys.argv[1:]
    top = None
    if "--top" in argv:
        i = argv.index("--top")
        top = (argv[i + 1], int(argv[i + 2]))
        del argv[i : i + 3]
    requests = int(argv[0])
    runs = [(totals(annotate(p)), p) for p in argv[1:]]
    counts, path = max((run for run in runs if run[0]), key=lambda run: run[0]["Ir"])
    for event, value in counts.items():
        print(f"{event:>5} {value / requests:12.1f}  {NAMES.get(event, event)}")
    if top:
        event, n = top
        print(f"\nper request, {NAMES.get(event, event)}, by function (self cost):")
        for value, name in self_costs(path, event)[:n]:
            print(f"{value / requests:8.2f}  {name[:150]}")


def self_costs(path, event):
    """Each function's own cost of `event` (not its callees'), most first: read from the
    callgrind file itself, as callgrind_annotate 3.19 attributes every self cost of a
    dump taken after `callgrind_control -z` to `main`."""
    names, costs, events = {}, {}, []
    function, skip_next = None, False
    with open(path) as lines:
        for line in lines:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("fn="):
                function = named(line[3:].strip(), names)
            elif line.startswith(("cfn=", "cfi=", "cfl=", "cob=")):
                if line.startswith("cfn="):
                    named(line[4:].strip(), names)
            elif line.startswith("calls="):
                skip_next = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                if skip_next:
                    skip_next = False
                    continue
                fields = line.split()
                at = events.index(event) + 1
                if function is not None and len(fields) > at:
                    costs[function] = costs.get(function, 0) + int(fields[at])
    return sorted(((v, names.get(f, f)) for f, v in costs.items()), reverse=True)


def named(text, names):
    """Resolves callgrind's name compression: "(7) name" defines 7, "(7)" uses it."""
    if text.startswith("("):
        key, _, name = text.partition(")")
        key = key + ")"
        if name.strip():
            names[key] = name.strip()
        return key
    return text

if __name__ == "__main__":
    main()
