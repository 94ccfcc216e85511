//! Kubernetes Events on transitions: phase changes, scale steps, handoffs, upgrade steps,
//! peer-list and live-setting changes, and invalid specs. Which events a reconcile causes is decided by a pure function (`transitions`), so it
//! is testable; publishing is best effort (a failed Event never fails a reconcile).
//!
//! kube's `Recorder` folds Events with the same reason, action and related object into one
//! series for six minutes, keeping the first note. So member events name the pod they concern
//! as the related object, and phase events use the new phase as their reason.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::Resource;
use tracing::warn;

use crate::api::{condition_types, CacheCluster, CacheClusterStatus, Phase, UpgradeState, UpgradeStatus};
use crate::handoff::{HandoffAction, HandoffReport};
use crate::mesh::{ScalePlan, ScaleStep, WiringReport};
use crate::names::ClusterNames;

/// An Event to publish, before it is attached to its object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
    /// The pod the Event concerns, if any.
    pub pod: Option<String>,
}

fn normal(reason: &'static str, action: &'static str, note: String) -> Transition {
    Transition { warning: false, reason, action, note, pod: None }
}

fn warning(reason: &'static str, action: &'static str, note: String) -> Transition {
    Transition { warning: true, reason, action, note, pod: None }
}

fn about(pod: String, transition: Transition) -> Transition {
    Transition { pod: Some(pod), ..transition }
}

/// The Events a reconcile of a valid spec causes.
pub fn transitions(
    names: &ClusterNames,
    old: Option<&CacheClusterStatus>,
    new: &CacheClusterStatus,
    plan: &ScalePlan,
    wiring: &WiringReport,
    handoffs: &HandoffReport,
) -> Vec<Transition> {
    let mut events = Vec::new();
    match &plan.step {
        ScaleStep::Create => events.push(normal("Creating", "Create", format!("creating {} engine pods", plan.statefulset_replicas))),
        ScaleStep::ScaleUp { from, to } => {
            events.push(normal("ScalingUp", "Scale", format!("StatefulSet grows from {from} to {to} pods; new pods join the mesh once synced")))
        }
        ScaleStep::ScaleDown { from, to } => {
            events.push(normal("ScalingDown", "Scale", format!("no member lists a leaving pod any more: StatefulSet shrinks from {from} to {to} pods")))
        }
        _ => {}
    }
    for action in &handoffs.done {
        match action {
            HandoffAction::SetGate { pod, serving: false, .. } => events.push(about(
                pod.clone(),
                normal("HandingOff", "Handoff", format!("{pod} leaves the client Service; its clients move to other pods before it goes")),
            )),
            HandoffAction::Start { pod, .. } => events.push(about(
                pod.clone(),
                normal("ClosingClients", "Handoff", format!("{pod} closes its client connections, then refuses writes until its peers hold them all")),
            )),
            HandoffAction::Cancel { pod, .. } => {
                events.push(about(pod.clone(), normal("HandoffCancelled", "Handoff", format!("{pod} is wanted again: it serves clients and takes writes"))))
            }
            HandoffAction::Save { pod, .. } => events
                .push(about(pod.clone(), normal("Snapshotting", "Handoff", format!("{pod} writes a snapshot to its volume; its replacement starts from it")))),
            HandoffAction::SetGate { serving: true, .. } => {}
        }
    }
    for error in &handoffs.failed {
        events.push(warning("HandoffFailed", "Handoff", error.to_string()));
    }
    events.extend(upgrade_transitions(old.and_then(|s| s.upgrade.as_ref()), new.upgrade.as_ref()));
    events.extend(tls_transitions(old, new));
    for (pod, directives) in &wiring.configured {
        events.push(about(pod.clone(), normal("ConfigApplied", "Configure", format!("{pod} changed {} live, without a restart", directives.join(", ")))));
    }
    let mut added: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    let mut removed: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for (pod, adds, removes) in &wiring.updated {
        adds.iter().for_each(|&i| added.entry(i).or_default().push(pod));
        removes.iter().for_each(|&i| removed.entry(i).or_default().push(pod));
    }
    for (i, pods) in added {
        events.push(about(names.pod(i), normal("PeersAdded", "WireMesh", format!("{} added to the peer lists of {}", names.pod(i), pods.join(", ")))));
    }
    for (i, pods) in removed {
        events.push(about(names.pod(i), normal("PeersRemoved", "WireMesh", format!("{} removed from the peer lists of {}", names.pod(i), pods.join(", ")))));
    }
    for (pod, error) in &wiring.failed {
        events.push(about(pod.clone(), warning("PeerUpdateFailed", "WireMesh", format!("failed to set the peer list of {pod}: {error}"))));
    }
    let old_phase = old.and_then(|s| s.phase);
    if let Some(phase) = new.phase.filter(|&p| Some(p) != old_phase) {
        let from = old_phase.map_or("none", Phase::as_str);
        let note = format!("phase {from} → {}", phase.as_str());
        events.push(Transition { warning: phase == Phase::Degraded, reason: phase.as_str(), action: "Reconcile", note, pod: None });
    }
    events
}

/// The Events of TLS: a new certificate (issued or renewed), and `TLSReady` turning False
/// (what is missing) or True.
pub fn tls_transitions(old: Option<&CacheClusterStatus>, new: &CacheClusterStatus) -> Vec<Transition> {
    let mut events = Vec::new();
    let old_tls = old.and_then(|s| s.tls.as_ref());
    if let Some(tls) = new.tls.as_ref().filter(|t| old_tls.map(|o| &o.serial) != Some(&t.serial)) {
        let (reason, verb) = if old_tls.is_some() { ("CertificateRenewed", "renewed") } else { ("CertificateIssued", "in use") };
        events.push(normal(
            reason,
            "Certificate",
            format!("certificate {} {verb} (Secret {}, valid until {}); the engines reload it without a restart", tls.serial, tls.secret_name, tls.not_after),
        ));
    }
    let condition = |s: Option<&CacheClusterStatus>| s.and_then(|s| s.condition(condition_types::TLS_READY)).map(|c| (c.status.clone(), c.reason.clone()));
    if let Some((status, reason)) = condition(Some(new)).filter(|now| condition(old).as_ref() != Some(now)) {
        let message = new.condition(condition_types::TLS_READY).map(|c| c.message.clone()).unwrap_or_default();
        let warn = status == "False" && !matches!(reason.as_str(), "Rolling" | "MeshSwitching");
        events.push(Transition {
            warning: warn,
            reason: if status == "True" { "TLSReady" } else { "TLSNotReady" },
            action: "Certificate",
            note: message,
            pod: None,
        });
    }
    events
}

/// The Events of an upgrade's progress: a new state, a pod handed off for replacement, a pod
/// running the new revision, the end.
pub fn upgrade_transitions(old: Option<&UpgradeStatus>, new: Option<&UpgradeStatus>) -> Vec<Transition> {
    let mut events = Vec::new();
    let same_upgrade = |o: &&UpgradeStatus| new.is_some_and(|n| n.to_revision == o.to_revision);
    let old_same = old.filter(same_upgrade);
    if let Some(new) = new {
        let versions = format!("{} → {}", new.from_version.as_deref().unwrap_or("?"), new.to_version);
        if old_same.map(|o| o.state) != Some(new.state) {
            let (reason, warn) = match new.state {
                UpgradeState::Pending => ("UpgradePending", false),
                UpgradeState::Rolling => ("Upgrading", false),
                UpgradeState::Paused => ("UpgradePaused", false),
                UpgradeState::Failed => ("UpgradeFailed", true),
                UpgradeState::RollingBack => ("RollingBack", true),
                UpgradeState::RolledBack => ("RolledBack", true),
            };
            let note = format!("{versions} (revision {}): {}", new.to_revision, new.message);
            events.push(Transition { warning: warn, reason, action: "Upgrade", note, pod: None });
        }
        if let Some(pod) = new.current_pod.as_ref().filter(|p| old_same.and_then(|o| o.current_pod.as_ref()) != Some(*p)) {
            if matches!(new.state, UpgradeState::Rolling | UpgradeState::RollingBack) {
                events.push(about(pod.clone(), normal("ReplacingPod", "Upgrade", format!("{pod}: {}", new.message))));
            }
        }
        if old_same.is_some_and(|o| new.updated_replicas > o.updated_replicas) {
            let note = format!("{} of the pods run revision {} ({versions})", new.updated_replicas, new.to_revision);
            events.push(normal("PodUpgraded", "Upgrade", note));
        }
    } else if let Some(old) = old.filter(|o| matches!(o.state, UpgradeState::Rolling | UpgradeState::Pending | UpgradeState::Paused)) {
        let versions = format!("{} → {}", old.from_version.as_deref().unwrap_or("?"), old.to_version);
        events.push(normal("UpgradeCompleted", "Upgrade", format!("every pod runs revision {} ({versions})", old.to_revision)));
    }
    events
}

/// The Event for a spec that failed validation, unless the same failure was already reported.
pub fn invalid_spec(old: Option<&CacheClusterStatus>, new: &CacheClusterStatus) -> Option<Transition> {
    let message = |s: &CacheClusterStatus| s.condition(crate::api::condition_types::READY).map(|c| c.message.clone());
    let already = old.is_some_and(|o| o.phase == Some(Phase::Failed) && message(o) == message(new));
    (!already).then(|| warning("InvalidSpec", "Validate", message(new).unwrap_or_default()))
}

/// Publishes the Events on the cluster, logging (not returning) failures.
pub async fn publish(recorder: &Recorder, cluster: &CacheCluster, events: Vec<Transition>) {
    let reference = cluster.object_ref(&());
    for t in events {
        let secondary = t.pod.map(|name| ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Pod".to_string()),
            name: Some(name),
            namespace: reference.namespace.clone(),
            ..ObjectReference::default()
        });
        let type_ = if t.warning { EventType::Warning } else { EventType::Normal };
        let event = Event { type_, reason: t.reason.into(), note: Some(t.note), action: t.action.into(), secondary };
        if let Err(e) = recorder.publish(&event, &reference).await {
            warn!(reason = event.reason, error = %e, "failed to publish an Event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::{plan, PlanInput};
    use crate::test_support::{full_mesh, names};

    fn status(phase: Phase) -> CacheClusterStatus {
        CacheClusterStatus { phase: Some(phase), ..CacheClusterStatus::default() }
    }

    #[test]
    fn scale_up_wiring_and_phase_changes_make_events() {
        let names = names();
        let members = full_mesh(3);
        let endpoints = std::collections::BTreeSet::new();
        let plan = plan(&PlanInput {
            names: &names,
            desired: 5,
            statefulset_replicas: Some(3),
            members: &members,
            endpoints: &endpoints,
            now: k8s_openapi::jiff::Timestamp::now(),
        });
        let wiring = WiringReport {
            updated: vec![("demo-0".into(), vec![3], vec![]), ("demo-2".into(), vec![3], vec![])],
            configured: vec![],
            failed: vec![("demo-1".into(), "timeout".into())],
        };
        let events = transitions(&names, Some(&status(Phase::Running)), &status(Phase::Scaling), &plan, &wiring, &HandoffReport::default());
        let reasons: Vec<&str> = events.iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["ScalingUp", "PeersAdded", "PeerUpdateFailed", "Scaling"], "{events:#?}");
        assert_eq!(events[1].note, "demo-3 added to the peer lists of demo-0, demo-2", "{events:#?}");
        assert_eq!(events[1].pod.as_deref(), Some("demo-3"), "{events:#?}");
        assert!(events[2].warning && events[2].pod.as_deref() == Some("demo-1"), "{events:#?}");
        assert_eq!(events[3].note, "phase Running → Scaling", "{events:#?}");
    }

    #[test]
    fn a_steady_reconcile_makes_no_events() {
        let names = names();
        let members = full_mesh(3);
        let endpoints = std::collections::BTreeSet::new();
        let plan = plan(&PlanInput {
            names: &names,
            desired: 3,
            statefulset_replicas: Some(3),
            members: &members,
            endpoints: &endpoints,
            now: k8s_openapi::jiff::Timestamp::now(),
        });
        let events = transitions(&names, Some(&status(Phase::Running)), &status(Phase::Running), &plan, &WiringReport::default(), &HandoffReport::default());
        assert!(events.is_empty(), "{events:#?}");
    }

    #[test]
    fn an_invalid_spec_is_reported_once() {
        let failed = |message: &str| {
            let mut s = status(Phase::Failed);
            s.conditions = crate::status::conditions::merge(
                &[],
                vec![crate::status::conditions::ConditionState::new("Ready", crate::status::conditions::Status::False, "InvalidSpec", message)],
                Some(1),
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            );
            s
        };
        let event = invalid_spec(Some(&status(Phase::Running)), &failed("spec.tls.enabled: ..."));
        assert_eq!(event.map(|e| (e.reason, e.warning)), Some(("InvalidSpec", true)));
        assert_eq!(invalid_spec(Some(&failed("a")), &failed("a")), None, "the same failure again is not a new event");
        assert!(invalid_spec(Some(&failed("a")), &failed("b")).is_some(), "a different failure is");
    }
}
