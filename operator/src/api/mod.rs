//! The `CacheCluster` custom resource (`keymesh.io/v1alpha1`): what a user asks for (`spec`) and
//! what the operator reports (`status`).
//!
//! Guarantees: every field is camelCase, every optional section has a default that the CRD schema
//! carries too (so `kubectl get -o yaml` shows the effective values), and the schema contains only
//! what a Kubernetes 1.20 API server accepts. Deeper checks that a schema cannot express (one of
//! two fields, allow-listed engine directives, unsupported features) live in `validate`.

mod spec;
mod status;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use spec::{
    AuthSpec, CertManagerSpec, EngineSpec, EvictionPolicy, ImagePullPolicy, IssuerRef, MetricsSpec, NetworkPolicySpec, NodeTuningSpec, PersistenceSpec,
    PodDisruptionBudgetSpec, PodOverrides, SecretRef, ServiceMonitorSpec, ServiceSpec, ServiceType, SpreadMode, ThpMode, TlsSpec, TopologySpec, UpgradeSpec,
};
pub use status::{condition_types, CacheClusterStatus, MemberStatus, Phase, TlsStatus, UpgradeState, UpgradeStatus};

/// The engine image repository used when `spec.image` is not set.
pub const DEFAULT_IMAGE_REPOSITORY: &str = "keymesh/keymesh-server";

/// The engine version this operator release ships with (the workspace version).
pub const DEFAULT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A multi-master KeyMesh cache: `replicas` engine pods that all accept reads and writes and
/// replicate every write to each other.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "keymesh.io",
    version = "v1alpha1",
    kind = "CacheCluster",
    plural = "cacheclusters",
    shortname = "cache",
    namespaced,
    status = "CacheClusterStatus",
    doc = "A multi-master KeyMesh cache cluster",
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.currentVersion"}"#,
    printcolumn = r#"{"name":"Target","type":"string","priority":1,"jsonPath":".status.targetVersion"}"#,
    printcolumn = r#"{"name":"Upgrade","type":"string","priority":1,"jsonPath":".status.upgrade.state"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CacheClusterSpec {
    /// Number of engine pods. Every pod holds all data, so this is about availability and
    /// read/write throughput, not capacity.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1))]
    pub replicas: i32,
    /// Engine image. Defaults to `keymesh/keymesh-server:<version>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Engine version; picks the default image's tag and is reported as `status.targetVersion`.
    /// Defaults to the operator's own version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Image pull policy of the engine container.
    // Schema without `null` in the enum: Kubernetes 1.20 rejects a CRD whose enum lists null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "ImagePullPolicy")]
    pub image_pull_policy: Option<ImagePullPolicy>,
    /// CPU and memory of the engine container. A memory limit sizes `maxmemory` (see
    /// `engine.maxmemoryPercent`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default)]
    pub engine: EngineSpec,
    #[serde(default)]
    pub auth: AuthSpec,
    #[serde(default)]
    pub tls: TlsSpec,
    #[serde(default)]
    pub persistence: PersistenceSpec,
    #[serde(default)]
    pub service: ServiceSpec,
    #[serde(default)]
    pub topology: TopologySpec,
    #[serde(default)]
    pub pod_disruption_budget: PodDisruptionBudgetSpec,
    #[serde(default)]
    pub network_policy: NetworkPolicySpec,
    #[serde(default)]
    pub node_tuning: NodeTuningSpec,
    /// Per-pod sysctls of the engine pods (`securityContext.sysctls`), e.g.
    /// `net.core.somaxconn: "8192"`. Only sysctls Kubernetes treats as per pod (`net.*`, and
    /// IPC's `kernel.shm*`, `kernel.msg*`, `kernel.sem`, `fs.mqueue.*`); node-wide ones belong in
    /// `nodeTuning`. Unsafe ones (most `net.*` outside a small safe set) need the kubelet's
    /// `--allowed-unsafe-sysctls`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sysctls: BTreeMap<String, String>,
    #[serde(default)]
    pub upgrade: UpgradeSpec,
    #[serde(default)]
    pub metrics: MetricsSpec,
    /// Scheduling and metadata passed through to the engine pods.
    #[serde(default)]
    pub pod: PodOverrides,
}

fn default_replicas() -> i32 {
    3
}

impl CacheClusterSpec {
    /// The version the cluster should run: `spec.version`, else the operator's own.
    pub fn target_version(&self) -> &str {
        self.version.as_deref().unwrap_or(DEFAULT_VERSION)
    }

    /// The engine image: `spec.image`, else the default repository tagged with the version.
    pub fn resolved_image(&self) -> String {
        match &self.image {
            Some(image) => image.clone(),
            None => format!("{DEFAULT_IMAGE_REPOSITORY}:{}", self.target_version()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_spec_gets_every_default() {
        let spec: CacheClusterSpec = serde_yaml::from_str("{}").expect("empty spec parses");
        assert_eq!(spec.replicas, 3, "{spec:#?}");
        assert_eq!(spec.topology.zone_spread, SpreadMode::Preferred, "{spec:#?}");
        assert_eq!(spec.topology.host_spread, SpreadMode::Preferred, "{spec:#?}");
        assert_eq!(spec.service.port, 6379, "{spec:#?}");
        assert_eq!(spec.service.type_, ServiceType::ClusterIP, "{spec:#?}");
        assert!(spec.pod_disruption_budget.enabled, "{spec:#?}");
        assert_eq!(spec.pod_disruption_budget.max_unavailable, 1, "{spec:#?}");
        assert!(spec.network_policy.enabled && spec.service.allowed_clients.is_empty(), "{spec:#?}");
        assert!(!spec.node_tuning.enabled && !spec.tls.enabled && !spec.persistence.enabled, "{spec:#?}");
        assert_eq!(spec.auth.secret_ref, None, "{spec:#?}");
        assert_eq!(spec.resolved_image(), format!("keymesh/keymesh-server:{DEFAULT_VERSION}"));
    }

    #[test]
    fn version_picks_the_default_image_tag_and_image_wins() {
        let spec: CacheClusterSpec = serde_yaml::from_str("version: 0.2.0").expect("spec parses");
        assert_eq!(spec.resolved_image(), "keymesh/keymesh-server:0.2.0");
        let spec: CacheClusterSpec = serde_yaml::from_str("{version: 0.2.0, image: 'registry.local/km:dev'}").expect("spec parses");
        assert_eq!(spec.resolved_image(), "registry.local/km:dev");
        assert_eq!(spec.target_version(), "0.2.0");
    }

    #[test]
    fn secret_ref_key_defaults_to_password() {
        let spec: CacheClusterSpec = serde_yaml::from_str("auth: {secretRef: {name: mine}}").expect("spec parses");
        let secret_ref = spec.auth.secret_ref.expect("secretRef is set");
        assert_eq!((secret_ref.name.as_str(), secret_ref.key.as_str()), ("mine", "password"));
    }
}
