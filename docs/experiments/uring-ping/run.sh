#!/usr/bin/env bash
# The kernel's share of a -P 1 request: CPU per request of a server that does no work but
# answer (`+PONG` to every request) over epoll and over io_uring, beside Redis 7.0 and
# KeyMesh, one core each (server on CPU 0, `redis-benchmark` on CPU 1, 50 clients), modes
# alternated, server CPU ticks (user + system, /proc) per N requests.
#
#   docs/experiments/uring-ping/run.sh [ROUNDS] [MODE...]
#   MODE: epoll | uring | uring-fixed | uring-multi (this program), redis, keymesh
#   T=ping_inline|ping_mbulk|set|get (default ping_mbulk), N (default 300000),
#   KEYMESH_SERVER (default target/release/keymesh-server)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
rounds="${1:-3}"; shift || true
modes=("$@"); ((${#modes[@]})) || modes=(epoll uring uring-multi redis keymesh)
n="${N:-300000}"; t="${T:-ping_mbulk}"; port="${PORT:-7400}"
keymesh="${KEYMESH_SERVER:-$root/target/release/keymesh-server}"
cargo build --release --quiet --manifest-path "$here/Cargo.toml" --target-dir "$here/target"
proto="$here/target/release/uring-ping"
bench() { taskset -c 1 redis-benchmark -p "$port" -n "$1" -c 50 -r 1000000 -d 100 -t "$t" -q 2>/dev/null | tr '\r' '\n' | grep -v '^$' | tail -1 | awk '{print $2}'; }
for _ in $(seq "$rounds"); do
  for m in "${modes[@]}"; do
    dir="$(mktemp -d)"
    case "$m" in
      redis) (cd "$dir" && exec taskset -c 0 redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1) & ;;
      keymesh) taskset -c 0 "$keymesh" --bind 127.0.0.1 --port "$port" --server-threads 1 --dir "$dir" >/dev/null 2>&1 & ;;
      *) taskset -c 0 "$proto" "$m" "$port" >/dev/null 2>&1 & ;;
    esac
    pid=$!
    for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    bench 50000 >/dev/null
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    rps="$(bench "$n")"
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    printf "%-12s %s: ticks %4d (user %3d) per %d, %s requests/s\n" "$m" "$t" $((u1 + s1 - u0 - s0)) $((u1 - u0)) "$n" "$rps"
    kill -9 "$pid"; wait "$pid" 2>/dev/null || true; rm -rf "$dir"; sleep 0.3
  done
done
