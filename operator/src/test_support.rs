//! Helpers for unit tests: `CacheCluster` objects from inline YAML.

use crate::api::CacheCluster;

/// A `CacheCluster` named `demo` in namespace `cache` (with a uid, so owner references can be
/// built) whose `spec` is the given YAML mapping.
pub fn cluster(spec_yaml: &str) -> CacheCluster {
    let indented: String = spec_yaml.lines().map(|l| format!("  {l}\n")).collect();
    let yaml = format!(
        "apiVersion: keymesh.io/v1alpha1\nkind: CacheCluster\nmetadata:\n  name: demo\n  namespace: cache\n  uid: 6f1c2a3e-0000-4000-8000-000000000001\n  generation: 1\nspec:\n{indented}"
    );
    serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("test CacheCluster does not parse: {e}\n{yaml}"))
}

use keymesh_proto::{NodeStatus, PeerStatus};

use crate::mesh::{peer_of, Member, MemberState};
use crate::names::ClusterNames;
use crate::observe::PodFacts;

/// The pod-template revision the test members run unless a test says otherwise.
pub const REVISION: &str = "rev-1";

/// The names of the `demo` cluster.
pub fn names() -> ClusterNames {
    ClusterNames::new("demo", "cache", "cluster.local")
}

/// An answering engine at `ordinal` with connected links to `peers`, ready and synced or not.
pub fn engine(ordinal: u32, peers: &[u32], caught_up: bool) -> MemberState {
    let names = names();
    let peers = peers
        .iter()
        .map(|&j| PeerStatus {
            peer: Some(peer_of(&names, j)),
            node_name: names.pod(j),
            link: "connected".into(),
            initial_sync_done: true,
            ..PeerStatus::default()
        })
        .collect();
    MemberState {
        member: Member::new(&names, ordinal, Some(&format!("10.0.0.{ordinal}"))),
        pod_ready: caught_up,
        zone: Some(format!("zone-{}", ordinal % 3)),
        pod: PodFacts { containers_ready: caught_up, serving: Some(true), template_hash: Some(REVISION.to_string()), ..PodFacts::default() },
        status: Ok(NodeStatus {
            node_name: names.pod(ordinal),
            ready: caught_up,
            synced: caught_up,
            peers,
            version: "0.1.0".into(),
            handoff: "serving".into(),
            config: default_live_settings(),
            ..NodeStatus::default()
        }),
    }
}

/// A pod whose engine does not answer (with an IP) or that has no IP yet.
pub fn silent(ordinal: u32, has_ip: bool) -> MemberState {
    let names = names();
    let ip = format!("10.0.0.{ordinal}");
    MemberState {
        member: Member::new(&names, ordinal, has_ip.then_some(ip.as_str())),
        pod_ready: false,
        zone: None,
        pod: PodFacts { template_hash: Some(REVISION.to_string()), ..PodFacts::default() },
        status: Err("unreachable".into()),
    }
}

/// Every engine of an `n`-member full mesh, all ready.
pub fn full_mesh(n: u32) -> Vec<MemberState> {
    (0..n).map(|i| engine(i, &(0..n).filter(|&j| j != i).collect::<Vec<_>>(), true)).collect()
}

/// The live engine settings a default spec asks for (what a test engine reports).
pub fn default_live_settings() -> std::collections::HashMap<String, String> {
    let spec = crate::validate::validate(&cluster("{}")).expect("the default spec is valid");
    crate::build::engine_settings(&spec, &names(), None).live.into_iter().collect()
}
