#!/usr/bin/env bash
# Replication benchmark (not a test), on loopback:
#   1. write throughput of a 3-node mesh vs a standalone node, same redis-benchmark SET load
#      against one node (-n BENCH_N, -r 1000000, -d 100, -c 50, -P 16, --threads 1), and the
#      CPU per replicated write: CPU seconds (user + system, /proc/PID/stat) of all three nodes
#      per million writes, until every node holds every key, over a standalone node's for the
#      same load (measured without the lag probe). It does not depend on how many cores the
#      machine has, as throughput does;
#   2. replication lag p50/p99 on that mesh, idle and under that load: a probe
#      (`keymesh-mesh-bench lag`, e2e/src/bin) PUBLISHes its send time on node 0 every 5 ms;
#      subscribers on nodes 1 and 2 receive it through the mesh stream, in order with the
#      writes (PUBLISH replicates as an effect like any write). Under load a subscriber on node
#      0 itself receives the same messages without the mesh hop (what the node and the probe's
#      own threads waiting for a core add), and a second run puts the load generator at
#      `nice -n 19` (the nodes take the cores first, as they would with a core each; the load
#      and throughput barely change); and, idle, how long a SET and the `WAIT 2` for it take
#      (`keymesh-mesh-bench wait`: the peers' Acks on request, docs/compatibility.md);
#   3. a 1M-key full sync: node A holds BENCH_KEYS keys of 100 bytes, node B starts with
#      `replicaof A`; prints the time until B is ready with every key, and the bytes received;
#   4. the reference, measured in this run under the same load and layout: Redis 7.0 standalone
#      and a Redis master with two replicas (`replicaof`; writes go to the master, which
#      propagates them), the master where node 0 runs and a replica where each of nodes 1 and 2
#      runs: its throughput and CPU per write (until both replicas hold every key) as the mesh's
#      are measured, and the mesh's CPU per write over the master and replicas';
#   5. catch-up after a 30 s partition at a steady write rate (network namespaces, root only):
#      `keymesh-mesh-bench partition` (e2e/src/bin), see its docs. BENCH_PARTITION=no skips it
#      (it does not depend on the rest, and takes over a minute).
#
# Layout: by default every process shares the machine's cores (on this project's 2-core
# machine: three nodes, the load generator and the probe on 2 cores, so the mesh's throughput
# measures the sharing). BENCH_PIN=yes gives each node a core of its own and one worker
# thread (`--server-threads 1`: the standalone node and node 0 on CPU 0, node 1 on CPU 1,
# node 2 on CPU 2), and the load generator and the probe CPU 3: how "mesh throughput >= 0.8x
# standalone where cores allow" (issue 16) is measured. It needs 4 cores and refuses fewer.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
# shellcheck source=scripts/lib.sh
source "$repo_root/scripts/lib.sh"
bin="${KEYMESH_SERVER:-target/release/keymesh-server}"
mesh_bench="$(dirname "$bin")/keymesh-mesh-bench"
for b in "$bin" "$mesh_bench"; do
  [[ -x "$b" ]] || { echo "bench-mesh: $b not found (cargo build --release -p keymesh-engine -p keymesh-e2e)" >&2; exit 2; }
done
for tool in redis-server redis-cli redis-benchmark; do
  command -v "$tool" >/dev/null || { echo "bench-mesh: $tool not found (scripts/install-deps.sh installs it)" >&2; exit 2; }
done
n="${BENCH_N:-1000000}"
keys="${BENCH_KEYS:-1000000}"
pinned="${BENCH_PIN:-no}"
declare -A cpu_of=([solo]=0 [mesh0]=0 [mesh1]=1 [mesh2]=2 [syncA]=0 [syncB]=1 [client]=3 [redis_solo]=0 [redis0]=0 [redis1]=1 [redis2]=2)
node_flags=()
if [[ "$pinned" == yes ]]; then
  (($(nproc) >= 4)) || { echo "bench-mesh: BENCH_PIN=yes needs 4 cores (a node or the client sharing one measures the sharing); this machine has $(nproc)" >&2; exit 2; }
  node_flags=(--server-threads 1)
  layout="pinned: one core and one worker thread per node (CPUs 0, 1, 2), load generator and probe on CPU 3"
else
  layout="unpinned: three nodes, the load generator and the probe share $(nproc) cores"
fi
# pin_to NAME: sets `pin` to the command prefix that runs on NAME's core (empty unless
# BENCH_PIN=yes). A prefix, not a wrapper function: a node started with `&` must be the
# background job itself (taskset execs it), whose PID the CPU figures read and `cleanup` kills.
pin_to() { pin=(); if [[ "$pinned" == yes ]]; then pin=(taskset -c "${cpu_of[$1]}"); fi; }
work="$(mktemp -d /tmp/keymesh-bench-mesh.XXXXXX)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap 'cleanup; rm -rf "$work"' EXIT

# start NAME PORT METRICS [flags...]: starts a node in a directory of its own (one started where
# a dump.rdb lies would load it: a snapshot, or a Redis RDB it imports); waits for PING.
start() {
  local name="$1" port="$2" metrics="$3"; shift 3
  mkdir -p "$work/$name"
  pin_to "$name"
  "${pin[@]}" "$bin" --dir "$work/$name" --bind 127.0.0.1 --port "$port" --metrics-port "$metrics" --node-name "$name" "${node_flags[@]}" "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  await_ping "${pids[-1]}" "$port" "$work/$name.log" "bench-mesh: $name" || exit 1
}
stop_all() { cleanup; pids=(); }
# cpu_ticks PID...: user + system clock ticks the processes have used so far.
cpu_ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat"))); done; echo "$t"; }
# set_load NICENESS PORT [ARGS...]: the SET load every measurement uses, run at that
# niceness (0: as the nodes; 19: after them). One client thread: with
# --threads 2, redis-benchmark 7.0's runs end on a 0.25 s step (1.0 or 1.25 s for 1.0 to 1.3M
# requests), which made every standalone run 998k and every mesh run 570k.
set_load() { pin_to client; "${pin[@]}" nice -n "$1" redis-benchmark -p "$2" -t set -n "$n" -r 1000000 -d 100 -c 50 -P 16 --threads 1 -q "${@:3}"; }
set_rps() { set_load 0 "$1" --csv | awk -F'"' '$2 == "SET" { print $4 }'; }
metric() { curl -s "localhost:$1/metrics" | awk -v p="$2" 'index($0, p) == 1 { v = $NF } END { print v + 0 }'; }

echo "bench-mesh: standalone SET throughput ..." >&2
p0="$(free_port)"; m0="$(free_port)"
start solo "$p0" "$m0"
solo_t0="$(cpu_ticks "${pids[@]}")"
solo="$(set_rps "$p0")"
solo_cpu=$(( $(cpu_ticks "${pids[@]}") - solo_t0 ))
stop_all

echo "bench-mesh: 3-node mesh SET throughput ..." >&2
ports=("$(free_port)" "$(free_port)" "$(free_port)"); metrics=("$(free_port)" "$(free_port)" "$(free_port)")
for i in 0 1 2; do
  peers=()
  for j in 0 1 2; do ((i == j)) || peers+=(--replicaof 127.0.0.1 "${ports[$j]}"); done
  start "mesh$i" "${ports[$i]}" "${metrics[$i]}" --active-replica yes --multi-master yes "${peers[@]}"
done
sleep 1
# lag_probe SECONDS|- GROUP...: publishes on node 0; prints "p50 p99 samples" (ms) of
# publish-to-receive times for each GROUP of subscribed ports (comma-separated), one line
# each, for SECONDS or, with -, until the file $work/load-done appears.
lag_probe() { pin_to client; "${pin[@]}" "$mesh_bench" lag "${ports[0]}" "${@:2}" "$1" "$work/load-done"; }
# converged [PORT PORT PORT]: waits until the three nodes (the mesh's by default) hold the same
# number of keys; fails after 30 s (a mesh whose links never came up must not pass for a fast
# one: its peers would cost nothing).
converged() {
  local on=("$@")
  ((${#on[@]})) || on=("${ports[@]}")
  for _ in $(seq 300); do
    a="$(redis-cli -p "${on[0]}" dbsize)"; b="$(redis-cli -p "${on[1]}" dbsize)"; c="$(redis-cli -p "${on[2]}" dbsize)"
    [[ "$a" == "$b" && "$b" == "$c" ]] && return 0; sleep 0.1
  done
  echo "bench-mesh: the nodes on ports ${on[*]} did not converge in 30 s (dbsize $a $b $c)" >&2; exit 1
}
idle_lag="$(lag_probe 3 "${ports[1]},${ports[2]}")"
# A write and the WAIT for both peers' Acks, one after the other (idle mesh).
pin_to client
wait_rt="$("${pin[@]}" "$mesh_bench" wait "${ports[0]}" 2 500)"
# Throughput and CPU on their own (the lag probe's clients would share the cores), until every
# node holds every key; then the same load again with the lag probe running.
node_t0=(); for p in "${pids[@]}"; do node_t0+=("$(cpu_ticks "$p")"); done
batches0="$(metric "${metrics[0]}" keymesh_mesh_sent_batches_total)"; ops0="$(metric "${metrics[0]}" keymesh_mesh_sent_ops_total)"
mesh_t0="$(cpu_ticks "${pids[@]}")"
mesh="$(set_rps "${ports[0]}")"
converged
mesh_cpu=$(( $(cpu_ticks "${pids[@]}") - mesh_t0 ))
# How node 0's streams batched that load: batches sent (to both peers) and ops per batch.
batches=$(( $(metric "${metrics[0]}" keymesh_mesh_sent_batches_total) - batches0 ))
ops=$(( $(metric "${metrics[0]}" keymesh_mesh_sent_ops_total) - ops0 ))
# Each node's share (node 0 takes the load, nodes 1 and 2 merge its writes).
node_cpu=""; for i in 0 1 2; do node_cpu+="$(( $(cpu_ticks "${pids[$i]}") - node_t0[i] )) "; done
# loaded_lag NICENESS: the lag probe while the load runs against node 0 at that niceness;
# two lines: received on nodes 1 and 2 (through the mesh), on node 0 itself (no mesh hop).
loaded_lag() {
  local probe_pid
  rm -f "$work/load-done"
  lag_probe - "${ports[1]},${ports[2]}" "${ports[0]}" >"$work/lag" &
  probe_pid=$!
  set_load "$1" "${ports[0]}" >/dev/null
  touch "$work/load-done"
  wait "$probe_pid"
  converged
  cat "$work/lag"
}
load_lag="$(loaded_lag 0)"
niced_lag="$(loaded_lag 19)"
echo "bench-mesh: after the load, dbsize per node: $a $b $c" >&2
stop_all

echo "bench-mesh: the reference: Redis standalone, then a master with two replicas ..." >&2
# start_redis NAME PORT [flags...]: a redis-server as the benchmark's other servers run (no
# persistence, its default single I/O thread) in a directory of its own (a replica writes the
# RDB of its first sync there, and a server starting there would load it); waits for PING.
start_redis() {
  local name="$1" port="$2"; shift 2
  mkdir -p "$work/$name"
  pin_to "$name"
  "${pin[@]}" redis-server --bind 127.0.0.1 --port "$port" --dir "$work/$name" --save '' --appendonly no "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  await_ping "${pids[-1]}" "$port" "$work/$name.log" "bench-mesh: $name" || exit 1
}
rp="$(free_port)"
start_redis redis_solo "$rp"
redis_solo_t0="$(cpu_ticks "${pids[@]}")"
redis_solo="$(set_rps "$rp")"
redis_solo_cpu=$(( $(cpu_ticks "${pids[@]}") - redis_solo_t0 ))
stop_all
rports=("$(free_port)" "$(free_port)" "$(free_port)")
# The load starts once both replicas finished their first sync: writes made before would reach
# them in that sync's RDB, which costs a replica far less than the command stream (the mistake of
# the reference docs/benchmarks.md quoted before the twenty-sixth pass). No diskless-sync delay:
# the master would wait 5 s for more replicas before it sends the first.
start_redis redis0 "${rports[0]}" --repl-diskless-sync-delay 0
for i in 1 2; do start_redis "redis$i" "${rports[$i]}" --replicaof 127.0.0.1 "${rports[0]}"; done
for i in 1 2; do
  for _ in $(seq 100); do redis-cli -p "${rports[$i]}" info replication | grep -q '^master_link_status:up' && break; sleep 0.1; done
  redis-cli -p "${rports[$i]}" info replication | grep -q '^master_link_status:up' || { echo "bench-mesh: Redis replica $i never linked to its master" >&2; exit 1; }
done
redis_t0=(); for p in "${pids[@]}"; do redis_t0+=("$(cpu_ticks "$p")"); done
redis_repl="$(set_rps "${rports[0]}")"
converged "${rports[@]}"
redis_cpu=""; redis_repl_cpu=0
for i in 0 1 2; do t=$(( $(cpu_ticks "${pids[$i]}") - redis_t0[i] )); redis_cpu+="$t "; redis_repl_cpu=$((redis_repl_cpu + t)); done
stop_all

echo "bench-mesh: full sync of $keys keys ..." >&2
pa="$(free_port)"; ma="$(free_port)"; pb="$(free_port)"; mb="$(free_port)"
start syncA "$pa" "$ma" --active-replica yes --multi-master yes
python3 - "$keys" <<'PY' | redis-cli -p "$pa" --pipe >/dev/null
import sys
w = sys.stdout.buffer.write
for i in range(int(sys.argv[1])):
    k = b"key:%010d" % i
    w(b"*3\r\n$3\r\nSET\r\n$14\r\n%s\r\n$100\r\n%s\r\n" % (k, b"x" * 100))
PY
t0=$(date +%s.%N)
start syncB "$pb" "$mb" --active-replica yes --multi-master yes --replicaof 127.0.0.1 "$pa"
until [[ "$(curl -s -o /dev/null -w '%{http_code}' "localhost:$mb/readyz")" == 200 && "$(redis-cli -p "$pb" dbsize)" == "$keys" ]]; do sleep 0.05; done
t1=$(date +%s.%N)
bytes="$(metric "$mb" 'keymesh_mesh_received_bytes_total{kind="full"')"

stop_all

awk -v s="$solo" -v m="$mesh" -v sc="$solo_cpu" -v mc="$mesh_cpu" -v n="$n" -v hz="$(getconf CLK_TCK)" -v t0="$t0" -v t1="$t1" -v b="$bytes" -v k="$keys" -v il="$idle_lag" -v ll="$(echo "$load_lag" | sed -n 1p)" -v pl="$(echo "$load_lag" | sed -n 2p)" -v nl="$(echo "$niced_lag" | sed -n 1p)" -v np="$(echo "$niced_lag" | sed -n 2p)" -v nc="$node_cpu" -v wr="$wait_rt" -v nb="$batches" -v no="$ops" -v layout="$layout" -v rs="$redis_solo" -v rr="$redis_repl" -v rsc="$redis_solo_cpu" -v rrc="$redis_repl_cpu" -v rc="$redis_cpu" 'BEGIN {
  printf "\nlayout: %s\n", layout
  printf "SET -P 16 ops/s: standalone %.0f, 3-node mesh %.0f, ratio %.2f (target >= 0.80 where cores allow)\n", s, m, m / s
  printf "CPU per million writes: standalone %.2f s, 3-node mesh (all nodes, until converged) %.2f s, ratio %.2f (target <= 2.0)\n", sc / hz / n * 1e6, mc / hz / n * 1e6, mc / sc
  split(nc, c, " ")
  printf "  of which node 0 (takes the writes) %.2f s, nodes 1 and 2 (merge them) %.2f s and %.2f s\n", c[1] / hz / n * 1e6, c[2] / hz / n * 1e6, c[3] / hz / n * 1e6
  printf "  node 0 streamed it in %d batches to its two peers, %.1f ops per batch\n", nb, (nb > 0 ? no / nb : 0)
  printf "Redis 7.0, same load and layout: standalone %.0f ops/s, master + 2 replicas %.0f ops/s, ratio %.2f; CPU per million writes: standalone %.2f s, master + 2 replicas %.2f s, ratio %.2f\n", rs, rr, rr / rs, rsc / hz / n * 1e6, rrc / hz / n * 1e6, rrc / rsc
  split(rc, r, " ")
  printf "  of which the master %.2f s, the replicas %.2f s and %.2f s\n", r[1] / hz / n * 1e6, r[2] / hz / n * 1e6, r[3] / hz / n * 1e6
  printf "  KeyMesh over Redis, CPU per million writes: standalone %.2fx, 3-node mesh over master + 2 replicas %.2fx\n", sc / rsc, mc / rrc
  split(il, i, " "); split(ll, l, " ")
  printf "replication lag (publish on node 0 -> receive on nodes 1, 2): idle p50 %.2f ms p99 %.2f ms (%d samples); under that load p50 %.2f ms p99 %.2f ms (%d samples) (target p99 <= 5 ms)\n", i[1], i[2], i[3], l[1], l[2], l[3]
  split(pl, q, " "); split(nl, w, " "); split(np, x, " ")
  printf "  the same messages received on node 0 itself (no mesh hop): p50 %.2f ms p99 %.2f ms (%d samples)\n", q[1], q[2], q[3]
  printf "  under that load with the load generator at nice 19 (the nodes take the cores first): p50 %.2f ms p99 %.2f ms (%d samples); on node 0 itself p50 %.2f ms p99 %.2f ms\n", w[1], w[2], w[3], x[1], x[2]
  split(wr, t, " ")
  printf "SET then WAIT 2 on an idle mesh (both peers ack): p50 %.2f ms p99 %.2f ms (%d rounds)\n", t[1], t[2], t[3]
  printf "full sync of %d keys x 100 B: %.2f s (target < 10 s), %.1f MiB received\n", k, t1 - t0, b / 1048576
}'

if [[ "${BENCH_PARTITION:-yes}" == no ]]; then
  echo "catch-up after a 30 s partition: skipped (BENCH_PARTITION=no)"
elif [[ $(id -u) == 0 ]] && command -v ip >/dev/null; then
  echo "bench-mesh: catch-up after a 30 s partition ..." >&2
  KEYMESH_SERVER="$bin" "$mesh_bench" partition
else
  echo "catch-up after a 30 s partition: skipped (needs root for network namespaces)"
fi
