#!/usr/bin/env bash
# Where a proxy's CPU goes: user space against the kernel, per request, for sluice or for
# nginx + limit_req, placed as proxybench.py places them (the proxy alone on CPU 1; wrk and
# the upstream, scripts/callgrind/upstream.conf, on CPU 0), wrk -c64 for 5 s after a 2 s
# warm-up. Reads the proxy process's utime and stime (/proc/PID/stat, 10 ms ticks).
#
#   scripts/cpu-split/run.sh sluice target/release/sluice scripts/callgrind/deny.toml
#   scripts/cpu-split/run.sh nginx deny        # or: pass (nginx_rl_429 / nginx_rl_pass)
#
# docs/benchmarks-history.md, "Cycles, not instructions (issue 84)", reads its figures.
set -u; a3=${3:-}
kind=$1
here=$(cd "$(dirname "$0")/../callgrind" && pwd)
taskset -c 0 nginx -c $here/upstream.conf -p /tmp & up=$!
sleep 0.3
if [ $kind = sluice ]; then
  taskset -c 1 $2 run --config $3 2>/dev/null & px=$!
else
  d=$(mktemp -d); shape=$2
  case $shape in pass) zone="rate=1000000r/s"; limit="limit_req zone=perip burst=100000 nodelay;";; deny) zone="rate=1r/m"; limit="limit_req zone=perip;";; esac
  cat >$d/nginx.conf <<CONF
daemon off; master_process off; worker_processes 1; pid $d/nginx.pid; error_log $d/error.log warn;
events { worker_connections 1024; }
http { access_log off; client_body_temp_path $d/b; proxy_temp_path $d/p; fastcgi_temp_path $d/f; uwsgi_temp_path $d/u; scgi_temp_path $d/s;
  keepalive_requests 1000000;
  upstream up { server 127.0.0.1:18380; keepalive 128; keepalive_requests 1000000; }
  limit_req_zone \$binary_remote_addr zone=perip:10m $zone;
  server { listen 127.0.0.1:18381; location / { $limit limit_req_status 429; limit_req_log_level info; proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
CONF
  taskset -c 1 nginx -c $d/nginx.conf -p $d & px=$!
fi
for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18381/ && break; sleep 0.1; done
taskset -c 0 wrk -t1 -c64 -d2s http://127.0.0.1:18381/ >/dev/null 2>&1
read u0 s0 < <(awk '{print $14, $15}' /proc/$px/stat)
out=$(taskset -c 0 wrk -t1 -c64 -d5s http://127.0.0.1:18381/ 2>&1)
read u1 s1 < <(awk '{print $14, $15}' /proc/$px/stat)
reqs=$(echo "$out" | awk '/requests in/ {print $1}')
kill $px; wait $px 2>/dev/null; kill $up; wait $up 2>/dev/null
label=$(echo "$kind ${2##*/} ${a3##*/}" | sed 's/ *$//')
# utime and stime are in ticks of 10 ms: 1e4 µs each.
python3 -c "u=($u1-$u0)*1e4/$reqs; s=($s1-$s0)*1e4/$reqs; print(f'$label: requests $reqs user {u:.2f} us/req sys {s:.2f} us/req total {u+s:.2f} user share {u/(u+s):.0%}')"
