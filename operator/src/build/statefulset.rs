//! The engines' StatefulSet: stable pod names (`<name>-<ordinal>`, the mesh's peer identities),
//! all pods started at once (`Parallel`), and `RollingUpdate` with a `partition` that the
//! operator moves one pod at a time (DESIGN.md, "Rolling upgrade"; `crate::upgrade`): pods below
//! the partition keep (and are recreated with) the current revision whatever the template says,
//! so a pod that restarts for another reason never jumps ahead of the upgrade's order.
//!
//! Its `replicas` is the scale plan's answer, which lags `spec.replicas` on a scale-down until
//! no remaining member lists a leaving pod. The pod template is built here as a whole, hashed,
//! and the hash stamped on it (`keymesh.io/template-hash`): that hash is the revision the
//! upgrade compares pods with.

use k8s_openapi::api::apps::v1::{RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector, PodReadinessGate, PodSpec, PodTemplateSpec,
    Probe, SecretKeySelector, SecretVolumeSource, TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::configmap::{config_hash, EngineSettings, CONFIG_DIR, CONFIG_FILE, PEERS_DIR};
use super::security::{engine_container_security_context, engine_pod_security_context};
use super::services::{CLIENT_PORT_NAME, MESH_PORT_NAME, METRICS_PORT_NAME, TLS_PORT_NAME};
use super::{child_metadata, common_labels, selector_labels, BuildError, BuildInput, TEMPLATE_HASH_ANNOTATION};
use crate::api::SpreadMode;
use crate::handoff::SERVING_CONDITION;
use crate::names::{ClusterNames, CLIENT_PORT, MESH_PORT, METRICS_PORT, TLS_PORT};
use crate::persistence::{self, DATA_DIR, DATA_VOLUME};
use crate::tls::{TlsSettings, TLS_DIR};
use crate::validate::ValidatedSpec;

/// The pod volume of the TLS Secret (mounted whole, never by `subPath`, so it updates in place).
pub const TLS_VOLUME: &str = "tls";

/// The engine container's name.
pub const CONTAINER_NAME: &str = "keymesh";

/// Seconds a stopping engine gets to finish in-flight requests and streams.
pub const TERMINATION_GRACE_SECONDS: i64 = 30;

pub const ZONE_TOPOLOGY_KEY: &str = "topology.kubernetes.io/zone";
pub const HOST_TOPOLOGY_KEY: &str = "kubernetes.io/hostname";

/// A pod template and its revision (the hash stamped on it).
#[derive(Debug, Clone, PartialEq)]
pub struct PodTemplate {
    pub template: PodTemplateSpec,
    pub hash: String,
}

impl PodTemplate {
    /// A template taken from the StatefulSet's history (a rollback), with the hash it carries.
    pub fn from_history(template: PodTemplateSpec) -> Option<PodTemplate> {
        let hash = template.metadata.as_ref()?.annotations.as_ref()?.get(TEMPLATE_HASH_ANNOTATION)?.clone();
        Some(PodTemplate { template, hash })
    }
}

pub fn build_statefulset(input: &BuildInput) -> Result<StatefulSet, BuildError> {
    let names = input.names;
    Ok(StatefulSet {
        metadata: child_metadata(input, names.statefulset())?,
        spec: Some(StatefulSetSpec {
            replicas: Some(input.statefulset_replicas),
            service_name: Some(names.headless_service()),
            pod_management_policy: Some("Parallel".to_string()),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".to_string()),
                rolling_update: Some(RollingUpdateStatefulSetStrategy {
                    partition: Some(i32::try_from(input.partition).unwrap_or(i32::MAX)),
                    ..RollingUpdateStatefulSetStrategy::default()
                }),
            }),
            selector: LabelSelector { match_labels: Some(selector_labels(names)), match_expressions: None },
            template: input.template.template.clone(),
            volume_claim_templates: persistence::claim_templates(input.spec.persistence.as_ref(), &selector_labels(names)),
            persistent_volume_claim_retention_policy: persistence::retention_policy(input.spec.persistence.as_ref(), input.capabilities.pvc_retention_policy),
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    })
}

/// The engine pods' template for a spec, hashed. Pure: the same spec gives the same template
/// and hash in every operator build that builds the same template. `tls`: the TLS the pods run
/// with (`BuildInput::mounted_tls`).
pub fn pod_template(spec: &ValidatedSpec, names: &ClusterNames, settings: &EngineSettings, tls: Option<&TlsSettings>) -> PodTemplate {
    let pod = &spec.pod;
    let mut labels = pod.labels.clone();
    labels.extend(common_labels(names));
    let spread = topology_spread(spec, names);
    let config_volume = |name: &str, config_map: String| Volume {
        name: name.to_string(),
        config_map: Some(ConfigMapVolumeSource { name: config_map, ..ConfigMapVolumeSource::default() }),
        ..Volume::default()
    };
    let mut volumes = vec![config_volume("config", names.config_map(&settings.hash)), config_volume("peers", names.peers_config_map())];
    let mut container = engine_container(spec);
    if let Some(tls) = tls {
        volumes.push(Volume {
            name: TLS_VOLUME.to_string(),
            secret: Some(SecretVolumeSource { secret_name: Some(tls.secret_name(names)), ..SecretVolumeSource::default() }),
            ..Volume::default()
        });
        container.volume_mounts.get_or_insert_default().push(VolumeMount {
            name: TLS_VOLUME.to_string(),
            mount_path: TLS_DIR.to_string(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
        container.ports.get_or_insert_default().push(container_port(TLS_PORT_NAME, TLS_PORT));
    }
    let mut template = PodTemplateSpec {
        metadata: Some(ObjectMeta { labels: Some(labels), annotations: Some(pod.annotations.clone()), ..ObjectMeta::default() }),
        spec: Some(PodSpec {
            containers: vec![container],
            volumes: Some(volumes),
            // Ready needs the operator's consent too: it takes a pod out of its Service at once
            // before handing it off (`crate::handoff`).
            readiness_gates: Some(vec![PodReadinessGate { condition_type: SERVING_CONDITION.to_string() }]),
            termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
            enable_service_links: Some(false),
            topology_spread_constraints: (!spread.is_empty()).then_some(spread),
            node_selector: (!pod.node_selector.is_empty()).then(|| pod.node_selector.clone()),
            tolerations: (!pod.tolerations.is_empty()).then(|| pod.tolerations.clone()),
            affinity: pod.affinity.clone(),
            priority_class_name: pod.priority_class_name.clone(),
            // Restricted-profile settings, plus per-pod (network-namespaced) kernel settings such
            // as the listen backlog.
            security_context: Some(engine_pod_security_context(&spec.sysctls)),
            ..PodSpec::default()
        }),
    };
    let hash = config_hash(&serde_json::to_string(&template).unwrap_or_default());
    if let Some(annotations) = template.metadata.as_mut().and_then(|m| m.annotations.as_mut()) {
        annotations.insert(TEMPLATE_HASH_ANNOTATION.to_string(), hash.clone());
    }
    PodTemplate { template, hash }
}

fn engine_container(spec: &ValidatedSpec) -> Container {
    let args =
        [&format!("{CONFIG_DIR}/{CONFIG_FILE}"), "--node-name", "$(POD_NAME)", "--requirepass", "$(KEYMESH_PASSWORD)", "--masterauth", "$(KEYMESH_PASSWORD)"];
    Container {
        name: CONTAINER_NAME.to_string(),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.clone(),
        command: Some(vec!["keymesh-server".to_string()]),
        args: Some(args.iter().map(|a| a.to_string()).collect()),
        env: Some(vec![
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
            EnvVar {
                name: "KEYMESH_PASSWORD".to_string(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector { name: spec.auth.secret_name().to_string(), key: spec.auth.key().to_string(), optional: None }),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            },
        ]),
        ports: Some(vec![
            container_port(CLIENT_PORT_NAME, CLIENT_PORT),
            container_port(MESH_PORT_NAME, MESH_PORT),
            container_port(METRICS_PORT_NAME, METRICS_PORT),
        ]),
        // Ready means synced (DESIGN.md, "Readiness"): a joining pod stays out of the client
        // Service until it holds the data.
        readiness_probe: Some(http_probe("/readyz", 5, 2, 3, None)),
        // Generous: a full sync of a large keyspace must not look like a hang.
        liveness_probe: Some(http_probe("/healthz", 10, 5, 6, Some(10))),
        resources: spec.resources.clone(),
        security_context: Some(engine_container_security_context()),
        volume_mounts: Some(volume_mounts(spec)),
        ..Container::default()
    }
}

fn volume_mounts(spec: &ValidatedSpec) -> Vec<VolumeMount> {
    let mut mounts = vec![
        VolumeMount { name: "config".to_string(), mount_path: CONFIG_DIR.to_string(), read_only: Some(true), ..VolumeMount::default() },
        VolumeMount { name: "peers".to_string(), mount_path: PEERS_DIR.to_string(), read_only: Some(true), ..VolumeMount::default() },
    ];
    if spec.persistence.is_some() {
        // The claim template's volume: the engine's `dir`.
        mounts.push(VolumeMount { name: DATA_VOLUME.to_string(), mount_path: DATA_DIR.to_string(), ..VolumeMount::default() });
    }
    mounts
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource { field_ref: Some(ObjectFieldSelector { field_path: path.to_string(), api_version: None }), ..EnvVarSource::default() }),
        ..EnvVar::default()
    }
}

fn container_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort { name: Some(name.to_string()), container_port: port, protocol: Some("TCP".to_string()), ..ContainerPort::default() }
}

fn http_probe(path: &str, period: i32, timeout: i32, failures: i32, initial_delay: Option<i32>) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction { path: Some(path.to_string()), port: IntOrString::String(METRICS_PORT_NAME.to_string()), ..HTTPGetAction::default() }),
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        failure_threshold: Some(failures),
        initial_delay_seconds: initial_delay,
        ..Probe::default()
    }
}

/// maxSkew 1 over zones and hosts: `Preferred` schedules anyway when the spread cannot hold,
/// `Required` leaves the pod pending, `Disabled` adds no constraint.
fn topology_spread(spec: &ValidatedSpec, names: &ClusterNames) -> Vec<TopologySpreadConstraint> {
    let topology = &spec.topology;
    [(topology.zone_spread, ZONE_TOPOLOGY_KEY), (topology.host_spread, HOST_TOPOLOGY_KEY)]
        .into_iter()
        .filter_map(|(mode, key)| {
            let when = match mode {
                SpreadMode::Disabled => return None,
                SpreadMode::Preferred => "ScheduleAnyway",
                SpreadMode::Required => "DoNotSchedule",
            };
            Some(TopologySpreadConstraint {
                max_skew: 1,
                topology_key: key.to_string(),
                when_unsatisfiable: when.to_string(),
                label_selector: Some(LabelSelector { match_labels: Some(selector_labels(names)), match_expressions: None }),
                ..TopologySpreadConstraint::default()
            })
        })
        .collect()
}

#[cfg(test)]
#[path = "statefulset_tests.rs"]
mod tests;
