#!/usr/bin/env bash
# Instructions per replicated SET, counted by callgrind (valgrind), for changes too small for
# this machine's wall-clock noise (docs/benchmarks.md, "CPU per replicated write"). Three
# counts, each over BENCH_N SETs of 100 B at -P 16 -c 50 to keys of -r 1000000, after a 20,000
# SET warm-up, from the load's start until every node holds every key:
#   peer:   a node under callgrind (one worker thread) merging what a native origin streams it;
#   origin: a node under callgrind (one worker thread) taking the writes, with two native peers;
#   plain:  a standalone node under callgrind (one worker thread) taking the writes.
# Repeated runs of one binary agree within ~1% (the plain node's within ~3%). callgrind counts
# each iteration of a `rep movsb` copy as an instruction, so copies weigh more here than in time.
#
# BENCH_COMMAND loads another write instead (a redis-benchmark command line, its
# `__rand_int__` drawn from -r BENCH_R, 1000000 unless set), e.g. a collection's edits: the
# elements of one hash (docs/benchmarks.md, "Collection writes in the mesh"), or with
# BENCH_R=1000 pushes onto a thousand lists of a few dozen items.
#
#   scripts/bench-mesh-instructions.sh            # needs valgrind (apt-get install valgrind)
#   KEYMESH_SERVER=path/to/keymesh-server BENCH_N=100000 scripts/bench-mesh-instructions.sh
#   BENCH_N=50000 BENCH_COMMAND='HSET myhash element:__rand_int__ value-of-forty-two-bytes-xxxxxxxxxxxxxxxxx' \
#     scripts/bench-mesh-instructions.sh
#   BENCH_N=50000 BENCH_R=1000 BENCH_COMMAND='LPUSH list:__rand_int__ item:__rand_int__' scripts/bench-mesh-instructions.sh
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
source "$repo_root/scripts/lib.sh"
bin="${KEYMESH_SERVER:-target/release/keymesh-server}"
n="${BENCH_N:-100000}"
command -v valgrind >/dev/null || { echo "bench-mesh-instructions: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
work="$(mktemp -d /tmp/keymesh-bench-ir.XXXXXX)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap 'cleanup; rm -rf "$work"' EXIT

wait_ping() { for _ in $(seq 600); do [[ "$(redis-cli -p "$1" ping 2>/dev/null)" == PONG ]] && return 0; sleep 0.1; done; echo "bench-mesh-instructions: port $1 did not answer" >&2; exit 1; }
same_dbsize() {
  for _ in $(seq 1200); do
    local a b ok=1
    a="$(redis-cli -p "$1" dbsize)"
    for p in "${@:2}"; do b="$(redis-cli -p "$p" dbsize)"; [[ "$a" == "$b" ]] || ok=0; done
    ((ok)) && return 0
    sleep 0.1
  done
  echo "bench-mesh-instructions: the nodes did not converge" >&2; exit 1
}
# A write's load: SETs of 100 B, or BENCH_COMMAND's (split into its arguments on purpose).
command_line="${BENCH_COMMAND:-}"
load() {
  if [[ -z "$command_line" ]]; then
    redis-benchmark -p "$1" -t set -n "$2" -r 1000000 -d 100 -c 50 -P 16 -q >/dev/null
  else
    # shellcheck disable=SC2086
    redis-benchmark -p "$1" -n "$2" -r "${BENCH_R:-1000000}" -c 50 -P 16 -q $command_line >/dev/null
  fi
}
# Waits until every peer (ports after the origin's) holds the origin's newest write: a link
# applies its ops in order, so a sentinel written last arrives after all of them (edits of a
# few keys leave the key counts equal long before the peers are done).
synced() {
  local origin="$1" tag="bench-$RANDOM$RANDOM"
  redis-cli -p "$origin" set bench:sentinel "$tag" >/dev/null
  for p in "${@:2}"; do
    for _ in $(seq 1200); do [[ "$(redis-cli -p "$p" get bench:sentinel)" == "$tag" ]] && continue 2; sleep 0.1; done
    echo "bench-mesh-instructions: port $p never received the load's writes" >&2; exit 1
  done
}
# Each node in a directory of its own: one started where a dump.rdb lies would load it.
native() { # name port [flags...]
  local name="$1" port="$2"; shift 2
  mkdir -p "$work/$name.dir"
  "$bin" --dir "$work/$name.dir" --bind 127.0.0.1 --port "$port" --metrics-port "$(free_port)" --node-name "$name" "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
}
counted() { # name port [flags...]: under callgrind, instrumentation off until `count_from`
  local name="$1" port="$2"; shift 2
  mkdir -p "$work/$name.dir"
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/$name.cg" \
    "$bin" --dir "$work/$name.dir" --bind 127.0.0.1 --port "$port" --metrics-port "$(free_port)" --node-name "$name" --server-threads 1 "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  counted_pid=$!
}
# Instructions collected since `callgrind_control -i on`, per write.
per_set() {
  callgrind_control -d "$counted_pid" >/dev/null 2>&1
  sleep 1
  local dump
  dump="$(ls "$work/$1.cg".* | head -1)"
  callgrind_annotate "$dump" 2>/dev/null | awk -v n="$n" '/PROGRAM TOTALS/ { gsub(",", "", $1); printf "%.0f", $1 / n }'
}

# peer: a native origin streams to a counted peer.
po="$(free_port)"; pp="$(free_port)"
native origin "$po" --active-replica yes --multi-master yes --replicaof 127.0.0.1 "$pp"
counted peer "$pp" --active-replica yes --multi-master yes --replicaof 127.0.0.1 "$po"
wait_ping "$po"; wait_ping "$pp"; sleep 3
load "$po" 20000; same_dbsize "$po" "$pp"; synced "$po" "$pp"
callgrind_control -i on "$counted_pid" >/dev/null 2>&1
load "$po" "$n"; same_dbsize "$po" "$pp"; synced "$po" "$pp"
peer="$(per_set peer)"
cleanup; pids=()

# origin: a counted origin with two native peers.
p0="$(free_port)"; p1="$(free_port)"; p2="$(free_port)"
native n1 "$p1" --active-replica yes --multi-master yes --replicaof 127.0.0.1 "$p0" --replicaof 127.0.0.1 "$p2"
native n2 "$p2" --active-replica yes --multi-master yes --replicaof 127.0.0.1 "$p0" --replicaof 127.0.0.1 "$p1"
counted origin "$p0" --active-replica yes --multi-master yes --replicaof 127.0.0.1 "$p1" --replicaof 127.0.0.1 "$p2"
wait_ping "$p0"; wait_ping "$p1"; wait_ping "$p2"; sleep 3
load "$p0" 20000; same_dbsize "$p0" "$p1" "$p2"; synced "$p0" "$p1" "$p2"
callgrind_control -i on "$counted_pid" >/dev/null 2>&1
load "$p0" "$n"; same_dbsize "$p0" "$p1" "$p2"; synced "$p0" "$p1" "$p2"
origin="$(per_set origin)"
cleanup; pids=()

# plain: a counted standalone node.
ps="$(free_port)"
counted plain "$ps"
wait_ping "$ps"; sleep 1
load "$ps" 20000
callgrind_control -i on "$counted_pid" >/dev/null 2>&1
load "$ps" "$n"
plain="$(per_set plain)"
cleanup; pids=()

write="${command_line%% *}"
awk -v peer="$peer" -v origin="$origin" -v plain="$plain" -v n="$n" -v write="${write:-SET}" 'BEGIN {
  printf "instructions per %s (%d %ss -P 16, callgrind): peer merging %d, origin with two peers %d, plain node %d\n", write, n, write, peer, origin, plain
  printf "3-node mesh (origin + 2 peers) %d = %.2fx a plain node\n", origin + 2 * peer, (origin + 2 * peer) / plain
}'
