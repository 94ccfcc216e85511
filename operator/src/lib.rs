//! KeyMesh's Kubernetes operator: runs `CacheCluster` objects as a mesh of multi-master engine
//! pods. See `operator/README.md` for the API, the reconcile pipeline and the scaling rules.

pub mod api;
pub mod apply;
pub mod auth;
pub mod build;
pub mod cluster_metrics;
pub mod controller;
pub mod crd;
pub mod discovery;
pub mod events;
pub mod handoff;
pub mod http;
pub mod leader;
pub mod mesh;
pub mod metrics;
pub mod names;
pub mod node_tuning;
pub mod observe;
pub mod persistence;
pub mod quantity;
pub mod status;
pub mod tls;
pub mod tuner;
pub mod upgrade;
pub mod validate;

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
pub(crate) mod test_support;
