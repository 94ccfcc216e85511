//! The sections of `CacheClusterSpec`. Each section's `Default` equals what the CRD schema
//! declares as its default, so an object read by the operator and one defaulted by the API
//! server mean the same thing.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, Toleration};
use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Engine settings that end up in the engine's config file.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EngineSpec {
    /// `server-threads`: worker threads of the engine (default: one per CPU the pod sees).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 256))]
    pub threads: Option<i32>,
    /// `maxmemory` as the engine reads it (`100mb`, `1gb`, bytes). Exclusive with
    /// `maxmemoryPercent`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maxmemory: Option<String>,
    /// `maxmemory` as a percentage of the container's memory limit. Defaults to 75 when the
    /// container has a memory limit and `maxmemory` is not set.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub maxmemory_percent: Option<i32>,
    /// `maxmemory-policy`: what the engine evicts once `maxmemory` is reached.
    #[serde(default)]
    pub eviction_policy: EvictionPolicy,
    /// `max-clock-skew-ms`: a peer's clock further ahead than this is reported (ClockSkew
    /// condition) and does not drag local clocks forward. Engine default: 500.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_clock_skew_ms: Option<i64>,
    /// `tombstone-gc-seconds`: how long deletes are remembered for peers that were away.
    /// Engine default: 86400.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub tombstone_gc_seconds: Option<i64>,
    /// Further engine directives, limited to an allow-list (see the operator README); the
    /// operator owns ports, auth and the peer list.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_config: BTreeMap<String, String>,
}

/// The engine's `maxmemory-policy` values.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EvictionPolicy {
    #[default]
    Noeviction,
    AllkeysLru,
    AllkeysLfu,
    VolatileLru,
    VolatileLfu,
    VolatileTtl,
    AllkeysRandom,
    VolatileRandom,
}

impl EvictionPolicy {
    /// The directive value, as the engine spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            EvictionPolicy::Noeviction => "noeviction",
            EvictionPolicy::AllkeysLru => "allkeys-lru",
            EvictionPolicy::AllkeysLfu => "allkeys-lfu",
            EvictionPolicy::VolatileLru => "volatile-lru",
            EvictionPolicy::VolatileLfu => "volatile-lfu",
            EvictionPolicy::VolatileTtl => "volatile-ttl",
            EvictionPolicy::AllkeysRandom => "allkeys-random",
            EvictionPolicy::VolatileRandom => "volatile-random",
        }
    }
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ImagePullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl ImagePullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ImagePullPolicy::Always => "Always",
            ImagePullPolicy::IfNotPresent => "IfNotPresent",
            ImagePullPolicy::Never => "Never",
        }
    }
}

/// Client and mesh authentication. Without `secretRef` the operator generates a Secret
/// `<name>-auth` with a random password once and never rotates it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
}

/// A key of a Secret in the cluster's namespace.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    pub name: String,
    #[serde(default = "default_secret_key")]
    pub key: String,
}

fn default_secret_key() -> String {
    "password".to_string()
}

/// TLS for clients, the mesh and the operator's admin calls (`docs/tls.md`). The certificate
/// comes from `secretName` (the user's Secret), from cert-manager (`certManager`), or, with
/// neither, from a CA the operator creates and keeps (`<name>-tls-ca`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    #[serde(default)]
    pub enabled: bool,
    /// A Secret in the cluster's namespace with `tls.crt`, `tls.key` and `ca.crt` (the
    /// layout cert-manager writes). Its certificate must name every pod
    /// (`*.<name>-headless.<ns>.svc.<domain>`) and allow server and client authentication.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// Have cert-manager issue the certificate (a `Certificate` named `<name>-tls`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_manager: Option<CertManagerSpec>,
    /// Whether clients must present a certificate signed by the CA: `"yes"`, `"no"` (when
    /// absent: clients verify the server and authenticate with the password) or `"optional"`.
    /// Quote the value: YAML 1.1 readers (kubectl) take a bare yes/no for a boolean.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_clients: Option<String>,
    /// Mutual TLS between the engines (the mesh stream and the admin API).
    #[serde(default = "default_true")]
    pub replication: bool,
    /// Validity of the certificates the operator issues itself, as a Go duration (`2160h`).
    #[serde(default = "default_tls_duration")]
    pub duration: String,
    /// The operator re-issues its certificate this long before it expires (`720h`).
    #[serde(default = "default_tls_renew_before")]
    pub renew_before: String,
}

impl Default for TlsSpec {
    fn default() -> Self {
        TlsSpec {
            enabled: false,
            secret_name: None,
            cert_manager: None,
            auth_clients: None,
            replication: true,
            duration: default_tls_duration(),
            renew_before: default_tls_renew_before(),
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_tls_duration() -> String {
    "2160h".to_string()
}

fn default_tls_renew_before() -> String {
    "720h".to_string()
}

/// A cert-manager `Certificate` the operator creates.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertManagerSpec {
    pub issuer_ref: IssuerRef,
    /// The Certificate's `duration` (cert-manager's default when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// The Certificate's `renewBefore`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renew_before: Option<String>,
}

/// cert-manager's issuer reference.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IssuerRef {
    pub name: String,
    /// `Issuer` (default) or `ClusterIssuer`.
    #[serde(default = "default_issuer_kind")]
    pub kind: String,
    #[serde(default = "default_issuer_group")]
    pub group: String,
}

fn default_issuer_kind() -> String {
    "Issuer".to_string()
}

fn default_issuer_group() -> String {
    "cert-manager.io".to_string()
}

/// Snapshots on a volume per pod (operator README, "Persistence"): each engine writes a
/// versioned snapshot of its keyspace to a PersistentVolumeClaim `data-<pod>` every
/// `snapshotIntervalSeconds` (when anything changed) and before the rolling upgrade replaces
/// it, and loads it when it starts, so a cluster whose pods all went down at once comes back
/// with its data.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PersistenceSpec {
    #[serde(default)]
    pub enabled: bool,
    /// The StorageClass of the claims; the cluster's default class when not set. Fixed once the
    /// claims exist.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// The size of each pod's claim (a quantity, e.g. `2Gi`). Increasing it resizes the existing
    /// claims when their StorageClass allows volume expansion; claims never shrink.
    #[serde(default = "default_persistence_size")]
    pub size: String,
    /// How often an engine snapshots when at least one write happened since its last snapshot
    /// (the engine's `save <seconds> 1`).
    #[serde(default = "default_snapshot_interval_seconds")]
    #[schemars(range(min = 1))]
    pub snapshot_interval_seconds: i32,
    /// Keep the claims (and the data) when the CacheCluster is deleted. Claims of pods removed
    /// by a scale down are always deleted: their snapshots would be stale.
    #[serde(default = "enabled")]
    pub retain_on_delete: bool,
}

impl Default for PersistenceSpec {
    fn default() -> Self {
        PersistenceSpec {
            enabled: false,
            storage_class_name: None,
            size: default_persistence_size(),
            snapshot_interval_seconds: default_snapshot_interval_seconds(),
            retain_on_delete: true,
        }
    }
}

fn default_persistence_size() -> String {
    "1Gi".to_string()
}

fn default_snapshot_interval_seconds() -> i32 {
    300
}

/// The client Service `<name>`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    /// Annotations of the client Service, e.g. for an AWS NLB.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The client Service's port (the pods listen on 6379).
    #[serde(default = "default_service_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Who may reach the client port, as NetworkPolicy peers (pod or namespace selectors, IP
    /// blocks), when `networkPolicy.enabled`. Empty: any source (a load balancer's clients).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_clients: Vec<NetworkPolicyPeer>,
}

impl Default for ServiceSpec {
    fn default() -> Self {
        ServiceSpec { type_: ServiceType::default(), annotations: BTreeMap::new(), port: default_service_port(), allowed_clients: Vec::new() }
    }
}

fn default_service_port() -> i32 {
    6379
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

impl ServiceType {
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }
}

/// How the pods spread over zones and hosts.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologySpec {
    #[serde(default = "preferred")]
    pub zone_spread: SpreadMode,
    #[serde(default = "preferred")]
    pub host_spread: SpreadMode,
}

impl Default for TopologySpec {
    fn default() -> Self {
        TopologySpec { zone_spread: SpreadMode::Preferred, host_spread: SpreadMode::Preferred }
    }
}

fn preferred() -> SpreadMode {
    SpreadMode::Preferred
}

/// `Preferred` schedules anyway when the spread cannot be kept; `Required` leaves pods
/// pending instead.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SpreadMode {
    Disabled,
    Preferred,
    Required,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodDisruptionBudgetSpec {
    #[serde(default = "enabled")]
    pub enabled: bool,
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub max_unavailable: i32,
}

impl Default for PodDisruptionBudgetSpec {
    fn default() -> Self {
        PodDisruptionBudgetSpec { enabled: true, max_unavailable: 1 }
    }
}

fn enabled() -> bool {
    true
}

fn one() -> i32 {
    1
}

/// Node-wide kernel settings, applied by a privileged DaemonSet `<name>-node-tuning` (the
/// operator's own image running `keymesh-operator tune`) on the nodes the engine pods may run on;
/// restored when tuning is disabled or the cluster deleted. Per-pod (network-namespaced)
/// settings such as `net.core.somaxconn` belong in `spec.sysctls`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTuningSpec {
    #[serde(default)]
    pub enabled: bool,
    /// Transparent huge pages on the nodes: `never` is what in-memory stores want (latency
    /// spikes and memory bloat otherwise); `unchanged` leaves it alone.
    #[serde(default)]
    pub transparent_huge_pages: ThpMode,
    /// `vm.overcommit_memory`: 0, 1 (what Redis recommends: forks and large allocations do not
    /// fail), 2, or `unchanged`.
    #[serde(default = "overcommit_one")]
    pub vm_overcommit_memory: k8s_openapi::apimachinery::pkg::util::intstr::IntOrString,
    /// Where the tuner runs; defaults to the engine pods' `pod.nodeSelector`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the tuner; default to the engine pods' `pod.tolerations`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Deprecated: use `spec.sysctls` (`net.core.somaxconn`), which this is copied to. Accepted
    /// for one release, with a warning in the status.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 128))]
    pub somaxconn: Option<i32>,
}

impl Default for NodeTuningSpec {
    fn default() -> Self {
        NodeTuningSpec {
            enabled: false,
            transparent_huge_pages: ThpMode::default(),
            vm_overcommit_memory: overcommit_one(),
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            somaxconn: None,
        }
    }
}

fn overcommit_one() -> k8s_openapi::apimachinery::pkg::util::intstr::IntOrString {
    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)
}

/// A transparent-huge-pages mode.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ThpMode {
    #[default]
    Never,
    Madvise,
    Unchanged,
}

impl ThpMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ThpMode::Never => "never",
            ThpMode::Madvise => "madvise",
            ThpMode::Unchanged => "unchanged",
        }
    }
}

/// How pod-template changes (version, image, resources, restart-only engine settings) roll
/// through the cluster: one pod at a time, highest ordinal first, each handed off and synced
/// before the next (operator README, "Rolling upgrades").
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeSpec {
    /// Stop before the next pod is replaced (a pod already being replaced finishes).
    #[serde(default)]
    pub paused: bool,
    /// Add one pod of the new revision first and remove it at the end, so no pod's data is
    /// ever only on the pod being replaced. Always on for a single-pod cluster.
    #[serde(default)]
    pub surge: bool,
    /// A replaced pod that is not ready and synced this long after it was created fails the
    /// upgrade.
    #[serde(default = "default_ready_timeout_seconds")]
    #[schemars(range(min = 1))]
    pub ready_timeout_seconds: i32,
    /// On a failed upgrade, restore the previous pod template and replace the pods that run
    /// the failed revision.
    #[serde(default = "enabled")]
    pub auto_rollback: bool,
    /// How long clients that are busy (in MULTI, subscribed, blocked) may stay connected to a
    /// pod being replaced or removed before it closes their connections.
    #[serde(default = "default_handoff_grace_seconds")]
    #[schemars(range(min = 0, max = 300))]
    pub handoff_grace_seconds: i32,
}

impl Default for UpgradeSpec {
    fn default() -> Self {
        UpgradeSpec {
            paused: false,
            surge: false,
            ready_timeout_seconds: default_ready_timeout_seconds(),
            auto_rollback: true,
            handoff_grace_seconds: default_handoff_grace_seconds(),
        }
    }
}

fn default_ready_timeout_seconds() -> i32 {
    300
}

fn default_handoff_grace_seconds() -> i32 {
    10
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricsSpec {
    #[serde(default)]
    pub service_monitor: ServiceMonitorSpec,
}

/// A Prometheus-operator ServiceMonitor for the engines' `/metrics`, created when its CRD
/// exists in the cluster.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceMonitorSpec {
    #[serde(default)]
    pub enabled: bool,
    /// Labels on the ServiceMonitor (so a Prometheus' selector picks it up).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Scrape interval, e.g. `30s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
}

/// Passed through to the engine pods as given.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodOverrides {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The NetworkPolicy `<name>` on the engine pods: the client port from `service.allowedClients`,
/// the mesh and admin port only from the cluster's own pods and the operator, metrics from
/// anywhere.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    #[serde(default = "enabled")]
    pub enabled: bool,
}

impl Default for NetworkPolicySpec {
    fn default() -> Self {
        NetworkPolicySpec { enabled: true }
    }
}
