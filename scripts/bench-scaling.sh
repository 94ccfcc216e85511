#!/usr/bin/env bash
# The multi-core scaling benchmark (not a test), for a machine with many cores (16 or more):
# keymesh-server with 1, 2, 4, 8 worker threads against redis-server with matching I/O threads
# (`--io-threads T --io-threads-do-reads yes`; T = 1 is Redis's default single thread), each
# server pinned to CPUs 0..T-1 and redis-benchmark pinned to the next CLIENT_CPUS cores with as
# many threads, so that the client never shares a core with the server.
#
#   redis-benchmark -t set,get -n N -r 1000000 -d 100 -c CONNS --threads CLIENT_CPUS -P 1
#   redis-benchmark ... -n N_PIPELINED ... -P 16
#
# With --threads, redis-benchmark 7.0 ends a run only on its 250 ms throughput tick, so each
# run's time is rounded up to the next quarter second: a -P 16 run of 1M requests at 2M/s
# (0.5 s) would read as 1.3-2M/s. N_PIPELINED (default 8 x N) keeps -P 16 runs seconds long.
#
# Prints per thread count and command: keymesh ops/s and p99, redis ops/s and p99, their ratio,
# each server's speed-up over its own one-thread figure, and each server's CPU time per request
# (user + system, from /proc/PID/stat around the command's run) with Redis's over KeyMesh's:
# the CPU figures are exact where the quarter-second rounding above blurs ops/s, and, with the
# server's cores saturated, say what its throughput would be without the client (medians of
# BENCH_RUNS runs; SET and GET run as separate redis-benchmark calls, SET first).
#
#   scripts/bench-scaling.sh [--threads "1 2 4 8"] [--out DIR]
#
# Environment: KEYMESH_SERVER (default target/release/keymesh-server), BENCH_N (default
# 1000000), BENCH_N_PIPELINED (default 8 x BENCH_N), BENCH_RUNS (default 3), CONNS (default
# 256), CLIENT_CPUS (default 8: the client's cores and threads). Needs max(threads) +
# CLIENT_CPUS cores; refuses to run with fewer (a client sharing the server's cores measures
# the client). On a 2-core machine use scripts/bench.sh (one core each) instead.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench_n="${BENCH_N:-1000000}"
bench_n_pipelined="${BENCH_N_PIPELINED:-$((8 * bench_n))}"
bench_runs="${BENCH_RUNS:-3}"
conns="${CONNS:-256}"
client_cpus="${CLIENT_CPUS:-8}"
thread_counts="1 2 4 8"
out=""

while (($#)); do
  case "$1" in
    --threads) thread_counts="${2:?--threads needs a list}"; shift 2 ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-scaling: unknown argument: $1" >&2; exit 2 ;;
  esac
done

for tool in redis-server redis-cli redis-benchmark python3 taskset; do
  command -v "$tool" >/dev/null || { echo "bench-scaling: $tool not found (run scripts/install-deps.sh)" >&2; exit 2; }
done
keymesh_bin="${KEYMESH_SERVER:-$repo_root/target/release/keymesh-server}"
[[ -x "$keymesh_bin" ]] || { echo "bench-scaling: $keymesh_bin not found (cargo build --release -p keymesh-engine)" >&2; exit 2; }
max_threads=0
for t in $thread_counts; do ((t > max_threads)) && max_threads=$t; done
if (($(nproc) < max_threads + client_cpus)); then
  echo "bench-scaling: needs $((max_threads + client_cpus)) CPUs ($max_threads for the server, $client_cpus for the client); this machine has $(nproc)" >&2
  exit 2
fi

work="$(mktemp -d /tmp/keymesh-bench-scaling.XXXXXX)"
out="${out:-$work}"
mkdir -p "$out"
server_pid=""
port=""
stop_server() {
  if [[ -n "$server_pid" ]]; then
    stop_pid "$server_pid"
    server_pid=""
  fi
}
cleanup() {
  stop_server
  if [[ "$out" != "$work" ]]; then rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# shellcheck source=scripts/lib.sh
source "$repo_root/scripts/lib.sh"

# start_server KIND THREADS: pinned to CPUs 0..THREADS-1.
start_server() {
  local kind="$1" threads="$2" log="$work/$1-$2.$SECONDS.log" cpus="0-$(($2 - 1))"
  port="$(free_port)"
  # Each server in an empty directory: one started where a dump.rdb lies would load it.
  mkdir -p "$work/$kind-dir"
  case "$kind" in
    keymesh) taskset -c "$cpus" "$keymesh_bin" --port "$port" --bind 127.0.0.1 --server-threads "$threads" --metrics-port 0 --dir "$work/$kind-dir" >"$log" 2>&1 & ;;
    redis)
      taskset -c "$cpus" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work/redis-dir" \
        --io-threads "$threads" --io-threads-do-reads yes >"$log" 2>&1 & ;;
  esac
  server_pid=$!
  await_ping "$server_pid" "$port" "$log" "bench-scaling: $kind server" || { stop_server; exit 1; }
}

# The server's user + system CPU so far, in clock ticks (taskset execs the server: same PID).
server_ticks() {
  awk '{ print $14 + $15 }' "/proc/$server_pid/stat"
}

started=$SECONDS
for threads in $thread_counts; do
  client="$threads-$((threads + client_cpus - 1))"
  # The two servers' runs alternate (keymesh, redis, keymesh, ...), so that a change in the
  # host's speed during the benchmark (a shared VM's neighbours) falls on both sides.
  for run in $(seq "$bench_runs"); do
    for kind in keymesh redis; do
      start_server "$kind" "$threads"
      for p in 1 16; do
        echo "bench-scaling: $kind threads=$threads -P $p run $run" >&2
        requests="$bench_n"
        ((p == 1)) || requests="$bench_n_pipelined"
        : >"$out/$kind-T$threads-P$p-$run.csv"
        : >"$out/$kind-T$threads-P$p-$run.cpu"
        for test in set get; do
          ticks_before="$(server_ticks)"
          taskset -c "$client" redis-benchmark -h 127.0.0.1 -p "$port" -t "$test" -n "$requests" -r 1000000 -d 100 \
            -c "$conns" --threads "$client_cpus" -P "$p" -q --csv >>"$out/$kind-T$threads-P$p-$run.csv"
          echo "${test^^} $(($(server_ticks) - ticks_before)) $requests" >>"$out/$kind-T$threads-P$p-$run.cpu"
        done
      done
      stop_server
    done
  done
done

python3 - "$out" "$thread_counts" "$bench_runs" "$bench_n/$bench_n_pipelined" "$conns" "$client_cpus" "$(getconf CLK_TCK)" <<'PY' | tee "$out/summary.txt"
import csv, statistics, sys
out, counts, runs, n, conns, client = sys.argv[1], [int(t) for t in sys.argv[2].split()], int(sys.argv[3]), *sys.argv[4:7]
tick_us = 1e6 / int(sys.argv[7])

def median(kind, t, p, test, column):
    values = []
    for run in range(1, runs + 1):
        with open(f"{out}/{kind}-T{t}-P{p}-{run}.csv") as f:
            values += [float(r[column]) for r in csv.DictReader(f) if r["test"] == test]
    return statistics.median(values) if values else float("nan")

def cpu_us(kind, t, p, test):
    """Median server CPU microseconds per request (user + system)."""
    values = []
    for run in range(1, runs + 1):
        with open(f"{out}/{kind}-T{t}-P{p}-{run}.cpu") as f:
            values += [int(ticks) * tick_us / int(requests) for name, ticks, requests in map(str.split, f) if name == test]
    return statistics.median(values) if values else float("nan")

print(f"\nScaling: redis-benchmark -t set,get -n {n} (-P 1/-P 16) -r 1000000 -d 100 -c {conns} --threads {client} on its own {client} cores;")
print(f"servers pinned to T cores (keymesh --server-threads T, redis --io-threads T --io-threads-do-reads yes); median of {runs} runs")
print("CPU: the server's user + system microseconds per request; CPU ratio: Redis's over KeyMesh's (above 1: KeyMesh uses less)")
print(f"{'T':>3} {'-P':>3} {'command':<8}{'keymesh ops/s':>15}{'p99 ms':>8}{'redis ops/s':>15}{'p99 ms':>8}{'ratio':>8}{'keymesh xT1':>13}{'redis xT1':>11}"
      f"{'keymesh CPU':>13}{'redis CPU':>11}{'CPU ratio':>11}")
for p in (1, 16):
    for test in ("SET", "GET"):
        k1, r1 = median("keymesh", counts[0], p, test, "rps"), median("redis", counts[0], p, test, "rps")
        for t in counts:
            k, r = median("keymesh", t, p, test, "rps"), median("redis", t, p, test, "rps")
            k99, r99 = median("keymesh", t, p, test, "p99_latency_ms"), median("redis", t, p, test, "p99_latency_ms")
            kc, rc = cpu_us("keymesh", t, p, test), cpu_us("redis", t, p, test)
            print(f"{t:>3} {p:>3} {test:<8}{k:>15,.0f}{k99:>8.3f}{r:>15,.0f}{r99:>8.3f}{k / r:>7.2f}x{k / k1:>12.2f}x{r / r1:>10.2f}x"
                  f"{kc:>11.2f}us{rc:>9.2f}us{rc / kc:>10.2f}x")
PY
echo "bench-scaling: done in $((SECONDS - started)) s; raw results in $out"
