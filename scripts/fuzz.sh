#!/usr/bin/env bash
# Runs the engine's fuzz targets (engine/fuzz: the RESP request parser, the mesh stream's
# messages merged into a keyspace, the config parser) for a bounded time each, starting from
# the seed corpus in engine/fuzz/corpus/<target>. libFuzzer writes the inputs it finds into a
# scratch folder, so the repository stays clean; a crash, panic, hang or runaway allocation
# fails the run and leaves the input in engine/fuzz/artifacts/<target>/ (reproduce:
# cargo fuzz run --fuzz-dir engine/fuzz -s none --codegen-units 4 <target> <file>). A fixed finding's input
# belongs in the corpus as a `regression_*` seed, with a unit test in the engine.
#
#   scripts/fuzz.sh [target ...]      # default: every target
#
# Environment: FUZZ_SECONDS (per target, default 30). scripts/test.sh runs it with 20.
#
# Toolchain: the machine's default one (stable). cargo-fuzz needs nightly only for sanitizers
# (-Zsanitizer) and -Zbuild-std; with `--sanitizer none` it passes rustc nothing but stable
# codegen flags (-Cpasses=sancov-module and LLVM's coverage options), so no nightly toolchain
# is needed — and none could be fetched here (rustup's servers are not reachable; crates.io
# is). Sanitizers are not needed either: the workspace denies `unsafe` outside the few places
# Cargo.toml lists, each argued sound and checked against a safe model or prost by its tests,
# so what a fuzzer can find is a panic, an abort, a hang or unbounded memory, which libFuzzer
# catches on its own (`mesh_message` also checks the hand-written op encoder against prost).
# cargo-fuzz itself is installed from crates.io when missing (once per machine, ~35 s here).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
fuzz_dir=engine/fuzz
seconds="${FUZZ_SECONDS:-30}"
all_targets=(resp_request mesh_message config_text)
targets=("$@")
((${#targets[@]})) || targets=("${all_targets[@]}")

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: installing cargo-fuzz from crates.io" >&2
  cargo install cargo-fuzz --locked
fi

# The flags `cargo fuzz build` and `cargo fuzz run` both get (run rebuilds on any difference).
# cargo-fuzz builds with one codegen unit per crate unless told otherwise, which leaves a core
# idle through the engine crate's codegen: 4 (the workspace's release setting) built the targets
# from cold in 517 s instead of 569 s on 2 cores, with as many inputs run in 20 s (1.18M vs
# 1.33M, 363k vs 332k, 137k vs 108k, the three targets' counts vary that much run to run).
build_flags=(--fuzz-dir "$fuzz_dir" --sanitizer none --codegen-units 4)

scratch="$(mktemp -d /tmp/keymesh-fuzz.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT
t0=$SECONDS
cargo fuzz build "${build_flags[@]}"
echo "fuzz: built the targets in $((SECONDS - t0)) s"
failed=0
for target in "${targets[@]}"; do
  corpus="$fuzz_dir/corpus/$target"
  if [[ ! -d "$corpus" ]]; then
    echo "fuzz: no target '$target' (targets: ${all_targets[*]})" >&2
    failed=1
    continue
  fi
  mkdir -p "$scratch/$target"
  t0=$SECONDS
  # -rss_limit_mb: a parser that allocates what a client merely claims fails here.
  # -timeout: one input that takes 10 s is a hang.
  if cargo fuzz run "${build_flags[@]}" "$target" "$scratch/$target" "$corpus" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      >"$scratch/$target.log" 2>&1; then
    runs="$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$scratch/$target.log" | grep -o '[0-9]*$' || echo '?')"
    echo "fuzz: $target ok: $runs inputs in $((SECONDS - t0)) s (from $(find "$corpus" -type f | wc -l) seeds)"
  else
    echo "fuzz: $target FAILED after $((SECONDS - t0)) s; last lines:" >&2
    tail -40 "$scratch/$target.log" >&2
    failed=1
  fi
done
exit "$failed"
