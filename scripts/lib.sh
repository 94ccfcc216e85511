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
