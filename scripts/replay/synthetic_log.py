#!/usr/bin/env python3
"""A synthetic access log for `sluice replay` benchmarks and tests.

Usage: synthetic_log.py LINES KEYS [SECONDS] > access.log

LINES requests from KEYS distinct API keys (and as many client IPs), spread
evenly over SECONDS (default a day), written in time order as sluice's
access log writes them (docs/edge.md), with `keys` holding `ip` and
`header:x-api-key` (as labels). Deterministic: the same arguments give the
same log.
"""
import random
import sys
from datetime import datetime, timezone

lines = int(sys.argv[1])
keys = int(sys.argv[2])
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 86400.0
rng = random.Random(72)
start = datetime(2026, 11, 27, tzinfo=timezone.utc).timestamp()
paths = ["/v1/orders", "/v1/search", "/v1/items/42", "/v2/users", "/login"]
methods = ["GET", "GET", "GET", "POST"]
out = sys.stdout
step = seconds / lines
for n in range(lines):
    at = start + n * step
    whole = int(at)
    micros = int(round((at - whole) * 1e6)) % 1_000_000
    stamp = datetime.fromtimestamp(whole, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    # Skewed: a few keys are busy, most are quiet.
    k = min(int(rng.paretovariate(1.2)) - 1, keys - 1) if rng.random() < 0.5 else rng.randrange(keys)
    ip = f"10.{k >> 16 & 255}.{k >> 8 & 255}.{k & 255}"
    label = f"sk_l\u2026#{k:012x}"
    path = paths[n % len(paths)]
    method = methods[n % len(methods)]
    out.write(
        f'{{"time":"{stamp}.{micros:06d}Z","request_id":"{n:028x}","client":"{ip}",'
        f'"method":"{method}","host":"api.example.com","path":"{path}","status":200,'
        f'"bytes_out":512,"duration_ms":1.250,"upstream_ms":1.100,"delay_ms":0,'
        f'"outcome":"allowed","rule":"per-key","key":"{label}","cost":1,'
        f'"keys":{{"ip":"{ip}","header:x-api-key":"{label}"}}}}\n'
    )
