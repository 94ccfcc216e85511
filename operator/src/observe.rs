//! Reads what exists: the live StatefulSet (size, partition, template revision), the cluster's
//! pods (IP, readiness, readiness gate, revision, restarts, start failures, node), the zones of
//! their nodes, and which pods the client Service routes to. Everything the plans decide from
//! is read here, before any write, so a reconcile plans from one consistent look.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use tracing::debug;

use crate::build::{pod_selector, TEMPLATE_HASH_ANNOTATION};
use crate::handoff::SERVING_CONDITION;
use crate::mesh::{Member, PodMember};
use crate::names::ClusterNames;

/// The node label that names its zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Container waiting reasons that mean the container cannot start at all (the kubelet's image
/// and container-config errors): an upgrade to such a pod fails at once.
pub const START_FAILURES: [&str; 6] =
    ["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError"];

#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("failed to read StatefulSet {name}: {source}")]
    StatefulSet { name: String, source: kube::Error },
    #[error("failed to list the pods of CacheCluster {name}: {source}")]
    Pods { name: String, source: kube::Error },
    #[error("failed to read the endpoints of Service {name}: {source}")]
    Endpoints { name: String, source: kube::Error },
}

/// What a reconcile reads about one pod, beyond its engine.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodFacts {
    /// Every container is ready (the engine's `/readyz`), whatever the readiness gate says.
    pub containers_ready: bool,
    /// The pod's `keymesh.io/serving` readiness gate; `None` until the operator set it.
    pub serving: Option<bool>,
    /// When the gate last changed.
    pub serving_since: Option<Timestamp>,
    /// The pod-template revision the pod was created from (`keymesh.io/template-hash`).
    pub template_hash: Option<String>,
    pub created: Option<Timestamp>,
    /// Being deleted (terminating).
    pub deleting: bool,
    /// Restarts of the engine container.
    pub restarts: i32,
    /// Why the engine container cannot start (an image or config error), in the kubelet's
    /// words: `<reason>: <message>`.
    pub start_failure: Option<String>,
    /// The container's last problem, for messages: waiting or terminated reason and message.
    pub problem: Option<String>,
    /// The node the pod runs on.
    pub node: Option<String>,
    /// The kubelet refused the pod's sysctls (`SysctlForbidden`): its message.
    pub sysctl_forbidden: Option<String>,
    /// The pod mounts a TLS Secret: its engine serves TLS and answers the operator over TLS.
    pub tls: bool,
    /// That Secret's name.
    pub tls_secret: Option<String>,
}

/// The live StatefulSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatefulSetFacts {
    pub replicas: u32,
    /// `updateStrategy.rollingUpdate.partition` (`None` for other strategies).
    pub partition: Option<u32>,
    /// The revision of its pod template (`keymesh.io/template-hash`).
    pub template_hash: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// `None` when the StatefulSet does not exist yet. While pods exist without it (it was
    /// deleted with `propagationPolicy: Orphan` to change its claim templates, see
    /// `crate::persistence`), facts stand in for it that name no revision, so the upgrade
    /// freezes the new StatefulSet's partition and replaces the pods one at a time.
    pub statefulset: Option<StatefulSetFacts>,
    /// The StatefulSet exists (`statefulset` may stand in for one that does not).
    pub statefulset_exists: bool,
    /// The live StatefulSet's claim templates (empty without one).
    pub claim_templates: Vec<crate::persistence::LiveClaimTemplate>,
    /// The cluster's pods in ordinal order, not yet asked for their engine status.
    pub pods: Vec<PodMember>,
    /// Pods among the ready endpoints of the client Service (where clients are sent).
    pub endpoints: BTreeSet<String>,
}

impl Observed {
    pub fn statefulset_replicas(&self) -> Option<u32> {
        self.statefulset.as_ref().map(|s| s.replicas)
    }
}

pub async fn observe(client: &kube::Client, names: &ClusterNames) -> Result<Observed, ObserveError> {
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &names.namespace);
    let statefulset = statefulsets.get_opt(&names.statefulset()).await.map_err(|source| ObserveError::StatefulSet { name: names.statefulset(), source })?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &names.namespace);
    let list =
        pods.list(&ListParams::default().labels(&pod_selector(names))).await.map_err(|source| ObserveError::Pods { name: names.name.clone(), source })?;
    let mut found: Vec<(u32, Pod)> = list.items.into_iter().filter_map(|p| Some((names.ordinal_of(&p.name_any())?, p))).collect();
    found.sort_by_key(|(ordinal, _)| *ordinal);

    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), &names.namespace);
    let endpoints = endpoints
        .get_opt(&names.client_service())
        .await
        .map_err(|source| ObserveError::Endpoints { name: names.client_service(), source })?
        .map(|e| ready_endpoints(&e))
        .unwrap_or_default();

    let zones = node_zones(client, found.iter().filter_map(|(_, p)| p.spec.as_ref()?.node_name.clone())).await;
    let pods: Vec<PodMember> = found
        .into_iter()
        .map(|(ordinal, pod)| {
            let status = pod.status.as_ref();
            let ip = status.and_then(|s| s.pod_ip.as_deref()).filter(|ip| !ip.is_empty());
            let zone = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).and_then(|n| zones.get(n).cloned());
            PodMember { member: Member::new(names, ordinal, ip), ready: condition(status, "Ready") == Some(true), zone, facts: pod_facts(&pod) }
        })
        .collect();
    let claim_templates = statefulset.as_ref().map(crate::persistence::live_claim_templates).unwrap_or_default();
    let facts = match &statefulset {
        Some(s) => Some(statefulset_facts(s)),
        None => orphans(&pods),
    };
    Ok(Observed { statefulset: facts, statefulset_exists: statefulset.is_some(), claim_templates, pods, endpoints })
}

/// Facts standing in for a StatefulSet that was deleted while its pods kept running.
fn orphans(pods: &[PodMember]) -> Option<StatefulSetFacts> {
    let last = pods.iter().filter(|p| !p.facts.deleting).map(|p| p.member.ordinal).max()?;
    Some(StatefulSetFacts { replicas: last + 1, partition: None, template_hash: None })
}

fn statefulset_facts(statefulset: &StatefulSet) -> StatefulSetFacts {
    let spec = statefulset.spec.as_ref();
    StatefulSetFacts {
        replicas: spec.and_then(|s| s.replicas).unwrap_or(1).max(0).unsigned_abs(),
        partition: spec
            .and_then(|s| s.update_strategy.as_ref())
            .filter(|u| u.type_.as_deref() == Some("RollingUpdate"))
            .map(|u| u.rolling_update.as_ref().and_then(|r| r.partition).unwrap_or(0).max(0).unsigned_abs()),
        template_hash: spec
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(TEMPLATE_HASH_ANNOTATION))
            .cloned(),
    }
}

fn condition(status: Option<&PodStatus>, type_: &str) -> Option<bool> {
    status?.conditions.as_ref()?.iter().find(|c| c.type_ == type_).map(|c| c.status == "True")
}

/// The facts of a pod that the upgrade and the handoff decide from.
pub fn pod_facts(pod: &Pod) -> PodFacts {
    let status = pod.status.as_ref();
    let engine = status.and_then(|s| s.container_statuses.as_ref()).and_then(|c| c.iter().find(|c| c.name == crate::build::CONTAINER_NAME));
    let state = engine.and_then(|c| c.state.as_ref());
    let waiting = state.and_then(|s| s.waiting.as_ref());
    let terminated = state.and_then(|s| s.terminated.as_ref()).or_else(|| engine.and_then(|c| c.last_state.as_ref()?.terminated.as_ref()));
    let describe = |reason: Option<&String>, message: Option<&String>| match (reason, message) {
        (Some(r), Some(m)) if !m.is_empty() => Some(format!("{r}: {m}")),
        (Some(r), _) => Some(r.clone()),
        (None, Some(m)) => Some(m.clone()),
        (None, None) => None,
    };
    let tls_secret = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .find(|v| v.name == crate::build::TLS_VOLUME)
        .and_then(|v| v.secret.as_ref()?.secret_name.clone());
    let start_failure =
        waiting.filter(|w| w.reason.as_deref().is_some_and(|r| START_FAILURES.contains(&r))).and_then(|w| describe(w.reason.as_ref(), w.message.as_ref()));
    let problem = waiting
        .and_then(|w| describe(w.reason.as_ref(), w.message.as_ref()))
        .or_else(|| terminated.and_then(|t| describe(t.reason.as_ref(), t.message.as_ref()).map(|d| format!("{d} (exit code {})", t.exit_code))))
        .or_else(|| status.and_then(|s| describe(s.reason.as_ref(), s.message.as_ref())));
    PodFacts {
        containers_ready: condition(status, "ContainersReady") == Some(true),
        serving: condition(status, SERVING_CONDITION),
        serving_since: status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == SERVING_CONDITION))
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0),
        template_hash: pod.annotations().get(TEMPLATE_HASH_ANNOTATION).cloned(),
        created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        restarts: engine.map_or(0, |c| c.restart_count),
        start_failure,
        problem,
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        sysctl_forbidden: status
            .filter(|s| s.reason.as_deref() == Some("SysctlForbidden"))
            .map(|s| s.message.clone().unwrap_or_else(|| "SysctlForbidden".to_string())),
        tls: tls_secret.is_some(),
        tls_secret,
    }
}

/// The pods an Endpoints object lists as ready addresses.
fn ready_endpoints(endpoints: &Endpoints) -> BTreeSet<String> {
    endpoints.subsets.iter().flatten().flat_map(|s| s.addresses.iter().flatten()).filter_map(|a| a.target_ref.as_ref()?.name.clone()).collect()
}

/// The zone of each node. A node that cannot be read (gone, or RBAC without `nodes get`)
/// simply has no zone: zones are informational.
async fn node_zones(client: &kube::Client, node_names: impl Iterator<Item = String>) -> BTreeMap<String, String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut zones = BTreeMap::new();
    let mut wanted: Vec<String> = node_names.collect();
    wanted.sort();
    wanted.dedup();
    for name in wanted {
        match nodes.get_opt(&name).await {
            Ok(Some(node)) => {
                if let Some(zone) = node.labels().get(ZONE_LABEL) {
                    zones.insert(name, zone.clone());
                }
            }
            Ok(None) => debug!(node = %name, "node not found"),
            Err(e) => debug!(node = %name, error = %e, "failed to read node"),
        }
    }
    zones
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("test pod does not parse: {e}\n{yaml}"))
    }

    #[test]
    fn an_image_error_is_a_start_failure_with_the_kubelets_message() {
        let facts = pod_facts(&pod("metadata: {name: demo-2, annotations: {keymesh.io/template-hash: abc}, creationTimestamp: '2026-11-30T10:00:00Z'}
status:
  conditions: [{type: ContainersReady, status: 'False'}, {type: keymesh.io/serving, status: 'True'}]
  containerStatuses:
  - {name: keymesh, image: 'keymesh/keymesh-server:bad', imageID: '', ready: false, restartCount: 0,
     state: {waiting: {reason: ErrImagePull, message: 'image keymesh/keymesh-server:bad is not mapped'}}}"));
        assert_eq!(facts.start_failure.as_deref(), Some("ErrImagePull: image keymesh/keymesh-server:bad is not mapped"), "{facts:?}");
        assert_eq!((facts.serving, facts.containers_ready, facts.template_hash.as_deref()), (Some(true), false, Some("abc")));
        assert!(facts.created.is_some() && !facts.deleting);
    }

    #[test]
    fn a_crash_loop_is_a_problem_with_restarts_not_a_start_failure() {
        let facts = pod_facts(&pod("metadata: {name: demo-2, deletionTimestamp: '2026-11-30T10:00:00Z'}
status:
  containerStatuses:
  - {name: keymesh, image: x, imageID: '', ready: false, restartCount: 4,
     state: {waiting: {reason: CrashLoopBackOff, message: back-off 40s}},
     lastState: {terminated: {exitCode: 2, reason: Error, message: 'keymesh-server: bad config'}}}"));
        assert_eq!((facts.restarts, facts.start_failure.clone(), facts.deleting), (4, None, true), "{facts:?}");
        assert_eq!(facts.problem.as_deref(), Some("CrashLoopBackOff: back-off 40s"));
        assert_eq!(facts.serving, None, "no gate condition yet");
    }

    #[test]
    fn ready_endpoints_are_named_by_their_pods() {
        let endpoints: Endpoints = serde_yaml::from_str(
            "metadata: {name: demo}
subsets:
- addresses: [{ip: 10.0.0.1, targetRef: {kind: Pod, name: demo-1}}]
  notReadyAddresses: [{ip: 10.0.0.2, targetRef: {kind: Pod, name: demo-2}}]",
        )
        .expect("endpoints parse");
        assert_eq!(ready_endpoints(&endpoints), BTreeSet::from(["demo-1".to_string()]));
    }
}
