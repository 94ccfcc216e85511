#!/usr/bin/env bash
# The collections benchmark (not a test): keymesh-server against Debian's redis-server, one
# server at a time, each pinned to CPU 0 (keymesh-server with one worker thread) and the client
# to CPU 1, as scripts/bench.sh's headline.
#
#   1. Memory of small collections: BENCH_KEYS collections of M elements (M in BENCH_SIZES) of
#      each type (ZADD, HSET, SADD, RPUSH, one command per key, loaded with redis-cli --pipe);
#      used_memory after the load, per server, and the ratio.
#   2. Sorted-set queries on one set of BENCH_MEMBERS members (`ZADD z i m:i`): ZRANK,
#      ZREVRANK, ZRANGE at a deep rank, ZCOUNT over most of the set, ZRANGEBYSCORE of 101
#      members, ZSCORE (redis-benchmark -c 50 -P 16, BENCH_N requests each).
#   3. ZADD -P 16 spread over 100,000 small sorted sets (random key, score and member).
#   4. Memory of collections emptied one element at a time: 1,000 hashes, sets and sorted
#      sets of 300 elements (one command per key), then one HDEL/SREM/ZREM per element until 2
#      are left in each; used_memory above the empty server's, full and emptied.
#
#   scripts/bench-collections.sh
#
# Environment: KEYMESH_SERVER (default target/release/keymesh-server), BENCH_KEYS (default
# 200000), BENCH_SIZES (default "1 5"), BENCH_MEMBERS (default 200000), BENCH_N (default
# 200000), BENCH_SERVERS (default "keymesh redis").
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$repo_root/scripts/lib.sh"
keys="${BENCH_KEYS:-200000}"
sizes="${BENCH_SIZES:-1 5}"
members="${BENCH_MEMBERS:-200000}"
requests="${BENCH_N:-200000}"
servers="${BENCH_SERVERS:-keymesh redis}"
case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "bench-collections: unknown argument: $1" >&2; exit 2 ;;
esac
for tool in redis-server redis-cli redis-benchmark python3 taskset; do
  command -v "$tool" >/dev/null || { echo "bench-collections: $tool not found (run scripts/install-deps.sh)" >&2; exit 2; }
done
(($(nproc) >= 2)) || { echo "bench-collections: needs 2 CPUs (server and client pinned apart)" >&2; exit 2; }
keymesh_bin="${KEYMESH_SERVER:-$repo_root/target/release/keymesh-server}"
[[ -x "$keymesh_bin" ]] || { echo "bench-collections: $keymesh_bin not found (build it or set KEYMESH_SERVER)" >&2; exit 2; }

work="$(mktemp -d /tmp/keymesh-bench-collections.XXXXXX)"
server_pid=""
cleanup() {
  [[ -n "$server_pid" ]] && stop_pid "$server_pid"
  rm -rf "$work"
}
trap cleanup EXIT

# start_server KIND: a fresh, empty server on $port, pinned to CPU 0.
start_server() {
  port="$(free_port)"
  case "$1" in
    keymesh) taskset -c 0 "$keymesh_bin" --port "$port" --bind 127.0.0.1 --server-threads 1 --metrics-port 0 --dir "$work" >"$work/server.log" 2>&1 & ;;
    redis) taskset -c 0 redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >"$work/server.log" 2>&1 & ;;
  esac
  server_pid=$!
  await_ping "$server_pid" "$port" "$work/server.log" "bench-collections: $1 server"
}

stop_server() {
  stop_pid "$server_pid"
  server_pid=""
}

used_memory() {
  redis-cli -p "$port" info memory | tr -d '\r' | sed -n 's/^used_memory://p'
}

# load TYPE M: BENCH_KEYS keys of TYPE with M elements each, one command per key.
load() {
  python3 - "$1" "$2" "$keys" <<'PY' | redis-cli -p "$port" --pipe >/dev/null
import sys
kind, m, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = sys.stdout
for k in range(keys):
    if kind == "zset":
        args = ["ZADD", f"z:{k}"] + [x for i in range(m) for x in (str(i * 1.5), f"member:{i}")]
    elif kind == "hash":
        args = ["HSET", f"h:{k}"] + [x for i in range(m) for x in (f"field:{i}", f"value:{i}")]
    elif kind == "set":
        args = ["SADD", f"s:{k}"] + [f"member:{i}" for i in range(m)]
    else:
        args = ["RPUSH", f"l:{k}"] + [f"member:{i}" for i in range(m)]
    out.write(f"*{len(args)}\r\n" + "".join(f"${len(a)}\r\n{a}\r\n" for a in args))
PY
}

# emptied TYPE full|emptied: 1,000 keys of TYPE (hash, set, zset) with 300 elements each, or
# one removal per element of those keys until 2 are left in each.
emptied() {
  python3 - "$1" "$2" <<'PY' | redis-cli -p "$port" --pipe >/dev/null
import sys
kind, stage = sys.argv[1], sys.argv[2]
out = sys.stdout
def send(*args):
    out.write(f"*{len(args)}\r\n" + "".join(f"${len(a)}\r\n{a}\r\n" for a in args))
for k in range(1000):
    key = f"{kind}:{k}"
    if stage == "emptied":
        for i in range(2, 300):
            send({"hash": "HDEL", "set": "SREM", "zset": "ZREM"}[kind], key, f"element:{i}")
    elif kind == "hash":
        send("HSET", key, *[x for i in range(300) for x in (f"element:{i}", "value-xyz")])
    elif kind == "set":
        send("SADD", key, *[f"element:{i}" for i in range(300)])
    else:
        send("ZADD", key, *[x for i in range(300) for x in (str(i * 1.5), f"element:{i}")])
PY
}

# rate ARGS...: redis-benchmark's requests per second for one command, client on CPU 1.
rate() {
  taskset -c 1 redis-benchmark --threads 1 -p "$port" -c 50 -P 16 -q "$@" 2>&1 | tr '\r' '\n' \
    | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' | tail -1
}

declare -A result
echo "== memory of small collections: $keys keys each (used_memory, bytes)" >&2
for server in $servers; do
  for kind in zset hash set list; do
    for m in $sizes; do
      start_server "$server"
      load "$kind" "$m"
      result["mem $kind $m $server"]="$(used_memory)"
      stop_server
    done
  done
done
queries=("ZRANK z m:$((members / 2))" "ZREVRANK z m:$((members / 2))" "ZRANGE z $((members / 2)) $((members / 2 + 9))" \
  "ZCOUNT z 1000 $((members * 3 / 4))" "ZRANGEBYSCORE z 1000 1100" "ZSCORE z m:$((members / 2))")
echo "== sorted-set queries on one set of $members members, $requests requests each" >&2
for server in $servers; do
  start_server "$server"
  seq 1 "$members" | awk '{print "ZADD z "$1" m:"$1}' | redis-cli -p "$port" >/dev/null
  for q in "${queries[@]}"; do
    # shellcheck disable=SC2086 # the query is a list of words
    result["q $q $server"]="$(rate -n "$requests" $q)"
  done
  result["small-zadd $server"]="$(rate -n 400000 -r 100000 ZADD 'z:__rand_int__' __rand_int__ 'm:__rand_int__')"
  stop_server
done

echo "== memory of 1,000 collections of 300 elements emptied one element at a time" >&2
for server in $servers; do
  for kind in hash set zset; do
    start_server "$server"
    empty="$(used_memory)"
    emptied "$kind" full
    result["full $kind $server"]="$(($(used_memory) - empty))"
    emptied "$kind" emptied
    result["emptied $kind $server"]="$(($(used_memory) - empty))"
    stop_server
  done
done

ratio() { python3 -c "import sys; a, b = float(sys.argv[1] or 0), float(sys.argv[2] or 0); print(f'{a / b:.2f}x' if b else '-')" "$1" "$2"; }
mb() { python3 -c "import sys; print(f'{int(sys.argv[1]) / 1e6:.1f} MB')" "$1"; }
num() { [[ -n "$1" ]] && python3 -c "import sys; print(f'{float(sys.argv[1]):,.0f}')" "$1"; }
has() { [[ " $servers " == *" $1 "* ]]; }

echo
echo "| type | elements | keymesh used_memory | redis used_memory | ratio |"
echo "| --- | ---: | ---: | ---: | ---: |"
for kind in zset hash set list; do
  for m in $sizes; do
    k="${result["mem $kind $m keymesh"]:-}"; r="${result["mem $kind $m redis"]:-}"
    echo "| $kind | $m | ${k:+$(mb "$k")} | ${r:+$(mb "$r")} | $(has keymesh && has redis && ratio "$k" "$r" || echo -) |"
  done
done
echo
echo "| command | keymesh ops/s | redis ops/s | ratio |"
echo "| --- | ---: | ---: | ---: |"
for q in "${queries[@]}" "small-zadd"; do
  if [[ "$q" == small-zadd ]]; then
    label="ZADD z:rand rand m:rand (100,000 small sets)"; k="${result["small-zadd keymesh"]:-}"; r="${result["small-zadd redis"]:-}"
  else
    label="$q"; k="${result["q $q keymesh"]:-}"; r="${result["q $q redis"]:-}"
  fi
  echo "| \`$label\` | $(num "$k") | $(num "$r") | $(has keymesh && has redis && ratio "$k" "$r" || echo -) |"
done
echo
echo "| 1,000 collections of | keymesh full | keymesh emptied to 2 | redis full | redis emptied to 2 |"
echo "| --- | ---: | ---: | ---: | ---: |"
for kind in hash set zset; do
  row="| $kind, 300 elements |"
  for cell in "full $kind keymesh" "emptied $kind keymesh" "full $kind redis" "emptied $kind redis"; do
    v="${result["$cell"]:-}"
    if [[ -n "$v" ]]; then row+=" $(mb "$v") |"; else row+=" - |"; fi
  done
  echo "$row"
done
