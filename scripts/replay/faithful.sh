#!/usr/bin/env bash
# Is a replay faithful? Records a live run of sluice (token bucket, sliding
# and fixed window, and delay rules, 50 API keys) behind an nginx upstream
# under wrk, then replays the access log with the same config and counts the
# requests whose outcome differs (newly limited + no longer limited).
#
# Usage: scripts/replay/faithful.sh [SECONDS] [SLUICE_BINARY]
# Needs nginx and wrk; everything runs on loopback and stops by itself.
set -euo pipefail
seconds=${1:-20}
sluice=${2:-target/release/sluice}
work=$(mktemp -d /tmp/sluice-faithful.XXXXXX)
upstream_port=$((20000 + RANDOM % 10000))
proxy_port=$((upstream_port + 1))
admin_port=$((upstream_port + 2))
cleanup() {
    [[ -n ${sluice_pid:-} ]] && kill "$sluice_pid" 2>/dev/null || true
    [[ -f $work/nginx.pid ]] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
}
trap cleanup EXIT

cat >"$work/nginx.conf" <<NGINX
daemon on;
pid $work/nginx.pid;
error_log $work/nginx.err;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work;
    server { listen 127.0.0.1:$upstream_port; location / { return 200 "ok\n"; } }
}
NGINX
nginx -c "$work/nginx.conf" -p "$work"

cat >"$work/sluice.toml" <<TOML
[server]
listen = "127.0.0.1:$proxy_port"
upstream = "http://127.0.0.1:$upstream_port"
access_log = "$work/access.log"

[admin]
listen = "127.0.0.1:$admin_port"

[[rule]]
name = "bucket-per-key"
key = ["header:x-api-key"]
rate = "2/s"
burst = 4

[[rule]]
name = "sliding-per-key"
match = { path_prefix = "/search" }
key = ["header:x-api-key"]
algorithm = "sliding_window"
rate = "60/m"

[[rule]]
name = "fixed-per-ip"
key = ["ip"]
algorithm = "fixed_window"
rate = "20000/m"

[[rule]]
name = "delay-per-path"
match = { path_prefix = "/write" }
key = ["path"]
rate = "50/s"
burst = 5
on_limit = "delay"
max_delay = "200ms"
TOML

"$sluice" run --config "$work/sluice.toml" 2>"$work/sluice.err" &
sluice_pid=$!
for _ in $(seq 50); do
    curl -fs "http://127.0.0.1:$admin_port/readyz" >/dev/null 2>&1 && break
    sleep 0.1
done

cat >"$work/load.lua" <<'LUA'
local n = 0
local paths = { "/items", "/search", "/write/a", "/write/b", "/items/7" }
request = function()
    n = n + 1
    local key = "key-" .. (n * 7919 % 50)
    return wrk.format("GET", paths[n % #paths + 1], { ["x-api-key"] = key })
end
LUA
wrk -t1 -c8 -d"${seconds}s" -s "$work/load.lua" "http://127.0.0.1:$proxy_port" >"$work/wrk.txt"
kill "$sluice_pid"
wait "$sluice_pid" 2>/dev/null || true
sluice_pid=

"$sluice" replay --json --config "$work/sluice.toml" "$work/access.log" >"$work/replay.json"
python3 - "$work/replay.json" "$work/access.log" <<'PY'
import collections, json, sys
report = json.load(open(sys.argv[1]))
logged = collections.Counter(json.loads(line)["outcome"] for line in open(sys.argv[2]))
lines = report["lines"]
differ = sum(r["newly_limited"] + r["no_longer_limited"] for r in report["rules"])
print(f"lines {lines}, logged outcomes {dict(logged)}")
for r in report["rules"]:
    print(f"  {r['rule']}: matched {r['matched']}, allowed {r['allowed']}, limited {r['limited']}, "
          f"held {r['held']}; newly limited {r['newly_limited']}, no longer limited {r['no_longer_limited']}")
print(f"same outcome: {lines - differ} of {lines} = {100 * (lines - differ) / max(lines, 1):.3f} %")
PY
echo "logs and report: $work"
trap - EXIT
cleanup
