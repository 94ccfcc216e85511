#!/usr/bin/env bash
# The benchmark (not a test): keymesh-server against Debian's redis-server on this machine, one
# server at a time.
#
#   1. Headline, one core each (the fair engine comparison on a small machine): the server is
#      pinned to CPU 0 (keymesh-server with one worker thread, redis-server with its default
#      single thread), redis-benchmark with one thread pinned to CPU 1:
#      -t set,get,incr,lpush,hset,zadd,sadd,spop -n N -r 1000000 -d 100 -c 50 -q --csv at -P 1 and -P 16,
#      BENCH_RUNS runs (default 3) against a fresh server of each kind, alternating between the
#      two servers; per command the run with the median ops/s is reported with its p50 and p99
#      latency. Each run also adds random elements to one HyperLogLog (`PFADD bench:hll
#      element:__rand_int__`, same -n, -r, -c and -P: the unique-visitors pattern, every client
#      on one key), reported as PFADD, and runs a small Lua script by its SHA1 (`EVALSHA <sha> 1
#      bench:counter:__rand_int__`, the script `return redis.call('INCR', KEYS[1])`, loaded with
#      SCRIPT LOAD first), reported as EVALSHA.
#   2. Second reference, two threads each, unpinned: keymesh-server --server-threads 2 against
#      redis-server --io-threads 2, redis-benchmark --threads 2, one run (on two cores the
#      client competes with both servers' threads, and Redis's I/O thread spins: flattering to
#      KeyMesh, kept for continuity with the earlier numbers).
#   3. Memory: a fresh server of each kind is loaded with exactly BENCH_KEYS distinct keys
#      (default 1,000,000) with 100-byte values through `redis-cli --pipe`; DBSIZE is checked
#      and the process's VmRSS is read from /proc/PID/status. Then again on fresh servers with
#      every key given a TTL (`SET … EX 3600`: a cache's usual write), where each server also
#      keeps the key in its deadline index.
# Prints ops/s, p50/p99 (ms), the server's CPU per request (user + system, /proc/PID/stat, over
# that command's run) and the ratios keymesh / redis (ops/s: higher is better; CPU: lower is
# better, and the one to read at -P 1, where the one-thread client saturates before either
# server) for each, then both RSS values and their ratio (keymesh / redis, lower is better).
#
#   scripts/bench.sh [--self-test] [--out DIR]
#
# Environment: KEYMESH_SERVER (default target/release/keymesh-server), BENCH_N (requests per
# test, default 400000), BENCH_RUNS (default 3), BENCH_KEYS (keys loaded for the RSS
# measurement, default 1000000). Needs taskset and at least two CPUs.
# --self-test uses redis-server in place of keymesh-server (through a wrapper that maps
# --server-threads to --io-threads), to check this script end to end without the engine;
# e.g. `BENCH_N=20000 BENCH_RUNS=1 BENCH_KEYS=50000 scripts/bench.sh --self-test`.
# Notes: with --threads 2, redis-benchmark 7.0's elapsed times come out in steps of about
# 0.5 s, so a small BENCH_N gives quantized ops/s in the second reference; fit only to check
# that the script runs.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench_n="${BENCH_N:-400000}"
bench_runs="${BENCH_RUNS:-3}"
bench_keys="${BENCH_KEYS:-1000000}"
tests="set,get,incr,lpush,hset,zadd,sadd,spop"
pfadd_test="PFADD bench:hll element:__rand_int__"
evalsha_script="return redis.call('INCR', KEYS[1])"
evalsha_sha="$(printf '%s' "$evalsha_script" | sha1sum | cut -d' ' -f1)"
evalsha_test="EVALSHA $evalsha_sha 1 bench:counter:__rand_int__"
self_test=0
out=""

while (($#)); do
  case "$1" in
    --self-test) self_test=1; shift ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,38p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench: unknown argument: $1" >&2; exit 2 ;;
  esac
done

for tool in redis-server redis-cli redis-benchmark python3 taskset; do
  command -v "$tool" >/dev/null || { echo "bench: $tool not found (run scripts/install-deps.sh)" >&2; exit 2; }
done

if (($(nproc) < 2)); then
  echo "bench: needs two CPUs (server on CPU 0, client on CPU 1); this machine has $(nproc)" >&2; exit 2
fi

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
    stop_pid "$server_pid"
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
#   keymesh-1core, redis-1core: pinned to CPU 0, one thread (Redis's default: one I/O thread).
#   keymesh-2t, redis-2t: unpinned, two threads (--server-threads 2, --io-threads 2).
start_server() {
  local kind="$1" log="$work/$1-server.$SECONDS.log"
  port="$(free_port)"
  # Each server in an empty directory: one started where a dump.rdb lies would load it.
  mkdir -p "$work/redis-dir" "$work/keymesh-dir"
  local redis=(redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work/redis-dir")
  case "$kind" in
    keymesh-1core) taskset -c 0 "$keymesh_bin" --port "$port" --bind 127.0.0.1 --server-threads 1 --metrics-port 0 --dir "$work/keymesh-dir" >"$log" 2>&1 & ;;
    redis-1core) taskset -c 0 "${redis[@]}" >"$log" 2>&1 & ;;
    keymesh-2t) "$keymesh_bin" --port "$port" --bind 127.0.0.1 --server-threads 2 --metrics-port 0 --dir "$work/keymesh-dir" >"$log" 2>&1 & ;;
    redis-2t) "${redis[@]}" --io-threads 2 >"$log" 2>&1 & ;;
    *) echo "bench: unknown server kind $kind" >&2; exit 2 ;;
  esac
  server_pid=$!
  await_ping "$server_pid" "$port" "$log" "bench: $kind server" || { stop_server; exit 1; }
}

# cpu_ticks: user + system clock ticks the server has used so far.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$server_pid/stat"; }
# note_cpu NAME T0 FILE: appends "NAME microseconds" (the server's CPU per request since tick T0,
# over $bench_n requests) to FILE.
note_cpu() {
  awk -v n="$1" -v d="$(($(cpu_ticks) - $2))" -v hz="$(getconf CLK_TCK)" -v r="$bench_n" \
    'BEGIN { printf "%s %.3f\n", n, d / hz / r * 1e6 }' >>"$3"
}

# throughput KIND PIPELINE RUN -> $out/KIND-P<PIPELINE>-<RUN>.csv, and the server's CPU per
# request for each command -> $out/KIND-P<PIPELINE>-<RUN>.cpu ("COMMAND microseconds" lines):
# what a request costs the server whether or not it is the bottleneck (at -P 1 on two cores the
# one-thread client saturates first, so ops/s alone reads parity). One command per
# redis-benchmark run, so that each has its own CPU figure. One-core kinds run the client with
# one thread pinned to CPU 1; two-thread kinds with --threads 2, unpinned.
throughput() {
  local kind="$1" p="$2" run="$3" csv="$out/$1-P$2-$3.csv" cpu="$out/$1-P$2-$3.cpu"
  local client=(redis-benchmark --threads 2)
  [[ "$kind" == *-1core ]] && client=(taskset -c 1 redis-benchmark --threads 1)
  echo "bench: $kind -P $p run $run: redis-benchmark -n $bench_n ..." >&2
  local t0 t
  : >"$csv"; : >"$cpu"
  for t in ${tests//,/ }; do
    t0="$(cpu_ticks)"
    # The CSV header once, from the first command's run.
    "${client[@]}" -h 127.0.0.1 -p "$port" -t "$t" -n "$bench_n" -r 1000000 -d 100 -c 50 \
      -q --csv -P "$p" | if [[ -s "$csv" ]]; then tail -n +2; else cat; fi >>"$csv"
    note_cpu "${t^^}" "$t0" "$cpu"
  done
  if ! grep -q '^"SET",' "$csv"; then
    echo "bench: redis-benchmark produced no results against $kind:" >&2; cat "$csv" >&2; exit 1
  fi
  t0="$(cpu_ticks)"
  # shellcheck disable=SC2086 # the PFADD command line is split into its arguments on purpose
  "${client[@]}" -h 127.0.0.1 -p "$port" -n "$bench_n" -r 1000000 -c 50 -q --csv -P "$p" \
    $pfadd_test | grep '^"PFADD ' >>"$csv" || {
    echo "bench: redis-benchmark produced no PFADD result against $kind" >&2; exit 1
  }
  note_cpu PFADD "$t0" "$cpu"
  local loaded
  loaded="$(redis-cli -h 127.0.0.1 -p "$port" SCRIPT LOAD "$evalsha_script")"
  [[ "$loaded" == "$evalsha_sha" ]] || { echo "bench: SCRIPT LOAD answered '$loaded' against $kind, expected $evalsha_sha" >&2; exit 1; }
  t0="$(cpu_ticks)"
  # shellcheck disable=SC2086 # as above
  "${client[@]}" -h 127.0.0.1 -p "$port" -n "$bench_n" -r 1000000 -c 50 -q --csv -P "$p" \
    $evalsha_test | grep '^"EVALSHA ' >>"$csv" || {
    echo "bench: redis-benchmark produced no EVALSHA result against $kind" >&2; exit 1
  }
  note_cpu EVALSHA "$t0" "$cpu"
}

# resp_load COUNT [ttl]: RESP for COUNT SETs of distinct keys with 100-byte values, on stdout;
# with `ttl`, each with EX 3600.
resp_load() {
  python3 - "$1" "${2:-}" <<'EOF'
import sys
n = int(sys.argv[1])
ttl = sys.argv[2] == "ttl"
w = sys.stdout.buffer.write
chunk = []
for i in range(n):
    key = b"key:%010d" % i
    val = (b"%010d" % i) * 10
    if ttl:
        chunk.append(b"*5\r\n$3\r\nSET\r\n$14\r\n%s\r\n$100\r\n%s\r\n$2\r\nEX\r\n$4\r\n3600\r\n" % (key, val))
    else:
        chunk.append(b"*3\r\n$3\r\nSET\r\n$14\r\n%s\r\n$100\r\n%s\r\n" % (key, val))
    if len(chunk) == 10000:
        w(b"".join(chunk)); chunk = []
w(b"".join(chunk))
EOF
}

# memory KIND [ttl] -> $out/KIND-rss.txt or $out/KIND-ttl-rss.txt (VmRSS in kB)
memory() {
  local kind="$1" ttl="${2:-}"
  echo "bench: $kind: loading $bench_keys keys of 100 bytes${ttl:+ with a TTL} ..." >&2
  local before
  before="$(awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status")"
  local pipe_out
  pipe_out="$(resp_load "$bench_keys" "$ttl" | redis-cli -h 127.0.0.1 -p "$port" --pipe 2>&1)"
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
  echo "$rss $before" >"$out/$kind${ttl:+-ttl}-rss.txt"
}

started=$SECONDS
# The two servers' runs alternate (keymesh, redis, keymesh, ...), so a change in the host's speed
# during the benchmark (a shared VM's neighbours) falls on both sides rather than on one.
for run in $(seq "$bench_runs"); do
  for kind in keymesh-1core redis-1core; do
    start_server "$kind"
    throughput "$kind" 1 "$run"
    throughput "$kind" 16 "$run"
    stop_server
  done
done
for kind in keymesh-2t redis-2t; do
  start_server "$kind"
  throughput "$kind" 1 1
  throughput "$kind" 16 1
  stop_server
done
for ttl in "" ttl; do
  for kind in keymesh-1core redis-1core; do
    start_server "$kind"
    memory "${kind%-1core}" "$ttl"
    stop_server
  done
done

{
  echo
  if ((self_test)); then echo "(SELF-TEST: the 'keymesh' columns are redis-server too)"; fi
  python3 - "$out" "$tests" "$bench_n" "$bench_runs" "$pfadd_test" "$evalsha_test" <<'PY'
import csv, sys
out, tests, n, runs, pfadd, evalsha = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
custom = {"PFADD": pfadd, "EVALSHA": evalsha}

def rows(kind, p, run):
    with open(f"{out}/{kind}-P{p}-{run}.csv") as f:
        found = {r["test"]: r for r in csv.DictReader(f)}
    # The server's CPU microseconds per request, per command (throughput(), "COMMAND us" lines).
    with open(f"{out}/{kind}-P{p}-{run}.cpu") as f:
        cpu = dict(line.split() for line in f if line.strip())
    for t, r in found.items():
        short = next((k for k, v in custom.items() if v == t), t)
        r["cpu_us"] = float(cpu.get(short, "nan"))
    return found

def median_run(kind, p, test, nruns):
    # The run whose ops/s is the median (the lower middle one for an even count), with its latencies.
    found = [rows(kind, p, r).get(test) for r in range(1, nruns + 1)]
    found = sorted((r for r in found if r), key=lambda r: float(r["rps"]))
    return found[(len(found) - 1) // 2] if found else None

def table(title, k, r, nruns):
    print(title)
    print(f"{'-P':<4}{'command':<8}{'keymesh ops/s':>14}{'p50':>7}{'p99':>7}{'CPU us':>8}{'redis ops/s':>14}{'p50':>7}{'p99':>7}{'CPU us':>8}{'ratio':>7}{'CPU ratio':>10}")
    for p in (1, 16):
        for t in tests.upper().split(",") + list(custom):
            name = custom.get(t, t)
            a, b = median_run(k, p, name, nruns), median_run(r, p, name, nruns)
            if not a or not b:
                print(f"{p:<4}{t:<8}{'n/a':>14}")
                continue
            ratio = float(a["rps"]) / float(b["rps"])
            cpu_ratio = a["cpu_us"] / b["cpu_us"] if b["cpu_us"] else float("nan")
            print(f"{p:<4}{t:<8}{float(a['rps']):>14,.0f}{a['p50_latency_ms']:>7}{a['p99_latency_ms']:>7}{a['cpu_us']:>8.2f}"
                  f"{float(b['rps']):>14,.0f}{b['p50_latency_ms']:>7}{b['p99_latency_ms']:>7}{b['cpu_us']:>8.2f}{ratio:>6.2f}x{cpu_ratio:>9.2f}x")
    print()

table(f"One core each (headline): server on CPU 0 with one thread, redis-benchmark --threads 1 on CPU 1;\n"
      f"-t {tests} -n {n} -r 1000000 -d 100 -c 50 (PFADD: {pfadd}; EVALSHA: {evalsha}); median of {runs} runs\n"
      f"(latencies in ms, of that run; CPU us: the server's user + system CPU per request in that run;\n"
      f"CPU ratio: keymesh's over redis's, lower is better: what a request costs when the client is not the limit)",
      "keymesh-1core", "redis-1core", runs)
table("Second reference, two threads each, unpinned: keymesh --server-threads 2, redis --io-threads 2,\n"
      "redis-benchmark --threads 2; one run", "keymesh-2t", "redis-2t", 1)
PY
  for ttl in "" ttl; do
    read -r k_rss k_idle <"$out/keymesh${ttl:+-ttl}-rss.txt"
    read -r r_rss r_idle <"$out/redis${ttl:+-ttl}-rss.txt"
    echo "Memory: VmRSS after loading $bench_keys distinct keys with 100-byte values${ttl:+, each with a TTL (SET … EX 3600)} (idle RSS before), one core each"
    printf '%-10s %14s %14s\n' server "RSS MiB" "idle MiB"
    printf '%-10s %14.1f %14.1f\n' keymesh "$(awk -v v="$k_rss" 'BEGIN{print v/1024}')" "$(awk -v v="$k_idle" 'BEGIN{print v/1024}')"
    printf '%-10s %14.1f %14.1f\n' redis "$(awk -v v="$r_rss" 'BEGIN{print v/1024}')" "$(awk -v v="$r_idle" 'BEGIN{print v/1024}')"
    printf 'RSS ratio keymesh/redis%s: %s (lower is better)\n' "${ttl:+ with a TTL}" "$(awk -v k="$k_rss" -v r="$r_rss" 'BEGIN { printf "%.2f", k / r }')"
  done
  echo "bench: done in $((SECONDS - started)) s; raw results in $out"
} | tee "$out/summary.txt"
