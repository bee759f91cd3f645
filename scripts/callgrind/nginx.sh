#!/usr/bin/env bash
# nginx + limit_req under callgrind, loaded as run.sh loads sluice, so the two compare per
# request: the same upstream (upstream.conf on 127.0.0.1:18380), one worker on 18381, the
# same wrk -c64 for 5 s after a 2 s warm-up. The limit is the harness's (proxybench.py's
# nginx_rl_pass / nginx_rl_429): a per-address zone that never refuses, or 1 r/m.
#
#   scripts/callgrind/nginx.sh pass        # or: deny
#   CACHE=1 scripts/callgrind/nginx.sh deny   # with the cache and branch simulation
#   TOP="D1mw 20" adds the functions with the most of one event (CACHE=1 only).
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${TMPDIR:-/tmp}
shape=$1
case $shape in
  pass) zone="rate=1000000r/s"; limit="limit_req zone=perip burst=100000 nodelay;" ;;
  deny) zone="rate=1r/m"; limit="limit_req zone=perip;" ;;
  *) echo "usage: $0 pass|deny" >&2; exit 2 ;;
esac
dir=$(mktemp -d)
cat >"$dir/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  keepalive_requests 1000000;
  upstream up { server 127.0.0.1:18380; keepalive 128; keepalive_requests 1000000; }
  limit_req_zone \$binary_remote_addr zone=perip:10m $zone;
  server {
    listen 127.0.0.1:18381;
    location / {
      $limit
      limit_req_status 429;
      limit_req_log_level info;
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
CONF
nginx -c "$here/upstream.conf" -p "$out" & up=$!
cache=(); [ -n "${CACHE:-}" ] && cache=(--cache-sim=yes --branch-sim=yes)
valgrind --tool=callgrind "${cache[@]}" --callgrind-out-file=$dir/cg.out \
  nginx -c "$dir/nginx.conf" -p "$dir" 2>"$dir/valgrind.log" & ng=$!
for _ in $(seq 120); do
  curl -s -o /dev/null http://127.0.0.1:18381/ && break
  sleep 0.5
done
wrk -t1 -c64 -d2s http://127.0.0.1:18381/ >/dev/null 2>&1   # warm-up
callgrind_control -z $ng >/dev/null 2>&1
result=$(wrk -t1 -c64 -d5s http://127.0.0.1:18381/ 2>&1)
callgrind_control -d $ng >/dev/null 2>&1
sleep 1
reqs=$(echo "$result" | awk '/requests in/ {print $1}')
kill -TERM $ng; wait $ng 2>/dev/null
kill -TERM $up; wait $up 2>/dev/null
echo "nginx $shape: requests=$reqs"
top=(); [ -n "${CACHE:-}" ] && [ -n "${TOP:-}" ] && top=(--top $TOP)
python3 "$here/events.py" "$reqs" $dir/cg.out* "${top[@]}"
[ -n "${KEEP:-}" ] && echo "kept: $dir" || rm -rf "$dir"
