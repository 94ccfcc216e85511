//! The agent's Nodes: registered with zone and hostname labels, a pod CIDR, capacity and
//! allocatable, and kept Ready by a heartbeat (the `Ready` condition's heartbeat time on the
//! status, and the node's Lease in `kube-node-lease`) every [`HEARTBEAT`], well inside the node
//! lifecycle controller's 40 s grace, so it never marks them unreachable or taints them.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use super::network::{node_ip, node_subnet};

pub const HEARTBEAT: Duration = Duration::from_secs(10);
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
const FIELD_MANAGER: &str = "keymesh-node-agent";
const LEASE_NAMESPACE: &str = "kube-node-lease";
const LEASE_SECONDS: i32 = 40;

/// One node the agent runs: its name and zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentNode {
    pub name: String,
    pub zone: String,
}

impl AgentNode {
    pub fn new(name: &str, zone: &str) -> Self {
        AgentNode { name: name.to_owned(), zone: zone.to_owned() }
    }

    /// `km-node-a`, `km-node-b`, `km-node-c` in zones `zone-a`, `zone-b`, `zone-c`.
    pub fn defaults() -> Vec<AgentNode> {
        ["a", "b", "c"].iter().map(|s| AgentNode::new(&format!("km-node-{s}"), &format!("zone-{s}"))).collect()
    }
}

/// Creates (or takes over) node `index` (1-based) and reports it Ready.
pub async fn register(client: &Client, node: &AgentNode, index: usize, since: Timestamp) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let labels = BTreeMap::from([
        (ZONE_LABEL.to_owned(), node.zone.clone()),
        ("failure-domain.beta.kubernetes.io/zone".to_owned(), node.zone.clone()),
        (HOSTNAME_LABEL.to_owned(), node.name.clone()),
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
    ]);
    let object = Node {
        metadata: ObjectMeta { name: Some(node.name.clone()), labels: Some(labels), ..ObjectMeta::default() },
        spec: Some(NodeSpec { pod_cidr: Some(node_subnet(index)), pod_cidrs: Some(vec![node_subnet(index)]), ..NodeSpec::default() }),
        status: None,
    };
    api.patch(&node.name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&object)).await?;
    heartbeat(client, node, index, since).await
}

/// Renews the node's status (Ready since `since`, when the agent started) and Lease.
pub async fn heartbeat(client: &Client, node: &AgentNode, index: usize, since: Timestamp) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let body = serde_json::json!({ "status": status(node, index, since) });
    api.patch_status(&node.name, &PatchParams::default(), &Patch::Merge(&body)).await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let lease = Lease {
        metadata: ObjectMeta { name: Some(node.name.clone()), namespace: Some(LEASE_NAMESPACE.into()), ..ObjectMeta::default() },
        spec: Some(LeaseSpec {
            holder_identity: Some(node.name.clone()),
            lease_duration_seconds: Some(LEASE_SECONDS),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..LeaseSpec::default()
        }),
    };
    leases.patch(&node.name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&lease)).await.map(drop)
}

fn status(node: &AgentNode, index: usize, since: Timestamp) -> NodeStatus {
    let now = Time(Timestamp::now());
    let resources = BTreeMap::from([
        ("cpu".to_owned(), Quantity("4".into())),
        ("memory".to_owned(), Quantity("8Gi".into())),
        ("pods".to_owned(), Quantity("110".into())),
        ("ephemeral-storage".to_owned(), Quantity("20Gi".into())),
    ]);
    let condition = |kind: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: kind.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(Time(since)),
    };
    NodeStatus {
        capacity: Some(resources.clone()),
        allocatable: Some(resources),
        conditions: Some(vec![
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "keymesh node agent is posting ready status"),
        ]),
        addresses: Some(vec![
            NodeAddress { type_: "InternalIP".into(), address: node_ip(index).to_string() },
            NodeAddress { type_: "Hostname".into(), address: node.name.clone() },
        ]),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".into(),
            boot_id: format!("keymesh-agent-{}", std::process::id()),
            container_runtime_version: "keymesh-agent://0.1.0".into(),
            kernel_version: String::new(),
            kube_proxy_version: String::new(),
            kubelet_version: format!("v{}", crate::control_plane::K8S_VERSION),
            machine_id: node.name.clone(),
            operating_system: "linux".into(),
            os_image: "keymesh node agent".into(),
            system_uuid: node.name.clone(),
            ..NodeSystemInfo::default()
        }),
        ..NodeStatus::default()
    }
}
