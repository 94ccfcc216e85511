//! `spec.persistence`: a volume per engine pod for its snapshots (operator README,
//! "Persistence").
//!
//! - **Claims**: the StatefulSet gets a `volumeClaimTemplates` entry `data` (ReadWriteOnce, the
//!   spec's class and size), mounted at `DATA_DIR`, the engine's `dir`; the engine snapshots
//!   there every `snapshotIntervalSeconds` when anything changed (`save <seconds> 1`) and loads
//!   the snapshot when it starts.
//! - **Immutable templates**: a StatefulSet's `volumeClaimTemplates` cannot change. Turning
//!   persistence on or off, or changing the class, deletes the StatefulSet with
//!   `propagationPolicy: Orphan` (the pods keep running) and creates it again; the pods' template
//!   changed with it, so the rolling upgrade replaces them one at a time, each with its handoff
//!   (`recreate_reason`). A size change keeps the live template (`keep_live_claim_size`) and
//!   resizes the existing claims instead (`claims`), which needs a StorageClass with
//!   `allowVolumeExpansion`; claims never shrink.
//! - **Retention**: `persistentVolumeClaimRetentionPolicy` where the API server has it
//!   (Kubernetes 1.27+, where the `StatefulSetAutoDeletePVC` gate is on by default;
//!   `Capabilities::pvc_retention_policy`): `whenDeleted` from `retainOnDelete`, `whenScaled:
//!   Delete`. Older servers (1.20) get the same behaviour from the operator (`claims`): an owner
//!   reference to the CacheCluster on each claim when `retainOnDelete` is false (the garbage
//!   collector deletes them with the cluster), and the claims of pods a scale down removed are
//!   deleted once the pods are gone — their snapshots would be stale, and a stale snapshot
//!   must not come back with a later scale up.
//!
//! Pure except `claims::apply`.

pub mod claims;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::PersistenceSpec;
use crate::quantity::quantity_bytes;

/// The claim template's (and the pod volume's) name; claims are `data-<pod>`.
pub const DATA_VOLUME: &str = "data";

/// Where the claim is mounted: the engine's `dir`.
pub const DATA_DIR: &str = "/var/lib/keymesh";

/// `spec.persistence` checked, when enabled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Persistence {
    pub storage_class_name: Option<String>,
    /// The claim size as the spec gives it (a Kubernetes quantity).
    pub size: String,
    pub size_bytes: u64,
    pub snapshot_interval_seconds: i32,
    pub retain_on_delete: bool,
}

impl Persistence {
    /// The engine directives: its snapshot directory and schedule.
    pub fn engine_directives(&self) -> Vec<(String, String)> {
        vec![("dir".to_string(), DATA_DIR.to_string()), ("save".to_string(), format!("{} 1", self.snapshot_interval_seconds))]
    }
}

/// Checks `spec.persistence`; `None` when disabled.
pub fn validate(spec: &PersistenceSpec, errors: &mut Vec<String>) -> Option<Persistence> {
    if !spec.enabled {
        return None;
    }
    let size_bytes = match quantity_bytes(&spec.size) {
        Some(0) | None => {
            errors.push(format!("spec.persistence.size: '{}' is not a storage size (a quantity like 1Gi or 500Mi)", spec.size));
            0
        }
        Some(bytes) => bytes,
    };
    if let Some(class) = &spec.storage_class_name {
        let valid = !class.is_empty()
            && class.len() <= 253
            && class.split('.').all(|part| {
                !part.is_empty()
                    && part.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            });
        if !valid {
            errors.push(format!("spec.persistence.storageClassName: '{class}' is not a StorageClass name (lowercase DNS subdomain)"));
        }
    }
    if spec.snapshot_interval_seconds < 1 {
        errors.push(format!("spec.persistence.snapshotIntervalSeconds: must be at least 1, got {}", spec.snapshot_interval_seconds));
    }
    Some(Persistence {
        storage_class_name: spec.storage_class_name.clone(),
        size: spec.size.clone(),
        size_bytes,
        snapshot_interval_seconds: spec.snapshot_interval_seconds,
        retain_on_delete: spec.retain_on_delete,
    })
}

/// The StatefulSet's claim templates for `persistence`.
pub fn claim_templates(persistence: Option<&Persistence>, selector: &std::collections::BTreeMap<String, String>) -> Option<Vec<PersistentVolumeClaim>> {
    let p = persistence?;
    Some(vec![PersistentVolumeClaim {
        metadata: ObjectMeta { name: Some(DATA_VOLUME.to_string()), labels: Some(selector.clone()), ..ObjectMeta::default() },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_string()]),
            storage_class_name: p.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some([("storage".to_string(), Quantity(p.size.clone()))].into()),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }])
}

/// `persistentVolumeClaimRetentionPolicy`, for API servers that have it.
pub fn retention_policy(persistence: Option<&Persistence>, supported: bool) -> Option<StatefulSetPersistentVolumeClaimRetentionPolicy> {
    let p = persistence.filter(|_| supported)?;
    Some(StatefulSetPersistentVolumeClaimRetentionPolicy {
        when_deleted: Some(if p.retain_on_delete { "Retain" } else { "Delete" }.to_string()),
        when_scaled: Some("Delete".to_string()),
    })
}

/// A live StatefulSet's claim template, as far as the operator compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveClaimTemplate {
    pub name: String,
    pub storage_class_name: Option<String>,
    pub size: Option<String>,
}

/// The claim templates of a live StatefulSet.
pub fn live_claim_templates(statefulset: &StatefulSet) -> Vec<LiveClaimTemplate> {
    statefulset
        .spec
        .iter()
        .flat_map(|s| s.volume_claim_templates.iter().flatten())
        .map(|c| LiveClaimTemplate {
            name: c.metadata.name.clone().unwrap_or_default(),
            storage_class_name: c.spec.as_ref().and_then(|s| s.storage_class_name.clone()),
            size: requested_size(c),
        })
        .collect()
}

/// A claim's (or claim template's) requested storage.
pub fn requested_size(claim: &PersistentVolumeClaim) -> Option<String> {
    claim.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?.get("storage").map(|q| q.0.clone())
}

/// Why the live StatefulSet must be recreated to carry the built one's claim templates (the
/// field is immutable), if it must: persistence turned on or off, or another StorageClass.
pub fn recreate_reason(live: &[LiveClaimTemplate], built: &StatefulSet) -> Option<String> {
    let built = live_claim_templates(built);
    let shape = |templates: &[LiveClaimTemplate]| templates.iter().map(|t| (t.name.clone(), t.storage_class_name.clone())).collect::<Vec<_>>();
    if shape(live) == shape(&built) {
        return None;
    }
    Some(match (live.is_empty(), built.is_empty()) {
        (true, false) => "persistence was turned on".to_string(),
        (false, true) => "persistence was turned off".to_string(),
        _ => "the claims' StorageClass changed".to_string(),
    })
}

/// Sends the live claim template's size instead of the spec's (the template is immutable;
/// `claims` resizes the claims themselves).
pub fn keep_live_claim_size(live: &[LiveClaimTemplate], built: &mut StatefulSet) {
    let templates = built.spec.iter_mut().flat_map(|s| s.volume_claim_templates.iter_mut().flatten());
    for template in templates {
        let name = template.metadata.name.clone().unwrap_or_default();
        let Some(size) = live.iter().find(|l| l.name == name).and_then(|l| l.size.clone()) else { continue };
        if let Some(requests) = template.spec.as_mut().and_then(|s| s.resources.as_mut()).and_then(|r| r.requests.as_mut()) {
            requests.insert("storage".to_string(), Quantity(size));
        }
    }
}

#[cfg(test)]
mod tests;
