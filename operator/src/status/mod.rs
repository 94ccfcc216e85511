//! The status step: computes the `CacheCluster` status (phase, conditions, members) and writes
//! it to the status subresource with server-side apply, only when it changed (an unchanged
//! status costs no write and triggers no watch event).

mod compute;
pub mod conditions;
#[cfg(test)]
mod health_testdata;
#[cfg(test)]
mod test_helpers;
mod tls;

use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

pub use compute::{compute, invalid, StatusInput};
pub use tls::TLS_REPLICATION;

use crate::api::{CacheCluster, CacheClusterStatus};
use crate::build::FIELD_MANAGER;

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("failed to patch the status of CacheCluster {name}: {source}")]
    Patch { name: String, source: kube::Error },
}

/// Writes `status` unless the cluster already has exactly that status. Returns whether it wrote.
pub async fn patch_if_changed(api: &Api<CacheCluster>, cluster: &CacheCluster, status: &CacheClusterStatus) -> Result<bool, StatusError> {
    if cluster.status.as_ref() == Some(status) {
        return Ok(false);
    }
    let name = cluster.name_any();
    let body = json!({ "apiVersion": "keymesh.io/v1alpha1", "kind": "CacheCluster", "status": status });
    api.patch_status(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body)).await.map_err(|source| StatusError::Patch { name, source })?;
    Ok(true)
}
