//! The build step: every child object of a `CacheCluster`, from a `ValidatedSpec` and the scale
//! plan's decisions, by pure functions (no client, no clock, no randomness).
//!
//! Guarantees: every child carries the common labels and a controlling owner reference to its
//! `CacheCluster` (so deleting the cluster garbage-collects it), and sets no field that a
//! Kubernetes 1.20 API server does not know (its server-side apply rejects unknown fields).

mod configmap;
mod networkpolicy;
mod node_tuning;
mod pdb;
mod secret;
mod security;
mod servicemonitor;
mod services;
mod statefulset;
mod tls;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::DynamicObject;
use kube::Resource;

use crate::api::CacheCluster;
use crate::names::ClusterNames;
use crate::tls::{TlsSettings, TlsState, TlsStep};
use crate::validate::ValidatedSpec;

pub use configmap::{build_config_map, build_peers_config_map, config_hash, engine_settings, EngineSettings, LIVE_DIRECTIVES};
pub use networkpolicy::{build_network_policy, network_policy_resource, NAMESPACE_NAME_LABEL, OPERATOR_POD_LABEL};
pub use node_tuning::{build_node_tuning, tuner_selector, TUNER_PORT};
pub use pdb::{build_pdb, PdbVersion};
pub use secret::build_secret;
pub use security::{engine_container_security_context, engine_pod_security_context, ENGINE_UID};
pub use servicemonitor::{build_service_monitor, service_monitor_resource};
pub use services::{build_client_service, build_headless_service};
pub use statefulset::{build_statefulset, pod_template, PodTemplate, CONTAINER_NAME, TLS_VOLUME};
pub use tls::{build_certificate, build_tls_secrets, certificate_resource};

/// The field manager of every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "keymesh-operator";

/// Labels that select a cluster's pods (the StatefulSet selector; immutable once created).
pub const SELECTOR_LABELS: [&str; 2] = ["app.kubernetes.io/name", "app.kubernetes.io/instance"];

/// Further labels the operator sets and a user may not override.
pub const RESERVED_LABELS: [&str; 2] = ["app.kubernetes.io/managed-by", SERVICE_LABEL];

/// Tells the headless Service from the client Service (the ServiceMonitor selects one).
pub const SERVICE_LABEL: &str = "keymesh.io/service";

/// The pod-template annotation that names its revision: the hash of the template itself
/// (`statefulset::pod_template`). Pods carry it, and so do the StatefulSet's ControllerRevisions.
pub const TEMPLATE_HASH_ANNOTATION: &str = "keymesh.io/template-hash";

/// What the API server offers, found by discovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// The PodDisruptionBudget version to use; `None` when the server serves neither.
    pub pdb: Option<PdbVersion>,
    /// Whether the `monitoring.coreos.com/v1` ServiceMonitor CRD is installed.
    pub service_monitor: bool,
    /// Whether cert-manager's `cert-manager.io/v1` Certificate CRD is installed.
    pub cert_manager: bool,
    /// Whether StatefulSets honour `persistentVolumeClaimRetentionPolicy` (`crate::persistence`).
    pub pvc_retention_policy: bool,
}

/// Everything a builder needs.
#[derive(Debug, Clone)]
pub struct BuildInput<'a> {
    pub cluster: &'a CacheCluster,
    pub spec: &'a ValidatedSpec,
    pub names: &'a ClusterNames,
    /// The StatefulSet's replicas now: the scale plan's answer, not always `spec.replicas`.
    pub statefulset_replicas: i32,
    /// The ordinals written as `replicaof` lines, so a (re)starting pod knows whom to sync from.
    pub config_peers: &'a [u32],
    /// The password of the generated Secret; `None` when the user references a Secret.
    pub generated_password: Option<&'a str>,
    pub capabilities: Capabilities,
    /// The pod template to apply: the spec's (`pod_template`), or a previous revision's while
    /// a failed upgrade rolls back (`crate::upgrade`).
    pub template: &'a PodTemplate,
    /// The StatefulSet's rolling-update partition: pods at or above it are replaced with the
    /// template (`crate::upgrade`).
    pub partition: u32,
    /// The image the node-tuning DaemonSet runs (the operator's own).
    pub tuner_image: &'a str,
    /// The operator's own namespace, so the NetworkPolicy admits it; `None` when unknown.
    pub operator_namespace: Option<&'a str>,
    /// What the TLS step decided (`crate::tls`).
    pub tls: &'a TlsStep,
}

impl BuildInput<'_> {
    /// The TLS the pods run with: the spec's, once its certificate exists (`crate::tls`).
    pub fn mounted_tls(&self) -> Option<&TlsSettings> {
        mounted_tls(self.spec, &self.tls.state)
    }
}

/// `spec.tls` when the TLS step found its certificate: pods mount it and the engines serve TLS.
pub fn mounted_tls<'a>(spec: &'a ValidatedSpec, state: &TlsState) -> Option<&'a TlsSettings> {
    spec.tls.as_ref().filter(|_| state.material().is_some())
}

/// Every child of a cluster. Consumers destructure it without `..`, so adding a child here
/// fails to compile wherever it would be forgotten.
#[derive(Debug, Clone)]
pub struct Children {
    /// `None` when the user references their own Secret.
    pub secret: Option<Secret>,
    /// The operator-issued CA and certificate Secrets (empty for other sources).
    pub tls_secrets: Vec<Secret>,
    /// The cert-manager `Certificate`; `None` unless cert-manager issues and its CRD exists.
    pub certificate: Option<DynamicObject>,
    /// The engine settings of the spec's revision (`<name>-config-<hash>`).
    pub config_map: ConfigMap,
    /// The members a starting pod syncs from (`<name>-peers`).
    pub peers_config_map: ConfigMap,
    pub headless_service: Service,
    pub client_service: Service,
    /// `None` while a new cluster waits for its nodes to be tuned (`node_tuning::holds_creation`).
    pub statefulset: Option<StatefulSet>,
    /// `None` when disabled or when the server serves no PodDisruptionBudget API.
    pub pdb: Option<DynamicObject>,
    /// `None` when disabled or when the ServiceMonitor CRD is absent.
    pub service_monitor: Option<DynamicObject>,
    /// `None` when node tuning is off.
    pub node_tuning: Option<DaemonSet>,
    /// `None` when `spec.networkPolicy.enabled` is false.
    pub network_policy: Option<DynamicObject>,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("failed to build children of CacheCluster {0}: it has no name, namespace or uid yet")]
    MissingMetadata(String),
    #[error("failed to build {kind} {name}: {source}")]
    Serialize { kind: &'static str, name: String, source: serde_json::Error },
}

/// Builds every child.
pub fn build_children(input: &BuildInput) -> Result<Children, BuildError> {
    let settings = engine_settings(input.spec, input.names, input.mounted_tls());
    Ok(Children {
        secret: build_secret(input)?,
        tls_secrets: build_tls_secrets(input)?,
        certificate: build_certificate(input)?,
        config_map: build_config_map(input, &settings)?,
        peers_config_map: build_peers_config_map(input)?,
        headless_service: build_headless_service(input)?,
        client_service: build_client_service(input)?,
        statefulset: Some(build_statefulset(input)?),
        pdb: build_pdb(input)?,
        service_monitor: build_service_monitor(input)?,
        node_tuning: build_node_tuning(input)?,
        network_policy: build_network_policy(input)?,
    })
}

/// `app.kubernetes.io/name` and `instance`: what selects the cluster's pods.
pub fn selector_labels(names: &ClusterNames) -> BTreeMap<String, String> {
    BTreeMap::from([(SELECTOR_LABELS[0].to_string(), "keymesh".to_string()), (SELECTOR_LABELS[1].to_string(), names.name.clone())])
}

/// The selector labels as a `key=value,...` string, for listing the cluster's pods.
pub fn pod_selector(names: &ClusterNames) -> String {
    selector_labels(names).iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// The labels on every child: the selector labels and `managed-by`.
pub fn common_labels(names: &ClusterNames) -> BTreeMap<String, String> {
    let mut labels = selector_labels(names);
    labels.insert(RESERVED_LABELS[0].to_string(), FIELD_MANAGER.to_string());
    labels
}

/// Metadata of a child: name, namespace, common labels and the controlling owner reference.
fn child_metadata(input: &BuildInput, name: String) -> Result<ObjectMeta, BuildError> {
    Ok(ObjectMeta {
        name: Some(name),
        namespace: Some(input.names.namespace.clone()),
        labels: Some(common_labels(input.names)),
        owner_references: Some(vec![owner_reference(input.cluster)?]),
        ..ObjectMeta::default()
    })
}

fn owner_reference(cluster: &CacheCluster) -> Result<OwnerReference, BuildError> {
    let missing = || BuildError::MissingMetadata(cluster.metadata.name.clone().unwrap_or_default());
    if cluster.metadata.namespace.is_none() {
        return Err(missing());
    }
    cluster.controller_owner_ref(&()).ok_or_else(missing)
}

/// Turns a typed object into a `DynamicObject` (for kinds whose version is chosen at run time
/// or that have no Rust type).
fn to_dynamic<T: serde::Serialize>(object: &T, kind: &'static str, name: &str) -> Result<DynamicObject, BuildError> {
    serde_json::to_value(object).and_then(serde_json::from_value).map_err(|source| BuildError::Serialize { kind, name: name.to_string(), source })
}

#[cfg(test)]
pub(crate) mod fixture;
