#!/usr/bin/env python3
"""Summarise strict.sh's results.tsv: per connection count and backend, the medians of
req/s, p50, p99 and sluice CPU us/req over the rounds, and redis' added p50 per round
(redis run minus the memory run just before it).  usage: summarize.py results.tsv"""
import csv, statistics, sys
from collections import defaultdict
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
by = defaultdict(list)
for r in rows:
    by[(int(r["conns"]), r["backend"])].append(r)
print("| clients | backend | req/s (median; range) | p50 ms | p99 ms | sluice CPU µs/req | EVALSHA / request | store errors (max) | fallback at end |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
for (c, b), rs in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    f = lambda k: [float(r[k]) for r in rs]
    med = lambda k: statistics.median(f(k))
    ev = sum(int(r["evalsha"]) for r in rs) / max(1, sum(int(r["sluice_reqs"]) for r in rs))
    print("| %d | %s | %s (%s–%s) | %.3g | %.3g | %.1f | %s | %d | %s |" % (
        c, b, format(round(med("req_s")), ","), format(round(min(f("req_s"))), ","), format(round(max(f("req_s"))), ","),
        med("p50_ms"), med("p99_ms"), med("cpu_us_per_req"), "%.4f" % ev if b != "memory" else "–",
        max(int(r["store_errors"]) for r in rs), "/".join(r["fallback"] for r in rs)))
print()
print("| clients | backend | added p50 over the memory run before it, per round (ms) | median |")
print("|---:|---|---|---:|")
for (c, b), rs in sorted(by.items()):
    if b == "memory":
        continue
    mem = {r["round"]: float(r["p50_ms"]) for r in by[(c, "memory")]}
    d = [float(r["p50_ms"]) - mem[r["round"]] for r in rs]
    print("| %d | %s | %s | %.3f |" % (c, b, ", ".join("%.3f" % x for x in d), statistics.median(d)))
