//! Reads what exists: the live StatefulSet's size, the cluster's pods (IP, readiness, node) and
//! the zones of their nodes. Everything the scale plan decides from is read here, before any
//! write, so a reconcile plans from one consistent look.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use tracing::debug;

use crate::build::pod_selector;
use crate::mesh::{Member, PodMember};
use crate::names::ClusterNames;

/// The node label that names its zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("failed to read StatefulSet {name}: {source}")]
    StatefulSet { name: String, source: kube::Error },
    #[error("failed to list the pods of CacheCluster {name}: {source}")]
    Pods { name: String, source: kube::Error },
}

#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// `spec.replicas` of the live StatefulSet; `None` when it does not exist yet.
    pub statefulset_replicas: Option<u32>,
    /// The cluster's pods in ordinal order, not yet asked for their engine status.
    pub pods: Vec<PodMember>,
}

pub async fn observe(client: &kube::Client, names: &ClusterNames) -> Result<Observed, ObserveError> {
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &names.namespace);
    let statefulset = statefulsets.get_opt(&names.statefulset()).await.map_err(|source| ObserveError::StatefulSet { name: names.statefulset(), source })?;
    let statefulset_replicas = statefulset.map(|s| s.spec.and_then(|s| s.replicas).unwrap_or(1).max(0).unsigned_abs());

    let pods: Api<Pod> = Api::namespaced(client.clone(), &names.namespace);
    let list =
        pods.list(&ListParams::default().labels(&pod_selector(names))).await.map_err(|source| ObserveError::Pods { name: names.name.clone(), source })?;
    let mut found: Vec<(u32, Pod)> = list.items.into_iter().filter_map(|p| Some((names.ordinal_of(&p.name_any())?, p))).collect();
    found.sort_by_key(|(ordinal, _)| *ordinal);

    let zones = node_zones(client, found.iter().filter_map(|(_, p)| p.spec.as_ref()?.node_name.clone())).await;
    let pods = found
        .into_iter()
        .map(|(ordinal, pod)| {
            let status = pod.status.as_ref();
            let ip = status.and_then(|s| s.pod_ip.as_deref()).filter(|ip| !ip.is_empty());
            let ready = status.and_then(|s| s.conditions.as_ref()).is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let zone = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).and_then(|n| zones.get(n).cloned());
            (Member::new(names, ordinal, ip), ready, zone)
        })
        .collect();
    Ok(Observed { statefulset_replicas, pods })
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
