//! End-to-end test support for KeyMesh (testing ladder item 3, the mesh): real `keymesh-server`
//! processes, each in its own Linux network namespace on a private bridge, so tests can cut
//! hosts off, partition them and heal them without touching the machine's own network.
//!
//! - [`netns`]: the private network (namespaces, veths, bridge, faults, cleanup).
//! - [`cluster`]: `MeshCluster`, N meshed servers in such a network, with a client per node.
//! - [`keyspace`]: a node's keyspace as plain values, and a readable diff.
//! - [`model`]: the expected keyspace after a sequence of acknowledged writes under KeyMesh's
//!   merge semantics, for randomized partition tests.
//! - [`resp`]: the tests' one blocking RESP client (the `keymesh-resp` crate).
//! - [`control_plane`]: `ControlPlane`, a real Kubernetes 1.20 control plane (etcd,
//!   kube-apiserver, kube-controller-manager, kube-scheduler) on loopback, with `kubectl` and
//!   `helm` (testing ladder item 4).
//! - [`local_cluster`]: `LocalCluster`, the main job: control plane, node agent, the operator
//!   installed by its Helm chart; CacheCluster helpers and a write load (testing ladder item 5).
//! - [`chart`]: the Helm chart without a cluster (lint, template, the values table) and the
//!   tools its checks run; [`registry`]: a local OCI registry for `helm push`/`install oci://`;
//!   [`argocd`]: Argo CD's health check run on Lua 5.1; [`promql`]: metric names of PromQL
//!   expressions and expositions; [`pod_security`]: the Pod Security Standards' `restricted`
//!   rules.
//!
//! The mesh tests need root (network namespaces); without it they print why and pass as skipped.

pub mod agent;
pub mod argocd;
pub mod chart;
pub mod cluster;
pub mod control_plane;
pub mod keyspace;
pub mod local_cluster;
pub mod model;
pub mod netns;
pub mod operator_process;
pub mod pod_security;
pub mod promql;
pub mod registry;
pub use keymesh_resp as resp;

pub use cluster::{ClusterError, ClusterOptions, MeshCluster};
pub use control_plane::{ControlPlane, ControlPlaneError};
pub use keyspace::{Entry, Keyspace, Value};
pub use netns::{Host, Network};

/// Returns from the calling test, printing why, when network namespaces are unavailable.
#[macro_export]
macro_rules! require_netns {
    () => {
        if let Some(why) = $crate::netns::skip_reason() {
            eprintln!("SKIPPED: this test needs Linux network namespaces: {why}");
            return;
        }
    };
}

/// Polls `check` every 250 ms until it returns `Ok` and returns its value; panics with `what`
/// and the last error after `limit`. For tests that wait on a system converging.
pub fn eventually<T>(what: &str, limit: std::time::Duration, mut check: impl FnMut() -> Result<T, String>) -> T {
    let start = std::time::Instant::now();
    loop {
        match check() {
            Ok(value) => return value,
            Err(last) if start.elapsed() > limit => panic!("{what}: not after {limit:?}; last: {last}"),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(250)),
        }
    }
}
