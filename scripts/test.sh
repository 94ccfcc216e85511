#!/usr/bin/env bash
# Runs every test: installs what the tests need (scripts/install-deps.sh: idempotent and cached,
# about a second once done), builds the workspace, runs the Rust tests (unit, property,
# black-box, control-plane, chart and cluster tests, via cargo-nextest), checks formatting and
# clippy, runs the engine's fuzz targets (FUZZ_SECONDS each, default 20), then drives a freshly
# started keymesh-server with unmodified clients (redis-py over RESP2 and RESP3, redis-cli) and
# with Redis's own Tcl suite.
#
#   scripts/test.sh [--no-cargo] [--no-install]
#
# --no-cargo skips the cargo stages and tests an already built binary ($KEYMESH_SERVER, default
# target/release/keymesh-server); --no-install skips scripts/install-deps.sh. Each stage is
# timed; a failed stage does not stop the later ones (except a failed install or build), and the
# exit status is non-zero if any stage failed. The last line, `N passed, N failed`, counts the
# non-cargo stages. No server is left running. Run as root on Debian bookworm (the install step
# uses apt-get; the network-namespace tests skip without root).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
run_cargo=1
run_install=1
while (($#)); do
  case "$1" in
    --no-cargo) run_cargo=0; shift ;;
    --no-install) run_install=0; shift ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done

target_dir="${CARGO_TARGET_DIR:-$repo_root/target}"
export KEYMESH_SERVER="${KEYMESH_SERVER:-$target_dir/release/keymesh-server}"
# Where the control-plane tests find the binaries install-deps.sh cached.
export KEYMESH_CACHE="${KEYMESH_CACHE:-/var/cache/keymesh}"

server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then
    kill "$server_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

summary=()
cargo_failed=0
clients_passed=0
clients_failed=0

# stage KIND NAME COMMAND...: runs one stage, times it, records the result.
# KIND is "cargo" or "clients" (the latter are the ones the final line counts).
stage() {
  local kind="$1" name="$2"; shift 2
  local t0=$SECONDS rc=0
  echo
  echo "==> $name"
  "$@" || rc=$?
  local secs=$((SECONDS - t0)) result=ok
  ((rc == 0)) || result="FAILED (exit $rc)"
  echo "<== $name: $result in ${secs}s"
  summary+=("$(printf '%-34s %-18s %5ss' "$name" "$result" "$secs")")
  if [[ "$kind" == cargo ]]; then
    ((rc == 0)) || cargo_failed=1
  elif ((rc == 0)); then
    clients_passed=$((clients_passed + 1))
  else
    clients_failed=$((clients_failed + 1))
  fi
  return "$rc"
}

print_summary() {
  echo
  echo "Summary:"
  for line in "${summary[@]}"; do echo "  $line"; done
  echo "$clients_passed passed, $clients_failed failed"
}

if ((run_install)); then
  if ! stage cargo "install deps" scripts/install-deps.sh; then
    print_summary
    exit 1
  fi
  # rustup/cargo install put tools in ~/.cargo/bin, which a fresh root shell may lack.
  if [[ -d "$HOME/.cargo/bin" && ":$PATH:" != *":$HOME/.cargo/bin:"* ]]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
fi

if ((run_cargo)); then
  locked=()
  [[ -f Cargo.lock ]] && locked=(--locked)
  # A dev-dependency that changes a shared crate's features makes the test build compile the
  # tree a second time (minutes): caught here, before either build.
  stage cargo "tests build the binaries' dependencies alike" scripts/check-test-features.sh || true
  if ! stage cargo "cargo build --release" cargo build --release --workspace "${locked[@]}"; then
    print_summary
    exit 1
  fi
  # The upgrade tests roll clusters to a second engine build that reports another version.
  if ! stage cargo "build the next engine (upgrade tests)" scripts/build-next-engine.sh; then
    print_summary
    exit 1
  fi
  if cargo nextest --version >/dev/null 2>&1; then
    stage cargo "cargo nextest run --release" cargo nextest run --workspace --release --no-fail-fast "${locked[@]}" || true
  else
    echo "test.sh: cargo-nextest is not installed; running cargo test instead" >&2
    stage cargo "cargo test --release" cargo test --workspace --release "${locked[@]}" || true
  fi
  stage cargo "cargo fmt --check" cargo fmt --all -- --check || true
  # COMMAND's metadata is generated from Redis 7.0's command definitions: still in step?
  stage cargo "command metadata up to date (scripts/gen-command-meta.py --check)" python3 scripts/gen-command-meta.py --check || true
  stage cargo "cargo clippy -D warnings" cargo clippy --all-targets --release "${locked[@]}" -- -D warnings || true
  # The fuzz targets (engine/fuzz), each for a bounded time, after their own build.
  export FUZZ_SECONDS="${FUZZ_SECONDS:-20}"
  stage cargo "fuzz ($FUZZ_SECONDS s a target)" scripts/fuzz.sh || true
fi

if [[ ! -x "$KEYMESH_SERVER" ]]; then
  echo "test.sh: no keymesh-server binary at $KEYMESH_SERVER" >&2
  print_summary
  exit 1
fi

# shellcheck source=scripts/lib.sh
source "$repo_root/scripts/lib.sh"

server_log="$(mktemp /tmp/keymesh-test-server.XXXXXX.log)"
start_keymesh() {
  cleanup
  port="$(free_port)"
  # --metrics-port 0: no HTTP endpoint is needed, and the derived one (client port + 2742) could
  # be taken by another process on this machine.
  "$KEYMESH_SERVER" --port "$port" --bind 127.0.0.1 --server-threads 2 --metrics-port 0 >"$server_log" 2>&1 &
  server_pid=$!
  await_ping "$server_pid" "$port" "$server_log" "test.sh: keymesh-server" || { server_pid=""; return 1; }
}

# Each client workload gets a fresh server, so one's leftovers cannot fail the other.
client_stage() {
  start_keymesh || return 1
  local rc=0
  "$@" 127.0.0.1 "$port" || rc=$?
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "test.sh: keymesh-server died during the run; log:" >&2; tail -30 "$server_log" >&2
    rc=1
  fi
  cleanup
  return "$rc"
}

stage clients "redis-py workload (RESP2, RESP3)" client_stage python3 e2e/clients/web_workload.py || true
stage clients "redis-cli workload" client_stage e2e/clients/redis_cli_workload.sh || true
# Starts its own 3-node mesh: node-redis's client-side cache on one node, writes on the others.
stage clients "node-redis client-side cache across a 3-node mesh" node e2e/clients/node/client_cache_mesh.mjs "$KEYMESH_SERVER" || true
stage clients "Redis Tcl suite (external mode)" scripts/redis-tcl-suite.sh --server keymesh || true
rm -f "$server_log"

print_summary
((cargo_failed == 0 && clients_failed == 0))
