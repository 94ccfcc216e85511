#!/usr/bin/env bash
# Installs what the tests and benchmarks need on a fresh Debian bookworm machine:
# Redis 7.0 (the reference server and its clients), Redis's Tcl test suite from
# Debian's source package, redis-py, the chart tools' checkers (promtool from `prometheus`, a
# local OCI registry from `docker-registry`, `lua5.1` for Argo CD health checks, Python's
# `jsonschema` for the eksctl example), the Rust tools
# the tests use (rustfmt, clippy, cargo-nextest), and for the control-plane tests Kubernetes
# 1.20.2 built from Debian's source package plus kubectl and helm (see those two scripts).
# Idempotent: a second run only checks (about a second). scripts/test.sh runs it first.
set -euo pipefail
cache="${KEYMESH_CACHE:-/var/cache/keymesh}"
mkdir -p "$cache"

need_apt=()
for pkg in redis-server redis-tools tcl iproute2 dpkg-dev python3-pip python3-yaml python3-jsonschema prometheus docker-registry lua5.1; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
# Node.js runs node-redis's client-side cache check (e2e/clients/node); any node >= 18 will do.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
if ((${#need_apt[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
# Debian's redis-server package may start its own daemon on 6379; the tests start their own
# servers, so stop only that daemon (by its pid file), never other redis-server processes.
if [ -f /run/redis/redis-server.pid ]; then
  if command -v systemctl >/dev/null 2>&1; then systemctl disable --now redis-server >/dev/null 2>&1 || true; fi
  service redis-server stop >/dev/null 2>&1 || kill "$(cat /run/redis/redis-server.pid)" 2>/dev/null || true
fi

# prometheus and docker-registry are installed for promtool and the registry binary only; the
# tests start their own registry on a free loopback port. Stop the packages' own daemons (by
# their pid files, as for redis above) so nothing listens on 9090 or 5000 behind our back.
for daemon in prometheus docker-registry; do
  if [ -f "/run/$daemon.pid" ] || [ -f "/run/$daemon/$daemon.pid" ]; then
    if command -v systemctl >/dev/null 2>&1; then systemctl disable --now "$daemon" >/dev/null 2>&1 || true; fi
    service "$daemon" stop >/dev/null 2>&1 || true
  fi
done

# Redis's own test suite, from the Debian source package of the installed version.
# node-redis, pinned by e2e/clients/node/package-lock.json.
(cd "$(dirname "${BASH_SOURCE[0]}")/../e2e/clients/node" && npm ci --silent --no-audit --no-fund)
if [ ! -x "$cache/redis-src/runtest" ]; then
  if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > /etc/apt/sources.list.d/keymesh-src.sources
    apt-get update -qq
  fi
  rm -rf "$cache/redis-src.tmp" && mkdir -p "$cache/redis-src.tmp"
  (cd "$cache/redis-src.tmp" && apt-get source -qq --download-only redis >/dev/null && dpkg-source -x --skip-patches redis_*.dsc src >/dev/null)
  rm -rf "$cache/redis-src" && mv "$cache/redis-src.tmp/src" "$cache/redis-src" && rm -rf "$cache/redis-src.tmp"
fi

# redis-py 5 (RESP3; Debian's python3-redis is 4.3). Debian's own python3 is "externally
# managed" (PEP 668): pip refuses to install into it without --break-system-packages.
if ! python3 -c 'import redis, sys; sys.exit(int(redis.__version__.split(".")[0]) < 5)' 2>/dev/null; then
  pip_flags=(-q)
  if python3 -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
    pip_flags+=(--break-system-packages)
  fi
  python3 -m pip install "${pip_flags[@]}" 'redis>=5,<6'
fi
echo "deps ok: $(redis-server --version | cut -d' ' -f3), tcl suite at $cache/redis-src, $(promtool --version 2>&1 | head -1 | cut -d' ' -f1-3), $(lua5.1 -v 2>&1 | cut -d' ' -f1-2)"

# The Rust tools the tests use. Only crates.io is reachable, so cargo-nextest is built from it
# when missing (once per machine: it stays in ~/.cargo/bin).
if command -v cargo >/dev/null 2>&1; then
  cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
  cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
  cargo nextest --version >/dev/null 2>&1 || cargo install --locked cargo-nextest
  echo "rust tools ok: $(cargo --version), $(cargo nextest --version | head -1)"
else
  echo "install-deps: cargo not found: the tests expect a machine with Rust (rustup)" >&2
  exit 1
fi

# The level-4 control plane (etcd, kube-apiserver & co.; the first run builds them, 6+ minutes)
# and the kubectl and helm binaries the tests drive.
"$(dirname "${BASH_SOURCE[0]}")/install-control-plane.sh"
"$(dirname "${BASH_SOURCE[0]}")/install-kube-tools.sh"
