//! Writes the Argo CD health check's testdata (`manifests/argocd/resource_customizations/
//! keymesh.io/CacheCluster/testdata/`) from this module's status code, so the Lua check is
//! tested on the statuses the operator really writes; fails when a committed file differs
//! (regenerate with `KEYMESH_UPDATE_MANIFESTS=1 cargo test -p keymesh-operator health_testdata`).
//! `e2e/tests/argocd_health.rs` runs `health.lua` on them.

use std::path::Path;

use k8s_openapi::jiff::Timestamp;

use super::invalid;
use super::test_helpers::{status_of, status_with};
use crate::api::{CacheCluster, UpgradeState, UpgradeStatus};
use crate::mesh::MemberState;
use crate::test_support::{cluster, full_mesh, silent};
use crate::upgrade::UpgradePlan;
use crate::validate::validate;

const DIR: &str = "../manifests/argocd/resource_customizations/keymesh.io/CacheCluster/testdata";

fn at(minute: u32) -> Timestamp {
    format!("2024-01-01T00:{minute:02}:00Z").parse().expect("timestamp")
}

/// The upgrade step's answer in `state`, one of three pods on the new revision.
fn upgrading(state: UpgradeState, current_pod: Option<&str>, message: &str) -> UpgradePlan {
    let status = UpgradeStatus {
        state,
        from_revision: Some("rev-1".into()),
        to_revision: "rev-2".into(),
        from_version: Some("0.1.0".into()),
        to_version: "0.2.0".into(),
        updated_replicas: 1,
        current_pod: current_pod.map(str::to_string),
        failed_pod: (state == UpgradeState::Failed).then(|| "demo-2".to_string()),
        started_at: None,
        message: message.into(),
    };
    UpgradePlan { target: "rev-2".into(), rollback: false, partition: 2, handoff: None, status: Some(status), complete: false }
}

/// A 3-pod cluster that ran 0.1.0, its spec now asking for 0.2.0 (`extra` more spec), with
/// the status a reconcile computes during `upgrade`.
fn during_upgrade(extra: &str, members: &[MemberState], upgrade: &UpgradePlan) -> CacheCluster {
    let mut c = cluster(&format!("version: 0.2.0{extra}"));
    c.status = Some(status_of(&cluster("{}"), &full_mesh(3), Some(3), at(0)));
    c.status = Some(status_with(&c, members, Some(3), upgrade, at(5)));
    c
}

/// `spec_yaml` with the status a reconcile computes from `members`, after a first reconcile
/// that saw a running 3-pod full mesh (when `ran` is true).
fn observed(spec_yaml: &str, ran: bool, members: &[MemberState], statefulset_replicas: Option<u32>) -> CacheCluster {
    let mut c = cluster(spec_yaml);
    if ran {
        c.status = Some(status_of(&cluster("{}"), &full_mesh(3), Some(3), at(0)));
    }
    c.status = Some(status_of(&c, members, statefulset_replicas, at(5)));
    c
}

fn scenarios() -> Vec<(&'static str, CacheCluster)> {
    let mut generation_ahead = observed("{}", true, &full_mesh(3), Some(3));
    generation_ahead.spec.replicas = 5;
    generation_ahead.metadata.generation = Some(2);

    let mut creating = cluster("{}");
    creating.status = Some(status_of(&creating, &[], None, at(0)));
    creating.status = Some(status_of(&creating, &[crate::test_support::engine(0, &[1, 2], false), silent(1, false), silent(2, false)], Some(3), at(1)));

    let mut lost = full_mesh(3);
    lost[1] = silent(1, true);

    let mut partitioned = full_mesh(3);
    for (i, m) in partitioned.iter_mut().enumerate() {
        for p in &mut m.status.as_mut().expect("answers").peers {
            if i == 2 || p.node_name == "demo-2" {
                p.link = "down".into();
            }
        }
    }

    let mut invalid_spec = cluster("tls: {enabled: true, authClients: maybe}");
    invalid_spec.status = Some(status_of(&cluster("{}"), &full_mesh(3), Some(3), at(0)));
    let error = validate(&invalid_spec).expect_err("authClients: maybe is invalid");
    invalid_spec.status = Some(invalid(&invalid_spec, &error, at(5)));

    let mut replacing = full_mesh(3);
    replacing[2].pod_ready = false;

    vec![
        (
            "progressing-upgrading.yaml",
            during_upgrade("", &replacing, &upgrading(UpgradeState::Rolling, Some("demo-2"), "demo-2 runs the new revision and is syncing")),
        ),
        (
            "suspended-upgrade-paused-mid-roll.yaml",
            during_upgrade("\nupgrade: {paused: true}", &full_mesh(3), &upgrading(UpgradeState::Paused, None, "paused before demo-1")),
        ),
        (
            "degraded-upgrade-failed.yaml",
            during_upgrade(
                "\nupgrade: {autoRollback: false}",
                &full_mesh(3),
                &upgrading(UpgradeState::Failed, Some("demo-2"), "demo-2 cannot start: ErrImagePull: keymesh/keymesh-server:0.2.0 is not mapped"),
            ),
        ),
        ("healthy.yaml", observed("{}", true, &full_mesh(3), Some(3))),
        ("progressing-no-status.yaml", cluster("{}")),
        ("progressing-generation-ahead.yaml", generation_ahead),
        ("progressing-creating.yaml", creating),
        ("progressing-scaling.yaml", observed("replicas: 5", true, &full_mesh(3), Some(3))),
        ("degraded-pod-lost.yaml", observed("{}", true, &lost, Some(3))),
        ("degraded-mesh-links-down.yaml", observed("{}", true, &partitioned, Some(3))),
        ("degraded-invalid-spec.yaml", invalid_spec),
        ("suspended-upgrade-paused.yaml", observed("upgrade: {paused: true}", true, &full_mesh(3), Some(3))),
    ]
}

#[test]
fn committed_testdata_is_what_the_status_code_writes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(DIR);
    let update = std::env::var_os("KEYMESH_UPDATE_MANIFESTS").is_some();
    for (file, object) in scenarios() {
        let text = format!(
            "# Generated by operator/src/status/health_testdata.rs from the operator's status code; do not edit.\n{}",
            serde_yaml::to_string(&object).expect("YAML")
        );
        let path = dir.join(file);
        if update {
            std::fs::create_dir_all(&dir).expect("testdata directory");
            std::fs::write(&path, &text).expect("write testdata");
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == text,
            "{} differs from what the status code writes; regenerate with KEYMESH_UPDATE_MANIFESTS=1 cargo test -p keymesh-operator health_testdata",
            path.display()
        );
    }
}
