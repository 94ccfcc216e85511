//! Carries out handoff actions: a pod's readiness gate is a condition on its status (a
//! strategic merge patch, which merges conditions by type, so the kubelet's own conditions are
//! left alone); starting or cancelling an engine's handoff is an admin call. Failures are
//! collected, never fatal: the next reconcile retries.

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;
use tracing::{info, warn};

use super::{HandoffAction, SERVING_CONDITION};
use crate::build::FIELD_MANAGER;
use crate::mesh::{MemberState, MeshClient};
use crate::names::ClusterNames;

#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    #[error("failed to set the {SERVING_CONDITION} condition of pod {pod}: {source}")]
    Gate { pod: String, source: kube::Error },
    #[error("failed to {what} the handoff of {pod}: {message}")]
    Engine { pod: String, what: &'static str, message: String },
    #[error("failed to ask {pod} for a snapshot: {message}")]
    Save { pod: String, message: String },
}

/// What the actions did.
#[derive(Debug, Default)]
pub struct HandoffReport {
    pub done: Vec<HandoffAction>,
    pub failed: Vec<HandoffError>,
}

/// Runs every action concurrently.
pub async fn apply(
    client: &kube::Client,
    mesh: &dyn MeshClient,
    names: &ClusterNames,
    members: &[MemberState],
    actions: &[HandoffAction],
    grace_ms: u64,
    password: Option<&str>,
) -> HandoffReport {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &names.namespace);
    let calls = actions.iter().map(|action| {
        let pods = pods.clone();
        async move {
            let result = match action {
                HandoffAction::SetGate { pod, serving, .. } => set_gate(&pods, pod, *serving).await,
                HandoffAction::Save { ordinal, pod } => match members.iter().find(|m| m.member.ordinal == *ordinal) {
                    Some(m) => mesh.save(&m.member, password).await.map(drop).map_err(|e| HandoffError::Save { pod: pod.clone(), message: e.to_string() }),
                    None => Err(HandoffError::Save { pod: pod.clone(), message: "the pod is gone".to_string() }),
                },
                HandoffAction::Start { ordinal, pod } | HandoffAction::Cancel { ordinal, pod } => {
                    let start = matches!(action, HandoffAction::Start { .. });
                    let what = if start { "start" } else { "cancel" };
                    match members.iter().find(|m| m.member.ordinal == *ordinal) {
                        Some(m) => mesh.handoff(&m.member, start, grace_ms, password).await.map(drop).map_err(|e| HandoffError::Engine {
                            pod: pod.clone(),
                            what,
                            message: e.to_string(),
                        }),
                        None => Err(HandoffError::Engine { pod: pod.clone(), what, message: "the pod is gone".to_string() }),
                    }
                }
            };
            (action.clone(), result)
        }
    });
    let mut report = HandoffReport::default();
    for (action, result) in join_all(calls).await {
        match result {
            Ok(()) => {
                info!(?action, "handoff action done");
                report.done.push(action);
            }
            Err(e) => {
                warn!(error = %e, "handoff action failed");
                report.failed.push(e);
            }
        }
    }
    report
}

async fn set_gate(pods: &Api<Pod>, pod: &str, serving: bool) -> Result<(), HandoffError> {
    let (status, reason, message) = if serving {
        ("True", "Serving", "the operator lets clients reach this pod")
    } else {
        ("False", "HandingOff", "the pod is leaving the mesh: the operator takes it out of its Service before handing its clients off")
    };
    let patch = json!({"status": {"conditions": [{
        "type": SERVING_CONDITION,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": Time(Timestamp::now()),
    }]}});
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_string()), ..PatchParams::default() };
    pods.patch_status(pod, &params, &Patch::Strategic(&patch)).await.map(drop).map_err(|source| HandoffError::Gate { pod: pod.to_string(), source })
}
