//! Test support: start a real `keymesh-server` process on free loopback ports, and talk to it
//! with the tests' one RESP client (`keymesh_resp`, shared with the e2e and operator tests).

#![allow(clippy::unwrap_used)]
#![allow(dead_code)]

pub mod data_node;
pub mod pki;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    pub port: u16,
    pub metrics_port: u16,
    child: Child,
}

/// Where test servers' ports come from: below the kernel's ephemeral range (32768-60999 by
/// default), so no outgoing connection of a concurrently running test can take a port between
/// the moment it is chosen and the moment the server binds it. `port + 10000` (the derived mesh
/// port) stays below it too.
const TEST_PORTS: std::ops::Range<u16> = 2000..22000;

/// Ports reserved by this process (see `reserve`), held until it exits.
static RESERVED: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());

/// Reserves `port` across every test process running at once (nextest runs each test in its
/// own process): an exclusive lock on `/tmp/keymesh-test-ports/<port>`, kept by this process.
/// `false` when another process holds it or something else listens there.
fn reserve(port: u16) -> bool {
    let dir = std::env::temp_dir().join("keymesh-test-ports");
    let _ = std::fs::create_dir_all(&dir);
    let Ok(file) = std::fs::File::create(dir.join(port.to_string())) else { return false };
    // File locks are std from Rust 1.89; the tests run on the stable toolchain (the MSRV is the
    // library's promise, not the test support's).
    #[allow(clippy::incompatible_msrv)]
    let locked = file.try_lock().is_ok();
    if !locked || TcpListener::bind(("127.0.0.1", port)).is_err() {
        return false;
    }
    RESERVED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(file);
    true
}

/// A free port for a test server, reserved for this process.
pub fn free_port() -> u16 {
    free_port_with(&[])
}

/// A free client port whose mesh port (client port + 10000) is free too.
pub fn free_mesh_port() -> u16 {
    free_port_with(&[10000])
}

/// A free client port such that `port + offset` is free too for every offset; all reserved.
pub fn free_port_with(offsets: &[u16]) -> u16 {
    for _ in 0..1000 {
        let port = rand::random_range(TEST_PORTS);
        if reserve(port) && offsets.iter().all(|offset| port.checked_add(*offset).is_some_and(reserve)) {
            return port;
        }
    }
    panic!("no free test port in {TEST_PORTS:?} with free ports at offsets {offsets:?}");
}

impl Server {
    /// Starts the server with extra `--directive value` flags and waits until it accepts.
    /// The mesh port is a free port too (client port + 10000 may be taken or too large).
    pub fn start(extra: &[&str]) -> Server {
        Server::start_with_env(extra, &[])
    }

    /// `start` with environment variables set for the server (`_RJEM_MALLOC_CONF`, read by
    /// its allocator).
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mesh_port = free_port().to_string();
        let mut args = vec!["--mesh-port", mesh_port.as_str()];
        args.extend_from_slice(extra);
        let server = Server::spawn_with_env(free_port(), free_port(), &args, env);
        server.wait_loaded();
        server
    }

    /// Waits until the server has loaded its snapshot. It accepts connections while it loads
    /// (commands then get LOADING), so a test that sends a command the moment the port is open
    /// can see LOADING on a busy machine (a BLPOP that never blocks, a SET refused). Asked over
    /// `/readyz`, which says why it is not ready: that works with AUTH, TLS-only ports and nodes
    /// whose mesh never syncs. (The metrics port listens before the client port does, and
    /// is served only after loading began.)
    pub fn wait_loaded(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.http_get("/readyz").1.contains("loading the snapshot") {
            assert!(Instant::now() < deadline, "keymesh-server on {} did not finish loading", self.port);
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts the server on the given client and metrics ports (a restart on the same
    /// address) and waits until it has loaded: a test's first command is never answered LOADING.
    pub fn start_on(port: u16, metrics_port: u16, extra: &[&str]) -> Server {
        let server = Server::spawn_on(port, metrics_port, extra);
        server.wait_loaded();
        server
    }

    /// Starts the server and waits only until its client port accepts: for tests that watch
    /// the load itself.
    pub fn spawn_on(port: u16, metrics_port: u16, extra: &[&str]) -> Server {
        Server::spawn_with_env(port, metrics_port, extra, &[])
    }

    fn spawn_with_env(port: u16, metrics_port: u16, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let child = Command::new(env!("CARGO_BIN_EXE_keymesh-server"))
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--metrics-port", &metrics_port.to_string(), "--loglevel", "warning"])
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("keymesh-server starts");
        let server = Server { port, metrics_port, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "keymesh-server did not start listening on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The server listens on its client port last, so every test checks that order: a
        // probe or client that got in finds the metrics port open too (once, under CI load, a
        // test got in between the two and read "connection refused" from /readyz).
        assert!(TcpStream::connect(("127.0.0.1", metrics_port)).is_ok(), "the client port {port} accepts but the metrics port {metrics_port} does not");
        server
    }

    pub fn connect(&self) -> Conn {
        Conn::connect(self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory of the server process, in bytes.
    pub fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()).map_or(0, |kb| kb * 1024)
    }

    /// The most memory the server process has held (`VmHWM`).
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()).map_or(0, |kb| kb * 1024)
    }

    /// Sends a signal (`STOP`, `CONT`, `KILL`, ...) to the server process.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill").args([&format!("-{name}"), &self.child.id().to_string()]).status().expect("kill runs");
        assert!(status.success(), "kill -{name} failed");
        if name == "STOP" {
            self.wait_stopped();
        }
    }

    /// Waits until every thread of the process has stopped. `kill -STOP` returns once the
    /// signal is sent, and a thread running on another core goes on until it takes it: a
    /// write sent right after could still be merged and acknowledged by the "stopped" node
    /// (`mesh_wait` once read 2 acks where the stopped peer's was not to come).
    fn wait_stopped(&self) {
        let tasks = format!("/proc/{}/task", self.child.id());
        let stopped = || {
            std::fs::read_dir(&tasks).into_iter().flatten().flatten().all(|task| {
                let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
                // The state follows the command name, which is in parentheses and may hold any.
                stat.rsplit_once(')').is_some_and(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('T' | 't')))
            })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !stopped() {
            assert!(Instant::now() < deadline, "keymesh-server on {} did not stop after SIGSTOP", self.port);
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Kills the process at once (no shutdown) and waits for it.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits for a clean exit.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait works") {
                return status;
            }
            assert!(Instant::now() < deadline, "server did not exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn http_get(&self, path: &str) -> (u16, String) {
        let mut s = TcpStream::connect(("127.0.0.1", self.metrics_port)).expect("metrics port");
        write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        (status, body)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// Not every test binary uses all three.
#[allow(unused_imports)]
pub use keymesh_resp::{encode, Conn, Reply};

/// `blocked_clients` of INFO clients.
pub fn blocked_clients(conn: &mut Conn) -> usize {
    data_node::info_field(conn, "clients", "blocked_clients").parse().unwrap()
}

/// Waits until the server reports `n` blocked clients. A command sent on one connection and a
/// command sent on another have no order until the server has run the first: a test that needs
/// client A blocked before client B (or before a push) waits here instead of sleeping.
pub fn wait_blocked(conn: &mut Conn, n: usize) {
    data_node::wait_for(&format!("{n} blocked clients"), || blocked_clients(conn) == n);
}

/// Shorthand for asserting a bulk/status/int reply's text.
#[macro_export]
macro_rules! assert_reply {
    ($conn:expr, [$($arg:expr),*], $expected:expr) => {{
        let reply = $conn.cmd(&[$($arg),*]);
        assert_eq!(reply.text(), $expected, "command {:?} replied {:?}", [$($arg),*], reply);
    }};
}
