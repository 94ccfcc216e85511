# Shell helpers shared by the scripts; source it, do not run it.

# free_port: prints a loopback port whose +10000 neighbour (an engine's default mesh port) is
# free too. Both lie below the kernel's ephemeral range (32768-60999 by default), as the Rust
# tests' ports do (engine/tests/support/mod.rs, `TEST_PORTS`): no outgoing connection can take
# one between the moment it is chosen and the moment a server binds it (one of ten
# `bench-mesh.sh` runs once failed so, its mesh port taken by a client's connection). A port a
# running Rust test holds (its lock file in /tmp/keymesh-test-ports) is skipped, and so is one
# this script was given already (listed there under the script's PID).
free_port() {
  python3 - "$$" <<'PY'
import fcntl, os, random, socket, sys

locks = "/tmp/keymesh-test-ports"
os.makedirs(locks, exist_ok=True)
given_path = os.path.join(locks, f"shell-{sys.argv[1]}")
# The lists of scripts that have exited go (a later script could otherwise reuse a PID's list).
for name in os.listdir(locks):
    if name.startswith("shell-") and not os.path.exists(f"/proc/{name[6:]}"):
        try:
            os.remove(os.path.join(locks, name))
        except OSError:
            pass
given = set(open(given_path).read().split()) if os.path.exists(given_path) else set()

def free(port):
    if str(port) in given:
        return False
    try:
        with open(os.path.join(locks, str(port)), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True

for _ in range(1000):
    port = random.randrange(2000, 22000)
    if free(port) and free(port + 10000):
        with open(given_path, "a") as f:
            f.write(f"{port} {port + 10000}\n")
        print(port)
        break
else:
    raise SystemExit("free_port: no free port pair below the ephemeral range")
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
