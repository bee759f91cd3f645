# Sourced by the benchmarks that want the machine to themselves:
#   cpu_busy N   busy ticks of CPU N (all processes), from /proc/stat
#   quiet S      waits up to QUIET_WAIT s (default S) for 3 seconds in a row in
#                which the machine is at most 10 % busy, so other work does not
#                share the run; says so and goes on if it never is
#   in_use H:P   whether something already listens on H:P
# Sets `tick` (clock ticks a second) too.
tick=$(getconf CLK_TCK)
cpu_busy() { awk -v cpu="cpu$1" '$1 == cpu {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
quiet() {
  local limit=${QUIET_WAIT:-$1} waited=0 calm=0 a b
  while [ "$waited" -lt "$limit" ]; do
    a=$(( $(cpu_busy 0) + $(cpu_busy 1) )); sleep 1; b=$(( $(cpu_busy 0) + $(cpu_busy 1) ))
    if [ $(( (b - a) * 100 / tick )) -le 20 ]; then   # 20 % of one CPU = 10 % of two
      calm=$((calm + 1)); [ "$calm" -ge 3 ] && return 0
    else
      calm=0
    fi
    waited=$((waited + 1))
  done
  echo "  (the machine was not quiet within $limit s: running anyway)"
}
in_use() { python3 -c 'import socket, sys
h, p = sys.argv[1].rsplit(":", 1)
s = socket.socket(); s.settimeout(0.5)
sys.exit(0 if s.connect_ex((h, int(p))) == 0 else 1)' "$1"; }
