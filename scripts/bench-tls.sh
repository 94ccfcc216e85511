#!/usr/bin/env bash
# The TLS benchmark (not a test): what TLS costs keymesh-server and Debian's redis-server on
# this machine, side by side in the same run, one core each: the server pinned to CPU 0 (one
# worker thread; redis-server's default single thread), redis-benchmark pinned to CPU 1
# (--threads 1 -c 50 -r 1000000 -d 100). Both servers listen on a plain port and a TLS port
# (tls-auth-clients no) with the same certificate, made here with openssl (ECDSA P-256).
#
#   scripts/bench-tls.sh [--out DIR]
#
# Prints, for SET and GET at -P 1 and -P 16: ops/s of each server in plain text and over TLS,
# TLS/plain for each, and keymesh TLS / redis TLS. Each figure is the median of BENCH_RUNS runs
# (default 3) of BENCH_N requests (default 200000).
# Environment: KEYMESH_SERVER (default target/release/keymesh-server), BENCH_N, BENCH_RUNS.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench_n="${BENCH_N:-200000}"
runs="${BENCH_RUNS:-3}"
out=""
while (($#)); do
  case "$1" in
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-tls: unknown argument: $1" >&2; exit 2 ;;
  esac
done
for tool in redis-server redis-benchmark openssl taskset python3; do
  command -v "$tool" >/dev/null || { echo "bench-tls: $tool not found (run scripts/install-deps.sh)" >&2; exit 2; }
done
keymesh_bin="${KEYMESH_SERVER:-$repo_root/target/release/keymesh-server}"
[[ -x "$keymesh_bin" ]] || { echo "bench-tls: $keymesh_bin not found (cargo build --release)" >&2; exit 2; }

work="$(mktemp -d /tmp/keymesh-bench-tls.XXXXXX)"
out="${out:-$work}"
mkdir -p "$out"
server_pid=""
cleanup() {
  [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# One CA and a certificate for 127.0.0.1/localhost, as both servers use.
(
  cd "$work"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt -subj /CN=bench-ca -days 2 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key -out server.csr -subj /CN=localhost 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >ext.cnf
  openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 1 -extfile ext.cnf 2>/dev/null
)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_ready() {
  for _ in $(seq 100); do
    redis-cli -p "$1" PING >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "bench-tls: server on $1 did not answer; its log:" >&2
  cat "$work/server.log" >&2
  exit 1
}

tls_args=(--tls-cert-file "$work/server.crt" --tls-key-file "$work/server.key" --tls-ca-cert-file "$work/ca.crt" --tls-auth-clients no)

# In the work directory, which holds no dump.rdb: one started where a dump.rdb lies would load it.
start() { # kind plain-port tls-port
  case "$1" in
    # An explicit mesh port: the derived one (port + 10000) may pass 65535 for a free port.
    keymesh) taskset -c 0 "$keymesh_bin" --port "$2" --tls-port "$3" "${tls_args[@]}" --bind 127.0.0.1 --server-threads 1 --metrics-port 0 --mesh-port "$(free_port)" --dir "$work" >"$work/server.log" 2>&1 & ;;
    redis) taskset -c 0 redis-server --port "$2" --tls-port "$3" "${tls_args[@]}" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >"$work/server.log" 2>&1 & ;;
  esac
  server_pid=$!
  wait_ready "$2"
}

stop() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

# ops/s of one redis-benchmark run: test, pipeline, port, extra args.
measure() {
  local test=$1 pipeline=$2 port=$3
  shift 3
  taskset -c 1 redis-benchmark -p "$port" "$@" -t "$test" -n "$bench_n" -r 1000000 -d 100 -c 50 -P "$pipeline" --threads 1 -q --csv 2>/dev/null |
    python3 -c 'import csv,sys; rows=[r for r in csv.reader(sys.stdin) if r and r[0] != "test"]; print(rows[0][1] if rows else "0")'
}

median() { python3 -c 'import statistics,sys; print(round(statistics.median(float(x) for x in sys.argv[1:])))' "$@"; }

results="$out/bench-tls.csv"
echo "server,test,pipeline,mode,ops" >"$results"
for kind in keymesh redis; do
  plain=$(free_port)
  tls=$(free_port)
  start "$kind" "$plain" "$tls"
  for test in set get; do
    for pipeline in 1 16; do
      for mode in plain tls; do
        values=()
        for _ in $(seq "$runs"); do
          if [[ $mode == plain ]]; then
            values+=("$(measure "$test" "$pipeline" "$plain")")
          else
            values+=("$(measure "$test" "$pipeline" "$tls" --tls --cacert "$work/ca.crt")")
          fi
        done
        echo "$kind,$test,$pipeline,$mode,$(median "${values[@]}")" >>"$results"
      done
    done
  done
  stop
done

python3 - "$results" <<'PY'
import csv, sys
rows = {(r["server"], r["test"], r["pipeline"], r["mode"]): float(r["ops"]) for r in csv.DictReader(open(sys.argv[1]))}
print("TLS cost, one core each (server on CPU 0, client on CPU 1), ops/s, median of runs")
print(f"{'test':<6}{'-P':>4}{'keymesh':>11}{'km TLS':>11}{'TLS/plain':>10}{'redis':>11}{'redis TLS':>11}{'TLS/plain':>10}{'km TLS/redis TLS':>18}")
for test in ("set", "get"):
    for p in ("1", "16"):
        kp, kt = rows[("keymesh", test, p, "plain")], rows[("keymesh", test, p, "tls")]
        rp, rt = rows[("redis", test, p, "plain")], rows[("redis", test, p, "tls")]
        ratio = lambda a, b: f"{a / b:.2f}x" if b else "n/a"
        print(f"{test.upper():<6}{p:>4}{kp:>11,.0f}{kt:>11,.0f}{ratio(kt, kp):>10}{rp:>11,.0f}{rt:>11,.0f}{ratio(rt, rp):>10}{ratio(kt, rt):>18}")
PY
