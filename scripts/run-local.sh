#!/usr/bin/env bash
# The engine alone, locally (the main job with Kubernetes is scripts/run-local-cluster.sh):
# builds keymesh-server and runs a 3-node multi-master mesh on 127.0.0.1 (client ports 6379,
# 6380, 6381; mesh ports +10000; metrics 9121-9123). Every node accepts writes and replicates
# to the others. Ctrl-C stops all three.
#
#   scripts/run-local.sh [--nodes N] [--port FIRST_PORT]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

nodes=3
first=6379
while (($#)); do
  case "$1" in
    --nodes) nodes="$2"; shift 2 ;;
    --port) first="$2"; shift 2 ;;
    -h|--help) sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-local: unknown argument $1" >&2; exit 2 ;;
  esac
done

if ! command -v redis-cli >/dev/null 2>&1; then
  echo "run-local: installing redis-tools for redis-cli"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-tools >/dev/null
fi
cargo build --release -p keymesh-engine --bin keymesh-server

logs="$(mktemp -d /tmp/keymesh-local.XXXXXX)"
pids=()
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "run-local: stopped; logs in $logs"
}
trap stop EXIT
trap 'exit 0' INT TERM

for ((i = 0; i < nodes; i++)); do
  port=$((first + i))
  peers=()
  for ((j = 0; j < nodes; j++)); do
    ((j == i)) || peers+=(--replicaof 127.0.0.1 $((first + j)))
  done
  target/release/keymesh-server --bind 127.0.0.1 --port "$port" --node-name "local-$i" \
    --metrics-port $((9121 + i)) --active-replica yes --multi-master yes "${peers[@]}" \
    >"$logs/node-$i.log" 2>&1 &
  pids+=($!)
done

for ((i = 0; i < nodes; i++)); do
  for _ in $(seq 100); do
    [[ "$(redis-cli -p $((first + i)) ping 2>/dev/null)" == PONG ]] && break
    sleep 0.1
  done
done

cat <<MSG

KeyMesh: $nodes-node mesh on 127.0.0.1 ports $first..$((first + nodes - 1)) (logs in $logs).
Try, from another terminal:
  redis-cli -p $first set greeting hello
  redis-cli -p $((first + 1)) get greeting            # replicated to every node
  redis-cli -p $((first + 2)) info replication
  curl -s localhost:9121/readyz; curl -s localhost:9121/metrics | grep keymesh_mesh
Ctrl-C stops the mesh.

MSG
wait
