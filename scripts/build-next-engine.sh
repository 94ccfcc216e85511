#!/usr/bin/env bash
# Builds the second engine binary the upgrade tests roll to: the same code, reporting version
# "<workspace version>-next" (KEYMESH_BUILD_VERSION, read only by engine/src/main.rs, so the
# change rebuilds only the binary), copied to target/release/keymesh-server-next; then rebuilds
# the normal binary so target/release/keymesh-server reports the workspace version again.
# `--workspace --bin`, not `-p keymesh-engine`: features unify over the packages a build
# selects, so building the engine's package alone resolves serde, syn, tower & co. with other
# features and recompiles most of the tree (minutes on a fresh machine); with the whole
# workspace selected it reuses `cargo build --release --workspace`'s crates.
#
#   scripts/build-next-engine.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target="${CARGO_TARGET_DIR:-target}/release"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
locked=()
[[ -f Cargo.lock ]] && locked=(--locked)
KEYMESH_BUILD_VERSION="${version}-next" cargo build --release --workspace --bin keymesh-server "${locked[@]}"
cp "$target/keymesh-server" "$target/keymesh-server-next.tmp"
mv "$target/keymesh-server-next.tmp" "$target/keymesh-server-next"
cargo build --release --workspace --bin keymesh-server "${locked[@]}"
reported="$("$target/keymesh-server-next" --version)"
[[ "$reported" == "keymesh-server ${version}-next "* ]] || { echo "build-next-engine: the next build reports '$reported'" >&2; exit 1; }
echo "build-next-engine: $target/keymesh-server-next reports ${version}-next; $target/keymesh-server $("$target/keymesh-server" --version | cut -d' ' -f2)"
