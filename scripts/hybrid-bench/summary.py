#!/usr/bin/env python3
"""The proxy process's own CPU per request in a proxybench results.json, per
scenario: the median over its rounds, and each scenario's ratio to the memory
mode of the same key count (modes.sh). The harness's own "CPU us/req" is the
busy time of the proxy's CPU, which also holds anything else scheduled there."""
import json
import statistics
import sys

results = json.load(open(sys.argv[1]))
by = {}
for run in results["runs"]:
    by.setdefault(run["scenario"], []).append(run)
rows = {}
for scenario, runs in by.items():
    cpu = statistics.median(run["proxy_us_per_req"] for run in runs)
    rps = statistics.median(run["rps"] for run in runs)
    p50 = statistics.median(run["p50_us"] for run in runs) / 1000
    busy = statistics.median(run["proxy_cpu_busy_us_per_req"] for run in runs)
    rows[scenario] = (cpu, rps, p50, busy, [round(run["proxy_us_per_req"], 2) for run in runs])
print("| scenario | proxy CPU us/req (median) | x memory | req/s | p50 ms | proxy CPU busy us/req | rounds |")
print("|---|---:|---:|---:|---:|---:|---|")
for scenario, (cpu, rps, p50, busy, each) in rows.items():
    keys = scenario.rsplit("_", 1)[-1]
    base = rows.get("memory_" + keys)
    ratio = "%.3f" % (cpu / base[0]) if base and "_" in scenario else "-"
    print("| %s | %.2f | %s | %.0f | %.3f | %.2f | %s |" % (scenario, cpu, ratio, rps, p50, busy, each))
