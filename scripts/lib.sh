# Shell helpers shared by the scripts; source it, do not run it.

# free_port: prints a loopback port whose +10000 neighbour (an engine's default mesh port) is
# free too.
free_port() {
  python3 - <<'PY'
import socket
for _ in range(200):
    with socket.socket() as a:
        a.bind(("127.0.0.1", 0))
        port = a.getsockname()[1]
        if port + 10000 > 65535:
            continue
        try:
            with socket.socket() as b:
                b.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
    print(port)
    break
else:
    raise SystemExit("no free port pair")
PY
}

# await_ping PID PORT LOG WHAT: waits up to 10 s for the server PID on 127.0.0.1:PORT to answer
# PING. Returns 1 (after printing why, with the tail of LOG) if it exits or never answers.
await_ping() {
  local pid="$1" port="$2" log="$3" what="$4"
  for _ in $(seq 100); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$what exited at start-up; log:" >&2; tail -20 "$log" >&2
      return 1
    fi
    [[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]] && return 0
    sleep 0.1
  done
  echo "$what did not answer PING on 127.0.0.1:$port in 10 s" >&2
  return 1
}

# stop_pid PID: stops a server this script started: SIGTERM, up to 10 s for it to exit, then
# SIGKILL; reaps it.
stop_pid() {
  local pid="$1"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# print_usage LAST: prints the calling script's header comment, lines 2 to LAST, without the
# comment marks (its --help).
print_usage() {
  sed -n "2,$1p" "${BASH_SOURCE[1]}" | sed 's/^# \{0,1\}//'
}
