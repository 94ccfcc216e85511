#!/usr/bin/env bash
# KeyMesh end to end on kind (Kubernetes in Docker), for machines with Docker: creates a kind
# cluster with three workers in zones zone-a/b/c, builds the keymesh-server and keymesh-operator
# images (e2e/kind/Dockerfile) and loads them into it, installs the operator with helm, applies
# manifests/examples/cachecluster.yaml, waits until the CacheCluster is Ready, writes a key with
# redis-cli in one pod and reads it in the two others, then deletes the cluster.
#
#   scripts/kind-e2e.sh        # CLUSTER=name picks the cluster's name, KEEP=1 keeps it
#
# Needs docker, kind (v0.20 or later: node labels), kubectl and helm on PATH. It uses its own
# kubeconfig file and never touches ~/.kube/config.
#
# NOT RUN where KeyMesh is developed and tested: that machine has no Docker. There the same
# steps run against a local control plane whose pods the e2e node agent runs
# (scripts/run-local-cluster.sh, e2e/tests/cluster_e2e.rs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cluster="${CLUSTER:-keymesh-e2e}"
# The operator's default engine image tag is the workspace version; the chart's operator image
# tag is its appVersion.
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)"
app_version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/keymesh-operator/Chart.yaml)"
server_image="keymesh/keymesh-server:$version"
operator_image="keymesh/keymesh-operator:$app_version"

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "kind-e2e: $tool not found on PATH" >&2; exit 1; }
done

step() { echo "==> kind-e2e: $*"; }

step "building $server_image and $operator_image"
docker build -f e2e/kind/Dockerfile --target server -t "$server_image" .
docker build -f e2e/kind/Dockerfile --target operator -t "$operator_image" .

work="$(mktemp -d)"
export KUBECONFIG="$work/kubeconfig"
cleanup() {
  if [[ "${KEEP:-0}" == 1 ]]; then
    echo "kind-e2e: kept cluster $cluster; KUBECONFIG=$KUBECONFIG"
  else
    kind delete cluster --name "$cluster" --kubeconfig "$KUBECONFIG" || true
    rm -rf "$work"
  fi
}
trap cleanup EXIT

step "creating kind cluster $cluster (3 zoned workers)"
kind create cluster --name "$cluster" --config e2e/kind/cluster.yaml --kubeconfig "$KUBECONFIG" --wait 180s
kind load docker-image --name "$cluster" "$server_image" "$operator_image"

step "installing the operator"
helm install keymesh-operator charts/keymesh-operator --namespace keymesh-system --create-namespace --wait --timeout 5m

step "applying the example CacheCluster"
kubectl apply -f manifests/examples/cachecluster.yaml
kubectl wait cachecluster/demo --for=condition=Ready --timeout=5m
kubectl get cachecluster demo
kubectl get pods -o wide -l app.kubernetes.io/instance=demo

step "writing through demo-0, reading from demo-1 and demo-2"
password="$(kubectl get secret demo-auth -o jsonpath='{.data.password}' | base64 -d)"
cli() {
  local pod="$1"; shift
  kubectl exec "$pod" -c keymesh -- redis-cli -a "$password" --no-auth-warning "$@"
}
value="kind-e2e-$(date +%s)"
[[ "$(cli demo-0 SET e2e:kind "$value")" == OK ]] || { echo "kind-e2e: SET on demo-0 failed" >&2; exit 1; }
for pod in demo-1 demo-2; do
  got=""
  for _ in $(seq 50); do
    got="$(cli "$pod" GET e2e:kind)"
    [[ "$got" == "$value" ]] && break
    sleep 0.2
  done
  [[ "$got" == "$value" ]] || { echo "kind-e2e: $pod has '$got', not '$value'" >&2; exit 1; }
  echo "kind-e2e: $pod reads $value"
done
echo "kind-e2e: ok"
