//! The upgrade plan, pure: observed state and the previous `status.upgrade` in, the partition,
//! the pod to hand off and the new `status.upgrade` out. See the module docs of `upgrade`.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::{UpgradeSpec, UpgradeState, UpgradeStatus};
use crate::handoff::{self, HandoffStep};
use crate::mesh::{peer_of, MemberState, ScalePlan};
use crate::names::ClusterNames;
use crate::observe::StatefulSetFacts;

/// Restarts of a new pod's engine that fail an upgrade (a crash loop).
pub const CRASH_LOOP_RESTARTS: i32 = 3;

pub struct UpgradeInput<'a> {
    pub names: &'a ClusterNames,
    pub settings: &'a UpgradeSpec,
    /// `spec.replicas`.
    pub replicas: u32,
    /// The engine version the spec asks for.
    pub target_version: &'a str,
    /// The revision of the spec's pod template.
    pub built: &'a str,
    pub statefulset: Option<&'a StatefulSetFacts>,
    pub members: &'a [MemberState],
    /// Pods the client Service routes to.
    pub endpoints: &'a BTreeSet<String>,
    /// `status.upgrade` of the last reconcile.
    pub previous: Option<&'a UpgradeStatus>,
    /// `status.currentVersion` of the last reconcile.
    pub current_version: Option<&'a str>,
    /// `spec.persistence` is on: a pod is replaced only after it wrote a snapshot (handoff
    /// step 5).
    pub persistence: bool,
    pub now: Timestamp,
}

/// What the upgrade wants before the scale plan runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    /// The revision the pods should run.
    pub target: String,
    /// `target` is the previous revision of a failed upgrade: its template comes from the
    /// StatefulSet's history.
    pub rollback: bool,
    /// The spec failed before and is not rolled back (`autoRollback: false`, or nothing to
    /// return to): nothing moves until the spec changes.
    pub hold_failed: bool,
    /// One extra pod (ordinal `spec.replicas`) is wanted while pods are replaced.
    pub surge: bool,
}

/// The upgrade's decisions for this reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct UpgradePlan {
    pub target: String,
    pub rollback: bool,
    /// The StatefulSet's rolling-update partition.
    pub partition: u32,
    /// The pod being handed off for its replacement, and where its handoff stands.
    pub handoff: Option<(u32, HandoffStep)>,
    /// `status.upgrade`: `None` when no upgrade is in flight and none failed.
    pub status: Option<UpgradeStatus>,
    /// Every pod runs the spec's revision and is ready: `status.currentVersion` may say so.
    pub complete: bool,
}

impl UpgradePlan {
    /// A pod is being handed off or replaced, or the upgrade waits for a gate.
    pub fn in_flight(&self) -> bool {
        self.status.as_ref().is_some_and(|s| matches!(s.state, UpgradeState::Pending | UpgradeState::Rolling | UpgradeState::RollingBack))
    }

    /// The ordinal the upgrade is busy with (handing off, or waiting for it to come back).
    pub fn current(&self, names: &ClusterNames) -> Option<u32> {
        self.status.as_ref().and_then(|s| s.current_pod.as_deref()).and_then(|p| names.ordinal_of(p))
    }
}

fn member(members: &[MemberState], ordinal: u32) -> Option<&MemberState> {
    members.iter().find(|m| m.member.ordinal == ordinal && !m.pod.deleting)
}

/// Pod `ordinal` exists, is not being deleted and runs revision `target`.
fn at(members: &[MemberState], ordinal: u32, target: &str) -> bool {
    member(members, ordinal).is_some_and(|m| m.pod.template_hash.as_deref() == Some(target))
}

/// Serves: its containers are ready and its engine says it is ready, which means it finished
/// an initial sync from a peer that answered (or none answered within the start-up grace: a
/// cluster whose every other pod is down).
fn healthy(m: &MemberState) -> bool {
    m.pod.containers_ready && m.node_status().is_some_and(|s| s.ready)
}

/// Serves nothing: its containers are not ready and its engine is silent or not ready.
fn dead(m: &MemberState) -> bool {
    !m.pod.containers_ready && m.node_status().is_none_or(|s| !s.ready)
}

/// Whether the failed upgrade of this very spec is on record.
fn failed_before<'a>(input: &UpgradeInput<'a>) -> Option<&'a UpgradeStatus> {
    input.previous.filter(|p| matches!(p.state, UpgradeState::Failed | UpgradeState::RollingBack | UpgradeState::RolledBack) && p.to_revision == input.built)
}

/// Pods below `spec.replicas` that exist and run another revision than `target`, in ordinal
/// order: what the roll still has to replace.
fn pending(input: &UpgradeInput, target: &str) -> Vec<u32> {
    (0..input.replicas).filter(|&i| member(input.members, i).is_some_and(|m| m.pod.template_hash.as_deref() != Some(target))).collect()
}

/// The last reconcile left an upgrade of this spec moving (or rolling back).
fn in_flight_before(input: &UpgradeInput) -> bool {
    input.previous.is_some_and(|p| {
        p.to_revision == input.built && matches!(p.state, UpgradeState::Pending | UpgradeState::Rolling | UpgradeState::Paused | UpgradeState::RollingBack)
    })
}

pub fn intent(input: &UpgradeInput) -> Intent {
    let built = input.built.to_string();
    let (target, rollback, hold_failed) = match failed_before(input) {
        Some(failed) if input.settings.auto_rollback => match &failed.from_revision {
            Some(from) => (from.clone(), true, false),
            None => (built, false, true),
        },
        Some(_) => (built, false, true),
        None => (built, false, false),
    };
    // A roll whose last replaced pods are still syncing is not over yet.
    let settling = in_flight_before(input) && (0..input.replicas).any(|i| member(input.members, i).is_none_or(|m| !healthy(m)));
    let roll = input.statefulset.is_some() && (!pending(input, &target).is_empty() || settling);
    let surge = roll && (input.replicas == 1 || input.settings.surge);
    Intent { target, rollback, hold_failed, surge }
}

/// Why the cluster is not ready for the next pod's handoff, if it is not.
fn gate(input: &UpgradeInput, scale: &ScalePlan) -> Option<String> {
    if !scale.settled() {
        return Some("waiting for the scale to finish".to_string());
    }
    let names = input.names;
    for &i in &scale.joined {
        let pod = names.pod(i);
        let Some(m) = member(input.members, i) else { return Some(format!("{pod} does not exist")) };
        let Some(status) = m.node_status() else { return Some(format!("{pod} does not answer")) };
        if !(m.pod_ready && status.ready && status.synced) {
            return Some(format!("{pod} is not ready and synced"));
        }
        for &j in scale.joined.iter().filter(|&&j| j != i) {
            let host = peer_of(names, j).host;
            let link = status.peers.iter().find(|p| p.peer.as_ref().is_some_and(|p| p.host.trim_end_matches('.').eq_ignore_ascii_case(&host)));
            match link {
                Some(l) if l.link == "connected" && l.lag_ops == 0 => {}
                Some(l) if l.link == "connected" => return Some(format!("{pod} lags {} ops behind {}", l.lag_ops, names.pod(j))),
                Some(l) => return Some(format!("{pod}'s link to {} is {}", names.pod(j), l.link)),
                None => return Some(format!("{pod} does not stream from {}", names.pod(j))),
            }
        }
    }
    None
}

/// Why a pod of the target revision failed the upgrade, if it did.
fn failure(input: &UpgradeInput, m: &MemberState) -> Option<String> {
    if healthy(m) {
        return None;
    }
    let pod = &m.member.pod;
    let why = || m.pod.problem.clone().or_else(|| m.status.as_ref().err().cloned()).unwrap_or_else(|| "its engine is not ready".to_string());
    if let Some(failure) = &m.pod.start_failure {
        return Some(format!("{pod} cannot start: {failure}"));
    }
    if let Some(refused) = &m.pod.sysctl_forbidden {
        return Some(format!("{pod} was refused by its kubelet: {refused}"));
    }
    if m.pod.restarts >= CRASH_LOOP_RESTARTS {
        return Some(format!("{pod} restarted {} times: {}", m.pod.restarts, why()));
    }
    let timeout = SignedDuration::from_secs(i64::from(input.settings.ready_timeout_seconds));
    let age = m.pod.created.map(|c| input.now.duration_since(c));
    if age.is_some_and(|age| age > timeout) {
        return Some(format!("{pod} is not ready and synced {}s after it was created: {}", input.settings.ready_timeout_seconds, why()));
    }
    None
}

pub fn plan(input: &UpgradeInput, intent: &Intent, scale: &ScalePlan) -> UpgradePlan {
    let names = input.names;
    let target = intent.target.clone();
    let Some(live) = input.statefulset else {
        // A new cluster: every pod is created from the spec's template.
        return UpgradePlan { target, rollback: false, partition: 0, handoff: None, status: None, complete: true };
    };
    // A changed template freezes the partition at the top, in the same apply, so the
    // controller replaces nothing on its own; after that it only ever moves down.
    let template_changes = live.template_hash.as_deref() != Some(target.as_str());
    let base = if template_changes { live.replicas } else { live.partition.unwrap_or(live.replicas).min(live.replicas) };
    let pending = pending(input, &target);
    let previous = input.previous.filter(|p| p.to_revision == input.built);
    let updated = (0..input.replicas).filter(|&i| at(input.members, i, &target)).count();
    let mut status = UpgradeStatus {
        state: UpgradeState::Rolling,
        from_revision: previous.and_then(|p| p.from_revision.clone()).or_else(|| live.template_hash.clone().filter(|h| *h != target)),
        to_revision: input.built.to_string(),
        from_version: previous.and_then(|p| p.from_version.clone()).or_else(|| input.current_version.map(str::to_string)),
        to_version: input.target_version.to_string(),
        updated_replicas: i32::try_from(updated).unwrap_or(i32::MAX),
        current_pod: None,
        failed_pod: previous.and_then(|p| p.failed_pod.clone()),
        started_at: previous.and_then(|p| p.started_at.clone()).or(Some(Time(input.now))),
        message: String::new(),
    };
    let plan = |partition: u32, handoff: Option<(u32, HandoffStep)>, status: Option<UpgradeStatus>| UpgradePlan {
        target: target.clone(),
        rollback: intent.rollback,
        partition,
        handoff,
        status,
        complete: false,
    };

    if intent.hold_failed {
        status.state = UpgradeState::Failed;
        status.message = previous.map(|p| p.message.clone()).unwrap_or_default();
        return plan(base, None, Some(status));
    }
    if pending.is_empty() && !in_flight_before(input) {
        // Nothing to replace: steady, or a rollback that finished (kept on record until the
        // spec changes, so the failed spec is not tried again).
        let status = intent.rollback.then(|| {
            let failed = previous.map(|p| p.message.clone()).unwrap_or_default();
            UpgradeStatus { state: UpgradeState::RolledBack, message: format!("{failed}; rolled back: change the spec to try again"), ..status }
        });
        return UpgradePlan { complete: !intent.rollback, ..plan(0, None, status) };
    }
    let rolling = if intent.rollback { UpgradeState::RollingBack } else { UpgradeState::Rolling };
    status.state = rolling;

    // Pods of the target revision (the surge pod included) must be there, ready and synced
    // before the next pod goes; one that cannot get there fails the upgrade.
    let mut waiting = None;
    for i in 0..scale.statefulset_replicas.max(input.replicas) {
        let pod = names.pod(i);
        match member(input.members, i) {
            None if i < input.replicas => {
                waiting.get_or_insert((pod, format!("waiting for {} to be created", names.pod(i))));
            }
            Some(m) if m.pod.template_hash.as_deref() == Some(target.as_str()) && !healthy(m) => {
                if let Some(failure) = failure(input, m) {
                    status.state = UpgradeState::Failed;
                    status.message = if intent.rollback { format!("rollback failed: {failure}") } else { failure };
                    status.failed_pod = Some(pod.clone());
                    status.current_pod = Some(pod);
                    return plan(base, None, Some(status));
                }
                waiting.get_or_insert((pod.clone(), format!("{pod} runs the new revision and is syncing")));
            }
            _ => {}
        }
    }
    if let Some((pod, message)) = waiting {
        status.current_pod = Some(pod);
        status.message = message;
        return plan(base, None, Some(status));
    }
    let Some(&k) = pending.last() else {
        let status = intent.rollback.then(|| {
            let failed = previous.map(|p| p.message.clone()).unwrap_or_default();
            UpgradeStatus { state: UpgradeState::RolledBack, message: format!("{failed}; rolled back: change the spec to try again"), ..status }
        });
        return UpgradePlan { complete: !intent.rollback, ..plan(0, None, status) };
    };
    let pod = names.pod(k);
    status.current_pod = Some(pod.clone());
    let Some(m) = member(input.members, k) else { return plan(base, None, Some(status)) };
    let begun = m.pod.serving == Some(false) || m.node_status().is_some_and(|s| s.handoff == "closing" || s.handoff == "done");
    if input.settings.paused && !begun {
        status.state = UpgradeState::Paused;
        status.current_pod = None;
        status.message = format!("paused before {pod}: {updated}/{} pods run the new revision", input.replicas);
        return plan(base, None, Some(status));
    }
    if dead(m) {
        status.message = format!("replacing {pod}, which serves nothing");
        return plan(base.min(k), None, Some(status));
    }
    if !begun {
        if let Some(why) = gate(input, scale) {
            if updated == 0 {
                status.state = UpgradeState::Pending;
            }
            status.current_pod = None;
            status.message = format!("holding before {pod}: {why}");
            return plan(base, None, Some(status));
        }
    }
    let witnesses: Vec<&MemberState> = scale.joined.iter().filter(|&&j| j != k).filter_map(|&j| member(input.members, j)).collect();
    let step = handoff::step(names, m, input.endpoints.contains(&pod), &witnesses, input.persistence, input.now);
    status.message = step.describe(&pod);
    if step.complete() {
        status.message = format!("replacing {pod}: {}", status.message);
        return plan(base.min(k), None, Some(status));
    }
    plan(base.min(k + 1), Some((k, step)), Some(status))
}
