//! `MeshCluster`: N `keymesh-server` processes, one per host of a private [`Network`], each a
//! peer of every other (`--replicaof` for each), plus a client per node.
//!
//! Every node listens on `<its ip>:6379` (mesh on 16379, metrics on 9121) inside its own
//! namespace, so all nodes use the default ports and faults come from [`MeshCluster::net`].
//! The client of node `i` is a [`Conn`](crate::resp::Conn) whose socket was opened inside node `i`'s
//! namespace (see [`crate::netns`]), so it keeps working while node `i` is cut off from the
//! others: tests can write to both sides of a partition. Calls never retry (a retried `INCR`
//! could apply twice); a failed call drops the connection and the next call reconnects.
//!
//! Dropping the cluster kills its servers, then the network removes its namespaces. Server
//! logs and data directories live in a temporary directory, kept (and its path printed) when
//! the cluster is dropped during a panic or `KEYMESH_E2E_KEEP` is set.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::keyspace::{self, Entry, Keyspace, Value};
use crate::netns::{Host, NetnsError, Network};
use crate::resp::{Conn, Reply, RespError};

pub const CLIENT_PORT: u16 = 6379;
pub const METRICS_PORT: u16 = 9121;
/// Bounds each client read and write, and each connect.
const IO_TIMEOUT: Duration = Duration::from_secs(3);
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// A failure to start or talk to a cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Network(#[from] NetnsError),
    #[error("keymesh-server binary not found at {0} (build it with `cargo build --release -p keymesh-engine` or set KEYMESH_SERVER)")]
    NoBinary(PathBuf),
    #[error("failed to prepare {path}: {source}")]
    Files { path: PathBuf, source: std::io::Error },
    #[error("node {node} did not start: {reason}\n--- last lines of {log} ---\n{tail}")]
    Start { node: usize, reason: String, log: String, tail: String },
    #[error("node {node}: {source}")]
    Client { node: usize, source: RespError },
    #[error("node {node}: `{command}` replied {reply:?}")]
    Reply { node: usize, command: String, reply: Reply },
    #[error("not converged after {waited:?}:\n{report}")]
    NotConverged { waited: Duration, report: String },
}

/// How to start a cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Number of nodes.
    pub nodes: usize,
    /// Whether each node gets `--replicaof` for every other node (`false`: plain servers).
    pub mesh: bool,
    /// More `--flag value` arguments for every node.
    pub extra_args: Vec<String>,
    /// The server binary.
    pub binary: PathBuf,
}

impl ClusterOptions {
    /// `nodes` meshed nodes running [`server_binary`].
    pub fn new(nodes: usize) -> Self {
        ClusterOptions { nodes, mesh: true, extra_args: Vec::new(), binary: server_binary() }
    }
}

/// The server under test: `$KEYMESH_SERVER`, else `release/keymesh-server` in the target dir.
pub fn server_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("KEYMESH_SERVER") {
        return path.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"), PathBuf::from);
    target.join("release/keymesh-server")
}

struct Node {
    host: Host,
    args: Vec<String>,
    log: PathBuf,
    child: Mutex<Option<Child>>,
    conn: Mutex<Option<Conn>>,
}

/// A running cluster; see the module docs.
pub struct MeshCluster {
    nodes: Vec<Node>,
    binary: PathBuf,
    dir: Option<tempfile::TempDir>,
    // Declared last so it is dropped last, after `Drop` has stopped the servers.
    net: Network,
}

impl MeshCluster {
    /// Starts `n` meshed nodes and waits until each answers `PING`.
    pub fn start(n: usize) -> Result<Self, ClusterError> {
        Self::start_with(ClusterOptions::new(n))
    }

    /// Starts a cluster as `opts` says and waits until each node answers `PING`.
    pub fn start_with(opts: ClusterOptions) -> Result<Self, ClusterError> {
        if !opts.binary.is_file() {
            return Err(ClusterError::NoBinary(opts.binary));
        }
        let net = Network::new(opts.nodes)?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("{}-", net.name()))
            .tempdir()
            .map_err(|source| ClusterError::Files { path: std::env::temp_dir(), source })?;
        let mut nodes = Vec::new();
        for host in net.hosts() {
            let i = host.index();
            let data = dir.path().join(format!("n{i}"));
            std::fs::create_dir_all(&data).map_err(|source| ClusterError::Files { path: data.clone(), source })?;
            let mut args: Vec<String> = [
                "--bind",
                &host.ip().to_string(),
                "--port",
                &CLIENT_PORT.to_string(),
                "--node-name",
                &format!("n{i}"),
                "--metrics-port",
                &METRICS_PORT.to_string(),
                "--dir",
                &data.to_string_lossy(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            if opts.mesh {
                args.extend(["--active-replica", "yes", "--multi-master", "yes"].map(String::from));
                for peer in net.hosts().iter().filter(|p| p.index() != i) {
                    args.extend(["--replicaof".to_owned(), peer.ip().to_string(), CLIENT_PORT.to_string()]);
                }
            }
            args.extend(opts.extra_args.iter().cloned());
            nodes.push(Node { host: host.clone(), args, log: dir.path().join(format!("n{i}.log")), child: Mutex::new(None), conn: Mutex::new(None) });
        }
        let cluster = MeshCluster { nodes, binary: opts.binary, dir: Some(dir), net };
        (0..cluster.len()).try_for_each(|i| cluster.spawn_node(i))?;
        (0..cluster.len()).try_for_each(|i| cluster.wait_started(i))?;
        Ok(cluster)
    }

    /// The network the nodes run in: use it to cut, partition and heal.
    pub fn net(&self) -> &Network {
        &self.net
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i`'s client address.
    pub fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::new(self.nodes[i].host.ip().into(), CLIENT_PORT)
    }

    /// The command line node `i` runs with (after the binary).
    pub fn args(&self, i: usize) -> &[String] {
        &self.nodes[i].args
    }

    fn spawn_node(&self, i: usize) -> Result<(), ClusterError> {
        let node = &self.nodes[i];
        let open = || std::fs::OpenOptions::new().create(true).append(true).open(&node.log);
        let files = open().and_then(|out| Ok((out, open()?))).map_err(|source| ClusterError::Files { path: node.log.clone(), source })?;
        let mut cmd = self.net.command(i, &self.binary);
        cmd.args(&node.args).stdin(Stdio::null()).stdout(files.0).stderr(files.1);
        let child = cmd.spawn().map_err(|e| self.start_error(i, format!("failed to spawn: {e}")))?;
        *lock(&node.child) = Some(child);
        Ok(())
    }

    fn wait_started(&self, i: usize) -> Result<(), ClusterError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = lock(&self.nodes[i].child).as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(self.start_error(i, format!("exited with {status}")));
            }
            match self.call(i, &["PING"]) {
                Ok(Reply::Status(s)) if s == "PONG" => return Ok(()),
                Ok(_) | Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                Ok(reply) => return Err(self.start_error(i, format!("PING replied {reply:?}"))),
                Err(e) => return Err(self.start_error(i, format!("no PONG within {START_TIMEOUT:?}: {e}"))),
            }
        }
    }

    fn start_error(&self, node: usize, reason: String) -> ClusterError {
        ClusterError::Start { node, reason, log: self.nodes[node].log.display().to_string(), tail: self.log_tail(node, 20) }
    }

    /// The last `lines` lines of node `i`'s log.
    pub fn log_tail(&self, i: usize, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Kills node `i` (SIGKILL, like a crash) and waits for it to exit.
    pub fn kill(&self, i: usize) {
        *lock(&self.nodes[i].conn) = None;
        if let Some(mut child) = lock(&self.nodes[i].child).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts node `i` again with the same arguments (an empty keyspace: nothing is persisted)
    /// and waits until it answers `PING`.
    pub fn restart(&self, i: usize) -> Result<(), ClusterError> {
        self.kill(i);
        self.spawn_node(i)?;
        self.wait_started(i)
    }

    /// Sends one command to node `i`, connecting first if needed. Never retries.
    pub fn call<A: AsRef<[u8]>>(&self, i: usize, args: &[A]) -> Result<Reply, ClusterError> {
        let node = &self.nodes[i];
        let mut conn = lock(&node.conn);
        if conn.is_none() {
            let stream = node.host.connect(self.addr(i), IO_TIMEOUT).map_err(|e| ClusterError::Client { node: i, source: e.into() })?;
            *conn = Some(Conn::new(stream, IO_TIMEOUT).map_err(|e| ClusterError::Client { node: i, source: e.into() })?);
        }
        let result = conn.as_mut().map_or_else(|| Err(RespError::Protocol("no connection".into())), |c| c.call(args));
        result.map_err(|source| {
            *conn = None;
            ClusterError::Client { node: i, source }
        })
    }

    /// Like [`MeshCluster::call`], but an error reply is an error too.
    pub fn call_ok<A: AsRef<[u8]>>(&self, i: usize, args: &[A]) -> Result<Reply, ClusterError> {
        match self.call(i, args)? {
            Reply::Error(e) => Err(ClusterError::Reply { node: i, command: show_command(args), reply: Reply::Error(e) }),
            reply => Ok(reply),
        }
    }

    /// `SET key value` on node `i`.
    pub fn set(&self, i: usize, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<(), ClusterError> {
        let args = [b"SET".as_slice(), key.as_ref(), value.as_ref()];
        match self.call_ok(i, &args)? {
            Reply::Status(s) if s == "OK" => Ok(()),
            reply => Err(ClusterError::Reply { node: i, command: show_command(&args), reply }),
        }
    }

    /// `GET key` on node `i`.
    pub fn get(&self, i: usize, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>, ClusterError> {
        let args = [b"GET".as_slice(), key.as_ref()];
        match self.call_ok(i, &args)? {
            Reply::Bulk(b) => Ok(Some(b)),
            Reply::Nil => Ok(None),
            reply => Err(ClusterError::Reply { node: i, command: show_command(&args), reply }),
        }
    }

    /// One field of node `i`'s `INFO section` (empty if the field is absent).
    pub fn info_field(&self, i: usize, section: &str, field: &str) -> Result<String, ClusterError> {
        let args = ["INFO", section];
        let text = match self.call_ok(i, &args)? {
            Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
            reply => return Err(ClusterError::Reply { node: i, command: show_command(&args), reply }),
        };
        let wanted = format!("{field}:");
        Ok(text.lines().find_map(|l| l.strip_prefix(&wanted)).unwrap_or("").trim().to_string())
    }

    /// Waits until every node streams from every peer: each link `connected` with its initial
    /// sync done. Tests that cut links need this: a link still being set up when the cut comes
    /// starts with a full sync, which carries everything that peer holds (including writes
    /// another node made across the cut), not only what it originated.
    pub fn wait_full_mesh(&self, timeout: Duration) -> Result<(), ClusterError> {
        let started = Instant::now();
        loop {
            let mut waiting = Vec::new();
            for i in 0..self.len() {
                let args = ["INFO", "replication"];
                let text = match self.call_ok(i, &args)? {
                    Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
                    reply => return Err(ClusterError::Reply { node: i, command: show_command(&args), reply }),
                };
                let states: Vec<&str> = text.lines().filter_map(|l| l.split_once("_link_state:").map(|(_, v)| v.trim())).collect();
                let synced = text.lines().filter(|l| l.contains("_initial_sync_done:1")).count();
                let connected = states.iter().filter(|s| **s == "connected").count();
                if connected < self.len() - 1 || synced < self.len() - 1 {
                    waiting.push(format!("node {i}: links {states:?}, {synced} synced"));
                }
            }
            if waiting.is_empty() {
                return Ok(());
            }
            if started.elapsed() > timeout {
                return Err(ClusterError::NotConverged { waited: timeout, report: waiting.join("; ") });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until node `i` reports itself ready (`mesh_ready:1`: it finished a sync from a
    /// peer, or found none within the start-up grace period).
    pub fn wait_ready(&self, i: usize, timeout: Duration) -> Result<(), ClusterError> {
        let started = Instant::now();
        loop {
            let ready = self.info_field(i, "replication", "mesh_ready");
            if matches!(&ready, Ok(r) if r == "1") {
                return Ok(());
            }
            if started.elapsed() > timeout {
                let reason = self.info_field(i, "replication", "mesh_ready_reason").unwrap_or_else(|e| e.to_string());
                return Err(ClusterError::NotConverged { waited: timeout, report: format!("node {i} not ready: {reason}") });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Node `i`'s whole keyspace (database 0).
    pub fn dump(&self, i: usize) -> Result<Keyspace, ClusterError> {
        self.dump_matching(i, "*")
    }

    /// Node `i`'s keys matching the glob `pattern`, with values and expiry (`SCAN`, then per key
    /// `TYPE`, the type's read command, `PEXPIRETIME`). Not a snapshot: compare dumps only when
    /// writes have stopped. A key that vanishes meanwhile is left out.
    pub fn dump_matching(&self, i: usize, pattern: &str) -> Result<Keyspace, ClusterError> {
        let mut keys = std::collections::BTreeSet::new();
        let mut cursor = b"0".to_vec();
        loop {
            let reply = self.call_ok(i, &[b"SCAN".as_slice(), &cursor, b"MATCH", pattern.as_bytes(), b"COUNT", b"1000"])?;
            let bad = || ClusterError::Reply { node: i, command: format!("SCAN {} MATCH {pattern}", String::from_utf8_lossy(&cursor)), reply: reply.clone() };
            let Reply::Array(parts) = &reply else { return Err(bad()) };
            let [Reply::Bulk(next), Reply::Array(batch)] = parts.as_slice() else { return Err(bad()) };
            keys.extend(batch.iter().filter_map(|k| k.as_bytes().map(<[u8]>::to_vec)));
            if next.as_slice() == b"0" {
                break;
            }
            cursor = next.clone();
        }
        let mut out = Keyspace::new();
        for key in keys {
            if let Some(entry) = self.read_entry(i, &key)? {
                out.insert(key, entry);
            }
        }
        Ok(out)
    }

    fn read_entry(&self, i: usize, key: &[u8]) -> Result<Option<Entry>, ClusterError> {
        let kind = self.call_ok(i, &[b"TYPE".as_slice(), key])?;
        let items = |cmd: &[&[u8]]| -> Result<Vec<Vec<u8>>, ClusterError> {
            match self.call_ok(i, cmd)? {
                Reply::Array(items) => Ok(items.iter().filter_map(|r| r.as_bytes().map(<[u8]>::to_vec)).collect()),
                reply => Err(ClusterError::Reply { node: i, command: show_command(cmd), reply }),
            }
        };
        let value = match kind.as_bytes().unwrap_or_default() {
            b"none" => return Ok(None),
            b"string" => match self.call_ok(i, &[b"GET".as_slice(), key])? {
                Reply::Bulk(b) => Value::Str(b),
                _ => return Ok(None),
            },
            b"list" => Value::List(items(&[b"LRANGE", key, b"0", b"-1"])?),
            b"hash" => Value::Hash(pairs(items(&[b"HGETALL", key])?).collect()),
            b"set" => Value::Set(items(&[b"SMEMBERS", key])?.into_iter().collect()),
            b"zset" => Value::ZSet(pairs(items(&[b"ZRANGE", key, b"0", b"-1", b"WITHSCORES"])?).map(|(m, s)| (m, parse_score(&s))).collect()),
            other => return Err(ClusterError::Reply { node: i, command: format!("TYPE {}", keyspace::Show(key)), reply: Reply::Bulk(other.to_vec()) }),
        };
        if value.is_empty() {
            return Ok(None);
        }
        let expire_at_ms = match self.call_ok(i, &[b"PEXPIRETIME".as_slice(), key])? {
            Reply::Int(-2) => return Ok(None),
            Reply::Int(-1) => None,
            Reply::Int(at) => Some(at),
            reply => return Err(ClusterError::Reply { node: i, command: format!("PEXPIRETIME {}", keyspace::Show(key)), reply }),
        };
        Ok(Some(Entry { value, expire_at_ms }))
    }

    /// Waits until every node's full keyspace is identical; returns it.
    pub fn wait_converged(&self, timeout: Duration) -> Result<Keyspace, ClusterError> {
        self.wait_converged_matching("*", timeout, |_| Ok(()))
    }

    /// Waits until every node holds the same keys matching `pattern` and `accept` approves that
    /// keyspace (e.g. compares it with a model); returns it. On timeout the error shows how the
    /// nodes differ from node 0, or what `accept` last said.
    pub fn wait_converged_matching(
        &self,
        pattern: &str,
        timeout: Duration,
        mut accept: impl FnMut(&Keyspace) -> Result<(), String>,
    ) -> Result<Keyspace, ClusterError> {
        let start = Instant::now();
        loop {
            let report = match self.compare_nodes(pattern) {
                Ok(space) => match accept(&space) {
                    Ok(()) => return Ok(space),
                    Err(why) => format!("all nodes agree, but:\n{why}"),
                },
                Err(report) => report,
            };
            if start.elapsed() >= timeout {
                return Err(ClusterError::NotConverged { waited: start.elapsed(), report });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Node 0's keyspace if every node's equals it, else a report of the differences.
    fn compare_nodes(&self, pattern: &str) -> Result<Keyspace, String> {
        let first = self.dump_matching(0, pattern).map_err(|e| e.to_string())?;
        let mut report = Vec::new();
        for i in 1..self.len() {
            match self.dump_matching(i, pattern) {
                Ok(other) => report.extend(keyspace::diff("n0", &first, &format!("n{i}"), &other, 0, 10)),
                Err(e) => report.push(e.to_string()),
            }
        }
        if report.is_empty() {
            Ok(first)
        } else {
            Err(report.join("\n"))
        }
    }
}

impl Drop for MeshCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
        let keep = std::thread::panicking() || std::env::var_os("KEYMESH_E2E_KEEP").is_some();
        if let (true, Some(dir)) = (keep, self.dir.take()) {
            eprintln!("keymesh-e2e: server logs kept in {}", dir.keep().display());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn pairs(items: Vec<Vec<u8>>) -> impl Iterator<Item = (Vec<u8>, Vec<u8>)> {
    let mut it = items.into_iter();
    std::iter::from_fn(move || Some((it.next()?, it.next()?)))
}

fn parse_score(s: &[u8]) -> f64 {
    std::str::from_utf8(s).ok().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN)
}

fn show_command<A: AsRef<[u8]>>(args: &[A]) -> String {
    args.iter().map(|a| String::from_utf8_lossy(a.as_ref()).into_owned()).collect::<Vec<_>>().join(" ")
}
