//! Reaching an engine pod as a client in the cluster would: `redis-cli` run inside a pod (its
//! network, mount and UTS namespaces, so cluster names resolve through the pod's hosts file),
//! RESP connections opened from inside a pod's network namespace, the engine's `/readyz`, and
//! its `INFO replication` parsed into the peer list the operator wired.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::LocalCluster;
use crate::resp::{Conn, Reply};

pub const CLIENT_PORT: u16 = 6379;
pub const METRICS_PORT: u16 = 9121;
const CLI_LIMIT: Duration = Duration::from_secs(10);

/// One peer link of an engine, from `INFO replication` (KeyDB's `master[_N]_*` fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerLink {
    /// The peer as configured: `<pod>.<cluster>-headless.<ns>.svc.cluster.local`.
    pub host: String,
    /// The first label of `host`: the peer's pod name.
    pub pod: String,
    pub link_up: bool,
    pub initial_sync_done: bool,
}

/// An engine's `INFO replication`.
#[derive(Debug, Clone, Default)]
pub struct Replication {
    pub peers: Vec<PeerLink>,
    pub fields: BTreeMap<String, String>,
}

impl Replication {
    /// The pod names of the configured peers.
    pub fn peer_pods(&self) -> BTreeSet<String> {
        self.peers.iter().map(|p| p.pod.clone()).collect()
    }

    /// `mesh_synced:1`: finished an initial sync from a peer (or needs none).
    pub fn synced(&self) -> bool {
        self.fields.get("mesh_synced").is_some_and(|v| v == "1")
    }

    /// Every configured peer's link is up.
    pub fn all_links_up(&self) -> bool {
        self.peers.iter().all(|p| p.link_up)
    }
}

/// Parses `INFO replication` text.
pub fn parse_replication(text: &str) -> Replication {
    let fields: BTreeMap<String, String> =
        text.lines().filter_map(|l| l.trim_end_matches('\r').split_once(':')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    let mut peers = Vec::new();
    for i in 0.. {
        let prefix = if i == 0 { "master".to_owned() } else { format!("master_{i}") };
        let Some(host) = fields.get(&format!("{prefix}_host")) else { break };
        let flag = |suffix: &str, yes: &str| fields.get(&format!("{prefix}_{suffix}")).is_some_and(|v| v == yes);
        peers.push(PeerLink {
            host: host.clone(),
            pod: host.split('.').next().unwrap_or(host).to_owned(),
            link_up: flag("link_status", "up"),
            initial_sync_done: flag("initial_sync_done", "1"),
        });
    }
    Replication { peers, fields }
}

impl LocalCluster {
    /// Pod `namespace/pod`'s IP, as the agent gave it.
    pub fn pod_ip(&self, namespace: &str, pod: &str) -> Result<Ipv4Addr, String> {
        self.agent.pod(namespace, pod).and_then(|p| p.net).map(|n| n.ip).ok_or_else(|| format!("pod {namespace}/{pod} has no network on the agent"))
    }

    /// Runs `redis-cli -h <host> -a <password> <args>` inside pod `from` and returns its
    /// stdout, trimmed; an error carries stderr (or the reply, when redis-cli printed an error).
    pub fn redis_cli(&self, namespace: &str, from: &str, host: &str, password: &str, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["-h", host, "-p", "6379", "-a", password, "--no-auth-warning"];
        all.extend_from_slice(args);
        let out = self.agent.pod_output(namespace, from, CLI_LIMIT, "redis-cli", &all).map_err(|e| e.to_string())?;
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if out.status.success() && !stdout.starts_with("ERR") && !stdout.starts_with("(error)") {
            Ok(stdout)
        } else {
            Err(format!("redis-cli {} from {from}: {} {stdout} {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim()))
        }
    }

    /// A RESP connection to pod `namespace/pod`'s client port, opened from inside the pod's own
    /// network namespace (a client next to it: no partition separates them) and authenticated.
    pub fn connect(&self, namespace: &str, pod: &str, password: &str, timeout: Duration) -> Result<Conn, String> {
        let ip = self.pod_ip(namespace, pod)?;
        let stream = self.agent.connect(namespace, pod, SocketAddr::from((ip, CLIENT_PORT)), timeout).map_err(|e| e.to_string())?;
        let mut conn = Conn::new(stream, timeout).map_err(|e| format!("connection to {pod}: {e}"))?;
        match conn.call(&["AUTH", password]) {
            Ok(Reply::Status(ok)) if ok == "OK" => Ok(conn),
            other => Err(format!("AUTH on {pod}: {other:?}")),
        }
    }

    /// `INFO replication` of pod `namespace/pod`.
    pub fn replication(&self, namespace: &str, pod: &str, password: &str) -> Result<Replication, String> {
        let mut conn = self.connect(namespace, pod, password, Duration::from_secs(3))?;
        match conn.call(&["INFO", "replication"]).map_err(|e| format!("INFO on {pod}: {e}"))? {
            Reply::Bulk(text) => Ok(parse_replication(&String::from_utf8_lossy(&text))),
            other => Err(format!("INFO on {pod}: {other:?}")),
        }
    }

    /// `DBSIZE` of pod `namespace/pod`.
    pub fn dbsize(&self, namespace: &str, pod: &str, password: &str) -> Result<i64, String> {
        let mut conn = self.connect(namespace, pod, password, Duration::from_secs(3))?;
        conn.call(&["DBSIZE"]).map_err(|e| e.to_string())?.as_int().ok_or_else(|| format!("DBSIZE on {pod}: not an integer"))
    }

    /// Writes `count` keys `bulk:<i>` of 100 bytes through `pod` (MSET, 1000 keys a command).
    pub fn preload(&self, namespace: &str, pod: &str, password: &str, count: usize) -> Result<(), String> {
        let mut conn = self.connect(namespace, pod, password, Duration::from_secs(10))?;
        let value = "v".repeat(100);
        for start in (0..count).step_by(1000) {
            let mut args = vec!["MSET".to_owned()];
            for i in start..(start + 1000).min(count) {
                args.extend([format!("bulk:{i}"), value.clone()]);
            }
            let reply = conn.call(&args).map_err(|e| format!("MSET on {pod}: {e}"))?;
            if reply.is_error() {
                return Err(format!("MSET on {pod}: {reply:?}"));
            }
        }
        Ok(())
    }

    /// The HTTP status of the engine's `/readyz` (what the readiness probe sees), asked from
    /// inside the pod's network namespace.
    pub fn readyz(&self, namespace: &str, pod: &str) -> Result<u16, String> {
        let ip = self.pod_ip(namespace, pod)?;
        let timeout = Duration::from_secs(2);
        let mut stream = self.agent.connect(namespace, pod, SocketAddr::from((ip, METRICS_PORT)), timeout).map_err(|e| e.to_string())?;
        stream.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
        stream.write_all(format!("GET /readyz HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes()).map_err(|e| e.to_string())?;
        let mut head = [0u8; 64];
        let n = stream.read(&mut head).map_err(|e| e.to_string())?;
        let line = String::from_utf8_lossy(&head[..n]).into_owned();
        line.split_whitespace().nth(1).and_then(|code| code.parse().ok()).ok_or_else(|| format!("bad /readyz answer {line:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keydb_style_peer_fields() {
        let text = "# Replication\r\nrole:active-replica\r\nmaster_host:demo-1.demo-headless.default.svc.cluster.local\r\nmaster_port:6379\r\n\
            master_link_status:up\r\nmaster_initial_sync_done:1\r\nmaster_1_host:demo-2.demo-headless.default.svc.cluster.local\r\n\
            master_1_link_status:down\r\nmaster_1_initial_sync_done:0\r\nmesh_synced:1\r\n";
        let r = parse_replication(text);
        assert_eq!(r.peer_pods(), BTreeSet::from(["demo-1".to_owned(), "demo-2".to_owned()]));
        assert!(r.peers[0].link_up && r.peers[0].initial_sync_done);
        assert!(!r.peers[1].link_up && !r.all_links_up());
        assert!(r.synced());
    }
}
