//! KeyMesh's Kubernetes operator: runs `CacheCluster` objects as a mesh of multi-master engine
//! pods. See `operator/README.md` for the API, the reconcile pipeline and the scaling rules.

pub mod api;
pub mod crd;
