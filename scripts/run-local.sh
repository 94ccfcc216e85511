#!/usr/bin/env bash
# KeyMesh's main job, locally: builds keymesh-server and runs one node on 127.0.0.1 that
# redis-cli (or any Redis client) can reach. Ctrl-C stops it.
#
#   scripts/run-local.sh [--port 6379] [any keymesh-server --directive value ...]
#
# Today this is a single multi-threaded node; the local mesh (issue 3) and the local
# Kubernetes cluster with the operator (issues 4 and 5) will take over this command.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

port=6379
args=()
while (($#)); do
  case "$1" in
    --port) port="$2"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done

if ! command -v redis-cli >/dev/null 2>&1; then
  echo "run-local: installing redis-tools for redis-cli"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-tools >/dev/null
fi
cargo build --release -p keymesh-engine --bin keymesh-server
cat <<MSG

KeyMesh node starting on 127.0.0.1:$port (metrics on http://127.0.0.1:9121/metrics).
Try, from another terminal:
  redis-cli -p $port set greeting hello
  redis-cli -p $port get greeting
  redis-cli -p $port info server
Ctrl-C stops it.

MSG
exec target/release/keymesh-server --bind 127.0.0.1 --port "$port" "${args[@]}"
