//! The cluster's PersistentVolumeClaims (`data-<pod>`): resized when `spec.persistence.size`
//! grows, given an owner reference to the CacheCluster when they must go with it, and deleted
//! when a scale down removed their pod — the last two only where the API server has no
//! `persistentVolumeClaimRetentionPolicy` to do it (module docs of `persistence`).
//!
//! `plan` is pure (claims and facts in, actions out); `apply` carries the actions out, and a
//! refused one (a StorageClass without volume expansion) is reported, never fatal.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::{requested_size, Persistence, DATA_VOLUME};
use crate::api::CacheCluster;
use crate::build::pod_selector;
use crate::events::Transition;
use crate::names::ClusterNames;
use crate::quantity::quantity_bytes;

#[derive(Debug, thiserror::Error)]
pub enum ClaimsError {
    #[error("failed to list the PersistentVolumeClaims of CacheCluster {name}: {source}")]
    List { name: String, source: kube::Error },
}

/// What to do to one claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimAction {
    /// Ask for `size` (the StorageClass expands the volume).
    Resize { claim: String, from: String, to: String },
    /// The spec asks for less than the claim has: claims never shrink.
    ShrinkRefused { claim: String, size: String, wanted: String },
    /// Add (`owned`) or remove the owner reference to the CacheCluster.
    Own { claim: String, owned: bool },
    /// Its pod was removed by a scale down.
    Delete { claim: String },
}

/// What `plan` decides from.
pub struct ClaimsInput<'a> {
    pub names: &'a ClusterNames,
    pub persistence: &'a Persistence,
    pub claims: &'a [PersistentVolumeClaim],
    /// Ordinals of the pods that exist.
    pub pods: &'a BTreeSet<u32>,
    /// The StatefulSet's replicas now (`None` while it does not exist).
    pub statefulset_replicas: Option<u32>,
    /// `spec.replicas`.
    pub replicas: u32,
    /// The API server has `persistentVolumeClaimRetentionPolicy`: the StatefulSet controller
    /// owns and deletes the claims.
    pub retention_policy: bool,
    /// The CacheCluster's uid.
    pub cluster_uid: &'a str,
}

/// The ordinal of claim `data-<pod>` of this cluster.
fn claim_ordinal(names: &ClusterNames, claim: &str) -> Option<u32> {
    names.ordinal_of(claim.strip_prefix(DATA_VOLUME)?.strip_prefix('-')?)
}

pub fn plan(input: &ClaimsInput) -> Vec<ClaimAction> {
    let mut actions = Vec::new();
    for claim in input.claims {
        let name = claim.name_any();
        let Some(ordinal) = claim_ordinal(input.names, &name) else { continue };
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let kept = ordinal < input.replicas.max(input.statefulset_replicas.unwrap_or(0));
        if !input.retention_policy && !kept && !input.pods.contains(&ordinal) {
            actions.push(ClaimAction::Delete { claim: name });
            continue;
        }
        if let Some(size) = requested_size(claim) {
            match quantity_bytes(&size) {
                Some(bytes) if bytes < input.persistence.size_bytes => {
                    actions.push(ClaimAction::Resize { claim: name.clone(), from: size, to: input.persistence.size.clone() })
                }
                Some(bytes) if bytes > input.persistence.size_bytes => {
                    actions.push(ClaimAction::ShrinkRefused { claim: name.clone(), size, wanted: input.persistence.size.clone() })
                }
                _ => {}
            }
        }
        if !input.retention_policy {
            let owned = claim.owner_references().iter().any(|o| o.uid == input.cluster_uid);
            if owned == input.persistence.retain_on_delete {
                actions.push(ClaimAction::Own { claim: name, owned: !input.persistence.retain_on_delete });
            }
        }
    }
    actions
}

/// The cluster's claims.
pub async fn observe(client: &kube::Client, names: &ClusterNames) -> Result<Vec<PersistentVolumeClaim>, ClaimsError> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &names.namespace);
    let list = api.list(&ListParams::default().labels(&pod_selector(names))).await.map_err(|source| ClaimsError::List { name: names.name.clone(), source })?;
    Ok(list.items)
}

/// Carries the actions out; returns the Events to publish (refusals are warnings).
pub async fn apply(
    client: &kube::Client,
    names: &ClusterNames,
    cluster: &CacheCluster,
    claims: &[PersistentVolumeClaim],
    actions: &[ClaimAction],
) -> Vec<Transition> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &names.namespace);
    let merge = PatchParams::default();
    let mut events = Vec::new();
    for action in actions {
        let event = |warning: bool, reason: &'static str, note: String| Transition { warning, reason, action: "Persist", note, pod: None };
        match action {
            ClaimAction::Resize { claim, from, to } => {
                let patch = json!({"spec": {"resources": {"requests": {"storage": to}}}});
                events.push(match api.patch(claim, &merge, &Patch::Merge(&patch)).await {
                    Ok(_) => event(false, "ResizingVolume", format!("{claim}: {from} -> {to}")),
                    Err(e) => event(true, "VolumeResizeRefused", format!("{claim} stays at {from}: {e} (its StorageClass needs allowVolumeExpansion: true)")),
                });
            }
            ClaimAction::ShrinkRefused { claim, size, wanted } => {
                events.push(event(true, "VolumeShrinkRefused", format!("{claim} keeps {size}: a claim cannot shrink to {wanted}")));
            }
            ClaimAction::Own { claim, owned } => {
                let Some(current) = claims.iter().find(|c| c.name_any() == *claim) else { continue };
                let mut owners: Vec<OwnerReference> =
                    current.owner_references().iter().filter(|o| o.uid != cluster.uid().unwrap_or_default()).cloned().collect();
                if *owned {
                    if let Some(mut owner) = cluster.controller_owner_ref(&()) {
                        // Not the claim's controller: the StatefulSet controller made it.
                        owner.controller = None;
                        owner.block_owner_deletion = None;
                        owners.push(owner);
                    }
                }
                let patch = json!({"metadata": {"ownerReferences": owners}});
                if let Err(e) = api.patch(claim, &merge, &Patch::Merge(&patch)).await {
                    events.push(event(true, "VolumeRetentionFailed", format!("failed to update the owner references of {claim}: {e}")));
                }
            }
            ClaimAction::Delete { claim } => match api.delete(claim, &DeleteParams::default()).await {
                Ok(_) => events.push(event(false, "DeletedVolume", format!("{claim}: its pod was removed by a scale down, its snapshot would be stale"))),
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => events.push(event(true, "VolumeDeleteFailed", format!("failed to delete {claim}: {e}"))),
            },
        }
    }
    events
}
