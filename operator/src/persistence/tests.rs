//! `spec.persistence` from inline YAML: validation, the claim templates and their immutable
//! parts, and the claims plan.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::claims::{plan, ClaimAction, ClaimsInput};
use super::*;
use crate::api::PersistenceSpec;
use crate::names::ClusterNames;

fn spec(yaml: &str) -> PersistenceSpec {
    serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("persistence spec does not parse: {e}\n{yaml}"))
}

fn valid(yaml: &str) -> Persistence {
    let mut errors = Vec::new();
    let p = validate(&spec(yaml), &mut errors).expect("enabled");
    assert!(errors.is_empty(), "{errors:?}");
    p
}

#[test]
fn defaults_and_errors_name_their_field() {
    let p = valid("{enabled: true}");
    assert_eq!((p.size.as_str(), p.size_bytes, p.snapshot_interval_seconds, p.retain_on_delete), ("1Gi", 1 << 30, 300, true));
    assert_eq!(p.engine_directives(), [("dir".to_string(), DATA_DIR.to_string()), ("save".to_string(), "300 1".to_string())]);
    assert!(validate(&spec("{}"), &mut Vec::new()).is_none(), "off by default");
    let mut errors = Vec::new();
    validate(&spec("{enabled: true, size: lots, storageClassName: Fast_SSD, snapshotIntervalSeconds: 0}"), &mut errors);
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(errors[0].starts_with("spec.persistence.size: 'lots'"), "{errors:?}");
    assert!(errors[1].starts_with("spec.persistence.storageClassName: 'Fast_SSD'"), "{errors:?}");
    assert!(errors[2].starts_with("spec.persistence.snapshotIntervalSeconds"), "{errors:?}");
}

fn statefulset_with(templates: Option<Vec<PersistentVolumeClaim>>) -> k8s_openapi::api::apps::v1::StatefulSet {
    k8s_openapi::api::apps::v1::StatefulSet {
        spec: Some(k8s_openapi::api::apps::v1::StatefulSetSpec { volume_claim_templates: templates, ..Default::default() }),
        ..Default::default()
    }
}

#[test]
fn claim_templates_carry_class_size_and_selector_labels() {
    let selector = [("app.kubernetes.io/instance".to_string(), "demo".to_string())].into();
    let p = valid("{enabled: true, storageClassName: fast, size: 2Gi}");
    let templates = claim_templates(Some(&p), &selector).expect("templates");
    let yaml = serde_yaml::to_string(&templates).expect("yaml");
    assert_eq!(templates[0].metadata.name.as_deref(), Some("data"), "{yaml}");
    let spec = templates[0].spec.as_ref().expect("spec");
    assert_eq!(spec.access_modes.as_deref(), Some(&["ReadWriteOnce".to_string()][..]), "{yaml}");
    assert_eq!(spec.storage_class_name.as_deref(), Some("fast"), "{yaml}");
    assert_eq!(requested_size(&templates[0]).as_deref(), Some("2Gi"), "{yaml}");
    assert_eq!(templates[0].metadata.labels.as_ref(), Some(&selector), "{yaml}");
    assert!(claim_templates(None, &selector).is_none());

    assert_eq!(retention_policy(Some(&p), false), None, "Kubernetes 1.20 has no retention policy");
    let policy = retention_policy(Some(&p), true).expect("a policy");
    assert_eq!((policy.when_deleted.as_deref(), policy.when_scaled.as_deref()), (Some("Retain"), Some("Delete")));
    let deleting = valid("{enabled: true, retainOnDelete: false}");
    assert_eq!(retention_policy(Some(&deleting), true).and_then(|p| p.when_deleted).as_deref(), Some("Delete"));
}

/// Turning persistence on or off, or another class, needs a new StatefulSet; a size change
/// keeps the live template and resizes the claims.
#[test]
fn immutable_claim_templates_recreate_the_statefulset_sizes_do_not() {
    let selector = Default::default();
    let small = statefulset_with(claim_templates(Some(&valid("{enabled: true, size: 1Gi}")), &selector));
    let live = live_claim_templates(&small);
    let mut big = statefulset_with(claim_templates(Some(&valid("{enabled: true, size: 5Gi}")), &selector));
    assert_eq!(recreate_reason(&live, &big), None);
    keep_live_claim_size(&live, &mut big);
    assert_eq!(live_claim_templates(&big)[0].size.as_deref(), Some("1Gi"), "the template keeps its live size");

    let none = statefulset_with(None);
    assert_eq!(recreate_reason(&[], &small).as_deref(), Some("persistence was turned on"));
    assert_eq!(recreate_reason(&live, &none).as_deref(), Some("persistence was turned off"));
    let other = statefulset_with(claim_templates(Some(&valid("{enabled: true, storageClassName: other}")), &selector));
    assert_eq!(recreate_reason(&live, &other).as_deref(), Some("the claims' StorageClass changed"));
    assert_eq!(recreate_reason(&[], &none), None);
}

fn claim(name: &str, size: &str, owner_uid: Option<&str>) -> PersistentVolumeClaim {
    let owners =
        owner_uid.map(|uid| format!("ownerReferences: [{{apiVersion: keymesh.io/v1alpha1, kind: CacheCluster, name: demo, uid: {uid}}}]")).unwrap_or_default();
    serde_yaml::from_str(&format!("metadata: {{name: {name}, {owners}}}\nspec: {{resources: {{requests: {{storage: {size}}}}}}}")).expect("a claim")
}

#[test]
fn claims_grow_never_shrink_follow_retention_and_go_with_scaled_away_pods() {
    let names = ClusterNames::new("demo", "cache", "cluster.local");
    let claims = vec![
        claim("data-demo-0", "1Gi", None),
        claim("data-demo-1", "4Gi", None),
        claim("data-demo-2", "2Gi", None),
        claim("data-demo-3", "2Gi", None),
        claim("data-other-0", "1Gi", None),
    ];
    let persistence = valid("{enabled: true, size: 2Gi, retainOnDelete: false}");
    let pods = BTreeSet::from([0, 1, 2]);
    let input = ClaimsInput {
        names: &names,
        persistence: &persistence,
        claims: &claims,
        pods: &pods,
        statefulset_replicas: Some(3),
        replicas: 3,
        retention_policy: false,
        cluster_uid: "uid-1",
    };
    assert_eq!(
        plan(&input),
        [
            ClaimAction::Resize { claim: "data-demo-0".into(), from: "1Gi".into(), to: "2Gi".into() },
            ClaimAction::Own { claim: "data-demo-0".into(), owned: true },
            ClaimAction::ShrinkRefused { claim: "data-demo-1".into(), size: "4Gi".into(), wanted: "2Gi".into() },
            ClaimAction::Own { claim: "data-demo-1".into(), owned: true },
            ClaimAction::Own { claim: "data-demo-2".into(), owned: true },
            ClaimAction::Delete { claim: "data-demo-3".into() },
        ]
    );
    let with_policy = ClaimsInput { retention_policy: true, ..input };
    assert_eq!(
        plan(&with_policy),
        [
            ClaimAction::Resize { claim: "data-demo-0".into(), from: "1Gi".into(), to: "2Gi".into() },
            ClaimAction::ShrinkRefused { claim: "data-demo-1".into(), size: "4Gi".into(), wanted: "2Gi".into() },
        ],
        "the StatefulSet controller owns and deletes the claims"
    );

    // Kept: an owned claim stays owned, a retained one loses the reference; a claim whose pod
    // still exists (a scale down not finished) is not deleted.
    let retained = valid("{enabled: true, size: 2Gi}");
    let claims = vec![claim("data-demo-0", "2Gi", Some("uid-1")), claim("data-demo-3", "2Gi", None)];
    let pods = BTreeSet::from([0, 3]);
    let input = ClaimsInput { persistence: &retained, claims: &claims, pods: &pods, ..with_policy };
    let input = ClaimsInput { retention_policy: false, ..input };
    assert_eq!(plan(&input), [ClaimAction::Own { claim: "data-demo-0".into(), owned: false }]);
}
