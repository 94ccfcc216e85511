//! Pod status as the kubelet reports it: phase, addresses, start time, the conditions
//! (`PodScheduled`, `Initialized`, `ContainersReady`, `Ready`, each with its last transition)
//! and a status per container (`state`, `lastState`, `ready`, `started`, `restartCount`),
//! patched on the status subresource whenever it changes.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

/// A container's state at one moment.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    Waiting { reason: String, message: Option<String> },
    Running { since: Timestamp },
    Terminated { exit_code: i32, signal: Option<i32>, reason: String, started: Option<Timestamp>, finished: Timestamp },
}

/// What the status says about one container.
#[derive(Debug, Clone)]
pub struct ContainerReport {
    pub name: String,
    pub image: String,
    pub id: Option<String>,
    pub ready: bool,
    pub started: bool,
    pub restart_count: i32,
    pub state: State,
    pub last: Option<State>,
}

/// What the status says about the pod.
#[derive(Debug, Clone)]
pub struct PodReport {
    pub phase: &'static str,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub ip: Option<Ipv4Addr>,
    pub host_ip: Ipv4Addr,
    pub start_time: Option<Timestamp>,
    pub initialized: bool,
    pub containers_ready: bool,
    pub init: Vec<ContainerReport>,
    pub main: Vec<ContainerReport>,
}

/// Each condition's value and when it last changed.
#[derive(Debug, Default)]
pub struct Conditions(BTreeMap<&'static str, (bool, Timestamp)>);

impl Conditions {
    fn set(&mut self, kind: &'static str, value: bool) -> Timestamp {
        let entry = self.0.entry(kind).or_insert((value, Timestamp::now()));
        if entry.0 != value {
            *entry = (value, Timestamp::now());
        }
        entry.1
    }
}

/// The status to patch for `report`. `Ready` is `ContainersReady` and every readiness gate's
/// condition (`spec.readinessGates`, set by a controller on the pod) True, as the kubelet
/// computes it; the patch is a strategic merge, which merges conditions by type, so conditions
/// set by others (`PodScheduled`, the gates) are left as they are.
pub fn pod_status(pod: &Pod, report: &PodReport, conditions: &mut Conditions) -> PodStatus {
    let existing: Vec<&PodCondition> = pod.status.iter().flat_map(|s| s.conditions.iter().flatten()).collect();
    let gates_open = pod
        .spec
        .iter()
        .flat_map(|s| s.readiness_gates.iter().flatten())
        .all(|gate| existing.iter().any(|c| c.type_ == gate.condition_type && c.status == "True"));
    let mut conds = Vec::new();
    for (kind, value) in [("Initialized", report.initialized), ("ContainersReady", report.containers_ready), ("Ready", report.containers_ready && gates_open)] {
        let since = conditions.set(kind, value);
        conds.push(PodCondition {
            type_: kind.into(),
            status: if value { "True" } else { "False" }.into(),
            last_transition_time: Some(Time(since)),
            ..PodCondition::default()
        });
    }
    let ip = report.ip.map(|ip| ip.to_string());
    PodStatus {
        phase: Some(report.phase.into()),
        reason: report.reason.clone(),
        message: report.message.clone(),
        host_ip: Some(report.host_ip.to_string()),
        host_ips: Some(vec![HostIP { ip: report.host_ip.to_string() }]),
        pod_ip: ip.clone(),
        pod_ips: ip.map(|ip| vec![PodIP { ip }]),
        start_time: report.start_time.map(Time),
        conditions: Some(conds),
        init_container_statuses: (!report.init.is_empty()).then(|| report.init.iter().map(container_status).collect()),
        container_statuses: Some(report.main.iter().map(container_status).collect()),
        qos_class: Some("BestEffort".into()),
        ..PodStatus::default()
    }
}

fn container_status(c: &ContainerReport) -> ContainerStatus {
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone(),
        image_id: String::new(),
        container_id: c.id.clone(),
        ready: c.ready,
        started: Some(c.started),
        restart_count: c.restart_count,
        state: Some(state(&c.state, c.id.as_deref())),
        last_state: Some(c.last.as_ref().map(|s| state(s, None)).unwrap_or_default()),
        ..ContainerStatus::default()
    }
}

fn state(s: &State, id: Option<&str>) -> ContainerState {
    match s {
        State::Waiting { reason, message } => {
            ContainerState { waiting: Some(ContainerStateWaiting { reason: Some(reason.clone()), message: message.clone() }), ..ContainerState::default() }
        }
        State::Running { since } => ContainerState { running: Some(ContainerStateRunning { started_at: Some(Time(*since)) }), ..ContainerState::default() },
        State::Terminated { exit_code, signal, reason, started, finished } => ContainerState {
            terminated: Some(ContainerStateTerminated {
                container_id: id.map(str::to_owned),
                exit_code: *exit_code,
                signal: *signal,
                reason: Some(reason.clone()),
                started_at: started.map(Time),
                finished_at: Some(Time(*finished)),
                message: None,
            }),
            ..ContainerState::default()
        },
    }
}

/// Strategic-merge-patches `status` onto the pod's status subresource (conditions merge by
/// type; see `pod_status`).
pub async fn patch(client: &Client, namespace: &str, name: &str, status: &PodStatus) -> Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let body = serde_json::json!({ "status": status });
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&body)).await.map(drop)
}
