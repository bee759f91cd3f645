#!/usr/bin/env python3
"""Soak load for sluice: legitimate, over-limit and hostile traffic on loopback.

Run by scripts/soak.sh (which starts the upstream and sluice); standard library
only. Every traffic class is paced and bounded, so the total stays at a few
hundred requests per second whatever sluice answers. Each class binds its own
source address in 127.0.0.0/8 (Linux routes all of it to lo), so per-IP
buckets see the classes as different clients.

    load.py --target 127.0.0.1:PORT --admin 127.0.0.1:PORT --pid PID --duration 600

Samples RSS (VmRSS), open descriptors and the legitimate client's p99 before
the load, 10 s in ("start"), every --sample-every seconds, at the end, and
again --settle seconds (60) after the load stopped ("after"), once client
connections timed out and sluice's idle upstream connections (kept 50 s)
were closed.
Prints a table while it runs and a JSON summary at the end (also to --json).
Exits 1 when sluice died or a legitimate request failed; 5xx answers to
hostile requests are printed as findings.
"""

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections import Counter

HOST_LINE = b"Host: soak.test\r\n"


class Stats:
    def __init__(self):
        self.status = {}  # class -> Counter of status (or "closed"/"error")
        self.legit_window = []  # latencies (s) since the last sample
        self.legit_all = []
        self.slowloris_lifetimes = []
        self.idle_lifetimes = []
        self.scrapes = []  # (seconds, bytes)
        self.stop = False

    def count(self, cls, what):
        self.status.setdefault(cls, Counter())[str(what)] += 1


def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(p / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[index]


async def read_response(reader):
    """Reads one HTTP/1.1 response; returns (status, headers dict, keep_alive)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    elif status not in (204, 304) and status >= 200:
        await reader.read()  # close-delimited
        return status, headers, False
    keep_alive = headers.get("connection", "").lower() != "close"
    return status, headers, keep_alive


async def connect(target, source):
    host, port = target
    return await asyncio.wait_for(
        asyncio.open_connection(host, port, local_addr=(source, 0)), 5
    )


async def paced(stats, rate, deadline, one):
    """Calls `one()` `rate` times per second on a fixed schedule until the deadline."""
    interval = 1.0 / rate
    next_at = time.monotonic()
    while not stats.stop and time.monotonic() < deadline:
        await one()
        next_at += interval
        delay = next_at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -1:
            next_at = time.monotonic()  # fell behind by a second: do not burst


async def keepalive_client(stats, cls, target, source, rate, deadline, request_for, latency=False):
    """One keep-alive connection sending `request_for()` at `rate`/s."""
    conn = [None]

    async def one():
        try:
            if conn[0] is None:
                conn[0] = await connect(target, source)
            reader, writer = conn[0]
            started = time.perf_counter()
            writer.write(request_for())
            await writer.drain()
            status, _, keep_alive = await asyncio.wait_for(read_response(reader), 10)
            elapsed = time.perf_counter() - started
            stats.count(cls, status)
            if latency:
                stats.legit_window.append(elapsed)
                stats.legit_all.append(elapsed)
            if not keep_alive:
                writer.close()
                conn[0] = None
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as error:
            stats.count(cls, "error:" + type(error).__name__)
            if conn[0] is not None:
                conn[0][1].close()
            conn[0] = None

    await paced(stats, rate, deadline, one)
    if conn[0] is not None:
        conn[0][1].close()


def get(path, *headers):
    extra = b"".join(h.encode() + b"\r\n" for h in headers)
    return b"GET " + path.encode() + b" HTTP/1.1\r\n" + HOST_LINE + extra + b"\r\n"


async def one_shot(stats, cls, target, source, payload, limit=3.0):
    """Sends `payload` on a fresh connection; counts the first status, or how it ended."""
    try:
        reader, writer = await connect(target, source)
    except (OSError, asyncio.TimeoutError) as error:
        stats.count(cls, "connect:" + type(error).__name__)
        return
    try:
        writer.write(payload)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), limit)
        parts = line.split()
        stats.count(cls, int(parts[1]) if len(parts) > 1 else "closed")
    except (OSError, asyncio.TimeoutError, ValueError) as error:
        stats.count(cls, "error:" + type(error).__name__)
    finally:
        writer.close()


def hostile_payloads():
    yield "cl+te smuggle", (
        b"POST /api/x HTTP/1.1\r\n" + HOST_LINE + b"X-Api-Key: h\r\nContent-Length: 4\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    yield "duplicate cl", (
        b"POST /public/x HTTP/1.1\r\n" + HOST_LINE + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"
    )
    yield "hex cl", b"POST /public/x HTTP/1.1\r\n" + HOST_LINE + b"Content-Length: 0x5\r\n\r\nhello"
    yield "bad chunk", (
        b"POST /public/x HTTP/1.1\r\n" + HOST_LINE + b"Transfer-Encoding: chunked\r\n\r\nZ\r\nhello\r\n0\r\n\r\n"
    )
    yield "te gzip, chunked", (
        b"POST /public/x HTTP/1.1\r\n" + HOST_LINE + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"
    )
    yield "no host", b"GET /public/x HTTP/1.1\r\n\r\n"
    yield "two hosts", b"GET /public/x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"
    yield "bad path", b"GET /public/%zz/../../.. HTTP/1.1\r\n" + HOST_LINE + b"\r\n"
    yield "70 KB uri", b"GET /public/" + b"a" * 70_000 + b" HTTP/1.1\r\n" + HOST_LINE + b"\r\n"
    yield "100 KiB header", b"GET /public/x HTTP/1.1\r\n" + HOST_LINE + b"X-Big: " + b"b" * 102_400 + b"\r\n\r\n"
    yield "200 headers", (
        b"GET /public/x HTTP/1.1\r\n" + HOST_LINE + b"".join(b"X-H%d: v\r\n" % i for i in range(200)) + b"\r\n"
    )
    yield "70 KB api key", b"GET /api/x HTTP/1.1\r\n" + HOST_LINE + b"X-Api-Key: " + b"k" * 70_000 + b"\r\n\r\n"
    yield "empty api key", b"GET /api/x HTTP/1.1\r\n" + HOST_LINE + b"X-Api-Key:\r\n\r\n"
    yield "garbage", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256))
    yield "xff spoof", get("/public/x", "X-Forwarded-For: 203.0.113.%d" % random.randint(0, 255))


async def hostile_sender(stats, target, rate, deadline):
    payloads = list(hostile_payloads())

    async def one():
        name, payload = random.choice(payloads)
        asyncio.ensure_future(one_shot(stats, "hostile:" + name, target, "127.0.7.1", payload))

    await paced(stats, rate, deadline, one)


async def slowloris(stats, target, deadline, trickle_every):
    """One connection at a time: trickles a head one byte per interval until sluice cuts it."""
    while not stats.stop and time.monotonic() < deadline:
        try:
            reader, writer = await connect(target, "127.0.8.1")
        except (OSError, asyncio.TimeoutError):
            stats.count("slowloris", "connect error")
            await asyncio.sleep(1)
            continue
        opened = time.monotonic()
        writer.write(b"GET /public/slow HTTP/1.1\r\n" + HOST_LINE)
        answer = None
        try:
            while not stats.stop and time.monotonic() < deadline:
                try:
                    line = await asyncio.wait_for(reader.readline(), trickle_every)
                    answer = int(line.split()[1]) if line.split() else "closed"
                    break
                except asyncio.TimeoutError:
                    writer.write(b"X")
                    await writer.drain()
        except (OSError, ValueError, IndexError):
            answer = "reset"
        if answer is not None:
            stats.count("slowloris", answer)
            stats.slowloris_lifetimes.append(time.monotonic() - opened)
        writer.close()


async def idle_hoarder(stats, target, deadline):
    """One request, then idle until sluice closes the connection."""
    while not stats.stop and time.monotonic() < deadline:
        try:
            reader, writer = await connect(target, "127.0.9.1")
            writer.write(get("/public/idle"))
            await writer.drain()
            status, _, _ = await asyncio.wait_for(read_response(reader), 10)
            stats.count("idle", status)
            answered = time.monotonic()
            while not stats.stop and time.monotonic() < deadline:
                try:
                    if await asyncio.wait_for(reader.read(1), 1) == b"":
                        stats.idle_lifetimes.append(time.monotonic() - answered)
                        break
                except asyncio.TimeoutError:
                    continue
            writer.close()
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as error:
            stats.count("idle", "error:" + type(error).__name__)
            await asyncio.sleep(1)


async def ip_churn(stats, target, rate, deadline):
    """A new connection from a new source address for every request."""

    async def one():
        source = "127.10.%d.%d" % (random.randint(0, 255), random.randint(1, 254))
        asyncio.ensure_future(one_shot(stats, "ip-churn", target, source, get("/public/churn")))

    await paced(stats, rate, deadline, one)


async def delayed(stats, target, rate, deadline):
    """Requests into an `on_limit = "delay"` rule, each on its own connection (they are held)."""

    async def one():
        asyncio.ensure_future(one_shot(stats, "delay", target, "127.0.5.1", get("/queue/x"), limit=5))

    await paced(stats, rate, deadline, one)


def read_proc(pid):
    with open("/proc/%d/status" % pid) as status:
        rss = next(int(l.split()[1]) for l in status if l.startswith("VmRSS:"))
    fds = len(os.listdir("/proc/%d/fd" % pid))
    return rss, fds


async def scrape(admin):
    started = time.perf_counter()
    reader, writer = await connect(admin, "127.0.0.1")
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
    await writer.drain()
    body = await reader.read()
    writer.close()
    elapsed = time.perf_counter() - started
    text = body.decode("utf-8", "replace")
    tracked = sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("sluice_tracked_keys{")
    )
    evictions = {
        line.split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("sluice_evictions_total{")
    }
    return elapsed, len(body), tracked, evictions


async def scraper(stats, admin, deadline, every):
    while not stats.stop and time.monotonic() < deadline:
        try:
            elapsed, size, _, _ = await scrape(admin)
            stats.scrapes.append((elapsed, size))
        except (OSError, asyncio.TimeoutError) as error:
            stats.count("scrape", "error:" + type(error).__name__)
        await asyncio.sleep(every)


async def sample(stats, args, label, started):
    if not os.path.exists("/proc/%d" % args.pid):
        return {"label": label, "dead": True}
    rss, fds = read_proc(args.pid)
    scrape_s, metrics_bytes, tracked, evictions = await scrape(args.admin)
    window, stats.legit_window = stats.legit_window, []
    row = {
        "label": label,
        "t_s": round(time.monotonic() - started, 1),
        "rss_mib": round(rss / 1024, 1),
        "fds": fds,
        "legit_requests": len(window),
        "legit_p50_ms": round(percentile(window, 50) * 1000, 2) if window else None,
        "legit_p99_ms": round(percentile(window, 99) * 1000, 2) if window else None,
        "metrics_bytes": metrics_bytes,
        "scrape_ms": round(scrape_s * 1000, 1),
        "tracked_keys": int(tracked),
        "evictions": evictions,
    }
    print(
        "%-8s t=%6.1fs rss=%6.1f MiB fds=%5d legit n=%6d p50=%6s ms p99=%6s ms /metrics=%6d B scrape=%5.1f ms keys=%6d evictions=%s"
        % (
            label,
            row["t_s"],
            row["rss_mib"],
            fds,
            row["legit_requests"],
            row["legit_p50_ms"],
            row["legit_p99_ms"],
            metrics_bytes,
            row["scrape_ms"],
            row["tracked_keys"],
            json.dumps(evictions),
        ),
        flush=True,
    )
    return row


async def main(args):
    random.seed(args.seed)
    target = (args.target.split(":")[0], int(args.target.split(":")[1]))
    args.admin = (args.admin.split(":")[0], int(args.admin.split(":")[1]))
    stats = Stats()
    started = time.monotonic()
    samples = [await sample(stats, args, "idle", started)]
    deadline = started + args.duration
    key = lambda k: "X-Api-Key: " + k
    tasks = []
    # Legitimate: 4 keys × 20/s, each under its 50/s per-key limit, from one IP under per-ip 150/s.
    for i in range(4):
        request = get("/api/items", key("legit-%d" % i))
        tasks.append(keepalive_client(stats, "legit", target, "127.0.1.1", 20, deadline, lambda r=request: r, latency=True))
    # Over the per-key limit: one key at 100/s against 50/s.
    abuse = get("/api/items", key("abuser"))
    tasks.append(keepalive_client(stats, "over-key", target, "127.0.2.1", 100, deadline, lambda: abuse))
    # Over the per-ip limit: 200/s from one address against 150/s.
    public = get("/public/page")
    tasks.append(keepalive_client(stats, "over-ip", target, "127.0.3.1", 200, deadline, lambda: public))
    # Random-key flood: 100/s, a new key every request (bucket churn against max_keys).
    tasks.append(
        keepalive_client(
            stats, "key-flood", target, "127.0.4.1", 100, deadline,
            lambda: get("/api/items", key("flood-%016x" % random.getrandbits(64))),
        )
    )
    # A new source address per request: per-ip bucket churn.
    tasks.append(ip_churn(stats, target, 20, deadline))
    # Held requests: 30/s into a 20/s delay rule.
    tasks.append(delayed(stats, target, 30, deadline))
    # Concurrency rule: 4 connections × 10/s.
    for _ in range(4):
        render = get("/render/x")
        tasks.append(keepalive_client(stats, "render", target, "127.0.6.1", 10, deadline, lambda r=render: r))
    # Hostile: malformed and oversized requests, 10/s, each on a fresh connection.
    tasks.append(hostile_sender(stats, target, 10, deadline))
    # Slowloris and idle hoarding: bounded numbers of connections, reopened when cut.
    tasks += [slowloris(stats, target, deadline, 1.0) for _ in range(args.slowloris)]
    tasks += [idle_hoarder(stats, target, deadline) for _ in range(args.idle)]
    tasks.append(scraper(stats, args.admin, deadline, 1.0))

    async def sampler():
        await asyncio.sleep(min(10, args.duration / 2))
        samples.append(await sample(stats, args, "start", started))
        n = 1
        while time.monotonic() + args.sample_every < deadline:
            await asyncio.sleep(max(0, started + n * args.sample_every - time.monotonic()))
            samples.append(await sample(stats, args, "%ds" % (n * args.sample_every), started))
            n += 1
        await asyncio.sleep(max(0, deadline - time.monotonic()))
        samples.append(await sample(stats, args, "end", started))

    await asyncio.gather(sampler(), *tasks)
    stats.stop = True
    # Let in-flight one-shots finish, idle client connections reach their
    # idle_timeout and sluice's pooled upstream connections their 50 s.
    await asyncio.sleep(args.settle)
    samples.append(await sample(stats, args, "after", started))

    scrape_times = [s for s, _ in stats.scrapes]
    classes = {cls: dict(counter) for cls, counter in sorted(stats.status.items())}
    legit_failures = sum(n for status, n in stats.status.get("legit", {}).items() if status != "200")
    # 5xx answers to hostile or churn traffic, per class and status: a
    # finding to report (sluice should answer 4xx), not a soak failure.
    hostile_5xx = {
        cls + " " + status: n
        for cls, counter in stats.status.items()
        if cls.startswith("hostile") or cls in ("slowloris", "idle", "ip-churn")
        for status, n in counter.items()
        if status[:1] == "5"
    }
    summary = {
        "duration_s": args.duration,
        "samples": samples,
        "statuses": classes,
        "requests_total": sum(sum(c.values()) for c in stats.status.values()),
        "legit_p99_ms_overall": round(percentile(stats.legit_all, 99) * 1000, 2) if stats.legit_all else None,
        "legit_failures": legit_failures,
        "hostile_5xx": hostile_5xx,
        "slowloris_max_lifetime_s": round(max(stats.slowloris_lifetimes), 2) if stats.slowloris_lifetimes else None,
        "idle_max_lifetime_s": round(max(stats.idle_lifetimes), 2) if stats.idle_lifetimes else None,
        "scrapes": len(scrape_times),
        "scrape_p99_ms": round(percentile(scrape_times, 99) * 1000, 1) if scrape_times else None,
        "scrape_max_ms": round(max(scrape_times) * 1000, 1) if scrape_times else None,
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(summary, out, indent=1)
    dead = any(s.get("dead") for s in samples)
    if hostile_5xx:
        print("finding: 5xx answers to hostile requests: %s" % json.dumps(hostile_5xx))
    return 1 if dead or legit_failures else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--admin", required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--duration", type=float, default=600)
    parser.add_argument("--sample-every", type=float, default=60)
    parser.add_argument("--slowloris", type=int, default=50)
    parser.add_argument("--idle", type=int, default=100)
    parser.add_argument("--settle", type=float, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json")
    sys.exit(asyncio.run(main(parser.parse_args())))
