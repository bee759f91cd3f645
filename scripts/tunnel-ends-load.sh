#!/usr/bin/env bash
# Tunnels that end, under load: 10,000 WebSocket tunnels through the real
# binary on loopback whose clients and upstream never close their sockets
# after the close handshake; prints how long until sluice's
# sluice_websocket_connections reads 0 and its open descriptors
# (/proc/<pid>/fd) are back where they were (docs/conversation.md, "When a
# tunnel ends"). The load is the ignored test
# tests/e2e/tunnel_ends.rs::ten_thousand_tunnels_whose_sides_never_close_are_gone_after_their_close_handshakes.
#
# Each tunnel costs two descriptors in sluice and two in the test process
# (its client and the upstream's end). The script raises the descriptor
# limit to 65536; where the hard limit forbids that, it takes the hard
# limit and as many tunnels as fit under it (TUNNELS, at most 10,000).
#
#   scripts/tunnel-ends-load.sh                # a debug build, as the tests
#   PROFILE=--release TUNNELS=5000 scripts/tunnel-ends-load.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if ! ulimit -n 65536 2>/dev/null; then
    ulimit -n "$(ulimit -Hn)"
fi
limit=$(ulimit -n)
# Room for each process's own descriptors (listeners, runtime, logs,
# the metrics scrapes) besides the tunnels'.
fit=$(( (limit - 200) / 2 ))
export TUNNELS=${TUNNELS:-$(( fit < 10000 ? fit : 10000 ))}
echo "descriptor limit $limit: $TUNNELS tunnels" >&2
cargo test --locked ${PROFILE:-} --test e2e -- --ignored --nocapture --exact \
    tunnel_ends::ten_thousand_tunnels_whose_sides_never_close_are_gone_after_their_close_handshakes
