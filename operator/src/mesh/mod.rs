//! The mesh step: who is in the replication mesh, and every member's peer list, set through the
//! engines' admin API (`Admin.Status`, `Admin.SetPeers`, authenticated with
//! `authorization: Bearer <requirepass>`).
//!
//! Written so a test can drive real engines without Kubernetes: a `Member` is a name, an admin
//! endpoint and a stable peer address; `plan` is pure (statuses in, peer lists and the scale
//! plan out); `observe` and `wire` talk to engines only through the `MeshClient` trait, whose
//! gRPC implementation is `GrpcMeshClient`. Peers are always stable DNS names
//! (`<pod>.<name>-headless.<ns>.svc.<domain>`), never pod IPs, which change on restart.

mod grpc;
mod plan;
mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;

use keymesh_proto::{NodeStatus, Peer};

pub use grpc::GrpcMeshClient;
pub use plan::{plan, PeerUpdate, PlanInput, ScalePlan, ScaleStep};
pub use wire::{observe, wire, PodMember, WiringReport};

use crate::observe::PodFacts;
use crate::tls::TlsMaterial;

use crate::names::{ClusterNames, MESH_PORT};

/// One engine pod as the mesh sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub pod: String,
    pub ordinal: u32,
    /// `http://<podIP>:16379`, where the operator reaches the admin API (empty while the pod
    /// has no IP).
    pub admin_endpoint: String,
    /// How other members name this one in their peer lists.
    pub peer: Peer,
    /// Set when the pod serves TLS: admin calls then use it (the CA to trust, the certificate
    /// to present; the server name checked is `peer.host`).
    pub tls: Option<Arc<TlsMaterial>>,
}

impl Member {
    /// The member for pod `ordinal` of a cluster, reachable at `pod_ip` if it has one.
    pub fn new(names: &ClusterNames, ordinal: u32, pod_ip: Option<&str>) -> Member {
        let admin_endpoint = match pod_ip {
            Some(ip) if ip.contains(':') => format!("http://[{ip}]:{MESH_PORT}"),
            Some(ip) => format!("http://{ip}:{MESH_PORT}"),
            None => String::new(),
        };
        Member { pod: names.pod(ordinal), ordinal, admin_endpoint, peer: peer_of(names, ordinal), tls: None }
    }

    /// The same member, called over TLS with `material`.
    pub fn with_tls(self, material: Arc<TlsMaterial>) -> Member {
        Member { admin_endpoint: self.admin_endpoint.replacen("http://", "https://", 1), tls: Some(material), ..self }
    }
}

/// The peer address of pod `ordinal`: its stable DNS name and the mesh port.
pub fn peer_of(names: &ClusterNames, ordinal: u32) -> Peer {
    Peer { host: names.pod_dns(ordinal), port: MESH_PORT.unsigned_abs() }
}

/// A member and what its engine said (or why it said nothing).
#[derive(Debug, Clone, PartialEq)]
pub struct MemberState {
    pub member: Member,
    /// The pod's Kubernetes readiness (containers ready and readiness gate open).
    pub pod_ready: bool,
    /// The `topology.kubernetes.io/zone` of the pod's node.
    pub zone: Option<String>,
    /// What else the pod's object says (revision, readiness gate, restarts, ...).
    pub pod: PodFacts,
    pub status: Result<NodeStatus, String>,
}

impl MemberState {
    pub fn node_status(&self) -> Option<&NodeStatus> {
        self.status.as_ref().ok()
    }

    /// Reachable with an IP but not answering: its peer list is unknown, not empty.
    pub fn unknown(&self) -> bool {
        !self.member.admin_endpoint.is_empty() && self.status.is_err()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    #[error("failed to connect to the admin API of {pod} at {endpoint}: {message}")]
    Connect { pod: String, endpoint: String, message: String },
    #[error("failed to call {call} on {pod}: {status}")]
    Call { pod: String, call: &'static str, status: Box<tonic::Status> },
    #[error("failed to call {call} on {pod}: {message}")]
    Invalid { pod: String, call: &'static str, message: String },
}

/// Talks to one engine's admin API. Injectable, so reconcile tests need no engines.
#[tonic::async_trait]
pub trait MeshClient: Send + Sync {
    /// The engine's `NodeStatus`, with the current values of the directives `config_keys`.
    async fn status(&self, member: &Member, password: Option<&str>, config_keys: &[String]) -> Result<NodeStatus, MeshError>;

    /// Replaces the engine's whole peer list; returns the list it now has.
    async fn set_peers(&self, member: &Member, peers: Vec<Peer>, password: Option<&str>) -> Result<Vec<Peer>, MeshError>;

    /// Starts (`start`) or cancels the handoff of the engine's clients before it leaves the
    /// mesh (engine `handoff` module); busy clients get `grace_ms`. Returns its status.
    async fn handoff(&self, member: &Member, start: bool, grace_ms: u64, password: Option<&str>) -> Result<NodeStatus, MeshError>;

    /// Changes directives that can change live; returns the status with their values.
    async fn set_config(&self, member: &Member, values: BTreeMap<String, String>, password: Option<&str>) -> Result<NodeStatus, MeshError>;

    /// Starts a background snapshot (as `BGSAVE`) unless one is running; returns the status,
    /// whose `snapshot` shows its progress.
    async fn save(&self, member: &Member, password: Option<&str>) -> Result<NodeStatus, MeshError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_named_by_dns_and_reached_by_ip() {
        let names = ClusterNames::new("demo", "cache", "cluster.local");
        let m = Member::new(&names, 1, Some("10.0.0.7"));
        assert_eq!(m.admin_endpoint, "http://10.0.0.7:16379");
        assert_eq!(m.peer, Peer { host: "demo-1.demo-headless.cache.svc.cluster.local".into(), port: 16379 });
        assert_eq!(Member::new(&names, 0, Some("fd00::5")).admin_endpoint, "http://[fd00::5]:16379");
        assert_eq!(Member::new(&names, 0, None).admin_endpoint, "");
    }
}
