#!/usr/bin/env bash
# Fails when a dependency is built with other features for the tests than for the binaries.
#
# Cargo unifies features per build: a dev-dependency that turns on a feature of a shared crate
# (tower-test turning on tokio's `test-util` did) makes `cargo test` compile that crate, every
# crate above it and the workspace's binaries a second time — about 6 minutes of a fresh run here —
# and the tests then run binaries built unlike the ones that ship. This compares the features
# each dependency gets without and with the dev-dependencies (cargo tree resolves both the way
# cargo build and cargo test do) and names every crate that differs. Crates only the tests use
# are fine: they are compiled once either way.
#
#   scripts/check-test-features.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# "name version | features" for every package outside the workspace the build compiles.
features() {
  cargo tree --workspace --locked --no-dedupe --prefix none -f '{p} | {f}' "$@" \
    | sed -e 's/ (\*)$//' -e 's/ (proc-macro)//' | grep -v '^keymesh' | sort -u
}
# A package the binaries build with a feature set the tests' build has not: the tests build
# it another way (a crate built for the build scripts and for the target is listed once each).
# One after the other: two cargo processes at once wait on each other's package-cache lock.
binaries="$(features -e normal,build)"
tests="$(features -e normal,build,dev)"
differ="$(comm -23 <(echo "$binaries") <(echo "$tests") | sed 's/^/  /')"
if [[ -n "$differ" ]]; then
  echo "check-test-features: the tests build these dependencies with other features than the binaries:" >&2
  echo "$differ" >&2
  echo "(find the dev-dependency that asks for them: cargo tree -e features,dev -i <crate>)" >&2
  exit 1
fi
echo "check-test-features: the tests build every dependency of the binaries with the same features"
