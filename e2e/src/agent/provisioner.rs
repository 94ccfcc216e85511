//! Local volumes, the way rancher's local-path-provisioner makes them: a StorageClass
//! `keymesh-local` (the cluster's default; `WaitForFirstConsumer`, `reclaimPolicy: Delete`,
//! `allowVolumeExpansion`) whose claims become directories on the node that runs their first
//! pod, under that node's root (`<node-root>/<node>/var/lib/keymesh-local-path/<pv>`).
//!
//! - **Provisioning**: the scheduler picks a node for a pod whose claim is unbound and writes it
//!   on the claim (`volume.kubernetes.io/selected-node`); the agent then creates a
//!   PersistentVolume pre-bound to the claim (`claimRef`), a `hostPath` with a node affinity to
//!   that node; the controller manager binds the pair and the scheduler binds the pod. A pod
//!   recreated later (a StatefulSet pod deleted, an upgrade) finds the same claim, bound to a
//!   volume pinned to the same node, so it is scheduled there and sees the same files.
//! - **Reclaim**: a `Released` volume of this class (its claim was deleted) is removed, files
//!   and object.
//! - **Expansion**: a bound claim asking for more than its volume has (the API server admits that
//!   only for a class with `allowVolumeExpansion`) gets the new capacity on its volume and in its
//!   status, as an external resizer does for a volume that needs no node-side step: a directory
//!   has no size to grow.
//!
//! One pass a second (`run`), lists in, writes out; failures are logged and retried.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::Shared;

/// The StorageClass the agent serves, and its provisioner name.
pub const STORAGE_CLASS: &str = "keymesh-local";
pub const PROVISIONER: &str = "keymesh.io/local-path";

/// Where volumes live under a node's root.
pub const VOLUME_ROOT: &str = "/var/lib/keymesh-local-path";

const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Creates the StorageClass unless it exists.
pub async fn ensure_storage_class(client: &kube::Client) -> Result<(), kube::Error> {
    let api: Api<StorageClass> = Api::all(client.clone());
    if api.get_opt(STORAGE_CLASS).await?.is_some() {
        return Ok(());
    }
    let class = StorageClass {
        metadata: ObjectMeta {
            name: Some(STORAGE_CLASS.to_string()),
            annotations: Some([("storageclass.kubernetes.io/is-default-class".to_string(), "true".to_string())].into()),
            ..ObjectMeta::default()
        },
        provisioner: PROVISIONER.to_string(),
        volume_binding_mode: Some("WaitForFirstConsumer".to_string()),
        reclaim_policy: Some("Delete".to_string()),
        allow_volume_expansion: Some(true),
        ..StorageClass::default()
    };
    match api.create(&PostParams::default(), &class).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The volume's directory on this machine: `hostPath` volumes of the agent's nodes live under
/// the node's root.
pub fn volume_dir(node_root: &Path, pv: &PersistentVolume) -> Option<PathBuf> {
    let path = pv.spec.as_ref()?.host_path.as_ref()?.path.clone();
    Some(node_root.join(path.trim_start_matches('/')))
}

/// The node a volume is pinned to.
pub fn volume_node(pv: &PersistentVolume) -> Option<String> {
    let terms = &pv.spec.as_ref()?.node_affinity.as_ref()?.required.as_ref()?.node_selector_terms;
    terms.iter().flat_map(|t| t.match_expressions.iter().flatten()).find(|e| e.key == HOSTNAME_LABEL)?.values.as_ref()?.first().cloned()
}

/// Provisions, reclaims and expands, once a second, until the task is dropped.
pub async fn run(shared: std::sync::Arc<Shared>) {
    loop {
        if let Err(e) = pass(&shared).await {
            tracing::debug!(error = %e, "volume pass failed (retrying)");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn pass(shared: &Shared) -> Result<(), kube::Error> {
    let claims: Api<PersistentVolumeClaim> = Api::all(shared.client.clone());
    let volumes: Api<PersistentVolume> = Api::all(shared.client.clone());
    let claims = claims.list(&ListParams::default()).await?.items;
    let pvs = volumes.list(&ListParams::default()).await?.items;
    let by_name: BTreeMap<String, &PersistentVolume> = pvs.iter().map(|pv| (pv.name_any(), pv)).collect();
    for claim in &claims {
        if claim.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()) != Some(STORAGE_CLASS) || claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let bound = claim.spec.as_ref().and_then(|s| s.volume_name.clone()).filter(|v| !v.is_empty());
        match bound {
            None => provision(shared, &volumes, claim, &by_name).await?,
            Some(pv) => {
                if let Some(pv) = by_name.get(&pv) {
                    expand(shared, &volumes, claim, pv).await?;
                }
            }
        }
    }
    for pv in &pvs {
        let ours = pv.annotations().get(PROVISIONED_BY).map(String::as_str) == Some(PROVISIONER);
        let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
        let delete = pv.spec.as_ref().and_then(|s| s.persistent_volume_reclaim_policy.as_deref()) == Some("Delete");
        if ours && released && delete {
            reclaim(shared, &volumes, pv).await?;
        }
    }
    Ok(())
}

fn requested(claim: &PersistentVolumeClaim) -> Option<Quantity> {
    claim.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?.get("storage").cloned()
}

async fn provision(
    shared: &Shared,
    volumes: &Api<PersistentVolume>,
    claim: &PersistentVolumeClaim,
    existing: &BTreeMap<String, &PersistentVolume>,
) -> Result<(), kube::Error> {
    let Some(node) = claim.annotations().get(SELECTED_NODE).cloned() else { return Ok(()) };
    let Some(index) = shared.node_index(&node) else { return Ok(()) };
    let uid = claim.uid().unwrap_or_default();
    let name = format!("pvc-{uid}");
    if existing.contains_key(&name) {
        return Ok(());
    }
    let path = format!("{VOLUME_ROOT}/{name}_{}_{}", claim.namespace().unwrap_or_default(), claim.name_any());
    let dir = shared.node_root(index).join(path.trim_start_matches('/'));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "failed to create a volume directory");
        return Ok(());
    }
    let pv = PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            annotations: Some([(PROVISIONED_BY.to_string(), PROVISIONER.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: requested(claim).map(|q| [("storage".to_string(), q)].into()),
            access_modes: claim.spec.as_ref().and_then(|s| s.access_modes.clone()),
            persistent_volume_reclaim_policy: Some("Delete".to_string()),
            storage_class_name: Some(STORAGE_CLASS.to_string()),
            volume_mode: Some("Filesystem".to_string()),
            host_path: Some(HostPathVolumeSource { path, type_: Some("DirectoryOrCreate".to_string()) }),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".to_string()),
                kind: Some("PersistentVolumeClaim".to_string()),
                namespace: claim.namespace(),
                name: Some(claim.name_any()),
                uid: Some(uid),
                ..ObjectReference::default()
            }),
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: HOSTNAME_LABEL.to_string(),
                            operator: "In".to_string(),
                            values: Some(vec![node.clone()]),
                        }]),
                        match_fields: None,
                    }],
                }),
            }),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    };
    match volumes.create(&PostParams::default(), &pv).await {
        Ok(_) => {
            tracing::info!(volume = %name, claim = %claim.name_any(), %node, "provisioned a local volume");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Gives a bound claim the capacity it asks for, if it asks for more than its volume has.
async fn expand(shared: &Shared, volumes: &Api<PersistentVolume>, claim: &PersistentVolumeClaim, pv: &PersistentVolume) -> Result<(), kube::Error> {
    let Some(wanted) = requested(claim) else { return Ok(()) };
    let capacity = |c: Option<&BTreeMap<String, Quantity>>| c.and_then(|c| c.get("storage")).map(|q| q.0.clone());
    let has = capacity(pv.spec.as_ref().and_then(|s| s.capacity.as_ref()));
    let reported = capacity(claim.status.as_ref().and_then(|s| s.capacity.as_ref()));
    let bigger = |a: &str, b: Option<&String>| keymesh_bytes(a).zip(b.and_then(|b| keymesh_bytes(b))).is_some_and(|(a, b)| a > b);
    if bigger(&wanted.0, has.as_ref()) {
        volumes.patch(&pv.name_any(), &PatchParams::default(), &Patch::Merge(json!({"spec": {"capacity": {"storage": wanted.0}}}))).await?;
        tracing::info!(volume = %pv.name_any(), to = %wanted.0, "expanded a local volume");
    }
    if has.is_some() && (bigger(&wanted.0, reported.as_ref()) || reported.is_none()) && claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
    {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(shared.client.clone(), &claim.namespace().unwrap_or_default());
        let status = json!({"status": {"capacity": {"storage": wanted.0}, "conditions": null}});
        claims.patch_status(&claim.name_any(), &PatchParams::default(), &Patch::Merge(status)).await?;
    }
    Ok(())
}

/// Removes a released volume's files and object.
async fn reclaim(shared: &Shared, volumes: &Api<PersistentVolume>, pv: &PersistentVolume) -> Result<(), kube::Error> {
    if let Some(index) = volume_node(pv).and_then(|n| shared.node_index(&n)) {
        if let Some(dir) = volume_dir(&shared.node_root(index), pv) {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(dir = %dir.display(), error = %e, "failed to remove a released volume");
                    return Ok(());
                }
            }
        }
    }
    match volumes.delete(&pv.name_any(), &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(volume = %pv.name_any(), "reclaimed a released local volume");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// A storage quantity in bytes (binary and decimal suffixes).
fn keymesh_bytes(q: &str) -> Option<u128> {
    let q = q.trim();
    let split = q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let number: u128 = number.parse().ok()?;
    let factor: u128 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return None,
    };
    number.checked_mul(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_compare_across_suffixes() {
        assert_eq!(keymesh_bytes("1Gi"), Some(1 << 30));
        assert!(keymesh_bytes("2Gi") > keymesh_bytes("2G"));
        assert_eq!(keymesh_bytes("1.5Gi"), None);
    }

    #[test]
    fn a_volume_names_its_node_and_directory() {
        let pv: PersistentVolume = serde_yaml::from_str(
            "metadata: {name: pvc-1}
spec:
  hostPath: {path: /var/lib/keymesh-local-path/pvc-1_cache_data-demo-0}
  nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [km-node-b]}]}]}}",
        )
        .expect("a volume");
        assert_eq!(volume_node(&pv).as_deref(), Some("km-node-b"));
        assert_eq!(volume_dir(Path::new("/r/km-node-b"), &pv), Some(PathBuf::from("/r/km-node-b/var/lib/keymesh-local-path/pvc-1_cache_data-demo-0")));
    }
}
