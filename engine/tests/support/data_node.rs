//! A node with a data directory (its snapshots and its log), restartable on the same ports,
//! and the helpers the persistence tests share.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{free_mesh_port, free_port, Conn, Server};

pub const DEADLINE: Duration = Duration::from_secs(20);

pub fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out after {DEADLINE:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A fresh, empty directory for one test.
pub fn data_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("keymesh-persist-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn info_field(conn: &mut Conn, section: &str, field: &str) -> String {
    let info = conn.cmd(&["INFO", section]).text();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(|v| v.trim().to_string()))
        .unwrap_or_else(|| panic!("INFO {section} has no {field}: {info}"))
}

pub fn metric(server: &Server, name: &str) -> f64 {
    let (_, body) = server.http_get("/metrics");
    body.lines().find_map(|l| l.strip_prefix(&format!("{name} ")).and_then(|v| v.trim().parse().ok())).unwrap_or_else(|| panic!("no metric {name}"))
}

/// A node with a data directory, restartable on the same ports.
pub struct DataNode {
    pub port: u16,
    pub metrics_port: u16,
    pub dir: PathBuf,
}

impl DataNode {
    pub fn new(name: &str) -> DataNode {
        DataNode { port: free_mesh_port(), metrics_port: free_port(), dir: data_dir(name) }
    }

    pub fn dir(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// Starts the node and waits until it has loaded its snapshot: it accepts connections while
    /// it loads and answers LOADING, so a test that wrote at once could lose its first writes
    /// (seen: a `SET` answered LOADING, then a `SAVE` of a snapshot without the key).
    pub fn start(&self, name: &str, peers: &[&DataNode], extra: &[&str]) -> Server {
        let server = self.start_loading(name, peers, extra);
        server.wait_loaded();
        server
    }

    /// Starts the node and returns as soon as it accepts connections, possibly still loading.
    pub fn start_loading(&self, name: &str, peers: &[&DataNode], extra: &[&str]) -> Server {
        let args = self.args(name, peers, extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Server::spawn_on(self.port, self.metrics_port, &args)
    }

    fn args(&self, name: &str, peers: &[&DataNode], extra: &[&str]) -> Vec<String> {
        let log = self.dir.join("server.log");
        let mut args: Vec<String> = ["--node-name", name, "--dir", self.dir(), "--logfile", log.to_str().unwrap()].iter().map(|s| s.to_string()).collect();
        if !peers.is_empty() {
            args.extend(["--active-replica", "yes", "--multi-master", "yes"].map(String::from));
        }
        for p in peers {
            args.extend(["--replicaof".to_string(), "127.0.0.1".to_string(), p.port.to_string()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    pub fn snapshot(&self) -> PathBuf {
        self.dir.join("dump.rdb")
    }
}

impl Drop for DataNode {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits until `/readyz` answers 200 (the snapshot is loaded and the mesh synced).
pub fn wait_ready(server: &Server) {
    wait_for("the node to be ready", || server.http_get("/readyz").0 == 200);
}
