//! KeyMesh's Kubernetes operator: runs `CacheCluster` objects as a mesh of multi-master engine
//! pods. See `operator/README.md` for the API, the reconcile pipeline and the scaling rules.

pub mod api;
pub mod build;
pub mod crd;
pub mod names;
pub mod quantity;
pub mod validate;

#[cfg(test)]
pub(crate) mod test_support;
