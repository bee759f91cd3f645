#!/usr/bin/env python3
"""The adaptive benchmark's 100 ms sampler (and its Python clients).

    load.py --target 127.0.0.1:18680 --clients 50 --duration 30 --out PREFIX
            [--think-ms 0] [--backoff-ms 50] [--path /work]
            [--stats 127.0.0.1:18690] [--metrics 127.0.0.1:18682 --rule adaptive]
            [--schedule 15:c=5,30:c=10] [--timeout 10] [--start-unix-ns NS]

run.sh runs it with --clients 0 and --start-unix-ns beside clients.rs (the
clients, given the same start): then it only samples and writes
PREFIX.samples.csv and PREFIX.sampler.txt (its CPU seconds). With clients
(PYCLIENTS=1 in run.sh), each holds one HTTP/1.1 keep-alive connection and
sends the next GET as soon as the previous one is answered (after
--think-ms, if any), as protocol callbacks in one event loop. After a
refusal (503, or 429: what a plain concurrency rule answers) it keeps the
connection and sleeps --backoff-ms before the next request. A connection the
server closes (or that breaks) is opened again; a request not answered within
--timeout s counts as status 0 and its connection is dropped.

Latency is client-measured: from just before the request is written to when
the whole answer (head and body) has been read.

Every 100 ms the sampler asks the upstream's /stats and the admin port's
/metrics (for the gauge `sluice_adaptive_limit{rule="RULE"}`: empty when the
gauge is missing or the admin port does not answer), and at the times of
--schedule POSTs `/control` to the upstream (the body after the colon).

Writes PREFIX.requests.csv (t_end s since the start, latency_ms, status) and
PREFIX.samples.csv (t, limit, in_flight, in_flight_avg, in_flight_max,
queued, c, served_delta, service_ms_mean), and PREFIX.refusal.txt (the first
refusal's head and body as read, for the summary's checks) and
PREFIX.load.txt (this process's CPU seconds and wall time). Stops by itself:
no request is sent after --duration, and those still unanswered 2 s later
are abandoned.
"""
import argparse
import asyncio
import json
import re
import resource
import sys
import time

now = time.perf_counter


def hostport(s):
    host, port = s.rsplit(":", 1)
    if not (host.startswith("127.") or host in ("localhost", "[::1]", "::1")):
        raise SystemExit(f"{s}: this harness sends traffic to loopback addresses only")
    return host, int(port)


class Closed(Exception):
    pass


async def read_answer(reader):
    """Returns (status, head bytes, body bytes, server wants to close)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        raise Closed() from e
    status = int(head[9:12])
    lower = head.lower()
    i = lower.find(b"\r\ncontent-length:")
    if i >= 0:
        j = lower.find(b"\r\n", i + 2)
        body = await reader.readexactly(int(lower[i + 17:j].strip()))
    elif b"\r\ntransfer-encoding: chunked" in lower:
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                break
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(chunks)
    elif status in (204, 304) or 100 <= status < 200:
        body = b""
    else:
        body = await reader.read()  # delimited by close
        return status, head, body, True
    close = b"\r\nconnection: close" in lower
    return status, head, body, close


class Http:
    """One keep-alive connection for the sampler's small requests."""

    def __init__(self, addr):
        self.addr, self.r, self.w = addr, None, None

    async def call(self, method, path, body=b""):
        for attempt in (1, 2):
            try:
                if self.w is None:
                    self.r, self.w = await asyncio.open_connection(*self.addr)
                self.w.write(f"{method} {path} HTTP/1.1\r\nhost: bench\r\ncontent-length: {len(body)}\r\n"
                             f"content-type: application/x-www-form-urlencoded\r\n\r\n".encode() + body)
                async with asyncio.timeout(1.0):
                    status, _, data, close = await read_answer(self.r)
                if close:
                    self.drop()
                return status, data
            except (OSError, Closed, asyncio.TimeoutError, ValueError, asyncio.IncompleteReadError):
                self.drop()
                if attempt == 2:
                    return None, b""

    def drop(self):
        if self.w is not None:
            self.w.close()
        self.r = self.w = None


class Conn(asyncio.Protocol):
    """One client's connection; a closed one is replaced by a new Conn."""

    def __init__(self, run, slot):
        self.run, self.slot = run, slot
        self.buf = bytearray()
        self.transport = None
        self.sent = None          # when the request waiting for its answer was written
        self.over = False

    def connection_made(self, transport):
        self.transport = transport
        self.run.conns.add(self)
        self.send()

    def send(self):
        if self.over:
            return
        if now() >= self.run.stop_at:
            self.over = True
            self.transport.close()
            return
        self.sent = now()
        self.transport.write(self.run.request)

    def data_received(self, data):
        t = now()
        self.buf += data
        buf = self.buf
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[:end + 4])
            lower = head.lower()
            i = lower.find(b"\r\ncontent-length:")
            if i >= 0:
                j = lower.find(b"\r\n", i + 2)
                total = end + 4 + int(lower[i + 17:j].strip())
            elif b"\r\ntransfer-encoding: chunked" in lower:
                k = buf.find(b"\r\n0\r\n\r\n", end + 2)
                if k < 0:
                    return
                total = k + 7
            else:
                total = end + 4  # no body delimited: sluice and upstream.py always send a length
            if len(buf) < total:
                return
            status = int(head[9:12])
            body = bytes(buf[end + 4:total])
            del buf[:total]
            self.answered(t, status, head, body, b"\r\nconnection: close" in lower)
            if self.over or self.transport.is_closing():
                return

    def answered(self, t, status, head, body, close):
        run = self.run
        run.done.append((t - run.t0, t - self.sent, status))
        self.sent = None
        refused = status in (503, 429)
        if refused and run.refusal is None:
            run.refusal = head + body
        wait = run.backoff if refused else run.think
        if close:
            self.over = True
            self.transport.close()   # connection_lost opens the next after the wait
            self.reopen_after = wait
        elif wait:
            run.loop.call_later(wait, self.send)
        else:
            self.send()

    def connection_lost(self, exc):
        run = self.run
        run.conns.discard(self)
        if run.ending:
            return
        if self.sent is not None:  # broken, timed out or closed under a request
            t = now()
            run.done.append((t - run.t0, t - self.sent, 0))
            self.sent = None
            run.loop.call_later(run.backoff, run.connect, self.slot)
        elif self.over and now() >= run.stop_at:
            run.finished += 1
        else:
            run.loop.call_later(getattr(self, "reopen_after", 0.0), run.connect, self.slot)


class Run:
    def __init__(self, a):
        self.a = a
        self.target = hostport(a.target)
        self.request = (f"GET {a.path} HTTP/1.1\r\nhost: {a.target}\r\nuser-agent: adaptive-bench\r\n\r\n").encode()
        self.done = []          # (t_end, latency s, status)
        self.samples = []
        self.refusal = None
        self.t0 = None
        self.stop_at = None
        self.conns = set()
        self.finished = 0
        self.ending = False
        self.backoff, self.think = a.backoff_ms / 1000.0, a.think_ms / 1000.0

    # The clients are protocol callbacks, not coroutines: an answer's end time
    # is read in data_received, as the event loop hands over the bytes, and
    # the next request is written from there, so a client's own bookkeeping
    # adds little to what it measures.
    def connect(self, slot):
        if now() >= self.stop_at:
            self.finished += 1
            return

        def failed(fut):
            if fut.cancelled() or fut.exception() is not None:
                self.done.append((now() - self.t0, 0.0, 0))
                self.loop.call_later(self.backoff, self.connect, slot)
        fut = asyncio.ensure_future(self.loop.create_connection(lambda: Conn(self, slot), *self.target))
        fut.add_done_callback(failed)

    async def watchdog(self):
        while self.finished < self.a.clients:
            await asyncio.sleep(0.25)
            t = now()
            for conn in list(self.conns):
                if conn.sent is not None and t - conn.sent > self.a.timeout:
                    conn.transport.abort()   # connection_lost counts it as status 0

    async def sampler(self):
        a = self.a
        stats = Http(hostport(a.stats)) if a.stats else None
        metrics = Http(hostport(a.metrics)) if a.metrics else None
        gauge = re.compile(r'^sluice_adaptive_limit\{[^}]*\brule="' + re.escape(a.rule) + r'"[^}]*\}\s+(\S+)', re.M)
        schedule = []
        for item in filter(None, (a.schedule or "").split(",")):
            at, body = item.split(":", 1)
            schedule.append((float(at), body.strip()))
        schedule.sort()
        k = 0
        while True:
            k += 1
            tick = self.t0 + 0.1 * k
            delay = tick - now()
            if delay > 0:
                await asyncio.sleep(delay)
            t = now() - self.t0
            if t > a.duration + 0.05:
                break
            while schedule and schedule[0][0] <= t + 1e-6 and stats:
                at, body = schedule.pop(0)
                status, data = await stats.call("POST", "/control", body.encode())
                print(f"  t={t:5.2f} s: POST /control {body} -> {status} {data.decode().strip()}", file=sys.stderr)
            calls = [stats.call("GET", "/stats") if stats else None,
                     metrics.call("GET", "/metrics") if metrics else None]
            res = await asyncio.gather(*(c for c in calls if c is not None))
            st = res.pop(0) if stats else (None, b"")
            me = res.pop(0) if metrics else (None, b"")
            row = {"t": round(t, 3), "limit": ""}
            if me[0] == 200:
                m = gauge.search(me[1].decode("utf-8", "replace"))
                if m:
                    row["limit"] = m.group(1)
            if st[0] == 200:
                s = json.loads(st[1])
                for f in ("in_flight", "in_flight_avg", "in_flight_max", "queued", "c", "served_delta",
                          "service_ms_mean"):
                    v = s.get(f)
                    row[f] = "" if v is None else (f"{v:.3f}" if isinstance(v, float) else v)
            self.samples.append(row)
        for h in (stats, metrics):
            if h:
                h.drop()

    async def main(self):
        a = self.a
        if a.start_unix_ns:  # the instant clients.rs starts too
            await asyncio.sleep(max(0.0, min(10.0, a.start_unix_ns / 1e9 - time.time())))
        if a.stats:  # opens the upstream's averaging window at t = 0
            await Http(hostport(a.stats)).call("GET", "/stats")
        self.t0 = now()
        self.stop_at = self.t0 + a.duration
        self.loop = asyncio.get_running_loop()
        for k in range(a.clients):
            self.connect(k)
        sampler = asyncio.create_task(self.sampler())
        try:
            await asyncio.wait_for(self.watchdog(), timeout=a.duration + 2.0)
        except asyncio.TimeoutError:
            pass  # requests still unanswered 2 s after the end are abandoned
        self.ending = True
        for conn in list(self.conns):
            conn.over = True
            conn.transport.abort()
        await sampler
        cols = ["t", "limit", "in_flight", "in_flight_avg", "in_flight_max", "queued", "c", "served_delta",
                "service_ms_mean"]
        with open(a.out + ".samples.csv", "w") as f:
            f.write(",".join(cols) + "\n")
            for row in self.samples:
                f.write(",".join(str(row.get(c, "")) for c in cols) + "\n")
        if not a.clients:
            ru = resource.getrusage(resource.RUSAGE_SELF)
            with open(a.out + ".sampler.txt", "w") as f:
                f.write(f"cpu_s {ru.ru_utime + ru.ru_stime:.3f}\n")
            print(f"  {len(self.samples)} samples", file=sys.stderr)
            return
        with open(a.out + ".requests.csv", "w") as f:
            f.write("t_end,latency_ms,status\n")
            for t, lat, st in self.done:
                f.write(f"{t:.4f},{lat * 1000:.3f},{st}\n")
        with open(a.out + ".refusal.txt", "wb") as f:
            f.write(self.refusal or b"")
        ru = resource.getrusage(resource.RUSAGE_SELF)
        with open(a.out + ".load.txt", "w") as f:
            f.write(f"cpu_s {ru.ru_utime + ru.ru_stime:.3f}\nwall_s {now() - self.t0:.3f}\n")
        print(f"  {len(self.done)} answers, {len(self.samples)} samples", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--think-ms", type=float, default=0.0)
    ap.add_argument("--backoff-ms", type=float, default=50.0)
    ap.add_argument("--path", default="/work")
    ap.add_argument("--stats")
    ap.add_argument("--metrics")
    ap.add_argument("--rule", default="adaptive")
    ap.add_argument("--schedule")
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--start-unix-ns", type=int, help="begin at this wall-clock instant (ns since the epoch)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    asyncio.run(Run(a).main())


if __name__ == "__main__":
    main()
