#!/usr/bin/env bash
# Builds the Kubernetes control plane the level-4 tests run (testing ladder, docs in
# e2e/README.md): kube-apiserver, kube-controller-manager and kube-scheduler 1.20.2 from Debian
# bookworm's `kubernetes` source package (it ships a full vendor/), with Debian's Go 1.19, plus
# Debian's etcd 3.4.
#
#   scripts/install-control-plane.sh
#
# The binaries land in ${KEYMESH_CACHE:-/var/cache/keymesh}/k8s-1.20.2/bin. Idempotent: when the
# three binaries are there and answer --version it only says so. The build (about 6+ minutes on
# 2 cores) happens in a scratch GOPATH and a temporary bin/ that is moved into place at the end,
# so an interrupted run never leaves a half-built cache; the scratch tree is removed afterwards.
# Each step prints its elapsed time.
set -euo pipefail
cache="${KEYMESH_CACHE:-/var/cache/keymesh}"
k8s_version=1.20.2
# The tarball is a `git archive` of this tag; these are the values hack/lib/version.sh reads
# from it, passed the same way (-X) so `kubectl version` reports v1.20.2, not v0.0.0-master.
k8s_commit=faecb196815e248d3ecfb03c680a4507229c2a56
bin_dir="$cache/k8s-$k8s_version/bin"
components=(kube-apiserver kube-controller-manager kube-scheduler)
mkdir -p "$cache"

script_start=$SECONDS
step_start=$SECONDS
step() {
  echo "install-control-plane: $1 ($((SECONDS - step_start))s, total $((SECONDS - script_start))s)"
  step_start=$SECONDS
}

need_apt=()
for pkg in golang-go etcd-server rsync openssl golang-github-modern-go-reflect2-dev dpkg-dev jq; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
# Debian's etcd-server package may start its own daemon on 2379; the tests start their own etcd
# on free ports, so stop only that service, never other etcd processes.
if [ -f /etc/init.d/etcd ] && service etcd status >/dev/null 2>&1; then
  if command -v systemctl >/dev/null 2>&1; then systemctl disable --now etcd >/dev/null 2>&1 || true; fi
  service etcd stop >/dev/null 2>&1 || true
fi
step "apt packages ok: $(go version | cut -d' ' -f3), etcd $(etcd --version | sed -n 's/^etcd Version: //p')"

binaries_ok() {
  local c
  for c in "${components[@]}"; do
    "$bin_dir/$c" --version 2>/dev/null | grep -q "v$k8s_version" || return 1
  done
}
if binaries_ok; then
  step "control plane ok: $("$bin_dir/kube-apiserver" --version) in $bin_dir"
  exit 0
fi

# Everything below works in one scratch directory; the Go build cache survives an interrupted
# run there (it is content-addressed), the rest is recreated.
work="$cache/k8s-build"
gopath="$cache/k8s-gopath"
src="$gopath/src/k8s.io/kubernetes"
mkdir -p "$work"
rm -rf "${gopath:?}" "${work:?}/bin"

if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > /etc/apt/sources.list.d/keymesh-src.sources
  apt-get update -qq
fi
if ! compgen -G "$work/dl/kubernetes_*.dsc" >/dev/null; then
  rm -rf "$work/dl.tmp" && mkdir -p "$work/dl.tmp"
  # As root, apt warns that it downloads unsandboxed; that is expected here.
  if ! out="$(cd "$work/dl.tmp" && apt-get source -qq --download-only kubernetes 2>&1)" || ! compgen -G "$work/dl.tmp/kubernetes_*.dsc" >/dev/null; then
    echo "install-control-plane: apt-get source kubernetes failed: $out" >&2
    exit 1
  fi
  rm -rf "$work/dl" && mv "$work/dl.tmp" "$work/dl"
fi
step "source package downloaded: $(basename "$work"/dl/kubernetes_*.dsc)"

# Unpacked inside dl/ so dpkg-source's copy of the orig tarball lands on itself. Its gpgv
# complaint (no Debian keyring) is noise: apt already checked the files against signed indexes.
rm -rf "$work/dl/src"
if ! out="$(cd "$work/dl" && dpkg-source -x kubernetes_*.dsc src 2>&1)"; then
  echo "install-control-plane: dpkg-source -x failed: $out" >&2
  exit 1
fi
mkdir -p "$(dirname "$src")"
mv "$work/dl/src" "$src"
grep -q "^v$k8s_version\$" <(sed -n "s/.*'tag: \(v[^ ,']*\).*/\1/p" "$src/hack/lib/version.sh") \
  || { echo "install-control-plane: the source package is not Kubernetes $k8s_version" >&2; exit 1; }
# The vendored reflect2 1.0.1 links to Go runtime internals that changed in Go 1.18, so
# json-iterator (used all over the apiserver) crashes under Go 1.19. Debian's 1.0.2 has the
# Go 1.18+ variant (go_above_118.go).
rm -rf "$src/vendor/github.com/modern-go/reflect2"
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$src/vendor/github.com/modern-go/reflect2"
step "source unpacked into GOPATH $gopath (reflect2 replaced by Debian's $(dpkg-query -W -f '${Version}' golang-github-modern-go-reflect2-dev))"

export GOPATH="$gopath" GO111MODULE=off CGO_ENABLED=0 GOFLAGS=
export GOCACHE="$work/gocache"
(cd "$src" && make generated_files >"$work/generated_files.log" 2>&1) || {
  echo "install-control-plane: make generated_files failed; log $work/generated_files.log:" >&2
  tail -30 "$work/generated_files.log" >&2
  exit 1
}
step "make generated_files done"

k8s_minor="$(cut -d. -f2 <<<"$k8s_version")"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
ldflags="-s -w"
for pkg in client-go/pkg/version component-base/version; do
  x="-X k8s.io/kubernetes/vendor/k8s.io/$pkg"
  ldflags+=" $x.gitVersion=v$k8s_version $x.gitMajor=1 $x.gitMinor=$k8s_minor"
  ldflags+=" $x.gitCommit=$k8s_commit $x.gitTreeState=archive"
  ldflags+=" $x.buildDate=$build_date"
done
mkdir -p "$work/bin"
(cd "$src" && go build -ldflags "$ldflags" -o "$work/bin/" "${components[@]/#/./cmd/}" >"$work/go-build.log" 2>&1) || {
  echo "install-control-plane: go build failed; log $work/go-build.log:" >&2
  tail -30 "$work/go-build.log" >&2
  exit 1
}
step "go build ${components[*]} done"

for c in "${components[@]}"; do
  "$work/bin/$c" --version | grep -q "v$k8s_version" || { echo "install-control-plane: $c --version failed" >&2; exit 1; }
done
rm -rf "$bin_dir" && mkdir -p "$(dirname "$bin_dir")"
mv "$work/bin" "$bin_dir"
# Only the binaries are worth keeping: the unpacked tree and the build cache take gigabytes.
rm -rf "$gopath" "$work/gocache"
step "control plane installed: $("$bin_dir/kube-apiserver" --version) in $bin_dir ($(du -sh "$bin_dir" | cut -f1))"
