#!/usr/bin/env bash
# The randomized partition test for longer (scripts/test.sh runs it with its default of 12
# trials): 3 engines in network namespaces, random partitions and mixed writes, then the full
# keyspace of every node is compared with a model of the acknowledged writes.
#   KEYMESH_E2E_TRIALS=200 KEYMESH_E2E_SEED=<n> scripts/mesh-soak.sh
# Needs root (network namespaces).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release -p keymesh-engine --bin keymesh-server
exec cargo nextest run --release -p keymesh-e2e --no-capture -E 'test(randomized)'
