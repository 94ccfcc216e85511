#!/usr/bin/env bash
# The snapshot benchmark (not a test): keymesh-server's fork-free BGSAVE against Debian's
# redis-server's fork-based one, one server at a time, on the same keyspace.
#
# For each server: load BENCH_KEYS distinct keys with 100-byte values (redis-cli --pipe), then
#   1. SAVE on the idle server: duration and file size;
#   2. a write load (redis-benchmark -t set -r BENCH_KEYS -d 100 -c 20, BENCH_N requests) alone,
#      for its p99 latency;
#   3. the same load again while BGSAVE runs back to back, sampling the process's VmRSS every
#      10 ms: peak RSS growth over the RSS before, and the load's p99. For Redis the fork's
#      copy-on-write (rdb_last_cow_size, the memory the child's pages cost) is shown too: its
#      parent's RSS does not grow, the machine's memory does.
#
#   scripts/bench-snapshot.sh [--out DIR]
#
# Environment: KEYMESH_SERVER (default target/release/keymesh-server), BENCH_KEYS (default
# 1000000), BENCH_N (write requests per phase, default 2000000).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
keys="${BENCH_KEYS:-1000000}"
requests="${BENCH_N:-2000000}"
out=""
while (($#)); do
  case "$1" in
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-snapshot: unknown argument: $1" >&2; exit 2 ;;
  esac
done
for tool in redis-server redis-cli redis-benchmark python3; do
  command -v "$tool" >/dev/null || { echo "bench-snapshot: $tool not found (run scripts/install-deps.sh)" >&2; exit 2; }
done
keymesh_bin="${KEYMESH_SERVER:-$repo_root/target/release/keymesh-server}"
[[ -x "$keymesh_bin" ]] || { echo "bench-snapshot: $keymesh_bin not found (build it or set KEYMESH_SERVER)" >&2; exit 2; }

work="$(mktemp -d /tmp/keymesh-bench-snapshot.XXXXXX)"
out="${out:-$work}"
mkdir -p "$out"
server_pid=""
sampler_pid=""
stop_server() {
  [[ -n "$sampler_pid" ]] && { kill "$sampler_pid" 2>/dev/null || true; wait "$sampler_pid" 2>/dev/null || true; sampler_pid=""; }
  if [[ -n "$server_pid" ]]; then
    stop_pid "$server_pid"
    server_pid=""
  fi
}
trap 'stop_server; [[ "$out" != "$work" ]] && rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# shellcheck source=scripts/lib.sh
source "$repo_root/scripts/lib.sh"

cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status"; }
now_ms() { date +%s%3N; }
p99() { awk -F'"' '$2 == "SET" { print $14 }' "$1"; }

start_server() {
  local kind="$1"
  port="$(free_port)"
  mkdir -p "$work/$kind"
  case "$kind" in
    keymesh) "$keymesh_bin" --port "$port" --bind 127.0.0.1 --server-threads 2 --metrics-port 0 \
      --dir "$work/$kind" >"$work/$kind.log" 2>&1 & ;;
    redis) redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
      --dir "$work/$kind" >"$work/$kind.log" 2>&1 & ;;
  esac
  server_pid=$!
  await_ping "$server_pid" "$port" "$work/$kind.log" "bench-snapshot: $kind" || exit 1
}

load() {
  python3 - "$keys" <<'EOF' | cli --pipe >"$work/pipe.out" 2>&1
import sys
n = int(sys.argv[1])
w = sys.stdout.buffer.write
chunk = []
for i in range(n):
    chunk.append(b"*3\r\n$3\r\nSET\r\n$14\r\n%s\r\n$100\r\n%s\r\n" % (b"key:%010d" % i, (b"%010d" % i) * 10))
    if len(chunk) == 10000:
        w(b"".join(chunk)); chunk = []
w(b"".join(chunk))
EOF
  [[ "$(cli dbsize)" == "$keys" ]] || { echo "bench-snapshot: loading failed" >&2; cat "$work/pipe.out" >&2; exit 1; }
}

write_load() { redis-benchmark -h 127.0.0.1 -p "$port" -t set -n "$requests" -r "$keys" -d 100 -c 20 -q --csv >"$1"; }

bgsave_in_progress() { cli info persistence | tr -d '\r' | awk -F: '$1 == "rdb_bgsave_in_progress" {print $2}'; }

measure() {
  local kind="$1"
  start_server "$kind"
  echo "bench-snapshot: $kind: loading $keys keys ..." >&2
  load
  sleep 1
  local t0 t1
  t0="$(now_ms)"; cli save >/dev/null; t1="$(now_ms)"
  local size
  size="$(stat -c %s "$work/$kind/dump.rdb")"
  echo "bench-snapshot: $kind: write load alone ..." >&2
  write_load "$work/$kind-alone.csv"
  local before
  before="$(rss_kb)"
  # Peak VmRSS while the load and back-to-back BGSAVEs run.
  (peak=0; while kill -0 "$server_pid" 2>/dev/null; do
     r="$(awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status" 2>/dev/null || echo 0)"
     ((r > peak)) && { peak=$r; echo "$peak" >"$work/$kind-peak"; }
     sleep 0.01
   done) &
  sampler_pid=$!
  echo "bench-snapshot: $kind: write load with BGSAVE ..." >&2
  write_load "$work/$kind-saving.csv" &
  local load_pid=$! saves=0
  while kill -0 "$load_pid" 2>/dev/null; do
    if [[ "$(bgsave_in_progress)" == 0 ]] && cli bgsave >/dev/null 2>&1; then saves=$((saves + 1)); fi
    sleep 0.05
  done
  wait "$load_pid"
  while [[ "$(bgsave_in_progress)" != 0 ]]; do sleep 0.05; done
  local cow
  cow="$(cli info persistence | tr -d '\r' | awk -F: '$1 == "rdb_last_cow_size" {print $2}')"
  kill "$sampler_pid" 2>/dev/null || true; wait "$sampler_pid" 2>/dev/null || true; sampler_pid=""
  echo "$kind $((t1 - t0)) $size $before $(cat "$work/$kind-peak") ${cow:-0} $saves $(p99 "$work/$kind-alone.csv") $(p99 "$work/$kind-saving.csv")" >>"$out/results.txt"
  stop_server
}

: >"$out/results.txt"
measure keymesh
measure redis
{
  echo
  echo "Snapshot of $keys keys x 100 B; write load: redis-benchmark -t set -n $requests -r $keys -d 100 -c 20"
  printf '%-8s %9s %9s %10s %10s %8s %9s %6s %9s %9s\n' server "SAVE ms" "file MiB" "RSS MiB" "peak MiB" growth "COW MiB" saves "p99 ms" "p99 save"
  while read -r kind ms size before peak cow saves p99a p99b; do
    printf '%-8s %9s %9.1f %10.1f %10.1f %7.1f%% %9.1f %6s %9s %9s\n' "$kind" "$ms" "$(awk -v v="$size" 'BEGIN{print v/1048576}')" \
      "$(awk -v v="$before" 'BEGIN{print v/1024}')" "$(awk -v v="$peak" 'BEGIN{print v/1024}')" \
      "$(awk -v a="$before" -v b="$peak" 'BEGIN{print (b-a)*100/a}')" "$(awk -v v="$cow" 'BEGIN{print v/1048576}')" "$saves" "$p99a" "$p99b"
  done <"$out/results.txt"
}
