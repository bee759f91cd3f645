#!/usr/bin/env python3
"""Hybrid mode's Redis load and overshoot, measured on loopback (BENCHMARKS.md).

    python3 scripts/hybrid-bench/bench.py redis-load [--seconds 10]
    python3 scripts/hybrid-bench/bench.py overshoot [--seconds 3]

Run from the project root after `cargo build --release --locked`; needs nginx,
wrk and redis-server. Starts its own nginx upstream (scripts/callgrind/upstream.conf,
127.0.0.1:18380), redis-server on 127.0.0.1:16479 (pinned to CPU 0, with the load)
and release sluice processes, and stops each by PID.

redis-load: one hybrid instance (pinned to CPU 1, one worker) keyed on an API key,
at two request rates a factor of 10 apart (wrk with a fixed pause per connection),
for 1k keys (synced every 50 ms, and every second, when each key is touched in
every interval at both rates) and 100k keys, then a strict instance under the
same loads: the commands Redis ran (a script's own included) and the CPU it
spent per second, the sync's calls, and the buckets the syncs watched.

overshoot: three hybrid instances hammering one key (a token bucket whose limit
the load spends in about a second), for sync intervals of 10, 50 and 200 ms:
what was admitted beyond the limit, against one interval's traffic.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.getcwd()
SLUICE = os.path.join(ROOT, "target/release/sluice")
UPSTREAM = "127.0.0.1:18380"
REDIS_PORT = 16479
HZ = os.sysconf("SC_CLK_TCK")

# wrk: a random key of N per request (X-Api-Key), a pause of D ms before each
# request of a connection; counts the answers by status.
LOAD_LUA = r"""
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args)
  keys = tonumber(args[1]); pause = tonumber(args[2]); ok = 0; refused = 0
  math.randomseed(os.time() + math.floor(os.clock() * 1e6))
end
function request()
  return wrk.format(nil, nil, { ["X-Api-Key"] = "k" .. math.random(keys) })
end
function delay() return pause end
function response(status)
  if status == 200 then ok = ok + 1 elseif status == 429 then refused = refused + 1 end
end
function done()
  local a, r = 0, 0
  for _, t in ipairs(threads) do a = a + t:get("ok"); r = r + t:get("refused") end
  io.write(string.format("STATUSES ok=%d refused=%d\n", a, r))
end
"""


def start_upstream(tmp):
    conf = os.path.join(ROOT, "scripts/callgrind/upstream.conf")
    proc = subprocess.Popen(["nginx", "-c", conf, "-p", tmp],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return proc


def start_redis(tmp):
    proc = subprocess.Popen(
        ["taskset", "-c", "0", "redis-server", "--port", str(REDIS_PORT), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no", "--dir", tmp],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(50):
        if redis("PING") == "PONG":
            return proc
        time.sleep(0.1)
    sys.exit("redis-server did not start")


def redis(*args):
    done = subprocess.run(["redis-cli", "-p", str(REDIS_PORT), *args],
                          capture_output=True, text=True)
    return done.stdout.strip()


def redis_counts(pid):
    """Commands Redis ran so far (INFO commandstats, INFO itself left out) and
    the CPU seconds redis-server spent."""
    calls = sum(int(n) for name, n in re.findall(r"cmdstat_(\w+):calls=(\d+)",
                                                  redis("INFO", "commandstats"))
                if name != "info")
    with open("/proc/%d/stat" % pid) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return calls, (int(fields[11]) + int(fields[12])) / HZ


def sluice_config(interval, rule, instances=1):
    """A hybrid instance syncing every `interval` (None: a strict one)."""
    mode = ('mode = "hybrid"\nsync_interval = "%s"\n' % interval if interval
            else 'mode = "strict"\ntimeout = "1s"\n')
    return (
        '[server]\nlisten = "127.0.0.1:0"\nupstream = "http://%s"\nworkers = 1\n'
        '[admin]\nlisten = "127.0.0.1:0"\n'
        '[store]\nbackend = "redis"\n[store.redis]\nurl = "redis://127.0.0.1:%d"\n'
        '%sinstances = %d\n\n%s'
        % (UPSTREAM, REDIS_PORT, mode, instances, rule))


def start_sluice(tmp, name, config, cpu=None):
    path = os.path.join(tmp, name + ".toml")
    with open(path, "w") as f:
        f.write(config)
    command = [SLUICE, "run", "--config", path]
    if cpu is not None:
        command = ["taskset", "-c", str(cpu)] + command
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            env=dict(os.environ, RUST_LOG="info"), text=True)
    for line in proc.stderr:
        if "sluice is serving" in line:
            listen = re.search(r"listen=(\S+)", line).group(1)
            admin = re.search(r"admin=(\S+)", line).group(1)
            # Keep draining its log so it never blocks on a full pipe.
            subprocess.Popen(["cat"], stdin=proc.stderr, stdout=subprocess.DEVNULL)
            return proc, listen, admin
    sys.exit("sluice did not start: %s" % config)


def metric(admin, name):
    text = urllib.request.urlopen("http://%s/metrics" % admin, timeout=5).read().decode()
    found = re.search(r"^%s(?:\{[^}]*\})? (\S+)$" % re.escape(name), text, re.M)
    return float(found.group(1)) if found else 0.0


def wrk(url, connections, seconds, keys, pause_ms, lua, cpu=0):
    out = subprocess.run(
        ["taskset", "-c", str(cpu), "wrk", "-t1", "-c%d" % connections, "-d%ds" % seconds,
         "--timeout", "2s", "-s", lua, url, "--", str(keys), str(pause_ms)],
        capture_output=True, text=True).stdout
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    ok, refused = map(int, re.search(r"STATUSES ok=(\d+) refused=(\d+)", out).groups())
    return requests, ok, refused


def stop(proc):
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def redis_load(args, tmp, redis_proc, lua):
    rule = ('[[rule]]\nname = "per-key"\nkey = ["header:x-api-key"]\n'
            'rate = "1000000000/s"\n')
    print("| keys | sync_interval (or strict) | wrk connections x pause | req/s | Redis commands/s "
          "| sync calls/s | Redis CPU ms/s | Redis CPU us/request | buckets watched (median) |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for keys, interval in ((1000, "50ms"), (1000, "1s"), (100000, "50ms"), (1000, None),
                           (100000, None)):
        for connections in (20, 200):
            redis("FLUSHALL")
            config = sluice_config(interval, rule)
            sluice, listen, admin = start_sluice(tmp, "load", config, cpu=1)
            url = "http://%s/" % listen
            # Warm-up: every key's bucket made, the sync in its stride.
            wrk(url, connections, 2, keys, 10, lua)
            calls0, cpu0 = redis_counts(redis_proc.pid)
            sync0 = metric(admin, "sluice_store_sync_calls_total")
            started = time.time()
            watched = []
            poll = subprocess.Popen(
                ["sh", "-c", "for i in $(seq %d); do curl -s http://%s/metrics | "
                 "grep '^sluice_store_sync_pending '; sleep 1; done" % (args.seconds, admin)],
                stdout=subprocess.PIPE, text=True)
            requests, _, _ = wrk(url, connections, args.seconds, keys, 10, lua)
            elapsed = time.time() - started
            calls1, cpu1 = redis_counts(redis_proc.pid)
            sync1 = metric(admin, "sluice_store_sync_calls_total")
            for line in poll.communicate()[0].splitlines():
                watched.append(float(line.split()[1]))
            stop(sluice)
            commands = (calls1 - calls0) / elapsed
            cpu_ms = (cpu1 - cpu0) / elapsed * 1000
            watched.sort()
            rate = requests / elapsed
            print("| %d | %s | %d x 10 ms | %.0f | %.0f | %.1f | %.1f | %.2f | %.0f |" % (
                keys, interval or "strict", connections, rate, commands,
                (sync1 - sync0) / elapsed,
                cpu_ms, cpu_ms * 1000 / max(rate, 1),
                watched[len(watched) // 2] if watched else 0))
            sys.stdout.flush()


def overshoot(args, tmp, lua):
    # A limit the hammering spends in about a second: the rest of the run
    # is refused, and what was admitted beyond the limit is the overshoot.
    limit = args.limit
    rule = ('[[rule]]\nname = "per-key"\nkey = ["header:x-api-key"]\n'
            'rate = "%d/h"\n' % limit)
    print("| sync_interval | admitted | limit + refill | overshoot | requests per interval "
          "| overshoot / interval's traffic | promise |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for interval_ms in (10, 50, 200):
        redis("FLUSHALL")
        config = sluice_config("%dms" % interval_ms, rule, instances=3)
        fleet = [start_sluice(tmp, "fleet%d" % at, config) for at in range(3)]
        # The key known to every instance first (the steady case: not a new key).
        for _, listen, _ in fleet:
            req = urllib.request.Request("http://%s/" % listen, headers={"X-Api-Key": "k1"})
            urllib.request.urlopen(req, timeout=5).read()
        time.sleep(3 * interval_ms / 1000 + 0.1)
        started = time.time()
        loads = [subprocess.Popen(
            ["wrk", "-t1", "-c16", "-d%ds" % args.seconds, "--timeout", "2s", "-s", lua,
             "http://%s/" % listen, "--", "1", "0"], stdout=subprocess.PIPE, text=True)
                 for _, listen, _ in fleet]
        outs = [load.communicate()[0] for load in loads]
        elapsed = time.time() - started
        requests = sum(int(re.search(r"(\d+) requests in", out).group(1)) for out in outs)
        admitted = 3 + sum(int(re.search(r"STATUSES ok=(\d+)", out).group(1)) for out in outs)
        for proc, _, _ in fleet:
            stop(proc)
        refill = limit * (elapsed + 3 * interval_ms / 1000 + 0.1) / 3600
        per_interval = requests / elapsed * interval_ms / 1000
        over = admitted - limit - refill
        print("| %d ms | %d | %.0f | %.0f | %.0f | %.2f | <= 1 while steady "
              "((N - 1)/N = 0.67 expected), <= 2 at worst |" % (
                  interval_ms, admitted, limit + refill, over, per_interval,
                  over / per_interval))
        sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["redis-load", "overshoot"])
    parser.add_argument("--seconds", type=int, default=0)
    parser.add_argument("--limit", type=int, default=20000,
                        help="overshoot: the key's limit per hour")
    args = parser.parse_args()
    args.seconds = args.seconds or (10 if args.what == "redis-load" else 3)
    with tempfile.TemporaryDirectory() as tmp:
        lua = os.path.join(tmp, "load.lua")
        with open(lua, "w") as f:
            f.write(LOAD_LUA)
        upstream = start_upstream(tmp)
        redis_proc = start_redis(tmp)
        try:
            if args.what == "redis-load":
                redis_load(args, tmp, redis_proc, lua)
            else:
                overshoot(args, tmp, lua)
        finally:
            stop(redis_proc)
            stop(upstream)


if __name__ == "__main__":
    main()
