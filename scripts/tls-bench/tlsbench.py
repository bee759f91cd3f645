#!/usr/bin/env python3
"""tlsbench - proxybench (../shared/bench/proxybench.py) extended with HTTPS, new-connection,
idle-connection memory and access-log scenarios, side by side with nginx in one run, stdlib only.

Everything proxybench does still holds (read its docstring, README and BASELINE): one upstream
nginx on the load CPU, the proxy under test alone on the proxy CPU (pinned mode), scenarios
interleaved round by round, CPU-busy us per request on the proxy CPU as the comparable figure
where the VM has no hardware counters, and checks that every run did what it claims.

What this copy adds (scripts/tls-bench/README.md has the commands):
  * TLS scenarios: one ECDSA P-256 certificate, made once with the openssl command line into
    --cert-dir (target/tls-bench/cert), served by nginx (`listen ... ssl`, TLS 1.3 only,
    ssl_session_tickets off, ssl_session_cache off) and by a candidate whose spec says
    "tls": true (placeholders {cert} and {key}). wrk and the probes speak https.
  * loads: plain (keep-alive, as proxybench), close (wrk -H "Connection: close": every request
    on a new connection, so a full TLS handshake each; wrk runs with an LD_PRELOAD shim,
    noresume.c, that drops OpenSSL's kept session on close, since wrk otherwise resumes every
    handshake with a server that accepts its tickets), idle:N (no wrk: a python asyncio client
    opens N connections, completes the TLS handshake and stays idle; the proxy's RSS and PSS
    are read before and after).
  * verification of TLS: a python ssl probe (version, cipher, ALPN, certificate verified,
    NewSessionTicket messages received, whether the server resumes a session), and during the
    warm-up a handshake census read off the loopback interface (AF_PACKET, a BPF filter on the
    proxy port): ClientHellos, PSK offered, ServerHellos with the negotiated version, cipher
    and group, resumed handshakes (PSK accepted), HelloRetryRequests. TCP passive opens per
    request tell keep-alive (about 0) from a new connection per request (about 1).
  * access log scenarios: nginx with a JSON access log (unbuffered, and buffer=64k), and a
    candidate spec key "log_file": the lines written are counted against the requests served.
  * --ref NAME[,NAME]: extra ratio columns against these scenarios (e.g. nginx_tls_rl).
  * spec key "scrape": {"url": ..., "match": REGEX}: metric lines recorded after each run.

Upstream stays plain HTTP/1.1 with a keep-alive pool in every scenario.
"""

import argparse
import asyncio
import collections
import ctypes
import datetime
import http.client
import json
import math
import os
import platform
import random
import re
import resource
import shlex
import shutil
import signal
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
HOST = "127.0.0.1"
KEY_HEADER = "X-Api-Key"
HERE = os.path.dirname(os.path.abspath(__file__))
# the certificate both proxies serve, and the client context that trusts it (set in main)
TLS = {"cert": None, "key": None, "ctx": None, "shim": None}
# the name the probes and the idle client send as SNI (the certificate's SAN); wrk sends the
# URL's host, 127.0.0.1, also in the certificate (IP SAN)
TLS_NAME = "localhost"

# ---------------------------------------------------------------------------------------
# process management: everything we start is tracked and stopped by PID, nothing else.
# ---------------------------------------------------------------------------------------
_STARTED = []  # list of (name, Popen)


def log(msg):
    sys.stderr.write("[%s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def start_proc(name, argv, cpus, logdir):
    """Start argv (optionally under `taskset -c cpus`), stdout/stderr to files."""
    full = (["taskset", "-c", cpus] if cpus is not None else []) + list(argv)
    out = open(os.path.join(logdir, name + ".out.log"), "ab")
    p = subprocess.Popen(full, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)
    out.close()
    _STARTED.append((name, p))
    return p, full


def stop_proc(p, sig=signal.SIGTERM, timeout=5.0):
    """Stop one process we started, by its PID (never by name)."""
    if p.poll() is None:
        try:
            os.kill(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            log("pid %d did not exit after %s, SIGKILL" % (p.pid, sig))
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(5)
    for i, (_, q) in enumerate(_STARTED):
        if q is p:
            del _STARTED[i]
            break


def stop_all():
    for name, p in list(reversed(_STARTED)):
        log("cleanup: stopping %s pid %d" % (name, p.pid))
        stop_proc(p)


def _on_signal(signum, frame):
    log("signal %d: cleaning up" % signum)
    stop_all()
    sys.exit(130)


# ---------------------------------------------------------------------------------------
# /proc helpers
# ---------------------------------------------------------------------------------------
def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def proc_tree(pid):
    kids = collections.defaultdict(list)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        s = read("/proc/%s/stat" % d)
        if not s:
            continue
        rest = s[s.rfind(")") + 2:].split()
        kids[int(rest[1])].append(int(d))
    out, stack = [pid], [pid]
    while stack:
        for c in kids.get(stack.pop(), []):
            out.append(c)
            stack.append(c)
    return out


def cpu_ticks(pids):
    t = 0
    for pid in pids:
        s = read("/proc/%d/stat" % pid)
        if s:
            rest = s[s.rfind(")") + 2:].split()
            t += int(rest[11]) + int(rest[12])
    return t


def status_kib(pid, field):
    for line in read("/proc/%d/status" % pid).splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def pss_kib(pid):
    for line in read("/proc/%d/smaps_rollup" % pid).splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def cpu_stat():
    """per-cpu jiffies: {cpuN: dict(user, nice, system, idle, iowait, irq, softirq, steal)}"""
    out = {}
    for line in read("/proc/stat").splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            f = line.split()
            v = [int(x) for x in f[1:9]]
            out[f[0]] = dict(zip(["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"], v))
    return out


def cpu_delta(a, b):
    """percent of each CPU over the window: busy (user+nice+system+irq+softirq), softirq, steal."""
    res = {}
    for cpu in b:
        d = {k: b[cpu][k] - a[cpu][k] for k in b[cpu]}
        tot = sum(d.values()) or 1
        res[cpu] = {
            "busy_pct": round(100.0 * (d["user"] + d["nice"] + d["system"] + d["irq"] + d["softirq"]) / tot, 1),
            "softirq_pct": round(100.0 * d["softirq"] / tot, 1),
            "steal_pct": round(100.0 * d["steal"] / tot, 1),
            "busy_jiffies": d["user"] + d["nice"] + d["system"] + d["irq"] + d["softirq"],
        }
    return res


def tcp_counters():
    """system-wide TCP counters (loopback segments are counted once out, once in)."""
    out = {}
    for path in ("/proc/net/snmp", "/proc/net/netstat"):
        lines = read(path).splitlines()
        for i in range(0, len(lines) - 1, 2):
            h, v = lines[i].split(), lines[i + 1].split()
            if h[0] in ("Tcp:", "TcpExt:"):
                for k, x in zip(h[1:], v[1:]):
                    out[h[0][:-1] + "." + k] = int(x)
    return out


TCP_KEYS = ["Tcp.OutSegs", "TcpExt.DelayedACKs", "TcpExt.TCPPureAcks", "TcpExt.TCPHPAcks",
            "TcpExt.TCPAutoCorking", "TcpExt.TCPBacklogCoalesce", "Tcp.RetransSegs",
            "Tcp.PassiveOpens", "Tcp.ActiveOpens"]


# ---------------------------------------------------------------------------------------
# TLS: the certificate, the client context, the no-resumption shim for wrk
# ---------------------------------------------------------------------------------------
def make_cert(cert_dir):
    """One self-signed ECDSA P-256 certificate (SAN localhost and 127.0.0.1), made once and
    reused by every later run (both proxies serve the same file). Returns (cert, key)."""
    os.makedirs(cert_dir, exist_ok=True)
    cert, key = os.path.join(cert_dir, "cert.pem"), os.path.join(cert_dir, "key.pem")
    if not (os.path.exists(cert) and os.path.exists(key)):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-nodes", "-keyout", key, "-out", cert, "-days", "3650", "-subj", "/CN=" + TLS_NAME,
                        "-addext", "subjectAltName=DNS:%s,IP:127.0.0.1" % TLS_NAME],
                       check=True, capture_output=True, timeout=30)
        log("made an ECDSA P-256 certificate in %s" % cert_dir)
    text = subprocess.run(["openssl", "x509", "-in", cert, "-noout", "-text"], capture_output=True, text=True,
                          timeout=30).stdout
    if "P-256" not in text and "prime256v1" not in text:
        raise SystemExit("%s is not an ECDSA P-256 certificate" % cert)
    return os.path.abspath(cert), os.path.abspath(key)


def client_context(alpn=("http/1.1",)):
    ctx = ssl.create_default_context(cafile=TLS["cert"])
    ctx.set_alpn_protocols(list(alpn))
    return ctx


def build_shim(out_dir):
    """noresume.so: an LD_PRELOAD shim for wrk that forgets OpenSSL's session on SSL_clear, so
    every reconnect is a full handshake (see noresume.c)."""
    src = os.path.join(HERE, "noresume.c")
    so = os.path.join(out_dir, "noresume.so")
    if not os.path.exists(so) or os.path.getmtime(so) < os.path.getmtime(src):
        cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if not cc:
            raise SystemExit("the close load needs a C compiler for noresume.c (or --allow-resumption)")
        os.makedirs(out_dir, exist_ok=True)
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", so, src, "-ldl"], check=True, timeout=120)
    return os.path.abspath(so)


def tls_probe(port):
    """What a TLS client gets from the proxy: version, cipher, ALPN (offering http/1.1, then h2 +
    http/1.1), the certificate verified against ours, the NewSessionTicket messages received on
    one connection, and whether the server resumes that session on a second connection."""
    out = {}
    tickets = [0]

    def on_message(conn, direction, version, content_type, msg_type, data):
        if direction == "read" and msg_type == ssl._TLSMessageType.NEWSESSION_TICKET:
            tickets[0] += 1

    contexts = {}

    def one(alpn, session=None):
        if alpn not in contexts:  # a session resumes only through the context that made it
            contexts[alpn] = client_context(alpn)
            if hasattr(contexts[alpn], "_msg_callback"):  # a debugging hook of CPython's ssl module
                contexts[alpn]._msg_callback = on_message
        ctx = contexts[alpn]
        raw = socket.create_connection((HOST, port), timeout=5)
        t = ctx.wrap_socket(raw, server_hostname=TLS_NAME, session=session)
        try:
            t.sendall(b"GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % TLS_NAME.encode())
            data = b""
            while True:
                d = t.recv(65536)
                if not d:
                    break
                data += d
            return {"version": t.version(), "cipher": t.cipher()[0], "alpn": t.selected_alpn_protocol(),
                    "reused": t.session_reused, "status_line": data.split(b"\r\n", 1)[0].decode(errors="replace"),
                    "session": t.session}
        finally:
            t.close()

    try:
        first = one(("http/1.1",))
        out.update({k: first[k] for k in ("version", "cipher", "alpn", "status_line")})
        out["tickets_per_connection"] = tickets[0] if hasattr(ssl.SSLContext, "_msg_callback") else None
        second = one(("http/1.1",), session=first["session"] if first["session"].has_ticket else None)
        out["server_resumes"] = second["reused"]
        out["alpn_offering_h2"] = one(("h2", "http/1.1"))["alpn"]
        out["certificate_verified"] = True
    except (OSError, ValueError) as e:
        out["error"] = "%s: %s" % (type(e).__name__, e)
    return out


# ---------------------------------------------------------------------------------------
# handshake census: ClientHello / ServerHello read off the loopback interface
# ---------------------------------------------------------------------------------------
HRR_RANDOM = bytes.fromhex("CF21AD74E59A6111BE1D8C021E65B891C2A211167ABB8C5E079E09E2C8A8339C")
TLS_SUITES = {0x1301: "TLS_AES_128_GCM_SHA256", 0x1302: "TLS_AES_256_GCM_SHA384",
              0x1303: "TLS_CHACHA20_POLY1305_SHA256", 0xc02b: "ECDHE-ECDSA-AES128-GCM-SHA256",
              0xc02c: "ECDHE-ECDSA-AES256-GCM-SHA384", 0xcca9: "ECDHE-ECDSA-CHACHA20-POLY1305"}
TLS_GROUPS = {0x001d: "X25519", 0x0017: "secp256r1", 0x0018: "secp384r1", 0x11ec: "X25519MLKEM768"}


def _bpf_hello_filter(port):
    """Classic BPF: outgoing IPv4 TCP packets to or from `port` whose payload starts with a TLS
    handshake record holding a ClientHello (1) or ServerHello (2). Loopback frames carry a
    14-byte Ethernet header; every packet is seen once outgoing and once incoming: keep one."""
    prog, labels, fix = [], {}, []

    def op(code, k=0, jt=None, jf=None):
        fix.append((len(prog), jt, jf))
        prog.append([code, 0, 0, k & 0xffffffff])

    op(0x20, -0x1000 + 4)            # A = pkttype (SKF_AD_PKTTYPE)
    op(0x15, 4, None, "drop")        # == PACKET_OUTGOING
    op(0x28, 12)                     # A = ethertype
    op(0x15, 0x0800, None, "drop")
    op(0x30, 23)                     # A = IP protocol
    op(0x15, 6, None, "drop")
    op(0xb1, 14)                     # X = IP header length
    op(0x48, 14)                     # A = TCP source port
    op(0x15, port, "tcp", None)
    op(0x48, 16)                     # A = TCP destination port
    op(0x15, port, None, "drop")
    labels["tcp"] = len(prog)
    op(0x50, 26)                     # A = TCP data offset byte
    op(0x74, 4)                      # A >>= 4
    op(0x64, 2)                      # A <<= 2
    op(0x0c)                         # A += X
    op(0x07)                         # X = A (IP + TCP header lengths)
    op(0x50, 14)                     # A = first payload byte
    op(0x15, 0x16, None, "drop")     # a handshake record
    op(0x50, 19)                     # A = handshake type
    op(0x15, 1, "accept", None)
    op(0x15, 2, "accept", "drop")
    labels["accept"] = len(prog)
    op(0x06, 262144)
    labels["drop"] = len(prog)
    op(0x06, 0)
    for i, jt, jf in fix:
        prog[i][1] = 0 if jt is None else labels[jt] - i - 1
        prog[i][2] = 0 if jf is None else labels[jf] - i - 1
    return b"".join(struct.pack("HBBI", *x) for x in prog), len(prog)


def _tls_extensions(b, i, end):
    out = {}
    while i + 4 <= end:
        t, n = struct.unpack_from("!HH", b, i)
        out[t] = b[i + 4:i + 4 + n]
        i += 4 + n
    return out


class HandshakeCensus:
    """Counts the TLS handshakes on one TCP port of the loopback interface while it runs (a
    thread of the harness, on the load CPU). Needs root (AF_PACKET); without it, it says why."""

    def __init__(self, port):
        self.port = port
        self.c = collections.Counter()
        self.error = None
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        try:
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))  # ETH_P_ALL
            self.sock.bind(("lo", 0))
            prog, n = _bpf_hello_filter(port)
            self._prog = ctypes.create_string_buffer(prog, len(prog))
            self.sock.setsockopt(socket.SOL_SOCKET, 26, struct.pack("HL", n, ctypes.addressof(self._prog)))
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)  # SO_RCVBUFFORCE
            except OSError:
                pass
            self.sock.settimeout(0.1)
            self.sock.getsockopt(263, 6, 8)  # SOL_PACKET PACKET_STATISTICS: read = reset
        except OSError as e:
            self.sock, self.error = None, "handshake census unavailable: %s" % e

    def start(self):
        if self.sock:
            self.thread.start()
        return self

    def stop(self):
        if not self.sock:
            return {"error": self.error}
        self.stop_ev.set()
        self.thread.join()
        # the socket may still hold packets: drain them
        self.sock.setblocking(False)
        try:
            while True:
                self._packet(self.sock.recv(65600))
        except (BlockingIOError, OSError):
            pass
        _, drops = struct.unpack("II", self.sock.getsockopt(263, 6, 8))
        self.c["packets_dropped"] += drops
        self.sock.close()
        return dict(self.c)

    def _loop(self):
        while not self.stop_ev.is_set():
            try:
                self._packet(self.sock.recv(65600))
            except socket.timeout:
                continue
            except OSError:
                return

    def _packet(self, b):
        try:
            t = 14 + (b[14] & 0xf) * 4
            sport, dport = struct.unpack_from("!HH", b, t)
            p = t + (b[t + 12] >> 4) * 4 + 9  # past the record (5) and handshake (4) headers
            if dport == self.port and b[p - 4] == 1:
                self._client_hello(b, p)
            elif sport == self.port and b[p - 4] == 2:
                self._server_hello(b, p)
        except (IndexError, struct.error):
            self.c["unparsed"] += 1

    def _client_hello(self, b, i):
        c = self.c
        c["client_hello"] += 1
        i += 2 + 32
        i += 1 + b[i]
        i += 2 + struct.unpack_from("!H", b, i)[0]
        i += 1 + b[i]
        n = struct.unpack_from("!H", b, i)[0]
        e = _tls_extensions(b, i + 2, i + 2 + n)
        c["client_hello_psk"] += 41 in e  # pre_shared_key: the client tries to resume
        c["client_hello_sni"] += 0 in e
        c["client_hello_alpn"] += 16 in e
        c["client_hello_tls12_ticket"] += bool(e.get(35))

    def _server_hello(self, b, i):
        c = self.c
        if b[i + 2:i + 34] == HRR_RANDOM:
            c["hello_retry_request"] += 1
            return
        c["server_hello"] += 1
        legacy = struct.unpack_from("!H", b, i)[0]
        i += 2 + 32
        i += 1 + b[i]
        suite = struct.unpack_from("!H", b, i)[0]
        i += 3
        n = struct.unpack_from("!H", b, i)[0]
        e = _tls_extensions(b, i + 2, i + 2 + n)
        ver = struct.unpack("!H", e[43])[0] if len(e.get(43, b"")) == 2 else legacy
        c["version:" + {0x0304: "TLSv1.3", 0x0303: "TLSv1.2"}.get(ver, hex(ver))] += 1
        c["cipher:" + TLS_SUITES.get(suite, hex(suite))] += 1
        if len(e.get(51, b"")) >= 2:
            g = struct.unpack_from("!H", e[51])[0]
            c["group:" + TLS_GROUPS.get(g, hex(g))] += 1
        c["server_hello_resumed"] += 41 in e  # the server accepted the PSK


def census_negotiated(h):
    """'TLSv1.3 TLS_AES_256_GCM_SHA384 X25519' from a census (the most common of each)."""
    parts = []
    for prefix in ("version:", "cipher:", "group:"):
        seen = sorted(((v, k[len(prefix):]) for k, v in h.items() if k.startswith(prefix)), reverse=True)
        if seen:
            parts.append(seen[0][1] + ("" if len(seen) == 1 else "(+%d other)" % (len(seen) - 1)))
    return " ".join(parts)


# ---------------------------------------------------------------------------------------
# the idle-connection client (run as a child process: python3 tlsbench.py --idle-client ...)
# ---------------------------------------------------------------------------------------
def idle_client(a):
    """Opens a.count connections to a.port (TLS with the certificate in a.cafile, or plain),
    completes each TLS handshake, sends nothing, and keeps them open. Prints one JSON line when
    all are open, one after 'check' on stdin (how many are still open), and closes all and exits
    on 'close' or end of input."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = a.count + 256
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard) if hard != resource.RLIM_INFINITY else want, hard))
        except (ValueError, OSError):
            pass
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < want:
        print(json.dumps({"error": "RLIMIT_NOFILE %s < %d: raise the hard limit (ulimit -Hn)" % (
            resource.getrlimit(resource.RLIMIT_NOFILE), want)}), flush=True)
        return 1
    ctx = None
    if a.cafile:
        ctx = ssl.create_default_context(cafile=a.cafile)
        ctx.set_alpn_protocols(["http/1.1"])

    async def main():
        conns, errors = [], collections.Counter()
        gate = asyncio.Semaphore(a.concurrency)

        async def one():
            async with gate:
                for attempt in range(3):
                    try:
                        r, w = await asyncio.wait_for(asyncio.open_connection(
                            HOST, a.port, ssl=ctx, server_hostname=TLS_NAME if ctx else None), 30)
                        conns.append((r, w))
                        return
                    except (OSError, ssl.SSLError, asyncio.TimeoutError) as e:
                        errors["%s: %s" % (type(e).__name__, str(e)[:80])] += 1
                        await asyncio.sleep(0.2)

        t0 = time.time()
        await asyncio.gather(*(one() for _ in range(a.count)))
        print(json.dumps({"opened": len(conns), "failed": a.count - len(conns), "errors": dict(errors),
                          "seconds": round(time.time() - t0, 2)}), flush=True)
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if line.strip() == "check":
                await asyncio.sleep(0.2)  # let the transports see any close
                closed = sum(1 for r, w in conns if r.at_eof() or w.is_closing())
                print(json.dumps({"still_open": len(conns) - closed, "closed_by_server": closed}), flush=True)
                continue
            break
        for _, w in conns:
            w.transport.abort()
        return 0

    return asyncio.run(main())


# ---------------------------------------------------------------------------------------
# hardware counters via perf_event_open(2) (ctypes, no perf binary needed). Optional: if the
# kernel/VM refuses, the columns are simply absent.
# ---------------------------------------------------------------------------------------
class HwCounters:
    """instructions + cycles, either CPU-wide on one CPU (pid=-1) or for a list of TIDs."""
    SYS_perf_event_open = {"x86_64": 298, "aarch64": 241}.get(platform.machine())
    ENABLE, DISABLE, RESET = 0x2400, 0x2401, 0x2403

    def __init__(self, cpu=None, tids=None):
        import ctypes
        self.ct = ctypes
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fds = {"instructions": [], "cycles": [], "instructions_user": []}
        if self.SYS_perf_event_open is None:
            raise OSError("perf_event_open: unknown syscall number")
        targets = [(-1, cpu)] if cpu is not None else [(t, -1) for t in tids]
        # PERF_TYPE_HARDWARE config: 0 cycles, 1 instructions; flags bit0 disabled, bit5 exclude_kernel
        for name, config, flags in (("cycles", 0, 1), ("instructions", 1, 1), ("instructions_user", 1, 1 | 1 << 5)):
            for pid, c in targets:
                # struct perf_event_attr, PERF_ATTR_SIZE_VER0 (64 bytes)
                attr = struct.pack("<IIQQQQQIIQ", 0, 64, config, 0, 0, 0, flags, 0, 0, 0)
                buf = ctypes.create_string_buffer(attr, 64)
                fd = self.libc.syscall(self.SYS_perf_event_open, buf, pid, c, -1, 0)
                if fd < 0:
                    self.close()
                    raise OSError(ctypes.get_errno(), "perf_event_open failed")
                self.fds[name].append(fd)

    def _ioctl(self, req):
        for fds in self.fds.values():
            for fd in fds:
                self.libc.ioctl(fd, req, 0)

    def start(self):
        self._ioctl(self.RESET)
        self._ioctl(self.ENABLE)

    def stop(self):
        self._ioctl(self.DISABLE)
        return {k: sum(struct.unpack("<Q", os.read(fd, 8))[0] for fd in fds) for k, fds in self.fds.items()}

    def close(self):
        for fds in self.fds.values():
            for fd in fds:
                os.close(fd)
        self.fds = {k: [] for k in self.fds}


def derive_hw(r, load_cpu, proxy_cpu, has_proxy):
    """per-request hardware-counter metrics from the raw hw_* counts of one run (also used by
    --resummarize on old results)."""
    nreq = max(1, r["requests"])
    dur = r["duration_us"] / 1e6
    for k in ("proxy_cpu", "proxy_tids", "load_cpu"):
        v = r.get("hw_" + k)
        if not v:
            continue
        if k in ("proxy_cpu", "proxy_tids") and has_proxy:
            r["proxy_kinstr_per_req"] = v["instructions"] / nreq / 1e3
            if "instructions_user" in v:
                r["proxy_user_kinstr_per_req"] = v["instructions_user"] / nreq / 1e3
            r["proxy_kcycles_per_req"] = v["cycles"] / nreq / 1e3
            r["proxy_ipc"] = v["instructions"] / max(1, v["cycles"])
            if k == "proxy_cpu":
                busy = r["cpu"]["cpu%d" % proxy_cpu]["busy_pct"] / 100.0
                r["proxy_ghz"] = v["cycles"] / dur / max(busy, 0.01) / 1e9
        if k == "load_cpu":
            r["load_kinstr_per_req"] = v["instructions"] / nreq / 1e3
            r["load_kcycles_per_req"] = v["cycles"] / nreq / 1e3
            r["load_ipc"] = v["instructions"] / max(1, v["cycles"])
            busy = r["cpu"]["cpu%d" % load_cpu]["busy_pct"] / 100.0
            r["load_ghz"] = v["cycles"] / dur / max(busy, 0.01) / 1e9


def tids_of(pids):
    out = []
    for p in pids:
        try:
            out += [int(t) for t in os.listdir("/proc/%d/task" % p)]
        except OSError:
            pass
    return out


# ---------------------------------------------------------------------------------------
# configs
# ---------------------------------------------------------------------------------------
def render(tpl, **kw):
    for k, v in kw.items():
        tpl = tpl.replace("@%s@" % k.upper(), str(v))
    return tpl


NGINX_MAIN = """# generated by proxybench.py
daemon off;
master_process on;
worker_processes @WORKERS@;
pid @DIR@/nginx.pid;
lock_file @DIR@/nginx.lock;
error_log @DIR@/error.log warn;
worker_rlimit_nofile 16384;
events { worker_connections @WORKER_CONNECTIONS@; }
http {
    access_log off;
    client_body_temp_path @DIR@/body;
    proxy_temp_path @DIR@/proxy;
    fastcgi_temp_path @DIR@/fastcgi;
    uwsgi_temp_path @DIR@/uwsgi;
    scgi_temp_path @DIR@/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
@HTTP@
}
"""

UPSTREAM_HTTP = """
    server {
        listen @HOST@:@PORT@ backlog=4096;
        location / { default_type text/plain; return 200 "@BODY@"; }
    }
    server {
        listen @HOST@:@STATUS_PORT@;
        location / { stub_status; }
    }
"""

NGINX_PROXY_HTTP = """
    upstream up {
        server @HOST@:@UPSTREAM_PORT@;
        keepalive 128;
        keepalive_requests 1000000;
    }
@ZONE@
    server {
        listen @HOST@:@LISTEN_PORT@ backlog=4096@LISTEN_SSL@;
@SSL@
        location / {
@LIMIT@
@LOG@
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
"""

# limit_req: burst is needed even for a huge rate, because nginx rejects a second request
# for the same key within the same millisecond when burst=0. nodelay => never queued.
NGINX_VARIANTS = {
    "plain": ("", ""),
    "rl_pass": ("    limit_req_zone $binary_remote_addr zone=perip:10m rate=1000000r/s;",
                "            limit_req zone=perip burst=100000 nodelay;\n"
                "            limit_req_status 429;\n            limit_req_log_level info;"),
    "rl_429": ("    limit_req_zone $binary_remote_addr zone=perip:10m rate=1r/m;",
               "            limit_req zone=perip;\n"
               "            limit_req_status 429;\n            limit_req_log_level info;"),
    # 64m zone: room for ~500k nodes, so 100k keys never hit LRU eviction ("could not allocate node" -> 503)
    "rl_key": ("    limit_req_zone $http_x_api_key zone=perkey:64m rate=1000000r/s;",
               "            limit_req zone=perkey burst=100000 nodelay;\n"
               "            limit_req_status 429;\n            limit_req_log_level info;"),
}

# TLS on nginx's listener: TLS 1.3 only, the shared certificate, no resumption at all (no
# tickets, no session cache: nginx 1.22 with OpenSSL 3 still sends two NewSessionTickets, which it
# never accepts), buffers released on idle connections (nginx's default with OpenSSL).
NGINX_SSL = """        ssl_certificate @CERT@;
        ssl_certificate_key @KEY@;
        ssl_protocols TLSv1.3;
        ssl_session_tickets off;
        ssl_session_cache off;"""

# the access log: one JSON line per request with the fields of sluice's (SPEC "At the edge");
# unbuffered (nginx's default: one write(2) per request) or buffered (64 KiB, flushed every 1 s)
NGINX_LOG_FORMAT = """    log_format edge escape=json '{"time":"$time_iso8601","request_id":"$request_id",'
        '"client":"$remote_addr","method":"$request_method","host":"$host","path":"$uri",'
        '"status":$status,"bytes_out":$body_bytes_sent,"duration_ms":$request_time,'
        '"upstream_ms":"$upstream_response_time","delay_ms":0,"outcome":"allowed",'
        '"rule":"per-ip","key":"$remote_addr"}';"""
NGINX_LOGS = {None: "", "log": "            access_log @DIR@/access.log edge;",
              "logbuf": "            access_log @DIR@/access.log edge buffer=64k flush=1s;"}

# idle connections: room for them, and a first request awaited long enough (the handshake
# and the wait for the request head both count against client_header_timeout in nginx 1.22)
NGINX_IDLE_HTTP = """    client_header_timeout 120s;"""

HAPROXY_CFG = """# generated by proxybench.py
global
    nbthread @WORKERS@
    maxconn 8192
    pidfile @DIR@/haproxy.pid
    # no 'log' line: nothing is logged, like nginx with access_log off
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
    option http-keep-alive
    http-reuse always
frontend fe
    bind @HOST@:@LISTEN_PORT@
@RULES@
    default_backend be
backend be
    server up @HOST@:@UPSTREAM_PORT@
"""

# L4 pass-through (no HTTP parsing): a practical ceiling for *any* proxy on the proxy CPU
# in this placement; tells how much headroom the harness has above nginx.
HAPROXY_TCP_CFG = """# generated by proxybench.py
global
    nbthread @WORKERS@
    maxconn 8192
    pidfile @DIR@/haproxy.pid
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend fe
    bind @HOST@:@LISTEN_PORT@
    default_backend be
backend be
    server up @HOST@:@UPSTREAM_PORT@
"""

HAPROXY_VARIANTS = {
    "plain": "",
    "rl_pass": "    stick-table type ip size 100k expire 60s store http_req_rate(10s)\n"
               "    http-request track-sc0 src\n"
               "    http-request deny deny_status 429 if { sc_http_req_rate(0) gt 1000000000 }",
    "rl_429": "    stick-table type ip size 100k expire 60s store http_req_rate(10s)\n"
              "    http-request track-sc0 src\n"
              "    http-request deny deny_status 429 if { sc_http_req_rate(0) gt 0 }",
}

# ---------------------------------------------------------------------------------------
# wrk Lua scripts
# ---------------------------------------------------------------------------------------
LUA_DONE = r'''
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('PROXYBENCH_JSON {"duration_us":%d,"requests":%d,"bytes":%d,' ..
    '"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d,' ..
    '"lat_mean_us":%.1f,"lat_stdev_us":%.1f,"lat_max_us":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d%s}\n',
    summary.duration, summary.requests, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.stdev, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    census_json()))
end
'''

LUA_SETUP = r'''
-- setup() runs once per wrk thread before it starts; gives each thread an id (tid)
local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads - 1)
end
'''

LUA_NO_CENSUS = r'''
function census_json() return "" end
'''

# status census: only used in the warm-up run (defining response() makes wrk parse
# headers into Lua tables for every response, which slows it down)
LUA_CENSUS = r'''
function response(status, headers, body)
  counts[status] = (counts[status] or 0) + 1
end
function census_json()
  local tot = {}
  for _, t in ipairs(threads) do
    local c = t:get("counts")
    for k, v in pairs(c) do tot[k] = (tot[k] or 0) + v end
  end
  local parts = {}
  for k, v in pairs(tot) do table.insert(parts, string.format('"%d":%d', k, v)) end
  return ',"census":{' .. table.concat(parts, ",") .. '}'
end
'''

LUA_INIT_PLAIN = r'''
function init(args) counts = {} end
'''

# keys:N load: every thread walks the same permutation of N keys (k*STRIDE mod N,
# STRIDE coprime with N); thread t starts at offset + t*N/T, so N requests in total
# touch every key once. wrk script args: <offset> <nthreads>. Requests are
# pre-formatted once per thread in init(); request() only returns a prebuilt string.
LUA_KEYS = r'''
local N, STRIDE = @N@, @STRIDE@
local reqs, idx = {}, 0
function init(args)
  counts = {}
  local off = tonumber(args[1]) or 0
  local nthr = tonumber(args[2]) or 1
  for k = 0, N - 1 do
    reqs[k + 1] = wrk.format("GET", "/", {["@HEADER@"] = string.format("key-%08d", (k * STRIDE) % N)})
  end
  idx = (off + math.floor((tid or 0) * N / nthr)) % N
end
function request()
  idx = idx + 1
  if idx > N then idx = 1 end
  return reqs[idx]
end
'''


def lua_script(load, census):
    parts = [LUA_SETUP, LUA_CENSUS if census else LUA_NO_CENSUS]
    if load in ("plain", "close"):
        parts.append(LUA_INIT_PLAIN)
    else:
        n = int(load.split(":")[1])
        stride = 7919
        while math.gcd(stride, n) != 1:
            stride += 2
        parts.append(render(LUA_KEYS, n=n, stride=stride % n if n > 1 else 1, header=KEY_HEADER))
    parts.append(LUA_DONE)
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------
# scenarios
# ---------------------------------------------------------------------------------------
def builtin_scenarios(keys, idle_conns=10000):
    kl = "keys:%d" % keys
    il = "idle:%d" % idle_conns
    S = []

    def add(name, letter, kind, variant, load, expect, desc, optional=False, tls=False, log=None):
        S.append(dict(name=name, letter=letter, kind=kind, variant=variant, load=load, expect=expect, desc=desc,
                      optional=optional, tls=tls, log=log))

    add("direct", "a", "direct", None, "plain", "2xx", "wrk -> upstream directly (ceiling)")
    add("nginx", "b", "nginx", "plain", "plain", "2xx", "nginx proxy_pass, keepalive upstream pool")
    add("nginx_rl_pass", "c", "nginx", "rl_pass", "plain", "2xx",
        "nginx + limit_req $binary_remote_addr, 1M r/s burst 100k nodelay (never rejects)")
    add("nginx_rl_429", "d", "nginx", "rl_429", "plain", "429",
        "nginx + limit_req $binary_remote_addr 1r/m (reject path, 429)")
    add("haproxy", "e0", "haproxy", "plain", "plain", "2xx", "haproxy proxy, http-reuse always (reference for e)")
    add("haproxy_rl_pass", "e", "haproxy", "rl_pass", "plain", "2xx",
        "haproxy + stick-table http_req_rate(10s) track src, deny if > 1e9 (never)")
    add("haproxy_rl_429", "f", "haproxy", "rl_429", "plain", "429",
        "haproxy + stick-table, deny 429 if rate > 0 (reject path)")
    add("l4_haproxy_tcp", "h", "haproxy", "tcp", "plain", "2xx",
        "opt-in: haproxy mode tcp, L4 pass-through 1:1 connections (NOT a ceiling: ~2x more softirq work "
        "on loopback than HTTP mode here)", optional=True)
    add("direct_keys", "g-", "direct", None, kl, "2xx",
        "wrk Lua key script -> upstream directly (ceiling for keyed loads)")
    add("nginx_key1", "g1", "nginx", "rl_key", "keys:1", "2xx",
        "nginx limit_req on $http_x_api_key, same Lua script, 1 distinct key (control)")
    add("nginx_key%dk" % (keys // 1000) if keys % 1000 == 0 else "nginx_key%d" % keys, "g", "nginx", "rl_key", kl, "2xx",
        "nginx limit_req on $http_x_api_key, %d distinct keys (all pre-inserted during warm-up)" % keys)
    # TLS (opt-in: name them in --scenarios)
    add("nginx_tls", "t1", "nginx", "plain", "plain", "2xx",
        "nginx listen ssl (TLS 1.3, P-256), proxy_pass keepalive pool; wrk keep-alive over https",
        optional=True, tls=True)
    add("nginx_tls_rl", "t2", "nginx", "rl_pass", "plain", "2xx",
        "nginx_tls + limit_req never rejecting; wrk keep-alive over https", optional=True, tls=True)
    add("nginx_tls_hs", "t3", "nginx", "plain", "close", "2xx",
        "nginx_tls, wrk Connection: close: a full TLS 1.3 handshake per request", optional=True, tls=True)
    add("nginx_tls_rl_hs", "t4", "nginx", "rl_pass", "close", "2xx",
        "nginx_tls_rl, wrk Connection: close: a full TLS 1.3 handshake per request", optional=True, tls=True)
    add("nginx_tls_idle", "t5", "nginx", "plain", il, "2xx",
        "nginx_tls, %d idle TLS connections (handshake done, no request): RSS/PSS growth" % idle_conns,
        optional=True, tls=True)
    add("nginx_idle", "t6", "nginx", "plain", il, "2xx",
        "nginx, %d idle plain TCP connections (no request): RSS/PSS growth" % idle_conns, optional=True)
    # access log (opt-in)
    add("nginx_rl_log", "l1", "nginx", "rl_pass", "plain", "2xx",
        "nginx_rl_pass + JSON access_log to a file, unbuffered (nginx's default)", optional=True, log="log")
    add("nginx_rl_logbuf", "l2", "nginx", "rl_pass", "plain", "2xx",
        "nginx_rl_pass + JSON access_log to a file, buffer=64k flush=1s", optional=True, log="logbuf")
    return S


def candidate_scenarios(args):
    out = []
    specs = []
    if args.candidate_spec:
        with open(args.candidate_spec) as f:
            specs = json.load(f)
        if isinstance(specs, dict):
            specs = [specs]
        base = os.path.dirname(os.path.abspath(args.candidate_spec))
        for s in specs:  # @file in a spec is relative to the spec file
            if (s.get("config") or "").startswith("@") and not os.path.isabs(s["config"][1:]):
                s["config"] = "@" + os.path.join(base, s["config"][1:])
    if args.candidate:
        specs.append(dict(name=args.candidate_name, cmd=args.candidate, config=args.candidate_config,
                          load=args.candidate_load, expect=args.candidate_expect))
    names = set()
    for s in specs:
        if s["name"] in names:
            raise SystemExit("duplicate candidate name %r" % s["name"])
        names.add(s["name"])
        cfg = s.get("config") or ""
        if cfg.startswith("@"):
            with open(cfg[1:]) as f:
                cfg = f.read()
        elif "\\n" in cfg:  # a template typed on the command line with literal \n
            cfg = cfg.replace("\\n", "\n").replace("\\t", "\t")
        load = s.get("load", "plain")
        if load.startswith("keys") and load == "keys":
            load = "keys:%d" % args.keys
        if load == "idle":
            load = "idle:%d" % args.idle_conns
        out.append(dict(name=s["name"], letter="cand", kind="command", variant=None, load=load,
                        expect=s.get("expect", "2xx"), cmd=s["cmd"], config=cfg,
                        stop_signal=s.get("stop_signal", "SIGTERM"),
                        ready_timeout=float(s.get("ready_timeout", 15)),
                        desc=s.get("desc", "candidate: " + s["cmd"]), tls=bool(s.get("tls")),
                        log_file=s.get("log_file"), scrape=s.get("scrape")))
    return out


# ---------------------------------------------------------------------------------------
# HTTP helpers
# ---------------------------------------------------------------------------------------
class _TlsConnection(http.client.HTTPSConnection):
    """https to 127.0.0.1 with SNI and certificate name TLS_NAME, verified against our CA."""

    def connect(self):
        http.client.HTTPConnection.connect(self)
        self.sock = TLS["ctx"].wrap_socket(self.sock, server_hostname=TLS_NAME)


def connection(port, tls, timeout):
    if tls:
        return _TlsConnection(HOST, port, timeout=timeout, context=TLS["ctx"])
    return http.client.HTTPConnection(HOST, port, timeout=timeout)


def http_get(port, path="/", headers=None, timeout=2.0, tls=False):
    c = connection(port, tls, timeout)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def port_open(port):
    s = socket.socket()
    s.settimeout(0.2)
    try:
        s.connect((HOST, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def wait_ready(port, proc, timeout, headers=None, tls=False):
    t0 = time.time()
    last = None
    while time.time() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("process exited with code %s before becoming ready" % proc.returncode)
        try:
            st, _ = http_get(port, headers=headers, timeout=1.0, tls=tls)
            return st
        except (OSError, http.client.HTTPException) as e:
            last = e
            time.sleep(0.05)
    raise RuntimeError("not ready on port %d after %.0fs (%s)" % (port, timeout, last))


def probe(port, n, headers, body_expected, tls=False):
    """n sequential requests on one keep-alive connection."""
    c = connection(port, tls, 5)
    statuses = collections.Counter()
    closes, body_ok, body_bad, sample = 0, 0, 0, None
    try:
        for _ in range(n):
            c.request("GET", "/", headers=headers or {})
            r = c.getresponse()
            b = r.read()
            statuses[r.status] += 1
            if r.will_close:
                closes += 1
            if r.status == 200:
                if b == body_expected:
                    body_ok += 1
                else:
                    body_bad += 1
            if sample is None or (r.status != 200 and sample["status"] == 200):
                sample = {"status": r.status, "headers": dict(r.getheaders()), "body_len": len(b)}
    finally:
        c.close()
    return {"statuses": {str(k): v for k, v in statuses.items()}, "server_closes": closes,
            "body_ok": body_ok, "body_bad": body_bad, "sample": sample}


def scrape(spec):
    """The metric lines of spec["url"] matching spec["match"] (a regex), e.g. sluice's own counts."""
    try:
        host, port = spec["url"].split("/")[2].split(":")
        c = http.client.HTTPConnection(host, int(port), timeout=2)
        try:
            c.request("GET", "/" + spec["url"].split("/", 3)[3])
            text = c.getresponse().read().decode(errors="replace")
        finally:
            c.close()
    except (OSError, http.client.HTTPException, IndexError, ValueError) as e:
        return ["scrape failed: %s" % e]
    rx = re.compile(spec.get("match", "."))
    return [l for l in text.splitlines() if not l.startswith("#") and rx.search(l)][:50]


def upstream_requests(status_port):
    _, b = http_get(status_port, timeout=2.0)
    lines = b.decode().splitlines()
    return int(lines[2].split()[2])


# ---------------------------------------------------------------------------------------
# the bench
# ---------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args):
        self.a = args
        self.pinned = args.mode == "pinned"
        ncpu = os.cpu_count() or 1
        self.workers = 1 if self.pinned else (args.workers or ncpu)
        self.wrk_threads = args.wrk_threads or (1 if self.pinned else ncpu)
        self.tmp = tempfile.mkdtemp(prefix="proxybench.")
        self.up_port = args.port_base + 80
        self.up_status_port = args.port_base + 81
        self.listen_port = args.port_base + 100
        for p in (self.up_port, self.up_status_port, self.listen_port):
            if not (18000 <= p <= 18999):
                raise SystemExit("port %d outside 18000-18999" % p)
        self.body = ("x" * max(0, args.body_bytes - 1) + "\n").encode()
        self.load_cpus = str(args.load_cpu) if self.pinned else None
        self.proxy_cpus = str(args.proxy_cpu) if self.pinned else None
        self.scripts = {}
        self.upstream = None
        self.best_ipc = {}
        self.attempt = 0

    # -- upstream -------------------------------------------------------------------
    def start_upstream(self):
        d = os.path.join(self.tmp, "upstream")
        os.makedirs(d)
        http_blk = render(UPSTREAM_HTTP, host=HOST, port=self.up_port, status_port=self.up_status_port,
                          body=self.body.decode().replace("\n", "\\n"))
        conf = render(NGINX_MAIN, workers=1, dir=d, http=http_blk, worker_connections=8192)
        path = os.path.join(d, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf)
        for p in (self.up_port, self.up_status_port, self.listen_port):
            if port_open(p):
                raise SystemExit("port %d already in use; refusing to run" % p)
        self.upstream, self.upstream_cmd = start_proc("upstream", ["/usr/sbin/nginx", "-c", path, "-p", d],
                                                      self.load_cpus, d)
        wait_ready(self.up_port, self.upstream, 10)
        st, b = http_get(self.up_port)
        if st != 200 or b != self.body:
            raise SystemExit("upstream returned %s %r" % (st, b[:60]))
        self.upstream_pids = proc_tree(self.upstream.pid)
        log("upstream nginx pid %d (tree %s) on %s:%d, status :%d" % (
            self.upstream.pid, self.upstream_pids, HOST, self.up_port, self.up_status_port))

    # -- proxies --------------------------------------------------------------------
    def start_proxy(self, sc, rnd):
        """returns (Popen or None, port, cmd list, config text)"""
        if sc["kind"] == "direct":
            return None, self.up_port, None, None
        d = os.path.join(self.tmp, self.run_dir_name(sc, rnd))
        os.makedirs(d)
        if port_open(self.listen_port):
            raise RuntimeError("listen port %d still in use before starting %s" % (self.listen_port, sc["name"]))
        if sc["kind"] == "nginx":
            zone, limit = NGINX_VARIANTS[sc["variant"]]
            idle = sc["load"].startswith("idle")
            if sc.get("log"):
                zone += "\n" + NGINX_LOG_FORMAT
            if idle:
                zone += "\n" + NGINX_IDLE_HTTP
            http_blk = render(NGINX_PROXY_HTTP, host=HOST, upstream_port=self.up_port,
                              listen_port=self.listen_port, zone=zone, limit=limit,
                              listen_ssl=" ssl" if sc.get("tls") else "",
                              ssl=render(NGINX_SSL, cert=TLS["cert"], key=TLS["key"]) if sc.get("tls") else "",
                              log=render(NGINX_LOGS[sc.get("log")], dir=d))
            conf = render(NGINX_MAIN, workers=self.workers, dir=d, http=http_blk,
                          worker_connections=self.a.idle_conns + 2000 if idle else 8192)
            if idle and self.a.idle_conns + 2000 > 16384:
                conf = conf.replace("worker_rlimit_nofile 16384;", "worker_rlimit_nofile %d;" % (2 * self.a.idle_conns + 4096))
            path = os.path.join(d, "nginx.conf")
            argv = ["/usr/sbin/nginx", "-c", path, "-p", d]
            ready_timeout = 10
        elif sc["kind"] == "haproxy":
            conf = render(HAPROXY_TCP_CFG if sc["variant"] == "tcp" else HAPROXY_CFG, workers=self.workers,
                          dir=d, host=HOST, listen_port=self.listen_port, upstream_port=self.up_port,
                          rules=HAPROXY_VARIANTS.get(sc["variant"], ""))
            path = os.path.join(d, "haproxy.cfg")
            argv = ["/usr/sbin/haproxy", "-f", path, "-db"]
            ready_timeout = 10
        else:  # generic command
            path = os.path.join(d, "candidate.conf")
            ph = {"{listen}": "%s:%d" % (HOST, self.listen_port), "{listen_port}": str(self.listen_port),
                  "{listen_host}": HOST, "{upstream}": "%s:%d" % (HOST, self.up_port),
                  "{upstream_port}": str(self.up_port), "{upstream_host}": HOST,
                  "{workers}": str(self.workers), "{config}": path, "{tmp}": d, "{key_header}": KEY_HEADER,
                  "{cert}": TLS["cert"] or "", "{key}": TLS["key"] or "",
                  "{max_connections}": str(self.a.idle_conns + 2000),
                  "{sluice}": self.a.sluice, "{sluice_alt}": self.a.sluice_alt or ""}

            def subst(s):
                for k, v in ph.items():
                    s = s.replace(k, v)
                return s

            conf = subst(sc["config"])
            argv = [subst(t) for t in shlex.split(sc["cmd"])]
            sc["log_path"] = subst(sc["log_file"]) if sc.get("log_file") else None
            ready_timeout = sc.get("ready_timeout", 15)
        with open(path, "w") as f:
            f.write(conf)
        if sc["kind"] == "nginx":
            sc["log_path"] = os.path.join(d, "access.log") if sc.get("log") else None
        p, full = start_proc(sc["name"], argv, self.proxy_cpus, d)
        hdr = {KEY_HEADER: "probe-key"} if sc["load"].startswith("keys") else None
        try:
            wait_ready(self.listen_port, p, ready_timeout, headers=hdr, tls=sc.get("tls"))
        except Exception as e:
            stop_proc(p)
            tail = read(os.path.join(d, sc["name"] + ".out.log"))[-300:].strip()
            raise RuntimeError("%s; cmd: %s; output: %r" % (e, " ".join(full), tail))
        return p, self.listen_port, full, conf

    # -- wrk ------------------------------------------------------------------------
    def script(self, load, census):
        k = (load, census)
        if k not in self.scripts:
            path = os.path.join(self.tmp, "wrk_%s_%s.lua" % (load.replace(":", "_"), "census" if census else "measure"))
            with open(path, "w") as f:
                f.write(lua_script(load, census))
            self.scripts[k] = path
        return self.scripts[k]

    def wrk(self, port, seconds, load, census, offset=0, tls=False):
        argv = ["wrk", "-t", str(self.wrk_threads), "-c", str(self.a.connections), "-d", "%ds" % seconds,
                "--timeout", "2s", "-s", self.script(load, census)]
        env = None
        if load == "close":
            argv += ["-H", "Connection: close"]
            if tls and TLS["shim"]:
                env = dict(os.environ, LD_PRELOAD=TLS["shim"])
        argv.append("%s://%s:%d/" % ("https" if tls else "http", HOST, port))
        if load.startswith("keys"):
            argv += ["--", str(offset), str(self.wrk_threads)]
        full = (["taskset", "-c", self.load_cpus] if self.load_cpus else []) + argv
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.time()
        p = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             start_new_session=True, env=env)
        _STARTED.append(("wrk", p))
        try:
            out, err = p.communicate(timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            stop_proc(p, signal.SIGKILL)
            raise RuntimeError("wrk did not finish within %ds" % (seconds + 30))
        finally:
            for i, (_, q) in enumerate(_STARTED):
                if q is p:
                    del _STARTED[i]
                    break
        wall = time.time() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = out.decode(errors="replace")
        line = [l for l in out.splitlines() if l.startswith("PROXYBENCH_JSON ")]
        if p.returncode != 0 or not line:
            raise RuntimeError("wrk failed rc=%s: %s %s" % (p.returncode, out[-500:], err.decode()[-500:]))
        res = json.loads(line[-1][len("PROXYBENCH_JSON "):])
        res["wrk_cpu_s"] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        res["wall_s"] = wall
        res["cmd"] = ("LD_PRELOAD=%s " % env["LD_PRELOAD"] if env else "") + " ".join(shlex.quote(x) for x in full)
        res["text"] = "\n".join(l for l in out.splitlines() if not l.startswith("PROXYBENCH_JSON"))
        return res

    # -- one scenario run -------------------------------------------------------------
    def run_one(self, sc, rnd):
        if sc["load"].startswith("idle"):
            return self.run_idle(sc, rnd)
        a = self.a
        r = {"scenario": sc["name"], "round": rnd, "checks": [], "started": time.time()}
        if self.upstream.poll() is not None:
            raise SystemExit("upstream died (rc %s)" % self.upstream.returncode)
        p = None
        tls = bool(sc.get("tls"))
        try:
            p, port, cmd, conf = self.start_proxy(sc, rnd)
            r["proxy_cmd"] = " ".join(shlex.quote(x) for x in cmd) if cmd else None
            pids = proc_tree(p.pid) if p else []
            r["proxy_pids"] = pids
            hdr = {KEY_HEADER: "probe-key"} if sc["load"].startswith("keys") else None
            r["probe"] = probe(port, 20, hdr, self.body, tls=tls)
            if tls:
                r["tls_probe"] = tls_probe(port)
            # warm-up (+ status census); keyed loads: repeat until every key was sent once
            nkeys = int(sc["load"].split(":")[1]) if sc["load"].startswith("keys") else 0
            census = collections.Counter()
            sent, chunks = 0, 0
            sniff = HandshakeCensus(port).start() if tls and not a.no_census else None
            while True:
                w = self.wrk(port, a.warmup, sc["load"], census=True, offset=sent // self.wrk_threads, tls=tls)
                chunks += 1
                sent += w["requests"]
                for k, v in w.get("census", {}).items():
                    census[k] += v
                if sent >= nkeys or chunks >= a.max_warmup_chunks:
                    break
            if sniff:
                r["hs_census"] = sniff.stop()
            r["warmup"] = {"requests": sent, "chunks": chunks, "census": dict(census),
                           "rps": w["requests"] / (w["duration_us"] / 1e6)}
            if nkeys and sent < nkeys:
                r["checks"].append("warm-up sent only %d < %d keys" % (sent, nkeys))
            if p:
                pids = proc_tree(p.pid)
                r["proxy_pids"] = pids
            # wait until nothing else on the machine is using CPU (other tenants of a shared box)
            r["quiet_wait"] = self.wait_quiet()
            # hardware counters: pinned -> everything on the proxy CPU and on the load CPU;
            # allcores -> the proxy's threads only
            hw = {}
            if not a.no_hw:
                try:
                    if self.pinned:
                        hw["proxy_cpu"] = HwCounters(cpu=a.proxy_cpu)
                        hw["load_cpu"] = HwCounters(cpu=a.load_cpu)
                    elif p:
                        hw["proxy_tids"] = HwCounters(tids=tids_of(pids))
                except OSError as e:
                    r["hw_error"] = str(e)
                    for h in hw.values():
                        h.close()
                    hw = {}
            # measured run
            up0 = upstream_requests(self.up_status_port)
            tcp0 = tcp_counters()
            st0 = cpu_stat()
            px0, us0 = cpu_ticks(pids), cpu_ticks(self.upstream_pids)
            self_ru0 = resource.getrusage(resource.RUSAGE_SELF)
            for h in hw.values():
                h.start()
            m = self.wrk(port, a.duration, sc["load"], census=False, offset=sent // self.wrk_threads, tls=tls)
            hwv = {k: h.stop() for k, h in hw.items()}
            for h in hw.values():
                h.close()
            st1 = cpu_stat()
            px1, us1 = cpu_ticks(pids), cpu_ticks(self.upstream_pids)
            self_ru1 = resource.getrusage(resource.RUSAGE_SELF)
            tcp1 = tcp_counters()
            up1 = upstream_requests(self.up_status_port)
            alive = p.poll() is None if p else True
            if sc.get("scrape") and alive:
                r["scrape"] = scrape(sc["scrape"])
            # memory (VmHWM = kernel-tracked peak RSS per process)
            if p:
                r["rss_hwm_kib"] = sum(status_kib(x, "VmHWM") for x in pids)
                r["rss_hwm_max_proc_kib"] = max([status_kib(x, "VmHWM") for x in pids] or [0])
                r["pss_end_kib"] = sum(pss_kib(x) for x in pids)
                r["threads"] = sum(status_kib(x, "Threads") for x in pids)
            dur = m["duration_us"] / 1e6
            r.update({k: m[k] for k in m if k not in ("text",)})
            r["wrk_text"] = m["text"]
            r["rps"] = m["requests"] / dur
            r["non2xx"] = m["err_status"]  # wrk counts status > 399
            r["non2xx_pct"] = 100.0 * m["err_status"] / max(1, m["requests"])
            r["sock_errors"] = m["err_connect"] + m["err_read"] + m["err_write"] + m["err_timeout"]
            r["forwarded"] = up1 - up0 - 1  # minus the 2nd stub_status request itself
            r["forwarded_ratio"] = r["forwarded"] / max(1, m["requests"])
            cpu = cpu_delta(st0, st1)
            r["cpu"] = cpu
            r["proxy_cpu_pct"] = 100.0 * (px1 - px0) / CLK_TCK / dur if p else 0.0
            r["upstream_cpu_pct"] = 100.0 * (us1 - us0) / CLK_TCK / dur
            r["wrk_cpu_pct"] = 100.0 * m["wrk_cpu_s"] / dur
            self_cpu = (self_ru1.ru_utime - self_ru0.ru_utime) + (self_ru1.ru_stime - self_ru0.ru_stime)
            # CPU not charged to our processes (other tenants' work, kernel threads, softirq
            # that landed outside our tasks). Tick-based accounting charges softirq ticks
            # taken in a task's context to that task's stime, so it is not subtracted again.
            busy_total_s = sum(c["busy_jiffies"] for c in cpu.values()) / CLK_TCK
            ours_s = (px1 - px0 + us1 - us0) / CLK_TCK + m["wrk_cpu_s"] + self_cpu
            r["foreign_cpu_pct"] = round(100.0 * max(0.0, busy_total_s - ours_s) / dur, 1)
            r["steal_pct"] = round(sum(c["steal_pct"] for c in cpu.values()), 1)
            r["proxy_us_per_req"] = 1e6 * (px1 - px0) / CLK_TCK / max(1, m["requests"]) if p else None
            if self.pinned:
                pc = "cpu%d" % a.proxy_cpu
                r["proxy_cpu_busy_us_per_req"] = (1e6 * cpu[pc]["busy_jiffies"] / CLK_TCK / max(1, m["requests"])
                                                  if p else None)
            nreq = max(1, m["requests"])
            r["tcp_per_req"] = {k: round((tcp1.get(k, 0) - tcp0.get(k, 0)) / nreq, 3) for k in TCP_KEYS}
            for k, v in hwv.items():
                r["hw_" + k] = v
            derive_hw(r, a.load_cpu, a.proxy_cpu, p is not None)
            r["bottleneck"], r["bottleneck_detail"] = self.bottleneck(r, p is not None)
            # ---- checks ----
            self.check(sc, r, alive)
            if tls:
                self.check_tls(sc, r)
        except Exception as e:  # noqa
            r["checks"].append("ERROR: %s" % e)
            r["error"] = str(e)
        finally:
            if p:
                stop_proc(p, getattr(signal, sc.get("stop_signal", "SIGTERM")))
                r["proxy_exit"] = p.returncode
                if sc.get("log_path"):
                    self.check_log(sc, r)
                d = os.path.join(self.tmp, self.run_dir_name(sc, rnd))
                tail = read(os.path.join(d, sc["name"] + ".out.log"))[-2000:] + read(os.path.join(d, "error.log"))[-2000:]
                bad = [l for l in tail.splitlines() if any(w in l for w in ("[emerg]", "[alert]", "[crit]", "[error]", "panic", "FATAL", "ALERT"))]
                if bad:
                    r["checks"].append("proxy log: " + bad[-1][:200])
                r["proxy_log_tail"] = tail[-600:]
        return r

    # -- TLS, access log and idle-connection checks ------------------------------------
    def check_tls(self, sc, r):
        c = r["checks"]
        tp = r.get("tls_probe") or {}
        if tp.get("error"):
            c.append("TLS probe: " + tp["error"])
        elif tp.get("version") != "TLSv1.3":
            c.append("TLS probe negotiated %s, not TLSv1.3" % tp.get("version"))
        elif not (tp.get("status_line") or "").startswith("HTTP/1.1 200"):
            c.append("TLS probe got %r" % tp.get("status_line"))
        req, warm = max(1, r["requests"]), r["warmup"]
        opens = r["tcp_per_req"].get("Tcp.PassiveOpens", 0)
        # system-wide counters: other tenants' connections only ever add to them
        if sc["load"] == "close" and opens < 0.9:
            c.append("%.3f TCP connections accepted per request, not 1 (Connection: close load)" % opens)
        if sc["load"] != "close" and opens > 0.1:
            c.append("%.3f TCP connections accepted per request in a keep-alive load" % opens)
        h = r.get("hs_census")
        if not h:
            return
        if h.get("error"):
            c.append(h["error"])
            return
        seen = h.get("client_hello", 0)
        other = [k for k in h if k.startswith("version:") and k != "version:TLSv1.3"]
        if not seen:
            c.append("handshake census saw no ClientHello")
        if other:
            c.append("handshakes not TLS 1.3: %s" % {k: h[k] for k in other})
        if h.get("hello_retry_request"):
            c.append("%d HelloRetryRequests (key share group mismatch)" % h["hello_retry_request"])
        if sc["load"] == "close":
            if h.get("server_hello_resumed"):
                c.append("%d of %d handshakes resumed (not full handshakes)" % (h["server_hello_resumed"], seen))
            if not self.a.allow_resumption and h.get("client_hello_psk"):
                c.append("%d ClientHellos offered a PSK despite the no-resumption shim" % h["client_hello_psk"])
            if not h.get("packets_dropped") and seen < 0.9 * warm["requests"]:
                c.append("only %d handshakes for %d warm-up requests" % (seen, warm["requests"]))
        elif seen > self.a.connections * warm["chunks"] * self.wrk_threads + 20:
            c.append("%d handshakes in a keep-alive warm-up of %d connections" % (seen, self.a.connections))

    def check_log(self, sc, r):
        """Counts the access log's lines against the requests served, then deletes the file (a run
        writes hundreds of MB)."""
        path = sc["log_path"]
        if not os.path.exists(path):
            r["checks"].append("no access log at %s" % path)
            return
        lines, size = 0, 0
        with open(path, "rb") as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                lines += b.count(b"\n")
                size += len(b)
        os.unlink(path)
        served = (r.get("warmup") or {}).get("requests", 0) + r.get("requests", 0)
        r["log_lines"] = lines
        r["log_bytes_per_line"] = round(size / max(1, lines), 1)
        r["log_lines_per_response"] = round(lines / max(1, served), 4)
        slack = 4 * self.a.connections + 50 + 0.002 * served
        if lines < served - 5:
            r["checks"].append("access log: %d lines for %d responses (lines dropped)" % (lines, served))
        elif lines > served + slack:
            r["checks"].append("access log: %d lines for %d responses" % (lines, served))

    def run_idle(self, sc, rnd):
        """idle:N: open N connections (TLS handshake completed, no request) from a child python
        process on the load CPU and read the proxy's memory before and after."""
        a = self.a
        r = {"scenario": sc["name"], "round": rnd, "checks": [], "started": time.time()}
        if self.upstream.poll() is not None:
            raise SystemExit("upstream died (rc %s)" % self.upstream.returncode)
        tls = bool(sc.get("tls"))
        n = int(sc["load"].split(":")[1])
        p = client = None
        d = os.path.join(self.tmp, self.run_dir_name(sc, rnd))

        def mem(pids):
            return {"rss_kib": sum(status_kib(x, "VmRSS") for x in pids),
                    "pss_kib": sum(pss_kib(x) for x in pids),
                    "hwm_kib": sum(status_kib(x, "VmHWM") for x in pids)}

        def answer(timeout):
            import select
            ready, _, _ = select.select([client.stdout], [], [], timeout)
            if not ready:
                raise RuntimeError("idle client silent for %ds" % timeout)
            line = client.stdout.readline()
            if not line:
                raise RuntimeError("idle client exited (rc %s): %s" % (
                    client.poll(), read(os.path.join(d, "idle-client.err.log"))[-300:]))
            return json.loads(line)

        try:
            p, port, cmd, conf = self.start_proxy(sc, rnd)
            r["proxy_cmd"] = " ".join(shlex.quote(x) for x in cmd)
            r["probe"] = probe(port, 20, None, self.body, tls=tls)
            if tls:
                r["tls_probe"] = tls_probe(port)
            time.sleep(1.0)
            pids = proc_tree(p.pid)
            r["proxy_pids"] = pids
            before = mem(pids)
            px0 = cpu_ticks(pids)
            argv = [sys.executable, os.path.abspath(__file__), "--idle-client", "--port", str(port),
                    "--count", str(n), "--concurrency", str(a.idle_concurrency)]
            if tls:
                argv += ["--cafile", TLS["cert"]]
            full = (["taskset", "-c", self.load_cpus] if self.load_cpus else []) + argv
            err = open(os.path.join(d, "idle-client.err.log"), "wb")
            client = subprocess.Popen(full, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                      start_new_session=True)
            err.close()
            _STARTED.append(("idle-client", client))
            opened = answer(600)
            if opened.get("error"):
                raise RuntimeError(opened["error"])
            px1 = cpu_ticks(pids)
            time.sleep(a.idle_settle)
            pids = proc_tree(p.pid)
            after = mem(pids)
            client.stdin.write("check\n")
            client.stdin.flush()
            still = answer(60)
            alive = p.poll() is None
            k = max(1, opened["opened"])
            r["idle"] = {
                "conns": n, "opened": opened["opened"], "failed": opened["failed"], "errors": opened["errors"],
                "open_seconds": opened["seconds"], "still_open": still["still_open"],
                "before": before, "after": after,
                "rss_delta_kib": after["rss_kib"] - before["rss_kib"],
                "pss_delta_kib": after["pss_kib"] - before["pss_kib"],
                "rss_kib_per_conn": (after["rss_kib"] - before["rss_kib"]) / k,
                "pss_kib_per_conn": (after["pss_kib"] - before["pss_kib"]) / k,
                "proxy_cpu_us_per_conn": 1e6 * (px1 - px0) / CLK_TCK / k,
            }
            if not alive:
                r["checks"].append("proxy process died during the run")
            if opened["opened"] != n:
                r["checks"].append("opened %d of %d connections: %s" % (opened["opened"], n, opened["errors"]))
            if still["still_open"] != opened["opened"]:
                r["checks"].append("%d connections closed by the proxy before the measurement ended" % (
                    opened["opened"] - still["still_open"]))
            if r["probe"]["body_bad"] or set(r["probe"]["statuses"]) - {"200"}:
                r["checks"].append("probe statuses %s, bad bodies %d" % (r["probe"]["statuses"], r["probe"]["body_bad"]))
            if tls:
                tp = r["tls_probe"]
                if tp.get("error") or tp.get("version") != "TLSv1.3":
                    r["checks"].append("TLS probe: %s" % (tp.get("error") or tp.get("version")))
        except Exception as e:  # noqa
            r["checks"].append("ERROR: %s" % e)
            r["error"] = str(e)
        finally:
            if client:
                try:
                    client.stdin.write("close\n")
                    client.stdin.close()
                    client.wait(60)
                except (OSError, subprocess.TimeoutExpired):
                    pass
                stop_proc(client, signal.SIGKILL)
            if p:
                stop_proc(p, getattr(signal, sc.get("stop_signal", "SIGTERM")))
                r["proxy_exit"] = p.returncode
                tail = read(os.path.join(d, sc["name"] + ".out.log"))[-2000:] + read(os.path.join(d, "error.log"))[-2000:]
                bad = [l for l in tail.splitlines() if any(w in l for w in ("[emerg]", "[alert]", "[crit]", "panic", "FATAL"))]
                if bad:
                    r["checks"].append("proxy log: " + bad[-1][:200])
                r["proxy_log_tail"] = tail[-600:]
        return r

    def run_dir_name(self, sc, rnd):
        return "%s.r%d.a%d" % (sc["name"], rnd, self.attempt)

    def wait_quiet(self):
        """Block until the machine (all CPUs, summed) is <= --quiet-threshold % busy over 0.5 s
        while our own processes idle, or --quiet-max-wait s have passed."""
        t0 = time.time()
        while True:
            s0 = cpu_stat()
            time.sleep(0.5)
            d = cpu_delta(s0, cpu_stat())
            pct = sum(c["busy_pct"] for c in d.values())
            waited = time.time() - t0 - 0.5
            if pct <= self.a.quiet_threshold or waited >= self.a.quiet_max_wait:
                if waited > 1:
                    log("waited %.0fs for the machine to go quiet (now %.0f%% busy)" % (waited, pct))
                return {"waited_s": round(waited, 1), "busy_pct": pct, "quiet": pct <= self.a.quiet_threshold}
            time.sleep(1.0)

    def noise_reasons(self, sc, r):
        """Reasons to distrust a run: other tenants' CPU use, hypervisor steal, or the CPUs running
        at clearly lower IPC than the best seen for this scenario (SMT sibling / cache contention
        from outside the VM, invisible to /proc/stat)."""
        a, out = self.a, []
        if not r["quiet_wait"]["quiet"]:
            out.append("machine busy before run (%.0f%%)" % r["quiet_wait"]["busy_pct"])
        if r["foreign_cpu_pct"] > a.noise_foreign:
            out.append("foreign CPU %.1f%%" % r["foreign_cpu_pct"])
        if r["steal_pct"] > 2:
            out.append("steal %.1f%%" % r["steal_pct"])
        other_noise = bool(out)
        for key in ("proxy_ipc", "load_ipc"):
            v = r.get(key)
            if not v:
                continue
            best = self.best_ipc.get((sc["name"], key), v)
            if v < a.ipc_drop * best:
                out.append("%s %.2f < %.2f x best %.2f" % (key, v, a.ipc_drop, best))
            if not other_noise:  # only undisturbed runs set the reference
                self.best_ipc[(sc["name"], key)] = max(best, v)
        return out

    def log_run(self, rnd, sc, r):
        if "idle" in r:
            i = r["idle"]
            log("round %d %-16s %d/%d connections open in %.1fs: RSS +%.1f MiB (%.1f KiB/conn), PSS +%.1f MiB "
                "(%.1f KiB/conn)%s" % (rnd, sc["name"], i["still_open"], i["conns"], i["open_seconds"],
                                      i["rss_delta_kib"] / 1024, i["rss_kib_per_conn"], i["pss_delta_kib"] / 1024,
                                      i["pss_kib_per_conn"],
                                      ("  CHECKS: " + " | ".join(r["checks"])) if r["checks"] else ""))
            return
        if "rps" in r and (r.get("hs_census") or r.get("log_lines") is not None):
            h, parts = r.get("hs_census") or {}, []
            if h:
                parts.append("%s handshakes %d (PSK offered %d, resumed %d, dropped %d)" % (
                    census_negotiated(h), h.get("client_hello", 0), h.get("client_hello_psk", 0),
                    h.get("server_hello_resumed", 0), h.get("packets_dropped", 0)))
            parts.append("TCP accepts/req %.3f" % r["tcp_per_req"].get("Tcp.PassiveOpens", 0))
            if r.get("log_lines") is not None:
                parts.append("log lines/response %s" % r["log_lines_per_response"])
            log("round %d %-16s %s" % (rnd, sc["name"], " | ".join(parts)))
        if "rps" in r:
            log("round %d %-16s %8.0f req/s p50 %.3fms p99 %.3fms non2xx %5.1f%% segs/req %.2f%s | %s%s%s" % (
                rnd, sc["name"], r["rps"], r["p50_us"] / 1e3, r["p99_us"] / 1e3, r["non2xx_pct"],
                r["tcp_per_req"]["Tcp.OutSegs"],
                " | proxy %.1fus/req %.1fkinstr/req IPC %.2f" % (
                    r["proxy_us_per_req"], r.get("proxy_kinstr_per_req") or 0, r.get("proxy_ipc") or 0)
                if r.get("proxy_us_per_req") else "",
                r["bottleneck"] + ": " + r["bottleneck_detail"],
                ("  NOISE: " + "; ".join(r["noise"])) if r["noise"] else "",
                ("  CHECKS: " + " | ".join(r["checks"])) if r["checks"] else ""))
        else:
            log("round %d %-16s FAILED: %s" % (rnd, sc["name"], " | ".join(r["checks"])))

    def bottleneck(self, r, has_proxy):
        """short label + detail. pinned: which CPU(s) were >= 95% busy."""
        cpu = r["cpu"]
        if self.pinned:
            lc, pc = "cpu%d" % self.a.load_cpu, "cpu%d" % self.a.proxy_cpu
            lb, pb = cpu[lc]["busy_pct"], cpu[pc]["busy_pct"]
            detail = "CPU%d(load) %.0f%% [wrk %.0f%%, upstream %.0f%%], CPU%d(proxy) %.0f%%" % (
                self.a.load_cpu, lb, r["wrk_cpu_pct"], r["upstream_cpu_pct"], self.a.proxy_cpu, pb)
            p_sat, l_sat = has_proxy and pb >= 95, lb >= 95
            label = {(True, True): "both CPUs", (True, False): "proxy CPU", (False, True): "load CPU",
                     (False, False): "none (latency-bound)"}[(p_sat, l_sat)]
            return label, detail
        tot = sum(c["busy_pct"] for c in cpu.values())
        detail = "all CPUs %.0f%% of %d00%% [wrk %.0f%%, upstream %.0f%%, proxy %.0f%%]" % (
            tot, len(cpu), r["wrk_cpu_pct"], r["upstream_cpu_pct"], r["proxy_cpu_pct"])
        return ("machine saturated" if tot >= 95 * len(cpu) else "not saturated"), detail

    def check(self, sc, r, alive):
        c = r["checks"]
        req = r["requests"]
        if not alive:
            c.append("proxy process died during the run")
        if req <= 0:
            c.append("no requests completed")
            return
        if r["sock_errors"]:
            c.append("socket errors: connect %d read %d write %d timeout %d" % (
                r["err_connect"], r["err_read"], r["err_write"], r["err_timeout"]))
        census = r["warmup"]["census"]
        ctot = sum(census.values()) or 1
        probe_st = r["probe"]["statuses"]
        if r["probe"]["server_closes"]:
            c.append("server closed keep-alive connection %d/20 times in probe" % r["probe"]["server_closes"])
        if r["probe"]["body_bad"]:
            c.append("%d probe 200 responses had an unexpected body" % r["probe"]["body_bad"])
        exp = sc["expect"]
        # allow for requests in flight when wrk stops (<= connections) and the warm-up tail
        slack = self.a.connections * 2 + 0.002 * req
        if exp == "2xx":
            bad = {k: v for k, v in census.items() if not k.startswith("2")}
            if bad:
                c.append("warm-up census non-2xx: %s" % bad)
            if set(probe_st) - {"200"}:
                c.append("probe statuses %s" % probe_st)
            if r["non2xx"]:
                c.append("%d non-2xx responses in measured run" % r["non2xx"])
            if abs(r["forwarded"] - req) > slack:
                c.append("upstream saw %d requests for %d responses" % (r["forwarded"], req))
        elif exp == "429":
            n429 = census.get("429", 0)
            other = {k: v for k, v in census.items() if k not in ("429", "200")}
            if other:
                c.append("warm-up census unexpected statuses: %s" % other)
            if n429 < 0.99 * ctot:
                c.append("only %.1f%% 429 in warm-up census" % (100.0 * n429 / ctot))
            if r["non2xx_pct"] < 99.0:
                c.append("only %.2f%% non-2xx in measured run" % r["non2xx_pct"])
            if r["forwarded"] > 0.01 * req + 2:
                c.append("upstream saw %d requests although %d were rejected" % (r["forwarded"], r["non2xx"]))
            if (r["probe"]["sample"] or {}).get("status") != 429:
                c.append("probe never saw a 429")
        # 'any': no status expectation

    # -- whole run ------------------------------------------------------------------
    def run(self, scenarios):
        a = self.a
        self.start_upstream()
        runs = []
        order_log = []
        rng = random.Random(a.seed)
        try:
            for rnd in range(1, a.rounds + 1):
                order = list(scenarios)
                if a.shuffle:
                    rng.shuffle(order)
                order_log.append([s["name"] for s in order])
                for sc in order:
                    attempts = []
                    for attempt in range(1 + a.retries):
                        self.attempt = attempt
                        la = os.getloadavg()[0]
                        r = self.run_one(sc, rnd)
                        r["loadavg1_before"] = la
                        r["attempt"] = attempt
                        r["noise"] = self.noise_reasons(sc, r) if "rps" in r else []
                        attempts.append(r)
                        self.log_run(rnd, sc, r)
                        time.sleep(a.pause)
                        if not r["noise"] or "rps" not in r:  # failures are reported, not retried
                            break
                    final = attempts[-1]
                    final["discarded_attempts"] = [
                        {k: x.get(k) for k in ("rps", "noise", "proxy_ipc", "load_ipc", "foreign_cpu_pct",
                                               "quiet_wait", "proxy_kinstr_per_req")} for x in attempts[:-1]]
                    runs.append(final)
        finally:
            if self.upstream:
                stop_proc(self.upstream)
        return runs, order_log


# ---------------------------------------------------------------------------------------
# summary
# ---------------------------------------------------------------------------------------
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(scenarios, runs, cpu_key, ipc_drop=0.9, ref_names=("direct", "nginx")):
    """Per scenario: statistics over the CLEAN rounds (no noise flag, IPC within ipc_drop of the
    scenario's best), falling back to all rounds when none is clean; all-round median and best too."""
    by = collections.defaultdict(dict)
    for r in runs:
        by[r["scenario"]][r["round"]] = r
    out, idx = [], {}
    for sc in scenarios:
        rs = [r for r in by[sc["name"]].values() if "rps" in r]
        if not rs:
            out.append({"scenario": sc["name"], "letter": sc["letter"], "desc": sc["desc"], "ok": False,
                        "checks": sorted({c for r in by[sc["name"]].values() for c in r["checks"]})})
            continue
        best = {k: max([r.get(k) or 0 for r in rs]) for k in ("proxy_ipc", "load_ipc")}
        for r in rs:
            reasons = list(r.get("noise", []))
            for k in ("proxy_ipc", "load_ipc"):
                if r.get(k) and r[k] < ipc_drop * best[k] and not any(x.startswith(k) for x in reasons):
                    reasons.append("%s %.2f < %.2f x scenario best %.2f" % (k, r[k], ipc_drop, best[k]))
            r["noise_final"] = reasons
            r["clean"] = not reasons
        clean = [r for r in rs if r["clean"]]
        use = clean or rs
        rps = [r["rps"] for r in use]
        s = {"scenario": sc["name"], "letter": sc["letter"], "desc": sc["desc"], "load": sc["load"],
             "expect": sc["expect"], "n": len(rs), "n_clean": len(clean),
             "rps_median": med(rps), "rps_min": min(rps), "rps_max": max(rps),
             "rps_spread_pct": 100.0 * (max(rps) - min(rps)) / med(rps),
             "rps_cv_pct": 100.0 * statistics.pstdev(rps) / statistics.mean(rps) if len(rps) > 1 else 0.0,
             "rps_median_all": med([r["rps"] for r in rs]), "rps_best": max(r["rps"] for r in rs),
             "rps_all": [round(r["rps"]) for r in sorted(rs, key=lambda x: x["round"])],
             "clean_rounds": [r["round"] for r in sorted(clean, key=lambda x: x["round"])],
             "noise": {r["round"]: r["noise_final"] for r in rs if r["noise_final"]},
             "retried": sum(len(r.get("discarded_attempts", [])) for r in rs)}
        for k in ("p50_us", "p90_us", "p99_us", "p999_us", "non2xx_pct", "proxy_us_per_req",
                  "proxy_cpu_busy_us_per_req", "proxy_cpu_pct", "wrk_cpu_pct", "upstream_cpu_pct",
                  "foreign_cpu_pct", "steal_pct", "forwarded_ratio", "proxy_kcycles_per_req", "proxy_ipc",
                  "load_kcycles_per_req", "load_ipc", "proxy_ghz", "load_ghz"):
            s[k] = med([r.get(k) for r in use])
        # instruction counts do not depend on clock frequency or contention: median over ALL rounds
        for k in ("proxy_kinstr_per_req", "proxy_user_kinstr_per_req", "load_kinstr_per_req"):
            s[k] = med([r.get(k) for r in rs])
            v = [r[k] for r in rs if r.get(k)]
            s[k + "_spread_pct"] = 100.0 * (max(v) - min(v)) / med(v) if v else None
        # noise only ever adds cycles: the minimum over rounds is the best estimate of the cost
        v = [r["proxy_kcycles_per_req"] for r in rs if r.get("proxy_kcycles_per_req")]
        s["proxy_kcycles_per_req_min"] = min(v) if v else None
        v = [r["load_kcycles_per_req"] for r in rs if r.get("load_kcycles_per_req")]
        s["load_kcycles_per_req_min"] = min(v) if v else None
        s["rounds_detail"] = [{"round": r["round"], "rps": round(r["rps"]), "clean": r["clean"],
                               "proxy_ipc": r.get("proxy_ipc") and round(r["proxy_ipc"], 2),
                               "load_ipc": r.get("load_ipc") and round(r["load_ipc"], 2),
                               "proxy_ghz": r.get("proxy_ghz") and round(r["proxy_ghz"], 2),
                               "load_ghz": r.get("load_ghz") and round(r["load_ghz"], 2),
                               "kinstr": r.get("proxy_kinstr_per_req") and round(r["proxy_kinstr_per_req"], 1),
                               "kcycles": r.get("proxy_kcycles_per_req") and round(r["proxy_kcycles_per_req"], 1),
                               "noise": r["noise_final"]} for r in sorted(rs, key=lambda x: x["round"])]
        s["tcp_outsegs_per_req"] = med([r.get("tcp_per_req", {}).get("Tcp.OutSegs") for r in use])
        s["non2xx_total"] = sum(r["non2xx"] for r in rs)
        s["requests_total"] = sum(r["requests"] for r in rs)
        s["sock_errors_total"] = sum(r["sock_errors"] for r in rs)
        s["rss_hwm_mib_max"] = (max(r.get("rss_hwm_kib", 0) for r in rs) / 1024.0) if any("rss_hwm_kib" in r for r in rs) else None
        s["pss_end_mib_max"] = (max(r.get("pss_end_kib", 0) for r in rs) / 1024.0) if any("pss_end_kib" in r for r in rs) else None
        for cpu in rs[0]["cpu"]:
            s[cpu + "_busy_pct"] = med([r["cpu"][cpu]["busy_pct"] for r in use])
        bn = collections.Counter(r["bottleneck"] for r in use)
        s["bottleneck"] = "; ".join("%s x%d" % kv for kv in bn.most_common())
        s["bottleneck_details"] = [r["bottleneck_detail"] for r in rs]
        census = collections.Counter()
        for r in rs:
            for k, v in r["warmup"]["census"].items():
                census[k] += v
        s["warmup_census"] = dict(census)
        s["probe_statuses"] = rs[0]["probe"]["statuses"]
        s["checks"] = sorted({c for r in by[sc["name"]].values() for c in r["checks"]})
        s["ok"] = not s["checks"]
        out.append(s)
        idx[sc["name"]] = s
    # ratios: of clean medians (primary) and median of per-round paired ratios over rounds where
    # both runs are clean (secondary, in the JSON)
    for s in out:
        if "rps_median" not in s:
            continue
        for ref in ref_names:
            rs_ = idx.get(ref)
            if not rs_:
                for k in ("ratio_vs_", "best_ratio_vs_", "cpu_ratio_vs_", "instr_ratio_vs_", "kcycles_ratio_vs_"):
                    s[k + ref] = None
                continue
            s["ratio_vs_" + ref] = s["rps_median"] / rs_["rps_median"]
            s["best_ratio_vs_" + ref] = s["rps_best"] / rs_["rps_best"]
            s["kcycles_ratio_vs_" + ref] = (s["proxy_kcycles_per_req_min"] / rs_["proxy_kcycles_per_req_min"]
                                           if s.get("proxy_kcycles_per_req_min") and rs_.get("proxy_kcycles_per_req_min") else None)
            s["cpu_ratio_vs_" + ref] = (s[cpu_key] / rs_[cpu_key]) if s.get(cpu_key) and rs_.get(cpu_key) else None
            s["instr_ratio_vs_" + ref] = (s["proxy_kinstr_per_req"] / rs_["proxy_kinstr_per_req"]
                                         if s.get("proxy_kinstr_per_req") and rs_.get("proxy_kinstr_per_req") else None)
            pr = []
            for rnd, r in by[s["scenario"]].items():
                rr = by.get(ref, {}).get(rnd)
                if rr and r.get("clean") and rr.get("clean"):
                    pr.append(r["rps"] / rr["rps"])
            s["paired_ratio_vs_" + ref] = med(pr)
            s["paired_n_vs_" + ref] = len(pr)
    return out


def fmt(x, f="%.2f", none="-"):
    return none if x is None else f % x


def markdown(summary, meta):
    """Main table + per-round table. Efficiency columns (kinstr, kcycles) come from hardware
    counters on the proxy CPU (pinned mode) and are the robust comparison on a noisy host."""
    L = []
    L.append("| # | scenario | req/s median (clean/N) | req/s best | x direct (best) | x nginx (best) | x nginx (median) | "
             "p50 ms | p90 ms | p99 ms | non-2xx % | proxy kinstr/req [user] | x nginx instr | proxy kcycles/req (min) | "
             "x nginx cycles | IPC | GHz | CPU us/req | TCP segs/req | peak RSS MiB | saturated (CPU0/CPU1 busy %) | checks |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for s in summary:
        if "rps_median" not in s:
            L.append("| %s | %s | FAILED |%s %s |" % (s["letter"], s["scenario"], " |" * 19, "; ".join(s["checks"])))
            continue
        cpu = s["proxy_cpu_busy_us_per_req"] if meta["mode"] == "pinned" else s["proxy_us_per_req"]
        busy = "/".join("%.0f" % s[k] for k in sorted(s) if k.startswith("cpu") and k.endswith("_busy_pct"))
        L.append("| " + " | ".join([
            s["letter"], s["scenario"],
            "%s (%d/%d)" % (fmt(s["rps_median"], "%.0f"), s["n_clean"], s["n"]), fmt(s["rps_best"], "%.0f"),
            fmt(s["best_ratio_vs_direct"], "%.3f"), fmt(s["best_ratio_vs_nginx"], "%.3f"), fmt(s["ratio_vs_nginx"], "%.3f"),
            fmt(s["p50_us"] and s["p50_us"] / 1e3, "%.3f"), fmt(s["p90_us"] and s["p90_us"] / 1e3, "%.3f"),
            fmt(s["p99_us"] and s["p99_us"] / 1e3, "%.3f"), fmt(s["non2xx_pct"], "%.2f"),
            "%s [%s]" % (fmt(s["proxy_kinstr_per_req"], "%.1f"), fmt(s["proxy_user_kinstr_per_req"], "%.1f")),
            fmt(s["instr_ratio_vs_nginx"], "%.3f"), fmt(s["proxy_kcycles_per_req_min"], "%.1f"),
            fmt(s["kcycles_ratio_vs_nginx"], "%.3f"), fmt(s["proxy_ipc"] or s["load_ipc"], "%.2f"),
            fmt(s["proxy_ghz"] or s["load_ghz"], "%.2f"), fmt(cpu, "%.2f"), fmt(s["tcp_outsegs_per_req"], "%.2f"),
            fmt(s["rss_hwm_mib_max"], "%.1f"), "%s (%s)" % (s["bottleneck"], busy),
            "ok" if s["ok"] else "; ".join(s["checks"])[:300]]) + " |")
    L.append("")
    L.append("Per-round req/s (`*` = flagged noisy: " + "foreign CPU / steal / busy machine / IPC below --ipc-drop x the scenario's best; "
             "IPC and GHz shown for the proxy CPU, or the load CPU for direct runs):")
    L.append("")
    n = max((len(s.get("rounds_detail", [])) for s in summary), default=0)
    L.append("| scenario | " + " | ".join("round %d" % (i + 1) for i in range(n)) + " | spread all rounds | kinstr/req spread |")
    L.append("|---|" + "---:|" * n + "---:|---:|")
    for s in summary:
        if "rounds_detail" not in s:
            continue
        cells = []
        for d in s["rounds_detail"]:
            ipc = d["proxy_ipc"] or d["load_ipc"]
            ghz = d["proxy_ghz"] or d["load_ghz"]
            cells.append("%d%s<br>IPC %s %s GHz" % (d["rps"], "" if d["clean"] else "*", fmt(ipc, "%.2f"), fmt(ghz, "%.1f")))
        allr = [d["rps"] for d in s["rounds_detail"]]
        sp = 100.0 * (max(allr) - min(allr)) / statistics.median(allr)
        L.append("| %s | %s | %.0f%% | %s |" % (s["scenario"], " | ".join(cells + [""] * (n - len(cells))), sp,
                                                 fmt(s.get("proxy_kinstr_per_req_spread_pct"), "%.1f%%")))
    return "\n".join(L)


def paired_median(runs, name, ref, key):
    """median over rounds of (name's key / ref's key) in the same round."""
    by = collections.defaultdict(dict)
    for r in runs:
        by[r["scenario"]][r["round"]] = r
    xs = [by[name][k][key] / by[ref][k][key] for k in by[name]
          if k in by[ref] and by[name][k].get(key) and by[ref][k].get(key)]
    return med(xs)


def tls_details(summary, runs, refs, cpu_key):
    """Per wrk-load scenario: the TLS handshake census (summed over rounds), the TLS probe, TCP
    connections accepted per request, the access log's lines per response, and the CPU ratio to
    each --ref scenario (ratio of the clean medians, and the median of the per-round ratios)."""
    by = collections.defaultdict(list)
    for r in runs:
        if "rps" in r:
            by[r["scenario"]].append(r)
    idx = {s["scenario"]: s for s in summary}
    for s in summary:
        rs = by.get(s["scenario"], [])
        h = collections.Counter()
        for r in rs:
            h.update({k: v for k, v in (r.get("hs_census") or {}).items() if isinstance(v, int)})
        s["hs_census"] = dict(h)
        s["negotiated"] = census_negotiated(h) if h else None
        s["tls_probe"] = next((r["tls_probe"] for r in rs if r.get("tls_probe")), None)
        s["tcp_accepts_per_req"] = med([r["tcp_per_req"].get("Tcp.PassiveOpens") for r in rs])
        s["log_lines_per_response"] = med([r.get("log_lines_per_response") for r in rs])
        s["log_bytes_per_line"] = med([r.get("log_bytes_per_line") for r in rs])
        s["scrape_last"] = next((r["scrape"] for r in reversed(rs) if r.get("scrape")), None)
        cpu = s.get(cpu_key)
        s["capacity_per_core"] = 1e6 / cpu if cpu else None
        own = s.get("proxy_us_per_req")
        for ref in refs:
            rs_ = idx.get(ref)
            s["cpu_x_" + ref] = cpu / rs_[cpu_key] if cpu and rs_ and rs_.get(cpu_key) else None
            s["cpu_x_%s_paired" % ref] = paired_median(runs, s["scenario"], ref, cpu_key)
            s["own_cpu_x_" + ref] = (own / rs_["proxy_us_per_req"]
                                     if own and rs_ and rs_.get("proxy_us_per_req") else None)


def tls_markdown(summary, refs, cpu_key):
    L = ["", "TLS, new connections and access log (CPU = proxy CPU busy us per request, median of clean rounds; "
         "'x REF' = ratio of medians (median of per-round ratios); capacity = 1e6 / CPU us, what one core "
         "would serve at 100 %; own CPU = the proxy processes' own CPU time per request, which other tenants "
         "on the proxy CPU do not inflate (x the first REF); the census counts the warm-up's handshakes off "
         "the loopback interface):", ""]
    hdr = ["scenario", "load", "negotiated", "handshakes (PSK offered / resumed / HRR)", "probe: tickets/conn, server resumes, ALPN h2 offered",
           "TCP accepts/req", "req/s median", "proxy CPU %", "CPU us/req"] + ["x " + r for r in refs] + \
          ["capacity req/s per core", "own CPU us/req" + (" (x %s)" % refs[0] if refs else ""),
           "log lines/response (bytes/line)", "checks"]
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|---|---|---|---|---|" + "---:|" * (4 + len(refs) + 3) + "---|")
    for s in summary:
        if "rps_median" not in s:
            continue
        h, tp = s.get("hs_census") or {}, s.get("tls_probe") or {}
        hs = ("%d (%d / %d / %d)%s" % (h.get("client_hello", 0), h.get("client_hello_psk", 0),
                                       h.get("server_hello_resumed", 0), h.get("hello_retry_request", 0),
                                       " drops %d" % h["packets_dropped"] if h.get("packets_dropped") else "")
              if h else "-")
        probe_s = ("%s, %s, %s" % (tp.get("tickets_per_connection"), tp.get("server_resumes"), tp.get("alpn_offering_h2"))
                   if tp and not tp.get("error") else (tp or {}).get("error", "-"))
        row = [s["scenario"], s["load"], s.get("negotiated") or "-", hs, probe_s,
               fmt(s.get("tcp_accepts_per_req"), "%.3f"), fmt(s["rps_median"], "%.0f"),
               fmt(s.get("proxy_cpu_pct"), "%.0f"), fmt(s.get(cpu_key), "%.2f")]
        for ref in refs:
            row.append("%s (%s)" % (fmt(s.get("cpu_x_" + ref), "%.3f"), fmt(s.get("cpu_x_%s_paired" % ref), "%.3f")))
        row += [fmt(s.get("capacity_per_core"), "%.0f"),
                "%s%s" % (fmt(s.get("proxy_us_per_req"), "%.2f"),
                          " (%s)" % fmt(s.get("own_cpu_x_" + refs[0]), "%.3f") if refs else ""),
                "%s (%s)" % (fmt(s.get("log_lines_per_response"), "%.4f"), fmt(s.get("log_bytes_per_line"), "%.0f"))
                if s.get("log_lines_per_response") is not None else "-",
                "ok" if s["ok"] else "; ".join(s["checks"])[:300]]
        L.append("| " + " | ".join(row) + " |")
    return "\n".join(L)


def summarize_idle(scenarios, runs, refs):
    out, idx = [], {}
    for sc in scenarios:
        rs = [r for r in runs if r["scenario"] == sc["name"]]
        ok = [r for r in rs if "idle" in r]
        s = {"scenario": sc["name"], "desc": sc["desc"], "load": sc["load"], "n": len(rs),
             "checks": sorted({c for r in rs for c in r["checks"]})}
        s["ok"] = bool(ok) and not s["checks"]
        if ok:
            def m(f):
                return med([f(r["idle"]) for r in ok])
            s.update({"conns": ok[0]["idle"]["conns"], "still_open": m(lambda i: i["still_open"]),
                      "open_seconds": m(lambda i: i["open_seconds"]),
                      "rss_before_mib": m(lambda i: i["before"]["rss_kib"]) / 1024,
                      "rss_after_mib": m(lambda i: i["after"]["rss_kib"]) / 1024,
                      "rss_delta_mib": m(lambda i: i["rss_delta_kib"]) / 1024,
                      "pss_delta_mib": m(lambda i: i["pss_delta_kib"]) / 1024,
                      "rss_kib_per_conn": m(lambda i: i["rss_kib_per_conn"]),
                      "pss_kib_per_conn": m(lambda i: i["pss_kib_per_conn"]),
                      "proxy_cpu_us_per_conn": m(lambda i: i["proxy_cpu_us_per_conn"]),
                      "rss_delta_mib_all": [round(r["idle"]["rss_delta_kib"] / 1024, 1) for r in ok]})
        out.append(s)
        idx[sc["name"]] = s
    for s in out:
        for ref in refs:
            rs_ = idx.get(ref)
            s["rss_x_" + ref] = (s["rss_delta_mib"] / rs_["rss_delta_mib"]
                                 if rs_ and s.get("rss_delta_mib") and rs_.get("rss_delta_mib") else None)
            s["pss_x_" + ref] = (s["pss_delta_mib"] / rs_["pss_delta_mib"]
                                 if rs_ and s.get("pss_delta_mib") and rs_.get("pss_delta_mib") else None)
    return out


def idle_markdown(idle, refs):
    L = ["", "Idle connections (medians over rounds; growth = after all connections are open and settled, "
         "minus before any; RSS and PSS summed over the proxy's processes):", ""]
    hdr = ["scenario", "open / asked", "opened in s", "RSS before -> after MiB", "RSS growth MiB (rounds)",
           "KiB/conn RSS", "PSS growth MiB", "KiB/conn PSS"] + ["x %s (RSS / PSS)" % r for r in refs] + \
          ["proxy CPU us per connection", "checks"]
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|---|" + "---:|" * (len(hdr) - 2) + "---|")
    for s in idle:
        if "conns" not in s:
            L.append("| %s | FAILED |%s %s |" % (s["scenario"], " |" * (len(hdr) - 3), "; ".join(s["checks"])[:300]))
            continue
        row = [s["scenario"], "%d / %d" % (s["still_open"], s["conns"]), fmt(s["open_seconds"], "%.1f"),
               "%.1f -> %.1f" % (s["rss_before_mib"], s["rss_after_mib"]),
               "%.1f (%s)" % (s["rss_delta_mib"], ", ".join("%.1f" % x for x in s["rss_delta_mib_all"])),
               fmt(s["rss_kib_per_conn"], "%.2f"), fmt(s["pss_delta_mib"], "%.1f"), fmt(s["pss_kib_per_conn"], "%.2f")]
        for ref in refs:
            row.append("%s / %s" % (fmt(s.get("rss_x_" + ref), "%.3f"), fmt(s.get("pss_x_" + ref), "%.3f")))
        row += [fmt(s["proxy_cpu_us_per_conn"], "%.0f"), "ok" if s["ok"] else "; ".join(s["checks"])[:300]]
        L.append("| " + " | ".join(row) + " |")
    return "\n".join(L)


def report(chosen, runs, meta, a):
    """(summary, idle summary, markdown) of a run."""
    refs = [x for x in (meta.get("refs") or []) if x]
    cpu_key = "proxy_cpu_busy_us_per_req" if meta["mode"] == "pinned" else "proxy_us_per_req"
    wrk_sc = [s for s in chosen if not (s.get("load") or "").startswith("idle")]
    idle_sc = [s for s in chosen if (s.get("load") or "").startswith("idle")]
    summary = summarize(wrk_sc, runs, cpu_key, ipc_drop=a.ipc_drop,
                        ref_names=tuple(dict.fromkeys(("direct", "nginx") + tuple(refs)))) if wrk_sc else []
    md = []
    if summary:
        tls_details(summary, runs, refs, cpu_key)
        md += [markdown(summary, meta), tls_markdown(summary, refs, cpu_key)]
    idle = summarize_idle(idle_sc, runs, refs)
    if idle:
        md.append(idle_markdown(idle, refs))
    return summary, idle, "\n".join(md)


def machine_info_cmd(c):
    try:
        return subprocess.run(c, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return "n/a (%s)" % e


def machine_info():
    def cmd(c):
        try:
            p = subprocess.run(c, capture_output=True, text=True, timeout=10)
            return (p.stdout.strip() + " " + p.stderr.strip()).strip()
        except Exception as e:  # noqa
            return "n/a (%s)" % e
    model = [l.split(":", 1)[1].strip() for l in read("/proc/cpuinfo").splitlines() if l.startswith("model name")]
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
        "cpu_model": model[0] if model else "?",
        "mem_total": [l for l in read("/proc/meminfo").splitlines() if l.startswith("MemTotal")][0],
        "loadavg": read("/proc/loadavg").strip(),
        "nginx": cmd(["/usr/sbin/nginx", "-v"]), "haproxy": cmd(["/usr/sbin/haproxy", "-v"]).splitlines()[0],
        "wrk": cmd(["wrk", "--version"]).splitlines()[0], "python": platform.python_version(),
        "virt": cmd(["systemd-detect-virt"]) if shutil.which("systemd-detect-virt") else "?",
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5, help="measured wrk run, seconds")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up wrk run, seconds (repeated for keyed loads)")
    ap.add_argument("--max-warmup-chunks", type=int, default=15)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--wrk-threads", type=int, default=0, help="default 1 (pinned) / all CPUs (allcores)")
    ap.add_argument("--workers", type=int, default=0, help="proxy workers in allcores mode (default all CPUs)")
    ap.add_argument("--mode", choices=["pinned", "allcores"], default="pinned")
    ap.add_argument("--load-cpu", type=int, default=0)
    ap.add_argument("--proxy-cpu", type=int, default=1)
    ap.add_argument("--scenarios", default="all", help="comma list of names or letters, 'all', or 'none'")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--keys", type=int, default=100000, help="distinct keys for the keyed scenario")
    ap.add_argument("--body-bytes", type=int, default=64)
    ap.add_argument("--port-base", type=int, default=18000)
    ap.add_argument("--pause", type=float, default=0.5, help="seconds between runs")
    ap.add_argument("--shuffle", action="store_true", help="random scenario order per round")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out-dir", default=None, help="write results.json and results.md here")
    ap.add_argument("--keep-tmp", action="store_true")
    ap.add_argument("--no-hw", action="store_true", help="do not use perf_event_open hardware counters")
    ap.add_argument("--retries", type=int, default=2, help="re-run a scenario in a round when flagged noisy")
    ap.add_argument("--quiet-threshold", type=float, default=10.0,
                    help="max %% CPU (summed over CPUs) used by others before a measured run starts")
    ap.add_argument("--quiet-max-wait", type=float, default=120.0, help="seconds to wait for quiet at most")
    ap.add_argument("--noise-foreign", type=float, default=5.0, help="flag runs with more foreign CPU %% than this")
    ap.add_argument("--ipc-drop", type=float, default=0.9, help="flag runs whose IPC < this x best IPC of the scenario")
    ap.add_argument("--candidate", help="command template of the proxy under test")
    ap.add_argument("--candidate-config", default="", help="config template text, or @file")
    ap.add_argument("--candidate-name", default="candidate")
    ap.add_argument("--candidate-load", default="plain", help="plain | keys:N | keys (= --keys)")
    ap.add_argument("--candidate-expect", default="2xx", choices=["2xx", "429", "any"])
    ap.add_argument("--candidate-spec", help="JSON file: list of candidate objects")
    ap.add_argument("--resummarize", metavar="RESULTS_JSON",
                    help="recompute summary/tables from an existing results.json (no load is run)")
    ap.add_argument("--ref", default="", help="comma list of scenarios to print CPU/memory ratios against")
    ap.add_argument("--cert-dir", default="target/tls-bench/cert",
                    help="where the shared ECDSA P-256 certificate is made once and reused")
    ap.add_argument("--shim-dir", default="target/tls-bench", help="where noresume.so is built")
    ap.add_argument("--allow-resumption", action="store_true",
                    help="close load: let wrk resume TLS sessions (no noresume.so shim)")
    ap.add_argument("--sluice", default="target/release/sluice", help="{sluice} in candidate commands")
    ap.add_argument("--sluice-alt", default=None,
                    help="{sluice_alt} in candidate commands: a second build (allocator.json), e.g. with jemalloc")
    ap.add_argument("--no-census", action="store_true", help="do not count handshakes off the loopback interface")
    ap.add_argument("--idle-conns", type=int, default=10000, help="connections of the idle:N scenarios")
    ap.add_argument("--idle-concurrency", type=int, default=128, help="handshakes in flight while opening them")
    ap.add_argument("--idle-settle", type=float, default=3.0, help="seconds between the last open and the reading")
    # the idle client itself (a child process of run_idle)
    ap.add_argument("--idle-client", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--concurrency", type=int, default=128, help=argparse.SUPPRESS)
    ap.add_argument("--cafile", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.idle_client:
        return idle_client(a)

    if a.resummarize:
        with open(a.resummarize) as f:
            data = json.load(f)
        meta = data["meta"]
        scen = data.get("scenarios") or [{k: s_.get(k) for k in ("scenario", "letter", "desc", "load", "expect")}
                                         for s_ in data["summary"]]
        for sc in scen:
            sc.setdefault("name", sc.get("scenario"))
        for r in data["runs"]:
            if "rps" in r:
                derive_hw(r, meta.get("load_cpu") or 0, meta.get("proxy_cpu") or 1, bool(r.get("proxy_pids")))
        if a.ref:
            meta["refs"] = [x.strip() for x in a.ref.split(",")]
        summary, idle, md = report(scen, data["runs"], meta, a)
        print(md)
        if a.out_dir:
            os.makedirs(a.out_dir, exist_ok=True)
            data["summary"] = summary
            data["idle_summary"] = idle
            data["resummarized"] = {"ipc_drop": a.ipc_drop, "at": time.time()}
            with open(os.path.join(a.out_dir, "results.json"), "w") as f:
                json.dump(data, f, indent=1, default=str)
            with open(os.path.join(a.out_dir, "results.md"), "w") as f:
                f.write(md + "\n")
        return 0

    scen = builtin_scenarios(a.keys, a.idle_conns)
    cands = candidate_scenarios(a)
    if a.list:
        for s in scen + cands:
            print("%-4s %-18s load=%-12s expect=%-4s %s" % (s["letter"], s["name"], s["load"], s["expect"], s["desc"]))
        print("(opt-in scenarios run only when named in --scenarios)")
        return 0
    if a.scenarios == "all":
        chosen = [s for s in scen if not s["optional"]]
    elif a.scenarios == "none":
        chosen = []
    else:
        want = [x.strip() for x in a.scenarios.split(",") if x.strip()]
        chosen = [s for s in scen if s["name"] in want or s["letter"] in want]
        unknown = set(want) - {s["name"] for s in scen} - {s["letter"] for s in scen}
        if unknown:
            raise SystemExit("unknown scenarios %s (see --list)" % sorted(unknown))
    clash = {c["name"] for c in cands} & {s["name"] for s in scen}
    if clash:
        raise SystemExit("candidate name(s) %s clash with built-in scenarios" % sorted(clash))
    chosen += cands
    if not chosen:
        raise SystemExit("no scenarios")
    if a.mode == "pinned":
        if (os.cpu_count() or 1) < 2 or a.load_cpu == a.proxy_cpu:
            raise SystemExit("pinned mode needs two distinct CPUs")
        os.sched_setaffinity(0, {a.load_cpu})  # the harness itself stays off the proxy's CPU
    for tool in ("wrk", "/usr/sbin/nginx", "taskset"):
        if not shutil.which(tool):
            raise SystemExit("missing " + tool)
    for c in cands:
        exe = c["cmd"].replace("{sluice}", a.sluice).replace("{sluice_alt}", a.sluice_alt or "{sluice_alt}").split()[0]
        if "{" in exe or not (shutil.which(exe) or os.access(exe, os.X_OK)):
            raise SystemExit("%s: %s is not an executable (build it, or pass --sluice / --sluice-alt)" % (c["name"], exe))
    refs = [x.strip() for x in a.ref.split(",") if x.strip()]
    unknown = set(refs) - {s["name"] for s in chosen}
    if unknown:
        raise SystemExit("--ref %s: not among the chosen scenarios" % sorted(unknown))
    if any(s.get("tls") for s in chosen):
        if not shutil.which("openssl"):
            raise SystemExit("missing openssl (the command line makes the certificate)")
        TLS["cert"], TLS["key"] = make_cert(a.cert_dir)
        TLS["ctx"] = client_context()
        if any(s["load"] == "close" for s in chosen if s.get("tls")) and not a.allow_resumption:
            TLS["shim"] = build_shim(a.shim_dir)
    # the proxies and the idle client inherit this: room for the idle connections
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = a.idle_conns + 4096 if any(s["load"].startswith("idle") for s in chosen) else soft
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard) if hard != resource.RLIM_INFINITY else want, hard))
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    b = Bench(a)
    meta = {"mode": a.mode, "rounds": a.rounds, "duration_s": a.duration, "warmup_s": a.warmup,
            "connections": a.connections, "wrk_threads": b.wrk_threads, "proxy_workers": b.workers,
            "upstream_workers": 1, "load_cpu": a.load_cpu if b.pinned else None,
            "proxy_cpu": a.proxy_cpu if b.pinned else None, "body_bytes": a.body_bytes, "keys": a.keys,
            "ports": {"upstream": b.up_port, "upstream_status": b.up_status_port, "proxy": b.listen_port},
            "argv": sys.argv, "tmp": b.tmp, "machine_before": machine_info(), "refs": refs,
            "tls": {"cert": TLS["cert"], "shim": TLS["shim"], "openssl": machine_info_cmd(["openssl", "version"])
                    if TLS["cert"] else None, "allow_resumption": a.allow_resumption},
            "idle_conns": a.idle_conns}
    log("mode=%s rounds=%d duration=%ds warmup=%ds -c%d wrk-threads=%d proxy-workers=%d tmp=%s" % (
        a.mode, a.rounds, a.duration, a.warmup, a.connections, b.wrk_threads, b.workers, b.tmp))
    log("scenarios: " + " ".join(s["name"] for s in chosen))
    try:
        runs, order = b.run(chosen)
    finally:
        stop_all()
    meta["machine_after"] = {"loadavg": read("/proc/loadavg").strip()}
    meta["order"] = order
    summary, idle, md = report(chosen, runs, meta, a)
    print(md)
    if a.out_dir:
        os.makedirs(a.out_dir, exist_ok=True)
        # configs of the first round, for the record
        configs = {}
        for s in chosen:
            d = os.path.join(b.tmp, "%s.r1.a0" % s["name"])
            for fn in ("nginx.conf", "haproxy.cfg", "candidate.conf"):
                if os.path.exists(os.path.join(d, fn)):
                    configs[s["name"]] = read(os.path.join(d, fn))
        configs["upstream"] = read(os.path.join(b.tmp, "upstream", "nginx.conf"))
        for k in list(b.scripts):
            configs[os.path.basename(b.scripts[k])] = read(b.scripts[k])
        with open(os.path.join(a.out_dir, "results.json"), "w") as f:
            json.dump({"meta": meta, "scenarios": chosen, "summary": summary, "idle_summary": idle, "runs": runs,
                       "configs": configs,
                       "upstream_cmd": b.upstream_cmd}, f, indent=1, default=str)
        with open(os.path.join(a.out_dir, "results.md"), "w") as f:
            f.write(md + "\n")
        log("wrote %s/results.json and results.md" % a.out_dir)
    if not a.keep_tmp:
        shutil.rmtree(b.tmp, ignore_errors=True)
    failed = [s["scenario"] for s in summary + idle if not s.get("ok")]
    if failed:
        log("CHECKS FAILED for: %s" % ", ".join(failed))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
