#!/usr/bin/env bash
# sluice's memory under a gzip bomb sent to a body: rule (issue 70).
#
#   scripts/gzip-bomb.sh target/release/sluice
#
# Starts a python3 upstream on 127.0.0.1:18480 (answers any POST 200 after reading
# the body) and sluice on 18481 (admin 18482) with max_key_body_bytes = 65536 and one
# rule keyed on body:/tenant. Makes {"tenant":"<64 MiB of a>"} gzipped (65,266
# bytes at level 9, under the bound as sent, so sluice inflates it), warms up with
# a few ordinary POSTs, reads VmRSS/VmHWM, POSTs the bomb 20 times in a row and
# 4 at once, and reads them again. Passes if both grew by at most
# max_key_body_bytes + 1 MiB. Stops both processes by PID. CODING= (empty) sends the
# same bytes without Content-Encoding, as a control (sluice then does not inflate).
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
dir=${TMPDIR:-/tmp}/sluice-gzip-bomb
mkdir -p "$dir"
limit=65536
coding=(); [ -n "${CODING-gzip}" ] && coding=(-H "Content-Encoding: ${CODING-gzip}")

cat >"$dir/sluice.toml" <<EOF
[server]
listen = "127.0.0.1:18481"
upstream = "http://127.0.0.1:18480"
max_key_body_bytes = $limit
[admin]
listen = "127.0.0.1:18482"
[[rule]]
name = "per-tenant"
key = ["body:/tenant"]
rate = "1000/s"
EOF

cat >"$dir/upstream.py" <<'EOF'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        elif self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                self.rfile.read(size + 2)
                if size == 0:
                    break
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")
    do_GET = do_POST
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 18480), H).serve_forever()
EOF

python3 - "$dir/bomb.gz" <<'EOF'
import gzip, sys
raw = b'{"tenant":"' + b"a" * (64 << 20) + b'"}'
open(sys.argv[1], "wb").write(gzip.compress(raw, 9))
EOF
echo "bomb: $(stat -c %s "$dir/bomb.gz") bytes gzipped, $(( (64 << 20) + 13 )) decoded"

python3 "$dir/upstream.py" & up=$!
for _ in $(seq 100); do
  curl -s -o /dev/null http://127.0.0.1:18480/ && break
  sleep 0.1
done
"$bin" run --config "$dir/sluice.toml" 2>"$dir/sluice.log" & sl=$!
for _ in $(seq 100); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:18481/)" = 200 ] && break
  sleep 0.1
done

mem() { awk '/^VmRSS|^VmHWM/ {printf "%s %s kB  ", $1, $2} END {print ""}' /proc/$sl/status; }
kb() { awk -v k="$1:" '$1 == k {print $2}' /proc/$sl/status; }
post() {  # file, extra curl args...
  local f=$1; shift
  curl -s -o /dev/null -w '%{http_code}\n' -X POST -H 'Content-Type: application/json' \
    "$@" --data-binary @"$f" http://127.0.0.1:18481/
}

printf '{"tenant":"t%d"}' 1 >"$dir/small.json"
for i in $(seq 10); do post "$dir/small.json"; done | sort | uniq -c | sed 's/^/warm-up: /'
sleep 0.5
echo "before: $(mem)"
rss0=$(kb VmRSS); hwm0=$(kb VmHWM)

t0=$(date +%s.%N)
for i in $(seq 20); do post "$dir/bomb.gz" "${coding[@]}"; done \
  | sort | uniq -c | sed 's/^/20 in a row: /'
echo "20 in a row took $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s"
echo "after 20 in a row: $(mem)"
pids=()
for i in 1 2 3 4; do post "$dir/bomb.gz" "${coding[@]}" >"$dir/par.$i" & pids+=($!); done
wait "${pids[@]}"
cat "$dir"/par.* | sort | uniq -c | sed 's/^/4 at once: /'
sleep 0.5
echo "after 4 at once: $(mem)"
rss1=$(kb VmRSS); hwm1=$(kb VmHWM)
alive=yes; kill -0 $sl 2>/dev/null || alive=no

kill -TERM $sl; wait $sl 2>/dev/null
kill -TERM $up; wait $up 2>/dev/null

bound=$(( limit / 1024 + 1024 ))
echo "growth: VmRSS +$(( rss1 - rss0 )) kB, VmHWM +$(( hwm1 - hwm0 )) kB (bound ${bound} kB); sluice alive to the end: $alive"
if [ $(( rss1 - rss0 )) -le $bound ] && [ $(( hwm1 - hwm0 )) -le $bound ] && [ $alive = yes ]; then
  echo PASS
else
  echo FAIL; exit 1
fi
