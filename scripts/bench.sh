#!/usr/bin/env bash
# The benchmark (not a test): keymesh-server against Debian's redis-server on this machine, one
# server at a time, both with two threads.
#
#   1. Throughput: redis-benchmark -t set,get,incr,lpush,hset,zadd -n N -r 1000000 -d 100 -c 50
#      --threads 2 -q --csv, at -P 1 and at -P 16, against a fresh server of each kind.
#   2. Memory: a fresh server of each kind is loaded with exactly BENCH_KEYS distinct keys
#      (default 1,000,000) with 100-byte values through `redis-cli --pipe`; DBSIZE is checked
#      and the process's VmRSS is read from /proc/PID/status.
# Prints, for both -P values, command / keymesh ops/s / redis ops/s / ratio (keymesh / redis,
# higher is better), then both RSS values and their ratio (keymesh / redis, lower is better).
#
#   scripts/bench.sh [--self-test] [--out DIR]
#
# Environment: KEYMESH_SERVER (default target/release/keymesh-server, started with
# `--port P --bind 127.0.0.1 --server-threads 2 --metrics-port 0`), BENCH_N (requests per test, default 1000000),
# BENCH_KEYS (keys loaded for the RSS measurement, default 1000000).
# --self-test uses redis-server in place of keymesh-server (through a wrapper that maps
# --server-threads to --io-threads), to check this script end to end without the engine;
# e.g. `BENCH_N=20000 BENCH_KEYS=50000 scripts/bench.sh --self-test`.
# Notes: on a 2-core machine the benchmark client's two threads compete with the server's two.
# With --threads, redis-benchmark 7.0's elapsed times come out in steps of about 0.5 s (observed:
# 20000 requests read ~40k ops/s at -P 1 and ~80k at -P 16, 200000 read ~398k), so a small
# BENCH_N gives quantized ops/s, fit only to check that the script runs. Keep 1000000 to measure.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench_n="${BENCH_N:-1000000}"
bench_keys="${BENCH_KEYS:-1000000}"
tests="set,get,incr,lpush,hset,zadd"
self_test=0
out=""

while (($#)); do
  case "$1" in
    --self-test) self_test=1; shift ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench: unknown argument: $1" >&2; exit 2 ;;
  esac
done

for tool in redis-server redis-cli redis-benchmark python3; do
  command -v "$tool" >/dev/null || { echo "bench: $tool not found (run scripts/install-deps.sh)" >&2; exit 2; }
done

work="$(mktemp -d /tmp/keymesh-bench.XXXXXX)"
out="${out:-$work}"
mkdir -p "$out"
server_pid=""
port=""

if ((self_test)); then
  keymesh_bin="$work/fake-keymesh-server"
  cat >"$keymesh_bin" <<'EOF'
#!/usr/bin/env bash
# Self-test stand-in for keymesh-server: redis-server with keymesh-server's flags mapped.
args=()
while (($#)); do
  case "$1" in
    --server-threads) args+=(--io-threads "$2"); shift 2 ;;
    --metrics-port|--mesh-port) shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
exec redis-server "${args[@]}" --save '' --appendonly no
EOF
  chmod +x "$keymesh_bin"
else
  keymesh_bin="${KEYMESH_SERVER:-$repo_root/target/release/keymesh-server}"
  [[ "$keymesh_bin" = /* ]] || keymesh_bin="$repo_root/$keymesh_bin"
  [[ -x "$keymesh_bin" ]] || { echo "bench: $keymesh_bin not found (build it, set KEYMESH_SERVER, or use --self-test)" >&2; exit 2; }
fi

stop_server() {
  if [[ -n "$server_pid" ]]; then
    kill "$server_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
cleanup() {
  stop_server
  if [[ "$out" != "$work" ]]; then rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck source=scripts/lib.sh
source "$repo_root/scripts/lib.sh"

# start_server KIND: a fresh server on a free loopback port; sets server_pid and port.
start_server() {
  local kind="$1" log="$work/$1-server.$SECONDS.log"
  port="$(free_port)"
  case "$kind" in
    keymesh) "$keymesh_bin" --port "$port" --bind 127.0.0.1 --server-threads 2 --metrics-port 0 \
      >"$log" 2>&1 & ;;
    redis)
      mkdir -p "$work/redis-dir"
      redis-server --port "$port" --bind 127.0.0.1 --io-threads 2 --save '' --appendonly no \
        --dir "$work/redis-dir" >"$log" 2>&1 & ;;
    redis-io1)
      # Redis's default (one I/O thread): on a 2-core machine io-threads 2 spins a core that the
      # benchmark client needs, so this is the stronger reference; both are printed.
      mkdir -p "$work/redis-dir"
      redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$work/redis-dir" >"$log" 2>&1 & ;;
  esac
  server_pid=$!
  await_ping "$server_pid" "$port" "$log" "bench: $kind server" || { stop_server; exit 1; }
}

# throughput KIND PIPELINE -> $out/KIND-P<PIPELINE>.csv
throughput() {
  local kind="$1" p="$2" csv="$out/$1-P$2.csv"
  echo "bench: $kind -P $p: redis-benchmark -n $bench_n ..." >&2
  redis-benchmark -h 127.0.0.1 -p "$port" -t "$tests" -n "$bench_n" -r 1000000 -d 100 -c 50 \
    --threads 2 -q --csv -P "$p" >"$csv"
  if ! grep -q '^"SET",' "$csv"; then
    echo "bench: redis-benchmark produced no results against $kind:" >&2; cat "$csv" >&2; exit 1
  fi
}

# resp_load COUNT: RESP for COUNT SETs of distinct keys with 100-byte values, on stdout.
resp_load() {
  python3 - "$1" <<'EOF'
import sys
n = int(sys.argv[1])
w = sys.stdout.buffer.write
chunk = []
for i in range(n):
    key = b"key:%010d" % i
    val = (b"%010d" % i) * 10
    chunk.append(b"*3\r\n$3\r\nSET\r\n$14\r\n%s\r\n$100\r\n%s\r\n" % (key, val))
    if len(chunk) == 10000:
        w(b"".join(chunk)); chunk = []
w(b"".join(chunk))
EOF
}

# memory KIND -> $out/KIND-rss.txt (VmRSS in kB)
memory() {
  local kind="$1"
  echo "bench: $kind: loading $bench_keys keys of 100 bytes ..." >&2
  local before
  before="$(awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status")"
  local pipe_out
  pipe_out="$(resp_load "$bench_keys" | redis-cli -h 127.0.0.1 -p "$port" --pipe 2>&1)"
  if ! grep -q "^errors: 0, replies: $bench_keys\$" <<<"$pipe_out"; then
    echo "bench: loading $kind failed:" >&2; echo "$pipe_out" >&2; exit 1
  fi
  local dbsize
  dbsize="$(redis-cli -h 127.0.0.1 -p "$port" dbsize)"
  if [[ "$dbsize" != "$bench_keys" ]]; then
    echo "bench: $kind holds $dbsize keys after loading $bench_keys" >&2; exit 1
  fi
  sleep 1
  local rss
  rss="$(awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status")"
  echo "$rss $before" >"$out/$kind-rss.txt"
}

started=$SECONDS
for kind in keymesh redis redis-io1; do
  start_server "$kind"
  throughput "$kind" 1
  throughput "$kind" 16
  stop_server
  [[ "$kind" == redis-io1 ]] && continue
  start_server "$kind"
  memory "$kind"
  stop_server
done

# rps FILE TEST: the rps column of one test in a redis-benchmark CSV.
rps() { awk -F'"' -v t="$2" '$2 == t { print $4 }' "$1"; }

{
  echo
  echo "Throughput: redis-benchmark -t $tests -n $bench_n -r 1000000 -d 100 -c 50 --threads 2"
  if ((self_test)); then echo "(SELF-TEST: the 'keymesh' column is redis-server too)"; fi
  echo "(redis = --io-threads 2, as specified; redis io1 = Redis's default single I/O thread)"
  printf '%-4s %-8s %14s %14s %7s %14s %7s\n' "-P" command "keymesh ops/s" "redis ops/s" ratio "redis io1" ratio
  ratio_of() { awk -v k="$1" -v r="$2" 'BEGIN { if (r > 0 && k != "") printf "%.2f", k / r; else print "n/a" }'; }
  for p in 1 16; do
    for t in SET GET INCR LPUSH HSET ZADD; do
      k="$(rps "$out/keymesh-P$p.csv" "$t")"; r="$(rps "$out/redis-P$p.csv" "$t")"; r1="$(rps "$out/redis-io1-P$p.csv" "$t")"
      printf '%-4s %-8s %14s %14s %7s %14s %7s\n' "$p" "$t" "${k:-n/a}" "${r:-n/a}" "$(ratio_of "$k" "$r")" "${r1:-n/a}" "$(ratio_of "$k" "$r1")"
    done
  done
  echo
  read -r k_rss k_idle <"$out/keymesh-rss.txt"
  read -r r_rss r_idle <"$out/redis-rss.txt"
  echo "Memory: VmRSS after loading $bench_keys distinct keys with 100-byte values (idle RSS before)"
  printf '%-10s %14s %14s\n' server "RSS MiB" "idle MiB"
  printf '%-10s %14.1f %14.1f\n' keymesh "$(awk -v v="$k_rss" 'BEGIN{print v/1024}')" "$(awk -v v="$k_idle" 'BEGIN{print v/1024}')"
  printf '%-10s %14.1f %14.1f\n' redis "$(awk -v v="$r_rss" 'BEGIN{print v/1024}')" "$(awk -v v="$r_idle" 'BEGIN{print v/1024}')"
  printf 'RSS ratio keymesh/redis: %s (lower is better)\n' "$(awk -v k="$k_rss" -v r="$r_rss" 'BEGIN { printf "%.2f", k / r }')"
  echo "bench: done in $((SECONDS - started)) s; raw results in $out"
} | tee "$out/summary.txt"
