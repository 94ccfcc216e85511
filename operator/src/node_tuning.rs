//! The node-tuning step's observation and its condition: which tuner pods run where, whether
//! they are ready, and what each tuner itself says (its `/status`: each setting's wanted and
//! observed value, a drift, a conflict with another cluster). `NodeTuned` is True only when the
//! tuner on every node that runs an engine pod is ready; otherwise it names the nodes and why.
//!
//! Engine pods wait for tuned nodes: a new cluster's StatefulSet is created only once every
//! tuner is ready (see the controller). A node added later gets its tuner from the DaemonSet;
//! an engine pod scheduled there before the tuner has applied its values runs with the node's
//! old values for those seconds, and the engines report such kernel settings themselves
//! (`KernelSettings`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use crate::api::condition_types as types;
use crate::build::{tuner_selector, TUNER_PORT};
use crate::mesh::{MemberState, ScaleStep};
use crate::names::ClusterNames;
use crate::status::conditions::{ConditionState, Status};
use crate::tuner::TunerStatus;

const STATUS_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum NodeTuningError {
    #[error("failed to read the node-tuning DaemonSet {name}: {source}")]
    DaemonSet { name: String, source: kube::Error },
    #[error("failed to list the node-tuning pods of CacheCluster {name}: {source}")]
    Pods { name: String, source: kube::Error },
}

/// One tuner pod.
#[derive(Debug, Clone, PartialEq)]
pub struct TunerPod {
    pub node: String,
    pub ready: bool,
    /// What the tuner says, or why it could not be asked.
    pub status: Result<TunerStatus, String>,
}

/// The tuners of a cluster.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tuners {
    /// Whether the DaemonSet exists.
    pub daemonset: bool,
    pub pods: Vec<TunerPod>,
}

impl Tuners {
    /// A tuner runs and is ready on every node that has one (and there is at least one).
    pub fn all_ready(&self) -> bool {
        !self.pods.is_empty() && self.pods.iter().all(|p| p.ready)
    }
}

/// Reads the DaemonSet and its pods; asks each ready-or-not tuner with an IP for its status.
pub async fn observe(client: &kube::Client, names: &ClusterNames, enabled: bool) -> Result<Tuners, NodeTuningError> {
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), &names.namespace);
    let daemonset =
        daemonsets.get_opt(&names.node_tuning()).await.map_err(|source| NodeTuningError::DaemonSet { name: names.node_tuning(), source })?.is_some();
    if !enabled || !daemonset {
        return Ok(Tuners { daemonset, pods: Vec::new() });
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &names.namespace);
    let list =
        pods.list(&ListParams::default().labels(&tuner_selector(names))).await.map_err(|source| NodeTuningError::Pods { name: names.name.clone(), source })?;
    let http = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut tuners = Vec::new();
    for pod in list.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        let ready = pod.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let problem = pod.status.as_ref().and_then(|s| Some(format!("{}: {}", s.reason.as_ref()?, s.message.clone().unwrap_or_default())));
        let status = match (problem, pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()).filter(|ip| !ip.is_empty())) {
            (Some(problem), _) => Err(format!("tuner pod {}: {problem}", pod.name_any())),
            (None, Some(ip)) => tuner_status(&http, ip).await,
            (None, None) => Err(format!("tuner pod {} has no IP yet", pod.name_any())),
        };
        tuners.push(TunerPod { node, ready, status });
    }
    tuners.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(Tuners { daemonset, pods: tuners })
}

async fn tuner_status(http: &Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>, ip: &str) -> Result<TunerStatus, String> {
    let host = if ip.contains(':') { format!("[{ip}]") } else { ip.to_string() };
    let uri: http::Uri = format!("http://{host}:{TUNER_PORT}/status").parse().map_err(|e| format!("bad tuner address {ip}: {e}"))?;
    let call = async {
        let response = http.get(uri).await.map_err(|e| format!("tuner at {ip} does not answer: {e}"))?;
        let body = response.into_body().collect().await.map_err(|e| format!("tuner at {ip}: {e}"))?.to_bytes();
        serde_json::from_slice::<TunerStatus>(&body).map_err(|e| format!("tuner at {ip} answered something else: {e}"))
    };
    tokio::time::timeout(STATUS_TIMEOUT, call).await.map_err(|_| format!("tuner at {ip} did not answer in {STATUS_TIMEOUT:?}"))?
}

/// A new cluster's pods wait until every tuner is ready (their StatefulSet is not created yet).
pub fn holds_creation(enabled: bool, step: &ScaleStep, tuners: &Tuners) -> bool {
    enabled && *step == ScaleStep::Create && !tuners.all_ready()
}

/// `NodeTuned`: see the module docs. `nodes` are the nodes that run engine pods.
pub fn condition(enabled: bool, tuners: &Tuners, engine_nodes: &BTreeSet<String>) -> ConditionState {
    if !enabled {
        return ConditionState::new(types::NODE_TUNED, Status::False, "NotEnabled", "node tuning is off (spec.nodeTuning.enabled)");
    }
    let by_node: BTreeMap<&str, &TunerPod> = tuners.pods.iter().map(|p| (p.node.as_str(), p)).collect();
    let nodes: BTreeSet<&str> = if engine_nodes.is_empty() { by_node.keys().copied().collect() } else { engine_nodes.iter().map(String::as_str).collect() };
    if nodes.is_empty() {
        return ConditionState::new(types::NODE_TUNED, Status::False, "NoTuners", "the node-tuning DaemonSet has placed no tuner yet");
    }
    let mut problems = Vec::new();
    for node in &nodes {
        match by_node.get(node) {
            None => problems
                .push(format!("{node}: no tuner (spec.nodeTuning's nodeSelector and tolerations do not reach it, or the DaemonSet has not placed one yet)")),
            Some(tuner) if tuner.ready => {}
            Some(tuner) => {
                let why = match &tuner.status {
                    Ok(status) => {
                        let issues: Vec<String> = status.settings.iter().filter(|s| s.state != "applied").map(|s| s.message.clone()).collect();
                        if issues.is_empty() {
                            "its tuner is not ready yet".to_string()
                        } else {
                            issues.join("; ")
                        }
                    }
                    Err(e) => format!("its tuner is not ready ({e})"),
                };
                problems.push(format!("{node}: {why}"));
            }
        }
    }
    if problems.is_empty() {
        let settings = tuners
            .pods
            .iter()
            .find_map(|p| p.status.as_ref().ok())
            .map(|s| s.settings.iter().map(|s| format!("{} {}", s.setting, s.wanted)).collect::<Vec<_>>().join(", "))
            .unwrap_or_default();
        let nodes: Vec<&str> = nodes.into_iter().collect();
        ConditionState::new(types::NODE_TUNED, Status::True, "Tuned", format!("{settings} hold on {}", nodes.join(", ")))
    } else {
        ConditionState::new(types::NODE_TUNED, Status::False, "NodesNotTuned", problems.join("; "))
    }
}

/// `KernelSettings`: the kernel settings the engines themselves report as hurting them.
pub fn kernel_condition(members: &[MemberState]) -> ConditionState {
    let warnings: Vec<String> = members
        .iter()
        .filter_map(|m| {
            let status = m.node_status()?;
            (!status.kernel_warnings.is_empty()).then(|| format!("{}: {}", m.member.pod, status.kernel_warnings.join("; ")))
        })
        .collect();
    if warnings.is_empty() {
        ConditionState::new(types::KERNEL_SETTINGS, Status::True, "NoWarnings", "no engine reports a kernel setting that hurts it")
    } else {
        ConditionState::new(types::KERNEL_SETTINGS, Status::False, "KernelWarnings", warnings.join(" | "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuner::SettingStatus;

    fn tuner(node: &str, ready: bool, state: &str, message: &str) -> TunerPod {
        let setting = SettingStatus {
            setting: "transparent_hugepage".into(),
            wanted: "never".into(),
            observed: Some("always".into()),
            state: state.into(),
            message: message.into(),
            reapplied: 0,
        };
        TunerPod { node: node.into(), ready, status: Ok(TunerStatus { owner: "cache/demo".into(), node: node.into(), ready, settings: vec![setting] }) }
    }

    fn nodes(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn tuned_only_when_every_engine_node_has_a_ready_tuner() {
        let tuners = Tuners { daemonset: true, pods: vec![tuner("a", true, "applied", ""), tuner("b", true, "applied", "")] };
        let ok = condition(true, &tuners, &nodes(&["a", "b"]));
        assert_eq!((ok.status, ok.reason), (Status::True, "Tuned"), "{ok:?}");
        assert!(ok.message.contains("transparent_hugepage never hold on a, b"), "{ok:?}");

        let missing = condition(true, &tuners, &nodes(&["a", "b", "c"]));
        assert_eq!(missing.status, Status::False);
        assert!(missing.message.contains("c: no tuner"), "{missing:?}");

        let drifted =
            Tuners { daemonset: true, pods: vec![tuner("a", true, "applied", ""), tuner("b", false, "drifted", "transparent_hugepage was changed to always")] };
        let c = condition(true, &drifted, &nodes(&["a", "b"]));
        assert_eq!((c.status, c.reason), (Status::False, "NodesNotTuned"));
        assert!(c.message.contains("b: transparent_hugepage was changed to always"), "the tuner's own words: {c:?}");
        assert_eq!(condition(false, &tuners, &nodes(&["a"])).reason, "NotEnabled");
    }
}
