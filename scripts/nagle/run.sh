#!/usr/bin/env bash
# Nagle against delayed ACK (issue 46, and issue 56 for bodies): 300
# sequential GETs, POSTs with a 1 KiB body and the same POSTs chunked,
# through a proxy to an upstream that writes head and body in two writes
# without TCP_NODELAY (two_writes.py). A stall shows as 40 ms a request
# (Linux's delayed ACK). Run for each binary given, and for nginx:
#
#   scripts/nagle/run.sh target/release/sluice [another/sluice ...]
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${TMPDIR:-/tmp}/sluice-nagle
mkdir -p "$out"
python3 "$here/two_writes.py" 18680 & up=$!
sleep 0.5
loads="get post chunked"
for load in $loads; do echo -n "direct "; python3 "$here/client.py" 18680 300 $load; done
for bin in "$@"; do
  "$bin" run --config "$here/sluice.toml" 2>"$out/sluice.log" & sl=$!
  for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18681/ && break; sleep 0.1; done
  for load in $loads; do echo -n "$bin "; python3 "$here/client.py" 18681 300 $load; done
  kill -TERM $sl; wait $sl 2>/dev/null
done
cat > "$out/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $out/nginx.pid;
error_log $out/nginx-error.log;
events { worker_connections 64; }
http {
  access_log off;
  upstream up { server 127.0.0.1:18680; keepalive 8; }
  server {
    listen 127.0.0.1:18682;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
nginx -c "$out/nginx.conf" -p "$out" & ng=$!
sleep 0.5
for load in $loads; do echo -n "nginx "; python3 "$here/client.py" 18682 300 $load; done
kill -TERM $ng $up; wait $ng $up 2>/dev/null
