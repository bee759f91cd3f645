#!/usr/bin/env python3
"""Latency percentiles from h2load's --log-file (tab-separated: start time in
µs since the epoch, HTTP status, µs until the end of the response), which
h2load writes but does not summarise:

  latency.py LOGFILE
  -> calls=N non200=N p50=X p99=X p99.9=X max=X (milliseconds)

Nearest-rank percentiles over every logged call.
"""
import sys


def percentile(ordered, p):
    if not ordered:
        return float("nan")
    rank = max(1, -(-len(ordered) * p // 100))  # ceil(n * p / 100), at least 1
    return ordered[int(rank) - 1]


def main(path):
    times, non200 = [], 0
    with open(path) as log:
        for line in log:
            columns = line.split("\t")
            if len(columns) < 3:
                continue
            if columns[1] != "200":
                non200 += 1
            times.append(int(columns[2]))
    times.sort()
    ms = lambda us: us / 1000
    print(
        f"calls={len(times)} non200={non200} p50={ms(percentile(times, 50)):.3f} "
        f"p99={ms(percentile(times, 99)):.3f} p99.9={ms(percentile(times, 99.9)):.3f} "
        f"max={ms(times[-1] if times else float('nan')):.3f}"
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
