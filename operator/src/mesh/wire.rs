//! The async half of the mesh step: ask every member for its status (concurrently), and set
//! the peer lists the plan decided and the live engine settings that differ. Failures are
//! collected, never fatal: one engine that does not answer must not stop the others from being
//! wired, and the next reconcile retries.

use std::collections::BTreeMap;

use futures::future::join_all;
use tracing::{info, warn};

use super::{Member, MemberState, MeshClient, ScalePlan};
use crate::observe::PodFacts;

/// A pod before its engine was asked.
#[derive(Debug, Clone)]
pub struct PodMember {
    pub member: Member,
    /// The pod's Kubernetes readiness.
    pub ready: bool,
    pub zone: Option<String>,
    pub facts: PodFacts,
}

/// Fetches every member's `NodeStatus`, with the current values of `config_keys`.
pub async fn observe(client: &dyn MeshClient, pods: Vec<PodMember>, password: Option<&str>, config_keys: &[String]) -> Vec<MemberState> {
    join_all(pods.into_iter().map(|pod| async move {
        let status = if pod.member.admin_endpoint.is_empty() {
            Err("the pod has no IP yet".to_string())
        } else {
            client.status(&pod.member, password, config_keys).await.map_err(|e| e.to_string())
        };
        MemberState { member: pod.member, pod_ready: pod.ready, zone: pod.zone, pod: pod.facts, status }
    }))
    .await
}

/// What the wiring did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WiringReport {
    /// Pods whose peer list was set, with the ordinals added and removed.
    pub updated: Vec<(String, Vec<u32>, Vec<u32>)>,
    /// Pods whose live settings were changed, with the directives changed.
    pub configured: Vec<(String, Vec<String>)>,
    /// Pods whose peer list or settings could not be set, and why.
    pub failed: Vec<(String, String)>,
}

/// The live settings each answering engine must change: the directives of `live` whose
/// reported value differs. Engines being handed off or deleted are left alone, and `tls-*`
/// directives only go to pods that mount a certificate (a pod of an earlier revision, before a
/// roll turned TLS on, has none: its engine would refuse them or, older, not know them).
pub fn config_updates(members: &[MemberState], live: &BTreeMap<String, String>) -> Vec<(u32, BTreeMap<String, String>)> {
    members
        .iter()
        .filter(|m| !m.pod.deleting)
        .filter_map(|m| {
            let status = m.node_status().filter(|s| s.handoff.is_empty() || s.handoff == "serving")?;
            let differing: BTreeMap<String, String> = live
                .iter()
                .filter(|(k, _)| m.pod.tls || !k.starts_with("tls-"))
                .filter(|(k, v)| status.config.get(*k) != Some(*v))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            (!differing.is_empty()).then_some((m.member.ordinal, differing))
        })
        .collect()
}

/// Sets the plan's peer lists and the live settings that differ.
pub async fn wire(client: &dyn MeshClient, members: &[MemberState], plan: &ScalePlan, live: &BTreeMap<String, String>, password: Option<&str>) -> WiringReport {
    let mut report = WiringReport::default();
    let calls = plan.peer_updates.iter().filter_map(|update| {
        let state = members.iter().find(|m| m.member.ordinal == update.ordinal)?;
        Some(async move {
            let result = client.set_peers(&state.member, update.peers.clone(), password).await;
            (update, result)
        })
    });
    for (update, result) in join_all(calls).await {
        match result {
            Ok(_) => {
                info!(pod = %update.pod, adds = ?update.adds, removes = ?update.removes, "set mesh peers");
                report.updated.push((update.pod.clone(), update.adds.clone(), update.removes.clone()));
            }
            Err(e) => {
                warn!(pod = %update.pod, error = %e, "failed to set mesh peers");
                report.failed.push((update.pod.clone(), e.to_string()));
            }
        }
    }
    let updates = config_updates(members, live);
    let calls = updates.iter().filter_map(|(ordinal, values)| {
        let state = members.iter().find(|m| m.member.ordinal == *ordinal)?;
        Some(async move { (state, values, client.set_config(&state.member, values.clone(), password).await) })
    });
    for (state, values, result) in join_all(calls).await {
        let pod = state.member.pod.clone();
        match result {
            Ok(_) => {
                info!(%pod, ?values, "changed live engine settings");
                report.configured.push((pod, values.keys().cloned().collect()));
            }
            Err(e) => {
                warn!(%pod, error = %e, "failed to change live engine settings");
                report.failed.push((pod, e.to_string()));
            }
        }
    }
    report
}
