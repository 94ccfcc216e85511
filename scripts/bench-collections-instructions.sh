#!/usr/bin/env bash
# Instructions per command on small collections, counted by callgrind (valgrind): for changes
# to the collections' layout too small for this machine's wall-clock noise (docs/benchmarks.md,
# "Small collections"). A node under callgrind (one worker thread) takes, over one connection
# (`redis-cli --pipe`), each phase below; a phase's instructions (the node's own, not the
# kernel's) are divided by its commands:
#   fill-h, fill-s, fill-z: 20,000 hashes, sets and sorted sets of 5 elements, built one
#     element per command (HSET, SADD, ZADD of a new element: 100,000 commands each);
#   then 100,000 commands each on random keys and elements of those: HGET, HSET (an existing
#     field), SISMEMBER, ZSCORE, ZRANK, ZRANGE 0 -1 WITHSCORES, ZINCRBY, HGETALL.
# Each binary given is counted in turn; repeated runs of one binary agree within ~1%.
#
#   scripts/bench-collections-instructions.sh                     # target/release/keymesh-server
#   scripts/bench-collections-instructions.sh OLD_BINARY NEW_BINARY
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$repo_root/scripts/lib.sh"
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { print_usage 14; exit 0; }
# The binaries to measure, in turn; this checkout's release build when none is given.
binaries=("${@:-$repo_root/target/release/keymesh-server}")
for tool in valgrind callgrind_control redis-cli python3; do
  command -v "$tool" >/dev/null || { echo "bench-collections-instructions: $tool not found (apt-get install valgrind redis-tools)" >&2; exit 2; }
done
work="$(mktemp -d /tmp/keymesh-bench-collections-ir.XXXXXX)"
server_pid=""
trap '[[ -n "$server_pid" ]] && stop_pid "$server_pid"; rm -rf "$work"' EXIT

phases=(fill-h fill-s fill-z hget hset sismember zscore zrank zrange zincrby hgetall)
python3 - "$work" <<'PY'
import random, sys
random.seed(7)
work, keys, elements, n = sys.argv[1], 20000, 5, 100000
def resp(*args):
    args = [str(a) for a in args]
    return f"*{len(args)}\r\n" + "".join(f"${len(a)}\r\n{a}\r\n" for a in args)
def write(phase, commands):
    with open(f"{work}/{phase}.resp", "w") as f:
        f.writelines(commands)
def picks():
    return ((random.randrange(keys), random.randrange(elements)) for _ in range(n))
write("fill-h", (resp("HSET", f"h:{k}", f"field:{j}", "value-xyz") for j in range(elements) for k in range(keys)))
write("fill-s", (resp("SADD", f"s:{k}", f"member:{j}") for j in range(elements) for k in range(keys)))
write("fill-z", (resp("ZADD", f"z:{k}", j * 1.5, f"member:{j}") for j in range(elements) for k in range(keys)))
write("hget", (resp("HGET", f"h:{k}", f"field:{j}") for k, j in picks()))
write("hset", (resp("HSET", f"h:{k}", f"field:{j}", "value-abc") for k, j in picks()))
write("sismember", (resp("SISMEMBER", f"s:{k}", f"member:{j}") for k, j in picks()))
write("zscore", (resp("ZSCORE", f"z:{k}", f"member:{j}") for k, j in picks()))
write("zrank", (resp("ZRANK", f"z:{k}", f"member:{j}") for k, j in picks()))
write("zrange", (resp("ZRANGE", f"z:{k}", 0, -1, "WITHSCORES") for k, j in picks()))
write("zincrby", (resp("ZINCRBY", f"z:{k}", 1, f"member:{j}") for k, j in picks()))
write("hgetall", (resp("HGETALL", f"h:{k}") for k, j in picks()))
PY

header="| binary |"
for phase in "${phases[@]}"; do header+=" $phase |"; done
echo "$header"
echo "| --- |$(printf ' ---: |%.0s' "${phases[@]}")"
for bin in "${binaries[@]}"; do
  port="$(free_port)"
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/cg.%p" \
    "$bin" --port "$port" --bind 127.0.0.1 --server-threads 1 --metrics-port 0 --dir "$work" >"$work/server.log" 2>&1 &
  server_pid=$!
  # Under callgrind a node starts in seconds, not the 10 s await_ping allows.
  for _ in $(seq 600); do [[ "$(redis-cli -p "$port" ping 2>/dev/null)" == PONG ]] && break; sleep 0.1; done
  row="| $(basename "$bin") |"
  for phase in "${phases[@]}"; do
    callgrind_control -i on "$server_pid" >/dev/null 2>&1
    callgrind_control -z "$server_pid" >/dev/null 2>&1
    redis-cli -p "$port" --pipe <"$work/$phase.resp" >/dev/null
    callgrind_control -d "$phase" "$server_pid" >/dev/null 2>&1
    callgrind_control -i off "$server_pid" >/dev/null 2>&1
    # The dump just written; its summary line is the instructions since the zeroing.
    dump="$(ls -t "$work/cg.$server_pid".* | head -1)"
    row+=" $(awk '/^summary:/ { printf "%.0f", $2 / 100000; exit }' "$dump") |"
  done
  echo "$row"
  stop_pid "$server_pid"
  server_pid=""
done
