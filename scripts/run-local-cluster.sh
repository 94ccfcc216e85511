#!/usr/bin/env bash
# KeyMesh's main job, locally: a Kubernetes 1.20 control plane on loopback, three nodes in zones
# zone-a/b/c whose pods really run (the e2e node agent: each pod a process in its own network
# namespace), the operator installed by `helm install` of charts/keymesh-operator, and the
# 3-replica CacheCluster of manifests/examples/cachecluster.yaml, Ready. Prints how to reach it
# (kubectl, redis-cli per pod); Ctrl-C (or SIGTERM) tears everything down.
#
#   scripts/run-local-cluster.sh [--namespace NS] [--no-example] [--server-tag TAG=BINARY]... [--set KEY=VALUE]...
#
# Needs root (network namespaces, mounts) on Debian bookworm with Rust. The first start builds
# the control plane (scripts/install-control-plane.sh, about 6 minutes) and fetches kubectl and
# helm (scripts/install-kube-tools.sh) into ${KEYMESH_CACHE:-/var/cache/keymesh}; later starts
# reuse them. The engine-only mesh without Kubernetes is scripts/run-local.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export KEYMESH_CACHE="${KEYMESH_CACHE:-/var/cache/keymesh}"

case "${1:-}" in
  -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
if [[ $EUID -ne 0 ]]; then
  echo "run-local-cluster: needs root (the node agent makes network namespaces and mounts)" >&2
  exit 1
fi

t0=$SECONDS
if [[ ! -x "$KEYMESH_CACHE/k8s-1.20.2/bin/kube-apiserver" ]] || ! command -v etcd >/dev/null 2>&1; then
  echo "run-local-cluster: building the control plane (first start only)"
  scripts/install-control-plane.sh
fi
if [[ ! -x "$KEYMESH_CACHE/bin/kubectl" || ! -x "$KEYMESH_CACHE/bin/helm" ]]; then
  scripts/install-kube-tools.sh
fi
missing=()
for tool in redis-cli ip unshare nsenter; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
  echo "run-local-cluster: installing redis-tools, iproute2, util-linux for ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-tools iproute2 util-linux >/dev/null
fi

locked=()
[[ -f Cargo.lock ]] && locked=(--locked)
cargo build --release "${locked[@]}" -p keymesh-engine -p keymesh-operator -p keymesh-e2e
target_dir="${CARGO_TARGET_DIR:-target}"
echo "run-local-cluster: tools and build ready in $((SECONDS - t0))s; starting the cluster"
exec "$target_dir/release/keymesh-local-cluster" "$@"
