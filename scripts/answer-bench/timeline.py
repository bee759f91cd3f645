#!/usr/bin/env python3
"""When each event of a slow stream reaches the client: through sluice with
the `json:` charge, through sluice without it, and straight from the
upstream. One Python process (asyncio) runs both the upstream and the
client, so every time below is from the same clock (time.monotonic_ns()).

    timeline.py --upstream-port 18785 \
        --target charged=127.0.0.1:18786 --target baseline=127.0.0.1:18788 --target direct \
        [--admin charged=127.0.0.1:18787] [--rounds 10] [--events 20] \
        [--first-ms 100] [--interval-ms 50] [--out DIR]

The upstream answers any request at once with its headers (200,
`text/event-stream`, chunked), then writes EVENTS events one by one, each
its own write and its own chunk: the first FIRST_MS after the request
arrived, then one every INTERVAL_MS. They are stream.py's OpenAI chunks
(one word each, `"usage":null`), the last but one the usage chunk
(`"choices":[]`), the last `data: [DONE]` with the terminating chunk. The
upstream records the monotonic time just before each write; the client
(a raw keep-alive-free HTTP/1.1 GET, decoding the chunked body itself)
records the time each read returned, and an event "arrived" with the read
that completed it (its closing blank line). delay = read - write.

Rounds go charged, baseline, direct, charged, ... (the order of --target),
ROUNDS of each. Printed: per event, the median over the rounds of the write
time and the read time (ms after the request reached the upstream) and the
delay (µs), for each path; then per path the first event's delay (median,
min, max over the rounds), the median delay over all events, the headers'
delay; the charged path's median minus the others'. Each answer is checked:
status 200, the client's body == the bytes the upstream wrote. With
--admin NAME=HOST:PORT, that sluice's /metrics is read before and after:
sluice_budget_charged_total{rule="tokens"} must grow by the usage's
prompt_tokens + 4 x completion_tokens per request and
sluice_charge_errors_total must not grow (else CHARGE FAILED, exit 1).
Per-round rows go to OUT/timeline.csv.
"""
import argparse
import asyncio
import os
import re
import statistics
import sys
import time
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stream import events as make_events  # noqa: E402

now = time.monotonic_ns


class Upstream:
    def __init__(self, lines, first_ms, interval_ms):
        self.lines = lines
        self.first_ns = int(first_ms * 1e6)
        self.interval_ns = int(interval_ms * 1e6)
        self.log = None  # the current request's record, set per request

    async def handle(self, reader, writer):
        # keep-alive: sluice's pooled connection brings the next request here
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError,
                    asyncio.CancelledError):  # the last: sluice's idle pooled connection at the end
                break
            try:
                await self.answer(head, writer)
            except ConnectionError:
                break
        writer.close()

    async def answer(self, head, writer):
        arrived = now()
        rec = {"arrived": arrived, "writes": [], "sent": bytearray(), "request": head}
        self.log = rec
        headers = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                   b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")
        rec["headers_written"] = now()
        writer.write(headers)
        for i, line in enumerate(self.lines):
            due = arrived + self.first_ns + i * self.interval_ns
            wait = due - now()
            if wait > 0:
                await asyncio.sleep(wait / 1e9)
            payload = (line + "\n\n").encode()
            frame = b"%x\r\n%s\r\n" % (len(payload), payload)
            if i == len(self.lines) - 1:
                frame += b"0\r\n\r\n"
            t = now()
            writer.write(frame)
            rec["writes"].append(t)
            rec["sent"] += payload
            await writer.drain()


async def fetch(host, port, n_events, timeout):
    """GET through host:port; the status, the headers' time, each event's time, the body."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"GET /v1/chat/completions HTTP/1.1\r\nhost: " + f"{host}:{port}".encode() +
                 b"\r\naccept: text/event-stream\r\nconnection: close\r\n\r\n")
    await writer.drain()
    buf = bytearray()
    body = bytearray()
    status = None
    headers_at = None
    chunked = False
    length = None
    times = []
    done = False
    pos = 0  # chunked decoding: where the next unparsed byte is in buf
    deadline = now() + int(timeout * 1e9)
    while not done:
        left = (deadline - now()) / 1e9
        if left <= 0:
            raise TimeoutError("the answer did not end in time")
        data = await asyncio.wait_for(reader.read(65536), left)
        t = now()
        if not data:
            break
        buf += data
        if status is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                continue
            headers_at = t
            head = bytes(buf[:end]).decode("latin-1").split("\r\n")
            status = int(head[0].split()[1])
            for h in head[1:]:
                k, _, v = h.partition(":")
                k, v = k.strip().lower(), v.strip().lower()
                if k == "transfer-encoding" and "chunked" in v:
                    chunked = True
                if k == "content-length":
                    length = int(v)
            pos = end + 4
        if chunked:
            while True:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
                if size == 0:
                    done = True
                    break
                if len(buf) < eol + 2 + size + 2:
                    break
                body += buf[eol + 2:eol + 2 + size]
                pos = eol + 2 + size + 2
        else:
            body += buf[pos:]
            pos = len(buf)
            if length is not None and len(body) >= length:
                done = True
        complete = body.count(b"\n\n")
        while len(times) < min(complete, n_events):
            times.append(t)
    writer.close()
    return status, headers_at, times, bytes(body)


def metrics(admin):
    text = urllib.request.urlopen(f"http://{admin}/metrics", timeout=5).read().decode()
    def value(name):
        m = re.search(r"^%s\{[^}]*rule=\"tokens\"[^}]*\} (\S+)$" % name, text, re.M)
        return float(m.group(1)) if m else 0.0
    return value("sluice_budget_charged_total"), value("sluice_charge_errors_total")


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream-port", type=int, default=18785)
    ap.add_argument("--target", action="append", required=True,
                    help="NAME=HOST:PORT through sluice, or `direct`")
    ap.add_argument("--admin", action="append", default=[], help="NAME=HOST:PORT of that target's admin port")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--events", type=int, default=20)
    ap.add_argument("--first-ms", type=float, default=100)
    ap.add_argument("--interval-ms", type=float, default=50)
    ap.add_argument("--out", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "sluice-answer-bench"))
    a = ap.parse_args()

    # events-1 events from stream.py (role, words, stop, usage), then [DONE]
    lines, usage = make_events(a.events - 1, prompt_tokens=57)
    expected = usage["prompt_tokens"] + 4 * usage["completion_tokens"]
    up = Upstream(lines, a.first_ms, a.interval_ms)
    server = await asyncio.start_server(up.handle, "127.0.0.1", a.upstream_port)
    targets = []
    for t in a.target:
        name, _, addr = t.partition("=")
        if name == "direct":
            addr = f"127.0.0.1:{a.upstream_port}"
        host, _, port = addr.rpartition(":")
        targets.append((name, host, int(port)))
    admins = dict(x.split("=", 1) for x in a.admin)
    before = {n: metrics(adm) for n, adm in admins.items()}
    rows = {n: [] for n, _, _ in targets}  # per round: (arrived, writes, reads, headers delay)
    failed = []
    timeout = (a.first_ms + a.events * a.interval_ms) / 1000 + 10
    for r in range(a.rounds):
        for name, host, port in targets:
            up.log = None
            try:
                status, headers_at, reads, body = await fetch(host, port, len(lines), timeout)
            except Exception as e:  # noqa: BLE001
                failed.append(f"{name} round {r + 1}: {e!r}")
                continue
            rec = up.log
            if rec is None:
                failed.append(f"{name} round {r + 1}: the request never reached the upstream (status {status})")
                continue
            if status != 200:
                failed.append(f"{name} round {r + 1}: status {status}")
            if body != bytes(rec["sent"]):
                failed.append(f"{name} round {r + 1}: the body differs from what the upstream wrote "
                              f"({len(body)} bytes read, {len(rec['sent'])} written)")
            if len(reads) != len(rec["writes"]):
                failed.append(f"{name} round {r + 1}: {len(reads)} events read of {len(rec['writes'])}")
                continue
            rows[name].append((rec["arrived"], rec["writes"], reads, headers_at - rec["headers_written"]))
            await asyncio.sleep(0.2)  # let the connection close before the next path
    after = {n: metrics(adm) for n, adm in admins.items()}
    server.close()

    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "timeline.csv"), "w") as f:
        f.write("path,round,event,write_ms,read_ms,delay_us\n")
        for name, rs in rows.items():
            for r, (arr, ws, rd, _) in enumerate(rs):
                for i, (w, d) in enumerate(zip(ws, rd)):
                    f.write(f"{name},{r + 1},{i + 1},{(w - arr) / 1e6:.3f},{(d - arr) / 1e6:.3f},{(d - w) / 1e3:.1f}\n")

    names = [n for n, _, _ in targets if rows[n]]
    med = statistics.median
    print(f"{a.events} events, the first {a.first_ms:g} ms after the request reached the upstream, then every "
          f"{a.interval_ms:g} ms; {a.rounds} rounds of {', '.join(n for n, _, _ in targets)}, interleaved.")
    print("per event, medians over the rounds: write and read in ms after the request reached the upstream, delay = read - write in µs")
    hdr = f"{'event':>5}"
    for n in names:
        hdr += f" | {n + ' write':>15} {'read':>9} {'delay':>8}"
    print(hdr)
    for i in range(len(lines)):
        line = f"{i + 1:>5}"
        for n in names:
            w = med((ws[i] - arr) / 1e6 for arr, ws, _, _ in rows[n])
            d = med((rd[i] - arr) / 1e6 for arr, _, rd, _ in rows[n])
            dl = med((rd[i] - ws[i]) / 1e3 for _, ws, rd, _ in rows[n])
            line += f" | {w:15.3f} {d:9.3f} {dl:8.1f}"
        print(line)
    print("summary (µs):")
    summary = {}
    for n in names:
        first = [(rd[0] - ws[0]) / 1e3 for _, ws, rd, _ in rows[n]]
        alls = [(r_ - w) / 1e3 for _, ws, rd, _ in rows[n] for w, r_ in zip(ws, rd)]
        heads = [h / 1e3 for *_, h in rows[n]]
        summary[n] = (med(first), med(alls))
        print(f"  {n:9} first event: median {med(first):7.1f}  (min {min(first):.1f}, max {max(first):.1f}; "
              f"{len(first)} rounds)   all events: median {med(alls):7.1f}  p90 "
              f"{sorted(alls)[int(0.9 * (len(alls) - 1))]:.1f}   headers: median {med(heads):.1f}")
    if "charged" in summary:
        for n in names:
            if n != "charged":
                print(f"  charged - {n}: first event {summary['charged'][0] - summary[n][0]:+.1f} µs, "
                      f"median over all events {summary['charged'][1] - summary[n][1]:+.1f} µs")
    ok = not failed
    for f_ in failed:
        print("FAILED: " + f_)
    for n, adm in admins.items():
        reqs = len(rows.get(n, []))
        dc, de = after[n][0] - before[n][0], after[n][1] - before[n][1]
        verdict = "ok" if dc == reqs * expected and de == 0 else "CHARGE FAILED"
        if verdict != "ok":
            ok = False
        print(f"  {n}: charged {dc:.0f} units for {reqs} requests (expected {reqs * expected} = {reqs} x "
              f"({usage['prompt_tokens']} + 4 x {usage['completion_tokens']})), charge errors +{de:.0f}: {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
