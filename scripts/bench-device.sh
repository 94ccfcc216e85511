#!/usr/bin/env bash
# Issue 16's two measurements that need a machine with many cores, as one prepared command for
# a lent machine (a few minutes of device time; nothing can be installed there):
#   1. one core each at -P 1 and -P 16, SET and GET, KeyMesh against Redis with a client that
#      is not the limit: `scripts/bench-scaling.sh --threads 1` (server on CPU 0, eight client
#      threads on CPUs 1-8), BENCH_RUNS runs of each, with each server's CPU per request;
#      1,000,000 requests at -P 1, so that a run's quarter-second rounding moves ops/s by ~2.5%,
#      not the ~7% of 400,000;
#   2. the mesh with a core per node: `BENCH_PIN=yes scripts/bench-mesh.sh` MESH_RUNS times (no
#      partition, 200,000 keys for the full sync), Redis's replication measured in each run.
#
#   scripts/bench-device.sh pack        # here: builds, then packs target/device (~35 MB)
#   scripts/bench-device.sh check       # here: the packed binaries and libraries start
#   scripts/bench-device.sh run OUT     # there, with target/device carried: results under OUT
#
# `pack` copies the release binaries (stripped) and this machine's redis-server, redis-cli and
# redis-benchmark with the libraries they load (not the C library's own, which any newer
# system has) into target/device (ignored by git; name it in the device tool's `carry`). `run`
# puts them first on PATH and LD_LIBRARY_PATH, prints what the machine is (kernel, cores, and
# whether `taskset` really pins: under gVisor the kernel reports 4.4.0 and its network stack is
# not Linux's, so its -P 1 figures do not stand for a Linux host), then each stage's output and
# time, as at most six files under OUT (the device tool returns eight; each run's raw figures
# come as one archive). It takes about five
# minutes; each stage has a time limit (330 s, then 80 s a mesh run), so that the whole fits one
# device command of 600 s. Environment: BENCH_RUNS (default 3), MESH_RUNS (default 3).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
pack_dir="$repo_root/target/device"

pack() {
  cargo build --release -p keymesh-engine -p keymesh-e2e
  rm -rf "$pack_dir"
  mkdir -p "$pack_dir/bin" "$pack_dir/lib"
  for b in keymesh-server keymesh-mesh-bench; do
    cp "target/release/$b" "$pack_dir/bin/"
    strip "$pack_dir/bin/$b"
  done
  local tools=() tool lib
  for tool in redis-server redis-cli redis-benchmark; do
    tools+=("$(command -v "$tool" || { echo "bench-device: $tool not found (scripts/install-deps.sh installs it)" >&2; exit 2; })")
  done
  cp -L "${tools[@]}" "$pack_dir/bin/"
  # The libraries the Redis tools load, but not the C library's (libc, libm, the loader):
  # those come from the machine, whose own are newer and must match its loader.
  for lib in $(ldd "${tools[@]}" | awk '$3 ~ /^\// { print $3 }' | sort -u); do
    case "$(basename "$lib")" in
      libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) ;;
      *) cp -L "$lib" "$pack_dir/lib/" ;;
    esac
  done
  { git rev-parse HEAD; redis-server --version; } >"$pack_dir/VERSION"
  echo "bench-device: packed $(du -sh "$pack_dir" | cut -f1) into $pack_dir ($(head -1 "$pack_dir/VERSION"))"
  echo "bench-device: on the lent machine, carry target/device and run: scripts/bench-device.sh run \$OUT"
}

use_pack() {
  [[ -x "$pack_dir/bin/keymesh-server" ]] || { echo "bench-device: $pack_dir is empty: run scripts/bench-device.sh pack first, and carry target/device" >&2; exit 2; }
  export PATH="$pack_dir/bin:$PATH" LD_LIBRARY_PATH="$pack_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export KEYMESH_SERVER="$pack_dir/bin/keymesh-server"
}

# check: each packed server starts and answers, from the pack alone.
check() {
  use_pack
  source "$repo_root/scripts/lib.sh"
  local work port pid kind
  work="$(mktemp -d /tmp/keymesh-bench-device.XXXXXX)"
  for kind in keymesh redis; do
    port="$(free_port)"
    case "$kind" in
      keymesh) keymesh-server --port "$port" --bind 127.0.0.1 --metrics-port 0 --dir "$work" >"$work/$kind.log" 2>&1 & ;;
      redis) redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >"$work/$kind.log" 2>&1 & ;;
    esac
    pid=$!
    await_ping "$pid" "$port" "$work/$kind.log" "bench-device: packed $kind" || { kill "$pid" 2>/dev/null; exit 1; }
    redis-benchmark -p "$port" -t set -n 10000 -r 100000 -q >/dev/null
    echo "bench-device: packed $kind answers ($(redis-cli -p "$port" dbsize) keys after 10,000 SETs)"
    kill "$pid"; wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}

run() {
  local out="${1:?bench-device run needs an output directory}" started=$SECONDS t i
  mkdir -p "$out"
  use_pack
  {
    echo "build: $(head -1 "$pack_dir/VERSION"); $(sed -n 2p "$pack_dir/VERSION")"
    echo "kernel: $(uname -sr); cores: $(nproc); $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null || true)"
    local last=$(($(nproc) - 1))
    echo "taskset -c $last pins to: $(taskset -c "$last" grep Cpus_allowed_list /proc/self/status 2>/dev/null | awk '{ print $2 }') ($last if pinning works)"
  } | tee "$out/machine.txt"
  t=$SECONDS
  BENCH_N="${BENCH_N:-1000000}" BENCH_N_PIPELINED="${BENCH_N_PIPELINED:-2400000}" BENCH_RUNS="${BENCH_RUNS:-3}" \
    timeout 330 scripts/bench-scaling.sh --threads 1 --out "$out/scaling-raw" 2>&1 | tee "$out/scaling.txt" || echo "bench-device: one core each failed"
  # Each run's CSV and CPU figures, as one file (the device tool returns at most eight).
  if [[ -d "$out/scaling-raw" ]]; then
    tar -czf "$out/scaling-raw.tgz" -C "$out" scaling-raw && rm -rf "$out/scaling-raw"
  fi
  echo "bench-device: one core each took $((SECONDS - t)) s"
  for i in $(seq "${MESH_RUNS:-3}"); do
    t=$SECONDS
    BENCH_PIN=yes BENCH_PARTITION=no BENCH_KEYS=200000 timeout 80 scripts/bench-mesh.sh 2>&1 | tee "$out/mesh-$i.txt" || echo "bench-device: mesh run $i failed"
    echo "bench-device: mesh run $i took $((SECONDS - t)) s"
  done
  echo "bench-device: done in $((SECONDS - started)) s"
}

case "${1:-}" in
  pack) pack ;;
  check) check ;;
  run) run "${2:-}" ;;
  *) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
