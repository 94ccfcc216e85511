#!/usr/bin/env bash
# The scripting benchmark (not a test): EVALSHA of two scripts against each keymesh-server
# given and Debian's redis-server, one server at a time, pinned as scripts/bench.sh's headline
# (server on CPU 0, keymesh-server with one worker thread; `redis-benchmark --threads 1 -c 50
# -r 1000000` on CPU 1), at -P 16 and -P 1, the servers alternated in each of BENCH_ROUNDS
# rounds; prints every round's ops/s and the medians with each server's ratio to Redis's.
#   incr: `return redis.call('INCR', KEYS[1])` (bench.sh's EVALSHA row: a call into the
#     engine per run);
#   loop: 100 iterations of builtins (`math.floor`, `string.byte` on KEYS[1]) and arithmetic:
#     the interpreter and its per-iteration checks.
#
#   scripts/bench-scripting.sh                         # target/release/keymesh-server
#   scripts/bench-scripting.sh OLD_BINARY NEW_BINARY   # both, beside Redis
#
# Environment: BENCH_N (requests per run, default 200000; the loop script runs a quarter as
# many), BENCH_ROUNDS (default 3).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$repo_root/scripts/lib.sh"
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { print_usage 17; exit 0; }
# The binaries to measure, in turn; this checkout's release build when none is given.
binaries=("${@:-$repo_root/target/release/keymesh-server}")
for tool in redis-server redis-cli redis-benchmark taskset python3; do
  command -v "$tool" >/dev/null || { echo "bench-scripting: $tool not found (run scripts/install-deps.sh)" >&2; exit 2; }
done
(($(nproc) >= 2)) || { echo "bench-scripting: needs 2 CPUs (server and client pinned apart)" >&2; exit 2; }
n="${BENCH_N:-200000}"
rounds="${BENCH_ROUNDS:-3}"
declare -A scripts=(
  [incr]="return redis.call('INCR', KEYS[1])"
  [loop]="local s = 0 for i = 1, 100 do s = s + math.floor(i / 3) + string.byte(KEYS[1], 1) end return s"
)
work="$(mktemp -d /tmp/keymesh-bench-scripting.XXXXXX)"
server_pid=""
trap '[[ -n "$server_pid" ]] && stop_pid "$server_pid"; rm -rf "$work"' EXIT

# One server's runs of both scripts at both pipeline depths, as "script P ops" lines.
measure() { # label binary|redis
  local label="$1" binary="$2" port log="$work/server.log"
  port="$(free_port)"
  if [[ "$binary" == redis ]]; then
    (cd "$work" && exec taskset -c 0 redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no) >"$log" 2>&1 &
  else
    (cd "$work" && exec taskset -c 0 "$binary" --bind 127.0.0.1 --port "$port" --metrics-port 0 --server-threads 1) >"$log" 2>&1 &
  fi
  server_pid=$!
  await_ping "$server_pid" "$port" "$log" "$label"
  for name in incr loop; do
    local sha requests="$n" ops
    sha="$(redis-cli -h 127.0.0.1 -p "$port" SCRIPT LOAD "${scripts[$name]}")"
    [[ "$name" == loop ]] && requests=$((n / 4))
    for pipeline in 16 1; do
      ops="$(taskset -c 1 redis-benchmark -h 127.0.0.1 -p "$port" -n "$requests" -r 1000000 -c 50 -P "$pipeline" --threads 1 --csv \
        EVALSHA "$sha" 1 bench:key:__rand_int__ | awk -F'"' '/^"EVALSHA/ { print $4 }')"
      [[ -n "$ops" ]] || { echo "bench-scripting: redis-benchmark gave no result against $label" >&2; exit 1; }
      echo "$label $name $pipeline $ops"
    done
  done
  stop_pid "$server_pid"
  server_pid=""
}

results="$work/results"
for round in $(seq "$rounds"); do
  for binary in "${binaries[@]}" redis; do
    label="$(basename "$binary")"
    [[ "$binary" == redis ]] && label=redis
    measure "$label" "$binary" | tee -a "$results" | sed "s/^/round $round: /"
  done
done
python3 - "$results" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
labels = []
for line in open(sys.argv[1]):
    label, name, pipeline, ops = line.split()
    runs[(label, name, pipeline)].append(float(ops))
    if label not in labels:
        labels.append(label)
print()
print("| script | -P | " + " | ".join(f"{l} ops/s" for l in labels) + " | " + " | ".join(f"{l} / redis" for l in labels if l != "redis") + " |")
print("| --- | ---: |" + " ---: |" * (2 * len(labels) - 1))
for name in ("incr", "loop"):
    for pipeline in ("16", "1"):
        med = {l: statistics.median(runs[(l, name, pipeline)]) for l in labels}
        row = [f"{med[l]:,.0f}" for l in labels] + [f"{med[l] / med['redis']:.2f}x" for l in labels if l != "redis"]
        print(f"| {name} | {pipeline} | " + " | ".join(row) + " |")
PY
