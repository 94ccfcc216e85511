//! The status a reconcile writes, from what it observed, planned and wired. Pure.

use std::collections::BTreeSet;

use k8s_openapi::jiff::Timestamp;
use keymesh_proto::NodeStatus;

use super::conditions::{merge, ConditionState, Status};
use super::tls::tls_status;
use crate::api::{condition_types as types, CacheCluster, CacheClusterStatus, MemberStatus, Phase, UpgradeState};
use crate::auth::Password;
use crate::mesh::{peer_of, MemberState, ScalePlan, ScaleStep, WiringReport};
use crate::names::ClusterNames;
use crate::node_tuning::{self, Tuners};
use crate::tls::TlsStep;
use crate::upgrade::UpgradePlan;
use crate::validate::{InvalidSpec, ValidatedSpec};

pub struct StatusInput<'a> {
    pub cluster: &'a CacheCluster,
    pub names: &'a ClusterNames,
    pub spec: &'a ValidatedSpec,
    pub members: &'a [MemberState],
    pub plan: &'a ScalePlan,
    pub upgrade: &'a UpgradePlan,
    pub tuners: &'a Tuners,
    pub wiring: &'a WiringReport,
    pub password: &'a Password,
    pub tls: &'a TlsStep,
    pub now: Timestamp,
}

/// The status after a reconcile of a valid spec.
pub fn compute(input: &StatusInput) -> CacheClusterStatus {
    let previous = input.cluster.status.clone().unwrap_or_default();
    let desired = input.spec.replicas.unsigned_abs();
    let ready = input.members.iter().filter(|m| m.member.ordinal < desired && m.pod_ready).count();
    let all_ready = ready >= desired as usize;
    let mesh = mesh_connection(input);
    let phase = phase(input, previous.phase, all_ready, mesh.status == Status::True);
    let mut degraded = degraded_reasons(input);
    degraded.extend(broken_links(input, &mesh));
    let mut states = vec![
        ConditionState::new(
            types::READY,
            Status::from_bool(all_ready),
            if all_ready { "AllPodsReady" } else { "PodsNotReady" },
            format!("{ready}/{desired} pods ready"),
        ),
        progressing(input, phase),
    ];
    states.push(match (phase, degraded.is_empty()) {
        (Phase::Pending | Phase::Creating, _) => ConditionState::new(types::DEGRADED, Status::False, "Creating", "the cluster has not run yet"),
        (_, true) => ConditionState::new(types::DEGRADED, Status::False, "Healthy", "every mesh member is ready, answers and streams from every other"),
        (_, false) => ConditionState::new(types::DEGRADED, Status::True, "MembersUnhealthy", degraded.join("; ")),
    });
    states.push(mesh);
    states.push(clock_skew(input));
    let engine_nodes: BTreeSet<String> = input.members.iter().filter_map(|m| m.pod.node.clone()).collect();
    states.push(node_tuning::condition(input.spec.node_tuning.is_some(), input.tuners, &engine_nodes));
    let refused = refused_sysctls(input, &previous, all_ready);
    states.push(sysctls_allowed(input, &refused));
    states.push(node_tuning::kernel_condition(input.members));
    states.push(spec_warnings(input));
    let (tls_condition, tls) = tls_status(input.spec, input.tls, input.members).unzip();
    states.extend(tls_condition);
    CacheClusterStatus {
        phase: Some(phase),
        observed_generation: input.cluster.metadata.generation,
        ready_replicas: i32::try_from(ready).unwrap_or(i32::MAX),
        current_version: current_version(input, &previous, all_ready),
        target_version: Some(input.spec.target_version.clone()),
        conditions: merge(&previous.conditions, states, input.cluster.metadata.generation, input.now),
        members: input.members.iter().map(member_status).collect(),
        upgrade: input.upgrade.status.clone(),
        refused_sysctls: refused,
        tls: tls.flatten(),
    }
}

/// The status of a spec that failed validation: phase Failed, the messages in the conditions,
/// the last observed members kept.
pub fn invalid(cluster: &CacheCluster, invalid: &InvalidSpec, now: Timestamp) -> CacheClusterStatus {
    let previous = cluster.status.clone().unwrap_or_default();
    let message = invalid.to_string();
    let states = vec![
        ConditionState::new(types::READY, Status::False, "InvalidSpec", message.clone()),
        ConditionState::new(types::PROGRESSING, Status::False, "InvalidSpec", "waiting for the spec to change"),
        ConditionState::new(types::DEGRADED, Status::True, "InvalidSpec", message),
    ];
    let mut conditions = merge(&previous.conditions, states, cluster.metadata.generation, now);
    conditions.extend(previous.conditions.iter().filter(|c| ![types::READY, types::PROGRESSING, types::DEGRADED].contains(&c.type_.as_str())).cloned());
    CacheClusterStatus { phase: Some(Phase::Failed), observed_generation: cluster.metadata.generation, conditions, ..previous }
}

fn phase(input: &StatusInput, previous: Option<Phase>, all_ready: bool, connected: bool) -> Phase {
    let upgrade = input.upgrade.status.as_ref().map(|u| u.state);
    if matches!(upgrade, Some(UpgradeState::Failed | UpgradeState::RolledBack)) {
        return Phase::UpgradeFailed;
    }
    let upgrading = matches!(upgrade, Some(UpgradeState::Rolling | UpgradeState::RollingBack | UpgradeState::Paused | UpgradeState::Pending));
    if all_ready && connected && input.plan.settled() && !upgrading {
        return Phase::Running;
    }
    match previous {
        None | Some(Phase::Pending | Phase::Creating | Phase::Failed) if input.members.is_empty() => Phase::Pending,
        None | Some(Phase::Pending | Phase::Creating | Phase::Failed) => Phase::Creating,
        Some(_) if scaling(input.plan) => Phase::Scaling,
        Some(_) if upgrading => Phase::Upgrading,
        Some(_) => Phase::Degraded,
    }
}

/// Pods are joining or leaving, the StatefulSet changes size, or peer lists are being set.
fn scaling(plan: &ScalePlan) -> bool {
    let resizing = matches!(
        plan.step,
        ScaleStep::ScaleUp { .. }
            | ScaleStep::HandOffLeaving { .. }
            | ScaleStep::RemoveLeaving { .. }
            | ScaleStep::AwaitPeerRemoval { .. }
            | ScaleStep::ScaleDown { .. }
    );
    resizing || !plan.joining.is_empty() || !plan.leaving.is_empty() || !plan.peer_updates.is_empty()
}

fn progressing(input: &StatusInput, phase: Phase) -> ConditionState {
    let plan = input.plan;
    if plan.step == ScaleStep::Steady && plan.leaving.is_empty() && plan.peer_updates.is_empty() {
        if let Some(upgrade) = &input.upgrade.status {
            let (status, reason) = match upgrade.state {
                UpgradeState::Pending => (Status::True, "UpgradePending"),
                UpgradeState::Rolling => (Status::True, "Upgrading"),
                UpgradeState::Paused => (Status::True, "UpgradePaused"),
                UpgradeState::RollingBack => (Status::True, "RollingBack"),
                UpgradeState::Failed => (Status::False, "UpgradeFailed"),
                UpgradeState::RolledBack => (Status::False, "RolledBack"),
            };
            let message = format!(
                "{} → {} ({}/{} pods): {}",
                upgrade.from_version.as_deref().unwrap_or("?"),
                upgrade.to_version,
                upgrade.updated_replicas,
                input.spec.replicas,
                upgrade.message
            );
            return ConditionState::new(types::PROGRESSING, status, reason, message);
        }
    }
    let (reason, message) = match &plan.step {
        ScaleStep::Create if node_tuning::holds_creation(input.spec.node_tuning.is_some(), &plan.step, input.tuners) => {
            ("AwaitingNodeTuning", "the pods are created once every node's tuner is ready (see NodeTuned)".to_string())
        }
        ScaleStep::Create => ("Creating", "creating the StatefulSet".to_string()),
        ScaleStep::ScaleUp { from, to } => ("ScalingUp", format!("StatefulSet grows from {from} to {to} pods")),
        ScaleStep::AwaitJoin { pods } if phase == Phase::Creating => ("Creating", format!("waiting for {} to start and sync", pods.join(", "))),
        ScaleStep::AwaitJoin { pods } => ("AwaitingSync", format!("{} join the mesh once ready and synced", pods.join(", "))),
        ScaleStep::HandOffLeaving { pods } => {
            let steps: Vec<String> = plan.handoffs.iter().filter(|(_, s)| !s.complete()).map(|(&i, s)| s.describe(&input.names.pod(i))).collect();
            let detail = if steps.is_empty() { pods.join(", ") } else { steps.join("; ") };
            ("HandingOffLeavingPods", detail)
        }
        ScaleStep::RemoveLeaving { pods } => ("RemovingLeavingPeers", format!("removing {} from every peer list", pods.join(", "))),
        ScaleStep::AwaitPeerRemoval { unanswered } => {
            ("AwaitingPeerRemoval", format!("the StatefulSet shrinks once {} answer and list no leaving pod", unanswered.join(", ")))
        }
        ScaleStep::ScaleDown { from, to } => ("ScalingDown", format!("StatefulSet shrinks from {from} to {to} pods")),
        ScaleStep::Steady if phase == Phase::Creating || phase == Phase::Pending => ("Creating", "waiting for the pods to become ready".to_string()),
        ScaleStep::Steady if !plan.leaving.is_empty() => {
            let pods: Vec<String> = plan.leaving.iter().map(u32::to_string).collect();
            ("ScalingDown", format!("waiting for leaving pods (ordinals {}) to terminate", pods.join(", ")))
        }
        ScaleStep::Steady if !plan.peer_updates.is_empty() => ("WiringMesh", "setting peer lists".to_string()),
        ScaleStep::Steady => return ConditionState::new(types::PROGRESSING, Status::False, "Stable", format!("{} members in the mesh", plan.joined.len())),
    };
    ConditionState::new(types::PROGRESSING, Status::True, reason, message)
}

fn degraded_reasons(input: &StatusInput) -> Vec<String> {
    let mut reasons = Vec::new();
    if let Password::Missing { secret, key } = input.password {
        reasons.push(format!("Secret {secret} has no key {key}"));
    }
    // The pod an upgrade hands off or replaces is expected to be away for a moment.
    let busy = input.upgrade.current(input.names).filter(|_| input.upgrade.in_flight());
    for &ordinal in input.plan.joined.iter().filter(|&&i| Some(i) != busy) {
        match input.members.iter().find(|m| m.member.ordinal == ordinal) {
            None => reasons.push(format!("{} does not exist", input.names.pod(ordinal))),
            Some(m) if !m.pod_ready => reasons.push(format!("{} is not ready", m.member.pod)),
            Some(MemberState { status: Err(e), .. }) => reasons.push(format!("{} does not answer: {e}", input.names.pod(ordinal))),
            Some(_) => {}
        }
    }
    reasons.extend(input.wiring.failed.iter().map(|(pod, e)| format!("peer list of {pod} not set: {e}")));
    reasons
}

/// Mesh links that are down between joined members, once the mesh is not being rewired: a
/// partition leaves every pod ready, and only the links show it.
fn broken_links(input: &StatusInput, mesh: &ConditionState) -> Option<String> {
    (mesh.status == Status::False && input.plan.settled() && !input.upgrade.in_flight()).then(|| format!("mesh links down: {}", mesh.message))
}

/// True when every joined member streams from every other joined member.
fn mesh_connection(input: &StatusInput) -> ConditionState {
    if let Password::Missing { secret, key } = input.password {
        return ConditionState::new(types::MESH_CONNECTED, Status::Unknown, "NoPassword", format!("Secret {secret} has no key {key}"));
    }
    let joined = &input.plan.joined;
    let mut missing = Vec::new();
    for &i in joined {
        let pod = input.names.pod(i);
        let status = match input.members.iter().find(|m| m.member.ordinal == i).map(|m| &m.status) {
            Some(Ok(status)) => status,
            Some(Err(e)) => {
                missing.push(format!("{pod} does not answer ({e})"));
                continue;
            }
            None => {
                missing.push(format!("{pod} does not exist"));
                continue;
            }
        };
        for &j in joined.iter().filter(|&&j| j != i) {
            let host = peer_of(input.names, j).host;
            let link = status.peers.iter().find(|p| p.peer.as_ref().is_some_and(|p| p.host.trim_end_matches('.').eq_ignore_ascii_case(&host)));
            match link {
                Some(l) if l.link == "connected" => {}
                // The engine's own reason, e.g. an incompatible mesh protocol during a roll.
                Some(l) if !l.error.is_empty() => missing.push(format!("{pod} → {} is {}: {}", input.names.pod(j), l.link, l.error)),
                Some(l) => missing.push(format!("{pod} → {} is {}", input.names.pod(j), l.link)),
                None => missing.push(format!("{pod} does not list {}", input.names.pod(j))),
            }
        }
    }
    if joined.is_empty() {
        ConditionState::new(types::MESH_CONNECTED, Status::Unknown, "NoMembers", "no mesh member answered yet")
    } else if missing.is_empty() {
        ConditionState::new(types::MESH_CONNECTED, Status::True, "FullMesh", format!("{} members stream from each other", joined.len()))
    } else {
        ConditionState::new(types::MESH_CONNECTED, Status::False, "LinksMissing", missing.join("; "))
    }
}

fn clock_skew(input: &StatusInput) -> ConditionState {
    let max = input.spec.max_clock_skew_ms;
    let mut skewed = Vec::new();
    let mut skewed_receives = 0u64;
    for m in input.members {
        let Some(status) = m.node_status() else { continue };
        skewed_receives += status.skewed_receives;
        for peer in status.peers.iter().filter(|p| p.clock_skew_ms.abs() > max) {
            let name = if peer.node_name.is_empty() { peer.peer.as_ref().map_or("?", |p| p.host.as_str()) } else { peer.node_name.as_str() };
            skewed.push(format!("{} sees {name}'s clock {} ms off", m.member.pod, peer.clock_skew_ms));
        }
    }
    if skewed.is_empty() {
        ConditionState::new(types::CLOCK_SKEW, Status::False, "WithinBounds", format!("every peer clock is within {max} ms"))
    } else {
        ConditionState::new(
            types::CLOCK_SKEW,
            Status::True,
            "PeerClockSkewed",
            format!("{} (max {max} ms; {skewed_receives} writes received from the future)", skewed.join("; ")),
        )
    }
}

/// The per-pod sysctls a kubelet refused (`SysctlForbidden`): the ones a pod shows now, and
/// those refused before that the spec still asks for until pods with them run (refused pods
/// are deleted and recreated, or rolled back, so a moment without one proves nothing).
fn refused_sysctls(input: &StatusInput, previous: &CacheClusterStatus, all_ready: bool) -> Vec<String> {
    let mut refused: BTreeSet<String> = input
        .members
        .iter()
        .filter_map(|m| m.pod.sysctl_forbidden.as_deref())
        .flat_map(|message| message.split('"').skip(1).step_by(2).map(str::to_string).collect::<Vec<_>>())
        .collect();
    let proven = input.upgrade.complete && all_ready;
    refused.extend(previous.refused_sysctls.iter().filter(|n| input.spec.sysctls.contains_key(*n) && !proven).cloned());
    refused.into_iter().collect()
}

/// `SysctlsAllowed`: which sysctls a kubelet refused, on which pod, and how to allow them.
fn sysctls_allowed(input: &StatusInput, refused: &[String]) -> ConditionState {
    let sysctls = &input.spec.sysctls;
    if sysctls.is_empty() && refused.is_empty() {
        return ConditionState::new(types::SYSCTLS_ALLOWED, Status::True, "NoSysctls", "spec.sysctls is empty");
    }
    if refused.is_empty() {
        let names: Vec<&str> = sysctls.keys().map(String::as_str).collect();
        return ConditionState::new(types::SYSCTLS_ALLOWED, Status::True, "Allowed", format!("no kubelet refused {}", names.join(", ")));
    }
    let pods: Vec<String> = input
        .members
        .iter()
        .filter_map(|m| Some(format!("{} on {}: {}", m.member.pod, m.pod.node.as_deref().unwrap_or("?"), m.pod.sysctl_forbidden.as_deref()?)))
        .collect();
    let seen = if pods.is_empty() { String::new() } else { format!(" ({})", pods.join("; ")) };
    let message = format!(
        "the kubelet refuses {}{seen}. Allow them on the nodes with the kubelet flag --allowed-unsafe-sysctls={} (EKS managed node groups: \
         kubeletExtraConfig.allowedUnsafeSysctls in the node group's config; Bottlerocket: settings.kubernetes.allowed-unsafe-sysctls), \
         or remove them from spec.sysctls",
        refused.join(", "),
        refused.join(",")
    );
    ConditionState::new(types::SYSCTLS_ALLOWED, Status::False, "SysctlForbidden", message)
}

fn spec_warnings(input: &StatusInput) -> ConditionState {
    if input.spec.warnings.is_empty() {
        ConditionState::new(types::SPEC_WARNINGS, Status::False, "NoWarnings", "the spec uses nothing deprecated")
    } else {
        ConditionState::new(types::SPEC_WARNINGS, Status::True, "Deprecated", input.spec.warnings.join("; "))
    }
}

fn member_status(m: &MemberState) -> MemberStatus {
    let status = m.node_status();
    MemberStatus {
        pod: m.member.pod.clone(),
        zone: m.zone.clone(),
        ready: status.map_or(m.pod_ready, |s| s.ready),
        synced: status.is_some_and(|s| s.synced),
        connected_peers: status.map_or(0, |s| i32::try_from(s.peers.iter().filter(|p| p.link == "connected").count()).unwrap_or(i32::MAX)),
        lag_ops: status.and_then(|s| s.peers.iter().map(|p| p.lag_ops).max()).map_or(0, |lag| i64::try_from(lag).unwrap_or(i64::MAX)),
        revision: m.pod.template_hash.clone(),
        version: status.map(|s| s.version.clone()).filter(|v| !v.is_empty()),
    }
}

/// The version every pod runs: the spec's once the upgrade has nothing left to do and every
/// pod is ready; until then what it was (so it changes only when the whole cluster did). A
/// cluster without a recorded version (created by operator 0.1) takes what its engines report.
fn current_version(input: &StatusInput, previous: &CacheClusterStatus, all_ready: bool) -> Option<String> {
    if input.upgrade.complete && all_ready {
        return Some(input.spec.target_version.clone());
    }
    previous.current_version.clone().or_else(|| {
        let versions: BTreeSet<&str> =
            input.members.iter().filter_map(MemberState::node_status).map(|s: &NodeStatus| s.version.as_str()).filter(|v| !v.is_empty()).collect();
        (!versions.is_empty()).then(|| versions.into_iter().collect::<Vec<_>>().join(","))
    })
}

#[cfg(test)]
#[path = "compute_tests.rs"]
mod tests;
