//! The async half of the mesh step: ask every member for its status (concurrently), and set
//! the peer lists the plan decided. Failures are collected, never fatal: one engine that does
//! not answer must not stop the others from being wired, and the next reconcile retries.

use futures::future::join_all;
use tracing::{info, warn};

use super::{Member, MemberState, MeshClient, ScalePlan};

/// A pod before its engine was asked: the member, its Kubernetes readiness and zone.
pub type PodMember = (Member, bool, Option<String>);

/// Fetches every member's `NodeStatus`.
pub async fn observe(client: &dyn MeshClient, pods: Vec<PodMember>, password: Option<&str>) -> Vec<MemberState> {
    join_all(pods.into_iter().map(|(member, pod_ready, zone)| async move {
        let status = if member.admin_endpoint.is_empty() {
            Err("the pod has no IP yet".to_string())
        } else {
            client.status(&member, password).await.map_err(|e| e.to_string())
        };
        MemberState { member, pod_ready, zone, status }
    }))
    .await
}

/// What the wiring did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WiringReport {
    /// Pods whose peer list was set, with the ordinals added and removed.
    pub updated: Vec<(String, Vec<u32>, Vec<u32>)>,
    /// Pods whose peer list could not be set, and why.
    pub failed: Vec<(String, String)>,
}

/// Applies the plan's draining changes, then its peer updates.
pub async fn wire(client: &dyn MeshClient, members: &[MemberState], plan: &ScalePlan, password: Option<&str>) -> WiringReport {
    let mut report = WiringReport::default();
    let drains = plan.drain_updates.iter().filter_map(|&(ordinal, draining)| {
        let state = members.iter().find(|m| m.member.ordinal == ordinal)?;
        Some(async move { (state, draining, client.set_draining(&state.member, draining, password).await) })
    });
    for (state, draining, result) in join_all(drains).await {
        match result {
            Ok(_) => info!(pod = %state.member.pod, draining, "set mesh draining"),
            Err(e) => {
                warn!(pod = %state.member.pod, error = %e, "failed to set mesh draining");
                report.failed.push((state.member.pod.clone(), e.to_string()));
            }
        }
    }
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
    report
}
