#!/usr/bin/env python3
"""CPU per request of rules that read the body (docs/conversation.md), against
the same 1 KiB JSON POST keyed on a header, in one run.

Starts nginx (1 worker, `return 200`) as the upstream, then, round by round
and variant by variant (interleaved), sluice (workers = 1, pinned to CPU 1)
with one rule keyed on `header:x-api-key`, on `body:/tenant/id`, or on
`graphql:operation`, and wrk (pinned to CPU 0) posting the same 1 KiB JSON
GraphQL request. Reports sluice's user+system CPU µs per request (from
/proc/PID/stat) per round, the medians and the ratios to the header key.

    scripts/bench/conversation.py target/release/sluice [--rounds 5] [--seconds 10]

Needs nginx and wrk (Debian's nginx-light and wrk); loopback only, bounded.
"""
import argparse, json, os, re, signal, socket, statistics, subprocess, sys, tempfile, time

QUERY = ("query GetRepository($owner: String!, $name: String!, $first: Int = 10) { "
         "repository(owner: $owner, name: $name) { id name description url stargazerCount "
         "forkCount createdAt updatedAt primaryLanguage { name color } licenseInfo { name spdxId } "
         "owner { login avatarUrl url } issues(first: $first, states: OPEN) { totalCount edges { "
         "node { id number title createdAt author { login } labels(first: 5) { edges { node { "
         "name color } } } } } } pullRequests(first: $first) { totalCount edges { node { id number "
         "title state } } } } }")


def body():
    request = {"query": QUERY, "operationName": "GetRepository",
               "variables": {"owner": "octocat", "name": "hello-world", "first": 10},
               "tenant": {"id": "tenant-0042"}, "client": {"app": "bench", "version": "1.0"}}
    text = json.dumps(request, separators=(",", ":"))
    pad = 1024 - len(text) - len(',"pad":""')
    request["pad"] = "p" * max(pad, 0)
    return json.dumps(request, separators=(",", ":"))


VARIANTS = {
    "header key": '["header:x-api-key"]',
    "body: key": '["body:/tenant/id"]',
    "graphql:operation key": '["graphql:operation"]',
}

CONFIG = """[server]
listen = "127.0.0.1:{port}"
upstream = "http://127.0.0.1:{upstream}"
workers = 1
[admin]
listen = "127.0.0.1:{admin}"
[[rule]]
name = "per-caller"
key = {key}
rate = "1000000000/s"
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listens on {port}")


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sluice")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=32)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    upstream = free_port()
    conf = os.path.join(tmp, "nginx.conf")
    open(conf, "w").write(
        f"worker_processes 1; daemon off; pid {tmp}/nginx.pid; error_log {tmp}/error.log;"
        f"events {{}} http {{ access_log off; server {{ listen 127.0.0.1:{upstream};"
        f" location / {{ return 200 'ok'; }} }} }}")
    nginx = subprocess.Popen(["taskset", "-c", "0", "nginx", "-c", conf, "-p", tmp])
    wait_port(upstream)
    script = os.path.join(tmp, "post.lua")
    payload = body().replace("\\", "\\\\").replace('"', '\\"')
    open(script, "w").write(
        'wrk.method = "POST"\n'
        f'wrk.body = "{payload}"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        'wrk.headers["X-Api-Key"] = "key-0042"\n')
    tick = os.sysconf("SC_CLK_TCK")
    results = {name: [] for name in VARIANTS}
    try:
        for round_ in range(args.rounds):
            for name, key in VARIANTS.items():
                port, admin = free_port(), free_port()
                path = os.path.join(tmp, "sluice.toml")
                open(path, "w").write(CONFIG.format(port=port, upstream=upstream, admin=admin, key=key))
                sluice = subprocess.Popen(["taskset", "-c", "1", args.sluice, "run", "--config", path],
                                          stderr=subprocess.DEVNULL)
                try:
                    wait_port(port)
                    url = f"http://127.0.0.1:{port}/graphql"
                    wrk = ["taskset", "-c", "0", "wrk", "-t1", f"-c{args.connections}", "-s", script]
                    subprocess.run(wrk + ["-d2s", url], capture_output=True, check=True)
                    before = cpu_ticks(sluice.pid)
                    out = subprocess.run(wrk + [f"-d{args.seconds}s", url], capture_output=True,
                                         text=True, check=True).stdout
                    used = (cpu_ticks(sluice.pid) - before) / tick
                    requests = int(re.search(r"(\d+) requests in", out).group(1))
                    if "Non-2xx" in out:
                        sys.exit(f"{name}: answers other than 2xx:\n{out}")
                    results[name].append(used * 1e6 / requests)
                    print(f"round {round_ + 1} {name}: {results[name][-1]:.2f} µs/req "
                          f"({requests / args.seconds:.0f} req/s)", flush=True)
                finally:
                    sluice.send_signal(signal.SIGKILL)
                    sluice.wait()
    finally:
        nginx.send_signal(signal.SIGQUIT)
        nginx.wait()
    base = statistics.median(results["header key"])
    print(f"\nbody: {len(body())} bytes of JSON; {args.rounds} rounds of {args.seconds} s")
    print("| rule keyed on | CPU µs/req (median) | vs header key |\n|---|---|---|")
    for name, values in results.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.2f} | {median / base:.3f}× |")


if __name__ == "__main__":
    main()
