#!/usr/bin/env python3
"""The adaptive benchmark's synthetic upstream: c workers behind one FIFO queue.

    upstream.py --port 18690 --c 10 --service-ms 20 [--dist fixed|exp] [--seed N]

Every request (any method, any path but the two below) joins the queue, waits
for a free worker, holds it for the service time (--service-ms, the same for
every request with --dist fixed, drawn from an exponential distribution of
that mean with --dist exp) and is answered `200 ok`. So up to c requests in
flight take the service time, and past c the queue makes latency grow.

    POST /control   body `c=5` (also `service_ms=20`, `dist=exp`; joined by &)
                    changes the upstream at once; a lowered c retires the
                    workers over it as their current request ends (nothing
                    is cut short). Answers the state as JSON.
    GET /stats      JSON: in_flight (requests read and not yet answered, the
                    queued ones included), queued, busy, c, served, and over
                    the time since the previous /stats: in_flight_avg (time-
                    weighted), in_flight_max, served_delta, service_ms_mean
                    (the service times actually slept, so one can see the
                    event loop keeps time). Meant for one poller.
    GET /instant    answered at once, outside the queue and not counted: for
                    measuring the server and its clients alone.

stdlib only (asyncio streams, HTTP/1.1 keep-alive, Content-Length bodies;
a chunked request is answered 400 and the connection closed).
"""
import argparse
import asyncio
import collections
import json
import random
import time

OK = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\r\nok\n"
OK_CLOSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n"


class Queue:
    """c workers and one FIFO queue, with the bookkeeping /stats reports."""

    def __init__(self, c, service_ms, dist, seed):
        self.c = c
        self.service = service_ms / 1000.0
        self.dist = dist
        self.rng = random.Random(seed)
        self.busy = 0                     # workers serving a request
        self.waiting = collections.deque()
        self.in_flight = 0
        self.served = 0
        now = time.monotonic()
        self.area, self.last = 0.0, now  # integral of in_flight over time
        self.mark_area, self.mark_t, self.mark_served = 0.0, now, 0
        self.max_since = 0
        self.slept, self.slept_n = 0.0, 0
        self.bias = 0.0                   # how late the event loop wakes, learned

    def enter(self):
        now = time.monotonic()
        self.area += self.in_flight * (now - self.last)
        self.last = now
        self.in_flight += 1
        if self.in_flight > self.max_since:
            self.max_since = self.in_flight

    def leave(self):
        now = time.monotonic()
        self.area += self.in_flight * (now - self.last)
        self.last = now
        self.in_flight -= 1
        self.served += 1

    def service_time(self):
        if self.dist == "exp":
            return self.rng.expovariate(1.0 / self.service) if self.service > 0 else 0.0
        return self.service

    async def serve(self):
        if self.busy < self.c and not self.waiting:
            self.busy += 1
        else:
            fut = asyncio.get_running_loop().create_future()
            self.waiting.append(fut)
            try:
                await fut        # whoever wakes us handed us a worker (busy counted)
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self.release()
                raise
        try:
            t = self.service_time()
            t0 = time.monotonic()
            # The loop wakes a timer up to ~1 ms late (epoll's timeout is in
            # whole ms): sleep that much less, so the mean is the service time.
            await asyncio.sleep(max(0.0, t - self.bias))
            took = time.monotonic() - t0
            if t > self.bias:
                late = took - (t - self.bias)
                self.bias = min(0.002, max(0.0, self.bias + 0.05 * (late - self.bias)))
            self.slept += took
            self.slept_n += 1
        finally:
            self.release()

    def release(self):
        if self.busy > self.c:            # c was lowered: this worker retires
            self.busy -= 1
            return
        while self.waiting:
            fut = self.waiting.popleft()
            if not fut.done():
                fut.set_result(None)      # the worker goes on to the next in line
                return
        self.busy -= 1

    def set(self, c=None, service_ms=None, dist=None):
        if service_ms is not None:
            self.service = service_ms / 1000.0
        if dist is not None:
            self.dist = dist
        if c is not None:
            self.c = c
            while self.busy < self.c and self.waiting:
                fut = self.waiting.popleft()
                if not fut.done():
                    self.busy += 1
                    fut.set_result(None)

    def state(self):
        return {"c": self.c, "service_ms": self.service * 1000.0, "dist": self.dist}

    def stats(self):
        now = time.monotonic()
        area = self.area + self.in_flight * (now - self.last)
        dt = now - self.mark_t
        out = {
            "t": now, "in_flight": self.in_flight, "queued": len(self.waiting),
            "busy": self.busy, "c": self.c, "served": self.served,
            "in_flight_avg": (area - self.mark_area) / dt if dt > 0 else float(self.in_flight),
            "in_flight_max": max(self.max_since, self.in_flight),
            "served_delta": self.served - self.mark_served,
            "service_ms_mean": 1000.0 * self.slept / self.slept_n if self.slept_n else None,
        }
        self.mark_area, self.mark_t, self.mark_served = area, now, self.served
        self.max_since = self.in_flight
        self.slept, self.slept_n = 0.0, 0
        return out


def answer(status, body, ctype="application/json", close=False):
    head = (f"HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n"
            + ("connection: close\r\n" if close else "") + "\r\n")
    return head.encode() + body


async def connection(q, reader, writer):
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            end = head.find(b"\r\n")
            parts = head[:end].split(b" ")
            if len(parts) != 3:
                writer.write(answer("400 Bad Request", b"bad request line\n", "text/plain", True))
                return
            method, target, version = parts
            lower = head.lower()
            length = 0
            i = lower.find(b"\r\ncontent-length:")
            if i >= 0:
                j = lower.find(b"\r\n", i + 2)
                length = int(lower[i + 17:j].strip())
            if b"\r\ntransfer-encoding:" in lower:
                writer.write(answer("400 Bad Request", b"chunked bodies are not supported\n", "text/plain", True))
                return
            body = await reader.readexactly(length) if length else b""
            close = (version == b"HTTP/1.0" and b"\r\nconnection: keep-alive" not in lower) \
                or b"\r\nconnection: close" in lower
            if target == b"/stats":
                writer.write(answer("200 OK", json.dumps(q.stats()).encode(), close=close))
            elif target == b"/control" and method == b"POST":
                try:
                    kv = dict(p.split("=", 1) for p in body.decode().strip().split("&") if p)
                    q.set(c=int(kv["c"]) if "c" in kv else None,
                          service_ms=float(kv["service_ms"]) if "service_ms" in kv else None,
                          dist=kv.get("dist"))
                    writer.write(answer("200 OK", json.dumps(q.state()).encode(), close=close))
                except (ValueError, KeyError) as e:
                    writer.write(answer("400 Bad Request", f"{e}\n".encode(), "text/plain", close))
            elif target == b"/instant":
                writer.write(OK_CLOSE if close else OK)
            else:
                q.enter()
                try:
                    await q.serve()
                    writer.write(OK_CLOSE if close else OK)
                finally:
                    q.leave()
            if close:
                return
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=18690)
    ap.add_argument("--c", type=int, default=10)
    ap.add_argument("--service-ms", type=float, default=20.0)
    ap.add_argument("--dist", choices=("fixed", "exp"), default="fixed")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not a.host.startswith("127."):
        raise SystemExit("the upstream listens on loopback only")
    q = Queue(a.c, a.service_ms, a.dist, a.seed)
    server = await asyncio.start_server(lambda r, w: connection(q, r, w), a.host, a.port,
                                        backlog=1024, reuse_address=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
