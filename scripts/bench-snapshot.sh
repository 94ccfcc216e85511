#!/usr/bin/env bash
# The snapshot benchmark (not a test): keymesh-server's fork-free BGSAVE against Debian's
# redis-server's fork-based one, one server at a time, on the same keyspace.
#
# For each server and run: load BENCH_KEYS distinct keys with 100-byte values (redis-cli
# --pipe), then
#   1. SAVE on the idle server: duration and file size;
#   2. a write load (redis-benchmark -t set -r BENCH_KEYS -d 100 -c 20, BENCH_N requests)
#      alone, for its p99 latency;
#   3. the same load again while BGSAVE runs back to back, for its p99 and the peak RSS growth
#      over the RSS before. For Redis the fork's copy-on-write (rdb_last_cow_size, the memory
#      the child's pages cost) is shown too: its parent's RSS does not grow, the machine's
#      memory does.
# One sampler process (python, one connection) runs through phases 2 and 3 alike: it reads the
# server's VmRSS every 10 ms and polls INFO persistence every 50 ms, and in phase 3 only it
# also starts the next BGSAVE when none runs. So the two p99s differ by the snapshots alone,
# not by the measuring (a shell loop forking awk and redis-cli per sample raised the p99 of the
# load without any snapshot 2.7x).
#
# Layout (2+ CPUs): by default each server is pinned to CPU 0 (keymesh-server with one worker
# thread; its snapshot thread inherits CPU 0, as Redis's fork child does) and the load and the
# sampler to CPU 1: one core for the server and everything it does to snapshot. With
# BENCH_LAYOUT=shared nothing is pinned and keymesh-server runs two worker threads (the
# layout of the first measurement, noisier: client, server and snapshot share both cores).
#
#   scripts/bench-snapshot.sh [--out DIR]
#
# Environment: KEYMESH_SERVER (default target/release/keymesh-server), BENCH_KEYS (default
# 1000000), BENCH_N (write requests per phase, default 2000000), BENCH_RUNS (runs per server,
# medians reported, default 3), BENCH_LAYOUT (pinned or shared, default pinned),
# BENCH_SERVERS (default "keymesh redis").
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
keys="${BENCH_KEYS:-1000000}"
requests="${BENCH_N:-2000000}"
runs="${BENCH_RUNS:-3}"
layout="${BENCH_LAYOUT:-pinned}"
servers="${BENCH_SERVERS:-keymesh redis}"
out=""
while (($#)); do
  case "$1" in
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,31p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-snapshot: unknown argument: $1" >&2; exit 2 ;;
  esac
done
case "$layout" in
  pinned|shared) ;;
  *) echo "bench-snapshot: BENCH_LAYOUT must be pinned or shared, not $layout" >&2; exit 2 ;;
esac
for tool in redis-server redis-cli redis-benchmark python3 taskset; do
  command -v "$tool" >/dev/null || { echo "bench-snapshot: $tool not found (run scripts/install-deps.sh)" >&2; exit 2; }
done
if [[ "$layout" == pinned ]] && (($(nproc) < 2)); then
  echo "bench-snapshot: the pinned layout needs 2 CPUs (BENCH_LAYOUT=shared runs on one)" >&2; exit 2
fi
keymesh_bin="${KEYMESH_SERVER:-$repo_root/target/release/keymesh-server}"
[[ -x "$keymesh_bin" ]] || { echo "bench-snapshot: $keymesh_bin not found (build it or set KEYMESH_SERVER)" >&2; exit 2; }

work="$(mktemp -d /tmp/keymesh-bench-snapshot.XXXXXX)"
out="${out:-$work}"
mkdir -p "$out"
server_pid=""
sampler_pid=""
stop_sampler() {
  [[ -n "$sampler_pid" ]] || return 0
  kill "$sampler_pid" 2>/dev/null || true
  wait "$sampler_pid" 2>/dev/null || true
  sampler_pid=""
}
stop_server() {
  stop_sampler
  if [[ -n "$server_pid" ]]; then
    stop_pid "$server_pid"
    server_pid=""
  fi
}
trap 'stop_server; [[ "$out" != "$work" ]] && rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# shellcheck source=scripts/lib.sh
source "$repo_root/scripts/lib.sh"

server_cpu=()
client_cpu=()
keymesh_threads=2
if [[ "$layout" == pinned ]]; then
  server_cpu=(taskset -c 0)
  client_cpu=(taskset -c 1)
  keymesh_threads=1
fi

cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status"; }
now_ms() { date +%s%3N; }
p99() { awk -F'"' '$2 == "SET" { print $14 }' "$1"; }

start_server() {
  local kind="$1"
  port="$(free_port)"
  rm -rf "${work:?}/$kind"
  mkdir -p "$work/$kind"
  case "$kind" in
    keymesh) "${server_cpu[@]}" "$keymesh_bin" --port "$port" --bind 127.0.0.1 --server-threads "$keymesh_threads" \
      --metrics-port 0 --dir "$work/$kind" >"$work/$kind.log" 2>&1 & ;;
    redis) "${server_cpu[@]}" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
      --dir "$work/$kind" >"$work/$kind.log" 2>&1 & ;;
    *) echo "bench-snapshot: unknown server $kind (BENCH_SERVERS: keymesh, redis)" >&2; exit 2 ;;
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

# sampler MODE RESULT: in the background, until SIGTERM: peak VmRSS (kB) and, with MODE
# saving, BGSAVE whenever none is in progress. Writes "PEAK_KB SAVES" to RESULT when stopped.
sampler() {
  "${client_cpu[@]}" python3 - "$server_pid" "$port" "$1" "$2" <<'EOF' &
import signal, socket, sys, time
pid, port, mode, result = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
conn = socket.create_connection(("127.0.0.1", port))
reader = conn.makefile("rb")
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
def command(*args):
    conn.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
    line = reader.readline()
    if line.startswith(b"$"):
        n = int(line[1:])
        return b"" if n < 0 else reader.read(n + 2)[:-2]
    return line.rstrip(b"\r\n")
def rss_kb():
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0
peak, saves, tick = 0, 0, 0
while not stop:
    peak = max(peak, rss_kb())
    if tick % 5 == 0:
        info = command(b"INFO", b"persistence")
        if mode == "saving" and b"rdb_bgsave_in_progress:0" in info:
            if command(b"BGSAVE").startswith(b"+"):
                saves += 1
    tick += 1
    time.sleep(0.01)
with open(result, "w") as f:
    f.write("%d %d\n" % (peak, saves))
EOF
  sampler_pid=$!
}

write_load() {
  "${client_cpu[@]}" redis-benchmark -h 127.0.0.1 -p "$port" -t set -n "$requests" -r "$keys" -d 100 -c 20 -q --csv >"$1"
}

bgsave_in_progress() { cli info persistence | tr -d '\r' | awk -F: '$1 == "rdb_bgsave_in_progress" {print $2}'; }

measure() {
  local kind="$1" run="$2"
  start_server "$kind"
  echo "bench-snapshot: $kind run $run: loading $keys keys ..." >&2
  load
  sleep 1
  local t0 t1 size before
  t0="$(now_ms)"; cli save >/dev/null; t1="$(now_ms)"
  size="$(stat -c %s "$work/$kind/dump.rdb")"
  echo "bench-snapshot: $kind run $run: write load alone ..." >&2
  sampler idle "$work/$kind-idle.sampler"
  write_load "$work/$kind-alone.csv"
  stop_sampler
  before="$(rss_kb)"
  echo "bench-snapshot: $kind run $run: write load with BGSAVE ..." >&2
  sampler saving "$work/$kind-saving.sampler"
  write_load "$work/$kind-saving.csv"
  stop_sampler
  while [[ "$(bgsave_in_progress)" != 0 ]]; do sleep 0.05; done
  local cow peak saves
  cow="$(cli info persistence | tr -d '\r' | awk -F: '$1 == "rdb_last_cow_size" {print $2}')"
  read -r peak saves <"$work/$kind-saving.sampler"
  echo "$kind $((t1 - t0)) $size $before $peak ${cow:-0} $saves $(p99 "$work/$kind-alone.csv") $(p99 "$work/$kind-saving.csv")" >>"$out/results.txt"
  stop_server
  rm -rf "${work:?}/$kind" # the snapshot files (~135 MiB for 1M keys)
}

: >"$out/results.txt"
for ((run = 1; run <= runs; run++)); do
  for kind in $servers; do measure "$kind" "$run"; done
done
{
  echo
  echo "Snapshot of $keys keys x 100 B; write load: redis-benchmark -t set -n $requests -r $keys -d 100 -c 20"
  if [[ "$layout" == pinned ]]; then
    echo "Layout: server on CPU 0 (keymesh-server --server-threads 1), load and sampler on CPU 1"
  else
    echo "Layout: nothing pinned, keymesh-server --server-threads 2"
  fi
  python3 - "$out/results.txt" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1]) if line.strip()]
head = "%-8s %9s %9s %10s %10s %8s %9s %6s %9s %9s %7s"
print(head % ("server", "SAVE ms", "file MiB", "RSS MiB", "peak MiB", "growth", "COW MiB", "saves", "p99 ms", "p99 save", "ratio"))
def line(kind, ms, size, before, peak, cow, saves, alone, saving):
    return head % (kind, "%d" % ms, "%.1f" % (size / 1048576), "%.1f" % (before / 1024), "%.1f" % (peak / 1024),
                   "%.1f%%" % ((peak - before) * 100 / before), "%.1f" % (cow / 1048576), "%d" % saves,
                   "%.3f" % alone, "%.3f" % saving, "%.2fx" % (saving / alone))
kinds = []
for r in rows:
    if r[0] not in kinds:
        kinds.append(r[0])
for kind in kinds:
    mine = [[float(v) for v in r[1:]] for r in rows if r[0] == kind]
    for m in mine:
        print(line(kind, *m))
    if len(mine) > 1:
        print(line(kind + " median", *[statistics.median(col) for col in zip(*mine)]))
EOF
} | tee "$out/summary.txt"
