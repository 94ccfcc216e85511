use super::*;
use crate::api::condition_types as types;
use crate::mesh::{plan, PlanInput};
use crate::node_tuning::Tuners;
use crate::status::test_helpers::{status_of, status_with, steady};
use crate::test_support::{cluster, engine, full_mesh, names, silent};
use crate::validate::validate;

fn at(time: &str) -> Timestamp {
    time.parse().expect("timestamp")
}

fn upgrade(state: crate::api::UpgradeState, current_pod: Option<&str>, message: &str) -> UpgradePlan {
    let status = crate::api::UpgradeStatus {
        state,
        from_revision: Some("rev-1".into()),
        to_revision: "rev-2".into(),
        from_version: Some("0.1.0".into()),
        to_version: "0.2.0".into(),
        updated_replicas: 1,
        current_pod: current_pod.map(str::to_string),
        failed_pod: None,
        started_at: None,
        message: message.into(),
    };
    UpgradePlan { target: "rev-2".into(), rollback: false, partition: 2, handoff: None, status: Some(status), complete: false }
}

#[test]
fn an_upgrade_shows_in_the_phase_and_progressing_and_the_version_moves_only_at_the_end() {
    use crate::api::UpgradeState;
    let mut c = cluster("version: 0.2.0");
    c.status = Some(CacheClusterStatus { phase: Some(Phase::Running), current_version: Some("0.1.0".into()), ..CacheClusterStatus::default() });
    let mut members = full_mesh(3);
    members[2].pod_ready = false;
    let rolling = upgrade(UpgradeState::Rolling, Some("demo-2"), "demo-2 runs the new revision and is syncing");
    let status = status_with(&c, &members, Some(3), &rolling, at("2024-01-01T00:00:00Z"));
    assert_eq!(status.phase, Some(Phase::Upgrading), "{status:#?}");
    let progressing = condition(&status, types::PROGRESSING);
    assert_eq!((progressing.status.as_str(), progressing.reason.as_str()), ("True", "Upgrading"), "{status:#?}");
    assert!(progressing.message.contains("0.1.0 → 0.2.0 (1/3 pods)"), "{status:#?}");
    assert_eq!(condition(&status, types::DEGRADED).status, "False", "the pod being replaced is not a degradation: {status:#?}");
    assert_eq!(status.current_version.as_deref(), Some("0.1.0"), "{status:#?}");
    assert_eq!(status.upgrade.as_ref().map(|u| u.state), Some(UpgradeState::Rolling));

    let paused = upgrade(UpgradeState::Paused, None, "paused before demo-1");
    let status = status_with(&c, &full_mesh(3), Some(3), &paused, at("2024-01-01T00:00:00Z"));
    assert_eq!((status.phase, condition(&status, types::PROGRESSING).reason.as_str()), (Some(Phase::Upgrading), "UpgradePaused"), "{status:#?}");

    let failed = upgrade(UpgradeState::Failed, Some("demo-2"), "demo-2 cannot start: ErrImagePull: not mapped");
    let status = status_with(&c, &full_mesh(3), Some(3), &failed, at("2024-01-01T00:00:00Z"));
    let progressing = condition(&status, types::PROGRESSING);
    assert_eq!((status.phase, progressing.status.as_str(), progressing.reason.as_str()), (Some(Phase::UpgradeFailed), "False", "UpgradeFailed"), "{status:#?}");
    assert!(progressing.message.contains("ErrImagePull: not mapped"), "the pod's own message: {status:#?}");

    let status = status_with(&c, &full_mesh(3), Some(3), &steady(), at("2024-01-01T00:00:00Z"));
    assert_eq!((status.phase, status.current_version.as_deref()), (Some(Phase::Running), Some("0.2.0")), "{status:#?}");
}

fn condition<'a>(status: &'a CacheClusterStatus, type_: &str) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    status.condition(type_).unwrap_or_else(|| panic!("no {type_} condition in {status:#?}"))
}

#[test]
fn a_new_cluster_is_pending_then_creating() {
    let c = cluster("{}");
    let status = status_of(&c, &[], None, at("2024-01-01T00:00:00Z"));
    assert_eq!(status.phase, Some(Phase::Pending), "{status:#?}");
    assert_eq!(condition(&status, types::PROGRESSING).reason, "Creating", "{status:#?}");

    let mut c = cluster("{}");
    c.status = Some(status);
    let status = status_of(&c, &[engine(0, &[1, 2], false), silent(1, false), silent(2, false)], Some(3), at("2024-01-01T00:00:10Z"));
    assert_eq!(status.phase, Some(Phase::Creating), "{status:#?}");
    assert_eq!(condition(&status, types::READY).status, "False", "{status:#?}");
    assert_eq!(condition(&status, types::DEGRADED).status, "False", "a cluster being created is not degraded: {status:#?}");
    assert_eq!(status.members.len(), 3, "{status:#?}");
}

#[test]
fn a_ready_full_mesh_is_running() {
    let c = cluster("{}");
    let status = status_of(&c, &full_mesh(3), Some(3), at("2024-01-01T00:00:00Z"));
    assert_eq!(status.phase, Some(Phase::Running), "{status:#?}");
    assert_eq!(status.ready_replicas, 3, "{status:#?}");
    assert_eq!(status.current_version.as_deref(), Some("0.1.0"), "{status:#?}");
    assert_eq!(status.target_version.as_deref(), Some(crate::api::DEFAULT_VERSION), "{status:#?}");
    assert_eq!(status.observed_generation, Some(1), "{status:#?}");
    for (type_, expected) in [
        (types::READY, "True"),
        (types::PROGRESSING, "False"),
        (types::DEGRADED, "False"),
        (types::MESH_CONNECTED, "True"),
        (types::CLOCK_SKEW, "False"),
        (types::NODE_TUNED, "False"),
    ] {
        assert_eq!(condition(&status, type_).status, expected, "{type_} in {status:#?}");
    }
    let member = &status.members[1];
    assert_eq!(
        (member.pod.as_str(), member.zone.as_deref(), member.ready, member.synced, member.connected_peers),
        ("demo-1", Some("zone-1"), true, true, 2),
        "{status:#?}"
    );
}

#[test]
fn a_lost_pod_degrades_a_running_cluster_and_transition_times_hold() {
    let mut c = cluster("{}");
    let running = status_of(&c, &full_mesh(3), Some(3), at("2024-01-01T00:00:00Z"));
    c.status = Some(running);
    let mut members = full_mesh(3);
    members[1] = silent(1, true);
    let degraded = status_of(&c, &members, Some(3), at("2024-01-01T00:10:00Z"));
    assert_eq!(degraded.phase, Some(Phase::Degraded), "{degraded:#?}");
    let condition_of = |type_| condition(&degraded, type_);
    assert_eq!(condition_of(types::DEGRADED).status, "True", "{degraded:#?}");
    assert!(condition_of(types::DEGRADED).message.contains("demo-1 is not ready"), "{degraded:#?}");
    assert!(condition_of(types::MESH_CONNECTED).message.contains("demo-1 does not answer"), "{degraded:#?}");
    assert_eq!(condition_of(types::DEGRADED).last_transition_time.0, at("2024-01-01T00:10:00Z"), "{degraded:#?}");
    assert_eq!(condition_of(types::CLOCK_SKEW).last_transition_time.0, at("2024-01-01T00:00:00Z"), "unchanged conditions keep their time: {degraded:#?}");
}

#[test]
fn a_partition_that_leaves_every_pod_ready_still_degrades_the_cluster() {
    let mut c = cluster("{}");
    c.status = Some(status_of(&c, &full_mesh(3), Some(3), at("2024-01-01T00:00:00Z")));
    let mut members = full_mesh(3);
    for (i, m) in members.iter_mut().enumerate() {
        for p in &mut m.status.as_mut().expect("answers").peers {
            if i == 2 || p.node_name == "demo-2" {
                p.link = "down".into();
            }
        }
    }
    let status = status_of(&c, &members, Some(3), at("2024-01-01T00:01:00Z"));
    assert_eq!(condition(&status, types::READY).status, "True", "{status:#?}");
    assert_eq!(condition(&status, types::MESH_CONNECTED).status, "False", "{status:#?}");
    assert_eq!(status.phase, Some(Phase::Degraded), "{status:#?}");
    let degraded = condition(&status, types::DEGRADED);
    assert!(degraded.status == "True" && degraded.message.contains("mesh links down") && degraded.message.contains("demo-2"), "{status:#?}");
}

#[test]
fn scaling_a_running_cluster() {
    let mut c = cluster("replicas: 5");
    c.status = Some(status_of(&cluster("{}"), &full_mesh(3), Some(3), at("2024-01-01T00:00:00Z")));
    let status = status_of(&c, &full_mesh(3), Some(3), at("2024-01-01T00:01:00Z"));
    assert_eq!(status.phase, Some(Phase::Scaling), "{status:#?}");
    let progressing = condition(&status, types::PROGRESSING);
    assert_eq!((progressing.status.as_str(), progressing.reason.as_str()), ("True", "ScalingUp"), "{status:#?}");
    assert_eq!(condition(&status, types::DEGRADED).status, "False", "new pods are not a degradation: {status:#?}");
}

#[test]
fn clock_skew_beyond_the_spec_maximum_is_reported() {
    let c = cluster("engine: {maxClockSkewMs: 200}");
    let mut members = full_mesh(3);
    if let Ok(status) = members[0].status.as_mut() {
        status.peers[0].clock_skew_ms = 900;
        status.skewed_receives = 4;
    }
    let status = status_of(&c, &members, Some(3), at("2024-01-01T00:00:00Z"));
    let skew = condition(&status, types::CLOCK_SKEW);
    assert_eq!(skew.status, "True", "{status:#?}");
    assert!(skew.message.contains("demo-0 sees demo-1's clock 900 ms off") && skew.message.contains("max 200 ms"), "{status:#?}");
}

#[test]
fn an_invalid_spec_fails_with_the_messages_and_keeps_the_members() {
    let mut c = cluster("tls: {enabled: true, authClients: maybe}");
    c.status = Some(status_of(&cluster("{}"), &full_mesh(3), Some(3), at("2024-01-01T00:00:00Z")));
    let invalid_spec = validate(&c).expect_err("authClients: maybe is invalid");
    let status = invalid(&c, &invalid_spec, at("2024-01-01T00:02:00Z"));
    assert_eq!(status.phase, Some(Phase::Failed), "{status:#?}");
    assert!(condition(&status, types::READY).message.contains("spec.tls.authClients"), "{status:#?}");
    assert_eq!(condition(&status, types::DEGRADED).reason, "InvalidSpec", "{status:#?}");
    assert_eq!(status.members.len(), 3, "{status:#?}");
    assert!(status.condition(types::MESH_CONNECTED).is_some(), "other conditions are kept: {status:#?}");
}

#[test]
fn a_missing_password_leaves_the_mesh_unknown() {
    let names = names();
    let c = cluster("auth: {secretRef: {name: creds}}");
    let spec = validate(&c).expect("valid");
    let members = [silent(0, true)];
    let endpoints = std::collections::BTreeSet::new();
    let plan = plan(&PlanInput {
        names: &names,
        desired: 3,
        statefulset_replicas: Some(3),
        members: &members,
        endpoints: &endpoints,
        now: k8s_openapi::jiff::Timestamp::now(),
    });
    let password = Password::Missing { secret: "creds".into(), key: "password".into() };
    let status = compute(&StatusInput {
        cluster: &c,
        names: &names,
        spec: &spec,
        members: &members,
        plan: &plan,
        upgrade: &steady(),
        tuners: &Tuners::default(),
        wiring: &WiringReport::default(),
        password: &password,
        tls: &crate::tls::TlsStep::off(),
        now: at("2024-01-01T00:00:00Z"),
    });
    let mesh = condition(&status, types::MESH_CONNECTED);
    assert_eq!((mesh.status.as_str(), mesh.reason.as_str()), ("Unknown", "NoPassword"), "{status:#?}");
}

#[test]
fn a_refused_link_names_the_engines_reason() {
    let c = cluster("{}");
    let mut members = full_mesh(3);
    if let Ok(s) = &mut members[0].status {
        s.peers[0].link = "down".into();
        s.peers[0].error = "origin refused the stream: incompatible mesh protocol: the peer speaks version 4, this node 2".into();
    }
    let status = status_of(&c, &members, Some(3), at("2024-01-01T00:00:00Z"));
    let mesh = condition(&status, types::MESH_CONNECTED);
    assert!(mesh.message.contains("demo-0 → demo-1 is down: origin refused the stream: incompatible mesh protocol"), "{status:#?}");
}

#[test]
fn a_refused_sysctl_is_named_with_how_to_allow_it_until_the_spec_drops_it() {
    let mut c = cluster("sysctls: {net.ipv4.tcp_fastopen: '3', net.core.somaxconn: '8192'}");
    let mut members = full_mesh(3);
    members[1].pod.node = Some("km-node-b".into());
    members[1].pod.sysctl_forbidden = Some("Pod forbidden sysctl: \"net.ipv4.tcp_fastopen\" not allowlisted".into());
    let status = status_of(&c, &members, Some(3), at("2024-01-01T00:00:00Z"));
    let allowed = condition(&status, types::SYSCTLS_ALLOWED);
    assert_eq!((allowed.status.as_str(), allowed.reason.as_str()), ("False", "SysctlForbidden"), "{status:#?}");
    assert!(allowed.message.contains("refuses net.ipv4.tcp_fastopen (demo-1 on km-node-b"), "{status:#?}");
    assert!(allowed.message.contains("--allowed-unsafe-sysctls=net.ipv4.tcp_fastopen") && allowed.message.contains("Bottlerocket"), "{status:#?}");
    assert_eq!(status.refused_sysctls, ["net.ipv4.tcp_fastopen"]);

    // No pod shows it right now (it was deleted to be recreated): still refused.
    c.status = Some(status);
    let mut waiting = upgrade(crate::api::UpgradeState::Rolling, Some("demo-1"), "syncing");
    waiting.complete = false;
    let status = status_with(&c, &full_mesh(3), Some(3), &waiting, at("2024-01-01T00:00:05Z"));
    assert_eq!(condition(&status, types::SYSCTLS_ALLOWED).status, "False", "{status:#?}");

    // The spec drops it: allowed.
    let mut dropped = cluster("sysctls: {net.core.somaxconn: '8192'}");
    dropped.status = Some(status);
    let status = status_of(&dropped, &full_mesh(3), Some(3), at("2024-01-01T00:00:10Z"));
    assert_eq!(condition(&status, types::SYSCTLS_ALLOWED).status, "True", "{status:#?}");
    assert!(status.refused_sysctls.is_empty());
}
