#!/usr/bin/env bash
# The TLS, new-connection, idle-memory and access-log benchmarks of issue 38, side by side
# with nginx in one run each (scripts/tls-bench/README.md).
#
#   scripts/tls-bench/run.sh WHAT [ROUNDS=5] [extra tlsbench.py flags...]
#
#   WHAT = keepalive     wrk keep-alive over https: nginx_tls, nginx_tls_rl, sluice_tls
#          handshake     wrk Connection: close over https, a full TLS 1.3 handshake per request:
#                        nginx_tls_hs, nginx_tls_rl_hs, sluice_tls_hs
#          memory        10,000 idle TLS connections: nginx_tls_idle, sluice_tls_idle
#          memory-plain  10,000 idle plain connections: nginx_idle, sluice_idle
#          memory-pool   the same with a pool of 100 servers: sluice_idle_pool100 beside sluice_idle
#          accesslog     plain HTTP keep-alive, access log off and on: nginx_rl_pass,
#                        nginx_rl_log, nginx_rl_logbuf, sluice, sluice_log
#          allocator     the TLS scenarios of keepalive, handshake and memory, each with
#                        target/release/sluice and with a second build (--sluice-alt PATH,
#                        required: e.g. one with jemalloc, README.md "Trying an allocator")
#
# Run from the project root after `cargo build --release --locked`, as root (the handshake
# census reads the loopback interface). Results: target/tls-bench/WHAT/results.{md,json}.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
what=${1:?"usage: $0 keepalive|handshake|memory|memory-plain|memory-pool|accesslog|allocator [ROUNDS] [flags...]"}
shift
rounds=5
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then rounds=$1; shift; fi
case "$what" in
  keepalive)    scenarios=nginx_tls,nginx_tls_rl;    ref=nginx_tls,nginx_tls_rl ;;
  handshake)    scenarios=nginx_tls_hs,nginx_tls_rl_hs; ref=nginx_tls_hs,nginx_tls_rl_hs ;;
  memory)       scenarios=nginx_tls_idle;            ref=nginx_tls_idle ;;
  memory-plain) scenarios=nginx_idle;                ref=nginx_idle ;;
  memory-pool)  scenarios=nginx_idle;                ref=nginx_idle,sluice_idle ;;
  accesslog)    scenarios=nginx_rl_pass,nginx_rl_log,nginx_rl_logbuf; ref=sluice,nginx_rl_pass ;;
  allocator)    scenarios=nginx_tls,nginx_tls_hs,nginx_tls_idle
                ref=nginx_tls,nginx_tls_hs,nginx_tls_idle,sluice_tls,sluice_tls_hs,sluice_tls_idle ;;
  *) echo "unknown: $what" >&2; exit 64 ;;
esac
python3 "$here/tlsbench.py" --scenarios "$scenarios" --candidate-spec "$here/$what.json" --ref "$ref" \
  --rounds "$rounds" --duration 5 --out-dir "target/tls-bench/$what" "$@"
