//! `CacheClusterStatus`: what the operator observed at its last reconcile. Conditions use the
//! standard `metav1.Condition` shape; `lastTransitionTime` changes only when a condition's
//! status changes (see `status::conditions`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The condition types the operator maintains.
pub mod condition_types {
    /// Every desired pod is ready (serves clients after its initial sync).
    pub const READY: &str = "Ready";
    /// The cluster is being created or scaled.
    pub const PROGRESSING: &str = "Progressing";
    /// Pods are not ready, or engines do not answer, on a cluster that was running.
    pub const DEGRADED: &str = "Degraded";
    /// Every mesh member streams from every other member.
    pub const MESH_CONNECTED: &str = "MeshConnected";
    /// A member sees a peer's clock further ahead than `spec.engine.maxClockSkewMs`.
    pub const CLOCK_SKEW: &str = "ClockSkew";
    /// The node-tuning DaemonSet's settings hold on every node that runs an engine pod.
    pub const NODE_TUNED: &str = "NodeTuned";
    /// Every sysctl of `spec.sysctls` is allowed by the kubelets (False names the refused one
    /// and how to allow it).
    pub const SYSCTLS_ALLOWED: &str = "SysctlsAllowed";
    /// The engines report no kernel setting that hurts them (THP `always`, overcommit not 1, a
    /// listen backlog above `somaxconn`).
    pub const KERNEL_SETTINGS: &str = "KernelSettings";
    /// The spec uses something deprecated (the message says what to use instead).
    pub const SPEC_WARNINGS: &str = "SpecWarnings";
    /// With `spec.tls` on: every pod serves TLS with a valid certificate and, with
    /// `tls.replication`, the mesh streams over mutual TLS (False says what is missing).
    pub const TLS_READY: &str = "TLSReady";

    pub const ALL: [&str; 10] =
        [READY, PROGRESSING, DEGRADED, MESH_CONNECTED, CLOCK_SKEW, NODE_TUNED, SYSCTLS_ALLOWED, KERNEL_SETTINGS, SPEC_WARNINGS, TLS_READY];
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CacheClusterStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The `metadata.generation` this status describes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Engine pods that are ready.
    #[serde(default)]
    pub ready_replicas: i32,
    /// The engine version the pods report (comma-separated while they differ).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
    /// The engine version the spec asks for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberStatus>,
    /// The rolling upgrade in flight, or the last one that failed (until the spec changes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeStatus>,
    /// Sysctls of `spec.sysctls` a kubelet refused (`SysctlForbidden`); kept while the spec
    /// asks for them until pods with them run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_sysctls: Vec<String>,
    /// The certificate the pods serve, while `spec.tls` is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsStatus>,
}

/// The pods' certificate.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsStatus {
    /// The Secret the pods mount.
    pub secret_name: String,
    /// The certificate's serial number, hex (as the engines' `INFO tls` shows it).
    pub serial: String,
    /// RFC 3339.
    pub not_after: String,
    /// When the operator issues the next certificate (operator-issued only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renew_at: Option<String>,
    /// Pods that mount the certificate.
    pub pods: i32,
    /// Every engine streams to its peers over mutual TLS.
    pub replication: bool,
}

impl CacheClusterStatus {
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// The cluster's life cycle, for humans and `kubectl get`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    /// Nothing created yet.
    Pending,
    /// The pods of a new cluster are starting.
    Creating,
    /// Every pod is ready and in the mesh.
    Running,
    /// Pods are being added to or removed from the mesh.
    Scaling,
    /// A cluster that ran has pods that are not ready or not connected.
    Degraded,
    /// The spec is invalid; the operator waits for it to change.
    Failed,
    /// Pods are being replaced with a new pod template, one at a time.
    Upgrading,
    /// A replaced pod did not become ready; see `status.upgrade` (rolled back when
    /// `spec.upgrade.autoRollback`). Waits for the spec to change.
    UpgradeFailed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Creating => "Creating",
            Phase::Running => "Running",
            Phase::Scaling => "Scaling",
            Phase::Degraded => "Degraded",
            Phase::Failed => "Failed",
            Phase::Upgrading => "Upgrading",
            Phase::UpgradeFailed => "UpgradeFailed",
        }
    }
}

/// Where a rolling upgrade stands.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum UpgradeState {
    /// The pod template changed and no pod was replaced yet (waiting for a healthy cluster).
    Pending,
    /// Pods are being replaced.
    Rolling,
    /// `spec.upgrade.paused`: no further pod is replaced.
    Paused,
    /// A replaced pod failed; without auto-rollback the operator holds here.
    Failed,
    /// A replaced pod failed; the pods on the failed revision go back to the previous one.
    RollingBack,
    /// The failed upgrade was rolled back; the cluster runs the previous revision until the
    /// spec changes again.
    RolledBack,
}

impl UpgradeState {
    pub fn as_str(self) -> &'static str {
        match self {
            UpgradeState::Pending => "Pending",
            UpgradeState::Rolling => "Rolling",
            UpgradeState::Paused => "Paused",
            UpgradeState::Failed => "Failed",
            UpgradeState::RollingBack => "RollingBack",
            UpgradeState::RolledBack => "RolledBack",
        }
    }
}

/// A rolling upgrade: which pod-template revision the pods come from and go to. Revisions are
/// the pod template's hash (the `keymesh.io/template-hash` annotation on pods and on the
/// StatefulSet's ControllerRevisions).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStatus {
    pub state: UpgradeState,
    /// The revision the pods ran when the upgrade started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_revision: Option<String>,
    /// The revision the spec asks for.
    pub to_revision: String,
    /// Engine versions of the two revisions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_version: Option<String>,
    pub to_version: String,
    /// Pods that run `toRevision` (during a rollback: `fromRevision`).
    pub updated_replicas: i32,
    /// The pod being handed off or replaced now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_pod: Option<String>,
    /// The pod that failed the upgrade.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_pod: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    pub message: String,
}

/// One engine pod as the operator last saw it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    pub pod: String,
    /// The `topology.kubernetes.io/zone` label of the pod's node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The engine reports itself ready (it serves clients).
    pub ready: bool,
    /// The engine finished an initial sync from a peer (or needs none).
    pub synced: bool,
    /// Peers this engine streams from right now.
    pub connected_peers: i32,
    /// The largest replication lag, in operations, over its peers.
    pub lag_ops: i64,
    /// The pod-template revision the pod runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The engine version it reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}
