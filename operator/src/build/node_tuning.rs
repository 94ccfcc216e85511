//! The node-tuning DaemonSet `<name>-node-tuning` (DESIGN.md, "Node tuning"): the operator's own
//! image running `keymesh-operator tune` (`crate::tuner`), privileged, with the host's `/sys`
//! and `/proc/sys` and a node-wide state directory mounted by hostPath, on exactly the nodes the
//! engine pods may run on (their nodeSelector, tolerations and node affinity, unless
//! `spec.nodeTuning` overrides the first two). Its readiness is "the values hold"
//! (`/readyz`). Built only when `spec.nodeTuning.enabled`; deleting it (tuning turned off, the
//! cluster deleted) stops the tuners, which restore the nodes' previous values.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, HostPathVolumeSource, ObjectFieldSelector, PodSpec, PodTemplateSpec, Probe,
    SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{child_metadata, BuildError, BuildInput, FIELD_MANAGER, RESERVED_LABELS, SELECTOR_LABELS};
use crate::names::ClusterNames;
use crate::validate::NodeTuning;

/// The tuner's `/readyz` and `/status` port.
pub const TUNER_PORT: i32 = 8081;
/// Where the tuners keep the node's state (shared by every cluster's tuner on the node).
pub const STATE_DIR: &str = "/var/lib/keymesh/node-tuning";
/// `app.kubernetes.io/name` of the tuner pods.
pub const TUNER_APP: &str = "keymesh-node-tuning";

/// The tuner pods' selector labels.
pub fn tuner_labels(names: &ClusterNames) -> BTreeMap<String, String> {
    BTreeMap::from([(SELECTOR_LABELS[0].to_string(), TUNER_APP.to_string()), (SELECTOR_LABELS[1].to_string(), names.name.clone())])
}

/// The tuner pods' selector as `key=value,...`.
pub fn tuner_selector(names: &ClusterNames) -> String {
    tuner_labels(names).iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

pub fn build_node_tuning(input: &BuildInput) -> Result<Option<DaemonSet>, BuildError> {
    let Some(tuning) = &input.spec.node_tuning else { return Ok(None) };
    let names = input.names;
    let mut metadata = child_metadata(input, names.node_tuning())?;
    let mut labels = tuner_labels(names);
    labels.insert(RESERVED_LABELS[0].to_string(), FIELD_MANAGER.to_string());
    metadata.labels = Some(labels.clone());
    Ok(Some(DaemonSet {
        metadata,
        spec: Some(DaemonSetSpec {
            selector: LabelSelector { match_labels: Some(tuner_labels(names)), match_expressions: None },
            template: PodTemplateSpec { metadata: Some(ObjectMeta { labels: Some(labels), ..ObjectMeta::default() }), spec: Some(pod_spec(input, tuning)) },
            ..DaemonSetSpec::default()
        }),
        ..DaemonSet::default()
    }))
}

fn pod_spec(input: &BuildInput, tuning: &NodeTuning) -> PodSpec {
    let pod = &input.spec.pod;
    let node_selector = if tuning.node_selector.is_empty() { pod.node_selector.clone() } else { tuning.node_selector.clone() };
    let tolerations = if tuning.tolerations.is_empty() { pod.tolerations.clone() } else { tuning.tolerations.clone() };
    let node_affinity = pod.affinity.as_ref().and_then(|a| a.node_affinity.clone());
    let host = |name: &str, path: &str, kind: &str| Volume {
        name: name.to_string(),
        host_path: Some(HostPathVolumeSource { path: path.to_string(), type_: Some(kind.to_string()) }),
        ..Volume::default()
    };
    PodSpec {
        containers: vec![container(input, tuning)],
        volumes: Some(vec![
            host("host-sys", "/sys", "Directory"),
            host("host-proc-sys", "/proc/sys", "Directory"),
            host("state", STATE_DIR, "DirectoryOrCreate"),
        ]),
        node_selector: (!node_selector.is_empty()).then_some(node_selector),
        tolerations: (!tolerations.is_empty()).then_some(tolerations),
        affinity: node_affinity.map(|n| Affinity { node_affinity: Some(n), ..Affinity::default() }),
        priority_class_name: pod.priority_class_name.clone(),
        // The tuner gives the nodes their values back on SIGTERM.
        termination_grace_period_seconds: Some(30),
        enable_service_links: Some(false),
        ..PodSpec::default()
    }
}

fn container(input: &BuildInput, tuning: &NodeTuning) -> Container {
    let owner = format!("{}/{}", input.names.namespace, input.names.name);
    let args = [
        "tune",
        "--owner",
        &owner,
        "--transparent-hugepages",
        tuning.transparent_huge_pages.unwrap_or("unchanged"),
        "--overcommit-memory",
        tuning.overcommit_memory.as_deref().unwrap_or("unchanged"),
        "--sys",
        "/mnt/host/sys",
        "--proc-sys",
        "/mnt/host/proc/sys",
        "--state-dir",
        STATE_DIR,
    ];
    let mount = |name: &str, path: &str| VolumeMount { name: name.to_string(), mount_path: path.to_string(), ..VolumeMount::default() };
    Container {
        name: "tuner".to_string(),
        image: Some(input.tuner_image.to_string()),
        command: Some(vec!["keymesh-operator".to_string()]),
        args: Some(args.iter().map(|a| a.to_string()).collect()),
        env: Some(vec![EnvVar {
            name: "NODE_NAME".to_string(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector { field_path: "spec.nodeName".to_string(), api_version: None }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }]),
        ports: Some(vec![ContainerPort {
            name: Some("tuner".to_string()),
            container_port: TUNER_PORT,
            protocol: Some("TCP".to_string()),
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction { path: Some("/readyz".to_string()), port: IntOrString::String("tuner".to_string()), ..HTTPGetAction::default() }),
            period_seconds: Some(5),
            timeout_seconds: Some(2),
            failure_threshold: Some(1),
            ..Probe::default()
        }),
        // Writing the host's /sys and /proc/sys needs a privileged container.
        security_context: Some(SecurityContext { privileged: Some(true), ..SecurityContext::default() }),
        volume_mounts: Some(vec![mount("host-sys", "/mnt/host/sys"), mount("host-proc-sys", "/mnt/host/proc/sys"), mount("state", STATE_DIR)]),
        ..Container::default()
    }
}

#[cfg(test)]
mod tests {
    use crate::build::fixture::{build, yaml};

    #[test]
    fn no_daemonset_without_node_tuning() {
        assert!(build("{}").node_tuning.is_none());
    }

    #[test]
    fn a_privileged_tuner_on_the_engine_pods_nodes_with_the_hosts_files() {
        let children = build(
            "nodeTuning: {enabled: true, vmOvercommitMemory: unchanged}\npod: {nodeSelector: {pool: cache}, tolerations: [{key: dedicated, operator: Exists}], affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: arch, operator: In, values: [amd64]}]}]}}, podAntiAffinity: {}}}",
        );
        let ds = children.node_tuning.expect("a DaemonSet");
        assert_eq!(ds.metadata.name.as_deref(), Some("demo-node-tuning"), "{}", yaml(&ds));
        let owner = &ds.metadata.owner_references.as_ref().expect("owned")[0];
        assert_eq!(owner.kind, "CacheCluster", "{}", yaml(&ds));
        let pod = ds.spec.as_ref().and_then(|s| s.template.spec.as_ref()).expect("pod spec");
        assert_eq!(pod.node_selector.as_ref().and_then(|n| n.get("pool")).map(String::as_str), Some("cache"), "the engine pods' nodes: {}", yaml(&ds));
        assert_eq!(pod.tolerations.as_ref().map(Vec::len), Some(1), "{}", yaml(&ds));
        let affinity = pod.affinity.as_ref().expect("node affinity");
        assert!(affinity.node_affinity.is_some() && affinity.pod_anti_affinity.is_none(), "node affinity only: {}", yaml(&ds));
        let c = &pod.containers[0];
        assert_eq!(c.image.as_deref(), Some("keymesh/keymesh-operator:test"), "{}", yaml(&ds));
        assert_eq!(c.security_context.as_ref().and_then(|s| s.privileged), Some(true), "{}", yaml(&ds));
        let args = c.args.as_ref().expect("args").join(" ");
        assert!(args.starts_with("tune --owner cache/demo --transparent-hugepages never --overcommit-memory unchanged"), "{args}");
        let paths: Vec<(&str, &str)> = pod.volumes.iter().flatten().filter_map(|v| Some((v.name.as_str(), v.host_path.as_ref()?.path.as_str()))).collect();
        assert_eq!(paths, [("host-sys", "/sys"), ("host-proc-sys", "/proc/sys"), ("state", "/var/lib/keymesh/node-tuning")], "{}", yaml(&ds));
        let readiness = c.readiness_probe.as_ref().and_then(|p| p.http_get.as_ref()).and_then(|h| h.path.as_deref());
        assert_eq!(readiness, Some("/readyz"), "ready while the values hold: {}", yaml(&ds));
    }

    #[test]
    fn the_tuning_section_overrides_where_the_tuner_runs() {
        let children = build("nodeTuning: {enabled: true, nodeSelector: {tuned: 'yes'}}\npod: {nodeSelector: {pool: cache}}");
        let ds = children.node_tuning.expect("a DaemonSet");
        let selector = ds.spec.and_then(|s| s.template.spec).and_then(|p| p.node_selector).unwrap_or_default();
        assert_eq!(selector.into_iter().collect::<Vec<_>>(), [("tuned".to_string(), "yes".to_string())]);
    }
}
