#!/usr/bin/env python3
"""WebSocket message limits (docs/conversation.md, "WebSocket messages"):
what a tunnel costs sluice, with and without a `unit = "message"` rule.

    scripts/bench/websocket.py target/release/sluice cpu [--rounds 5] [--seconds 10] [--conns 8]
    scripts/bench/websocket.py target/release/sluice tunnels [--count 10000]
    scripts/bench/websocket.py target/release/sluice gigabyte

cpu: sluice (workers = 1, pinned to CPU 1) in front of an echo upstream;
the client (pinned to CPU 0 with the upstream) keeps `--conns` tunnels
busy, each sending a 64-byte masked message and waiting for its echo
(`--batch N`: N messages in one write, then their N echoes).
Round by round, interleaved: no message rule (the tunnel copies), and a
message rule that never limits. Reports sluice's user+system CPU µs per
message (from /proc/PID/stat), the medians and their ratio.

tunnels: sluice's RSS with `--count` idle HTTP/1.1 keep-alive connections
(each after one request), then, in a fresh sluice, with `--count` open
WebSocket tunnels (each after one echoed message), with and without a
message rule; per connection above the idle ones. Raises RLIMIT_NOFILE.

gigabyte: a client announces a 1 GiB message and keeps sending; sluice
closes with 1009 from the header. Reports RSS before and after.

Loopback only, bounded; the upstream and the client are this process
(asyncio), so their speed bounds the rate, not sluice's.
"""
import argparse, asyncio, os, resource, socket, statistics, struct, subprocess, sys, tempfile, time

CONFIG = """[server]
listen = "127.0.0.1:{port}"
upstream = "http://127.0.0.1:{upstream}"
workers = 1
max_connections = 100000
[admin]
listen = "127.0.0.1:{admin}"
{rules}
"""

METERED = """[[rule]]
name = "messages"
unit = "message"
rate = "1000000000/s"
"""

HANDSHAKE = (b"GET /ws HTTP/1.1\r\nHost: bench\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
             b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
SWITCHED = (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
KEY = bytes([0x37, 0xFA, 0x21, 0x3D])


def client_frame(payload):
    masked = bytes(b ^ KEY[i % 4] for i, b in enumerate(payload))
    return bytes([0x82, 0x80 | len(payload)]) + KEY + masked


MESSAGE = client_frame(bytes(range(64)))
ECHO_LEN = 2 + 64


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit("no VmRSS")


async def upstream_conn(reader, writer):
    """Answers 101 and echoes every client frame unmasked (64-byte binary
    messages; anything else is echoed as its payload); or, for a plain
    request, answers 200 and keeps the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        if b"upgrade: websocket" not in head.lower():
            while True:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
                await reader.readuntil(b"\r\n\r\n")
        writer.write(SWITCHED)
        while True:
            first = await reader.readexactly(2)
            n = first[1] & 0x7F
            if n == 126:
                n = struct.unpack(">H", await reader.readexactly(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", await reader.readexactly(8))[0]
            key = await reader.readexactly(4) if first[1] & 0x80 else b"\0\0\0\0"
            payload = await reader.readexactly(n)
            if first[0] & 0x0F == 0x8:
                return
            payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
            writer.write(bytes([first[0], len(payload)]) + payload)
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError,
            asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def start_upstream():
    server = await asyncio.start_server(upstream_conn, "127.0.0.1", 0, backlog=4096)
    return server, server.sockets[0].getsockname()[1]


def start_sluice(binary, upstream, rules, cpu=None):
    port, admin = free_port(), free_port()
    directory = tempfile.mkdtemp()
    path = os.path.join(directory, "sluice.toml")
    open(path, "w").write(CONFIG.format(port=port, upstream=upstream, admin=admin, rules=rules))
    command = [binary, "run", "--config", path]
    if cpu is not None:
        command = ["taskset", "-c", str(cpu)] + command
    log = open(os.path.join(directory, "sluice.log"), "w")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    end = time.time() + 10
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return process, port
        except OSError:
            time.sleep(0.05)
    process.kill()
    sys.exit("sluice did not start")


async def open_tunnel(port):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HANDSHAKE)
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 101"):
        raise SystemExit(f"no tunnel: {head!r} (sluice's log: /tmp/*/sluice.log)")
    return reader, writer


async def echo_loop(port, until, counts, batch):
    reader, writer = await open_tunnel(port)
    burst = MESSAGE * batch
    while time.time() < until:
        writer.write(burst)
        await reader.readexactly(ECHO_LEN * batch)
        counts[0] += batch
    writer.close()


async def cpu_round(binary, upstream_port, rules, seconds, conns, batch):
    process, port = start_sluice(binary, upstream_port, rules, cpu=1)
    try:
        # Warm up, then measure.
        counts = [0]
        await asyncio.gather(*(echo_loop(port, time.time() + 1, counts, batch) for _ in range(conns)))
        before = cpu_ticks(process.pid)
        counts = [0]
        await asyncio.gather(*(echo_loop(port, time.time() + seconds, counts, batch) for _ in range(conns)))
        used = (cpu_ticks(process.pid) - before) / os.sysconf("SC_CLK_TCK")
        return used * 1e6 / counts[0], counts[0] / seconds
    finally:
        process.kill()
        process.wait()


async def cpu(args):
    os.sched_setaffinity(0, {0})
    server, upstream_port = await start_upstream()
    variants = {"no message rule": "", "message rule": METERED}
    results = {name: [] for name in variants}
    for round_ in range(args.rounds):
        for name, rules in variants.items():
            us, rate = await cpu_round(args.sluice, upstream_port, rules, args.seconds, args.conns,
                                       args.batch)
            results[name].append(us)
            print(f"round {round_ + 1} {name:16} {us:7.2f} µs CPU/message  {rate:8.0f} messages/s", flush=True)
    server.close()
    medians = {name: statistics.median(values) for name, values in results.items()}
    for name, median in medians.items():
        print(f"median {name:16} {median:7.2f} µs CPU/message")
    print(f"ratio: {medians['message rule'] / medians['no message rule']:.3f}×")


async def hold(port, count, tunnel):
    conns = []
    for n in range(count):
        if tunnel:
            reader, writer = await open_tunnel(port)
            writer.write(MESSAGE)
            await reader.readexactly(ECHO_LEN)
        else:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /idle HTTP/1.1\r\nHost: bench\r\n\r\n")
            await reader.readuntil(b"\r\n\r\nok")
        conns.append(writer)
        if n % 1000 == 999:
            await asyncio.sleep(0)
    return conns


async def tunnels(args):
    # Each tunnel is two sockets here (client, upstream) and two in sluice,
    # which inherits the limit; raising the hard limit needs root.
    wanted = max(4 * args.count + 1000, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
    except (ValueError, OSError):
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    server, upstream_port = await start_upstream()
    results = {}
    for name, rules, tunnel in [("idle HTTP connections", "", False),
                                ("tunnels, no message rule", "", True),
                                ("tunnels, message rule", METERED, True)]:
        process, port = start_sluice(args.sluice, upstream_port, rules)
        try:
            await asyncio.sleep(0.5)
            empty = rss_kib(process.pid)
            conns = await hold(port, args.count, tunnel)
            # Past the quiet clock (10 s): an idle connection has given
            # back what it held for requests.
            await asyncio.sleep(12)
            full = rss_kib(process.pid)
            results[name] = full - empty
            print(f"{name:28} RSS {empty} KiB → {full} KiB: {(full - empty) * 1024 / args.count:8.0f} bytes each", flush=True)
            for writer in conns:
                writer.close()
            await asyncio.sleep(1)
        finally:
            process.kill()
            process.wait()
    idle = results["idle HTTP connections"]
    for name in ["tunnels, no message rule", "tunnels, message rule"]:
        print(f"{name:28} {(results[name] - idle) * 1024 / args.count:8.0f} bytes each above an idle connection")
    server.close()


async def gigabyte(args):
    server, upstream_port = await start_upstream()
    process, port = start_sluice(args.sluice, upstream_port, METERED)
    try:
        await asyncio.sleep(0.5)
        before = rss_kib(process.pid)
        reader, writer = await open_tunnel(port)
        # Read while sending: the Close frame arrives before the reset.
        answer = asyncio.create_task(reader.read(64))
        writer.write(bytes([0x82, 0xFF]) + struct.pack(">Q", 1 << 30) + KEY)
        chunk = b"\x55" * (1 << 20)
        sent = 0
        try:
            while sent < 1024:
                writer.write(chunk)
                await asyncio.wait_for(writer.drain(), 2)
                sent += 1
        except (asyncio.TimeoutError, ConnectionError):
            pass
        close = b""
        try:
            close = await asyncio.wait_for(answer, 2)
        except (asyncio.TimeoutError, ConnectionError):
            pass
        after = rss_kib(process.pid)
        code = struct.unpack(">H", close[2:4])[0] if len(close) >= 4 and close[0] == 0x88 else None
        print(f"sent {sent} MiB of the 1024 announced; close code {code}; RSS {before} KiB → {after} KiB ({after - before:+d} KiB)")
    finally:
        process.kill()
        process.wait()
        server.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sluice")
    ap.add_argument("what", choices=["cpu", "tunnels", "gigabyte"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--count", type=int, default=10000)
    args = ap.parse_args()
    asyncio.run({"cpu": cpu, "tunnels": tunnels, "gigabyte": gigabyte}[args.what](args))


if __name__ == "__main__":
    main()
