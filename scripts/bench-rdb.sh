#!/usr/bin/env bash
# The RDB migration benchmark (not a test): BENCH_KEYS distinct keys with 100-byte values
# (redis-cli --pipe) into Debian's redis-server, then
#   1. SAVE in Redis: duration and dump.rdb size;
#   2. Redis loading its own dump.rdb at start: time until it answers DBSIZE with every key;
#   3. keymesh-server importing that dump.rdb at start (and saving the import in its own
#      format, as it does): time until it answers DBSIZE with every key, and its RSS;
#   4. redis-cli --rdb against keymesh-server (the export): duration and file size;
#   5. Redis loading the exported file: time until it answers DBSIZE with every key.
#
#   scripts/bench-rdb.sh [--out DIR]
#
# Environment: KEYMESH_SERVER (default target/release/keymesh-server), BENCH_KEYS (default
# 1000000).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
keys="${BENCH_KEYS:-1000000}"
out=""
while (($#)); do
  case "$1" in
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-rdb: unknown argument: $1" >&2; exit 2 ;;
  esac
done
for tool in redis-server redis-cli python3; do
  command -v "$tool" >/dev/null || { echo "bench-rdb: $tool not found (run scripts/install-deps.sh)" >&2; exit 2; }
done
keymesh_bin="${KEYMESH_SERVER:-$repo_root/target/release/keymesh-server}"
[[ -x "$keymesh_bin" ]] || { echo "bench-rdb: $keymesh_bin not found (build it or set KEYMESH_SERVER)" >&2; exit 2; }

work="$(mktemp -d /tmp/keymesh-bench-rdb.XXXXXX)"
out="${out:-$work}"
mkdir -p "$out"
server_pid=""
# shellcheck source=scripts/lib.sh
source "$repo_root/scripts/lib.sh"

stop_server() {
  if [[ -n "$server_pid" ]]; then
    stop_pid "$server_pid"
    server_pid=""
  fi
}
# The data files (hundreds of MiB) go; results.txt stays in --out (default: the work directory).
trap 'stop_server; rm -rf "$work/redis" "$work/keymesh" "$work/export"; [[ "$out" != "$work" ]] && rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
now_ms() { date +%s%3N; }
rss_mib() { awk '/^VmRSS:/ {printf "%.1f", $2 / 1024}' "/proc/$server_pid/status"; }

# start KIND DIR DBFILENAME: starts a server on DIR/DBFILENAME, sets started_ms.
start() {
  local kind="$1" dir="$2" file="$3"
  port="$(free_port)"
  started_ms="$(now_ms)"
  case "$kind" in
    keymesh) "$keymesh_bin" --port "$port" --bind 127.0.0.1 --metrics-port 0 --dir "$dir" --dbfilename "$file" \
      >"$work/$kind.log" 2>&1 & ;;
    redis) redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" --dbfilename "$file" \
      >"$work/$kind.log" 2>&1 & ;;
  esac
  server_pid=$!
}

# loaded_ms: waits until the server holds every key; prints the ms since it was started.
loaded_ms() {
  for _ in $(seq 6000); do
    kill -0 "$server_pid" 2>/dev/null || { echo "bench-rdb: the server exited; log:" >&2; tail -20 "$work"/*.log >&2; exit 1; }
    if [[ "$(cli dbsize 2>/dev/null)" == "$keys" ]]; then echo $(($(now_ms) - started_ms)); return; fi
    sleep 0.01
  done
  echo "bench-rdb: the server did not load $keys keys in 60 s" >&2; exit 1
}

mkdir -p "$work/redis" "$work/keymesh" "$work/export"
start redis "$work/redis" dump.rdb
await_ping "$server_pid" "$port" "$work/redis.log" "bench-rdb: redis" || exit 1
echo "bench-rdb: loading $keys keys into redis-server ..." >&2
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
[[ "$(cli dbsize)" == "$keys" ]] || { echo "bench-rdb: loading failed" >&2; cat "$work/pipe.out" >&2; exit 1; }
t0="$(now_ms)"; cli save >/dev/null; redis_save_ms=$(($(now_ms) - t0))
redis_rdb_bytes="$(stat -c %s "$work/redis/dump.rdb")"
stop_server

echo "bench-rdb: redis-server loading its dump.rdb ..." >&2
start redis "$work/redis" dump.rdb
redis_load_ms="$(loaded_ms)"
redis_rss="$(rss_mib)"
stop_server

echo "bench-rdb: keymesh-server importing it ..." >&2
cp "$work/redis/dump.rdb" "$work/keymesh/dump.rdb"
start keymesh "$work/keymesh" dump.rdb
keymesh_import_ms="$(loaded_ms)"
keymesh_rss="$(rss_mib)"
echo "bench-rdb: redis-cli --rdb against keymesh-server ..." >&2
t0="$(now_ms)"; cli --rdb "$work/export/export.rdb" >/dev/null 2>&1; export_ms=$(($(now_ms) - t0))
export_bytes="$(stat -c %s "$work/export/export.rdb")"
stop_server

echo "bench-rdb: redis-server loading the export ..." >&2
start redis "$work/export" export.rdb
export_load_ms="$(loaded_ms)"
stop_server

{
  echo "RDB migration of $keys keys x 100 B"
  printf '%-52s %9s %10s\n' step ms MiB
  mib() { awk -v v="$1" 'BEGIN{printf "%.1f", v/1048576}'; }
  printf '%-52s %9s %10s\n' "redis-server SAVE (dump.rdb size)" "$redis_save_ms" "$(mib "$redis_rdb_bytes")"
  printf '%-52s %9s %10s\n' "redis-server loads dump.rdb at start (RSS)" "$redis_load_ms" "$redis_rss"
  printf '%-52s %9s %10s\n' "keymesh-server imports dump.rdb at start (RSS)" "$keymesh_import_ms" "$keymesh_rss"
  printf '%-52s %9s %10s\n' "redis-cli --rdb from keymesh-server (file size)" "$export_ms" "$(mib "$export_bytes")"
  printf '%-52s %9s %10s\n' "redis-server loads the export at start" "$export_load_ms" ""
} | tee "$out/results.txt"
echo "bench-rdb: results in $out/results.txt" >&2
