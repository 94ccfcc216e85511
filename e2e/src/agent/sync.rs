//! The agent's control loop: watches (reflectors) on Pods, Services and Endpoints; a pass on
//! every change (and every second) that starts a task for each new pod bound to one of the
//! agent's nodes, hands each task its pod's latest object, drops the tasks of pods that are gone,
//! and rewrites the hosts files; and the nodes' heartbeat.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::serde::de::DeserializeOwned;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use super::{new_record, nodes, pod, AgentError, Shared};

const PASS_INTERVAL: Duration = Duration::from_secs(1);

/// Starts the reflectors; every event wakes the returned `Notify`.
pub fn start_watches(client: &Client) -> (Store<Service>, Store<Endpoints>, Store<Pod>, Arc<Notify>) {
    let notify = Arc::new(Notify::new());
    let services = reflect(Api::all(client.clone()), notify.clone());
    let endpoints = reflect(Api::all(client.clone()), notify.clone());
    let pods = reflect(Api::all(client.clone()), notify.clone());
    (services, endpoints, pods, notify)
}

fn reflect<K>(api: Api<K>, notify: Arc<Notify>) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()).default_backoff());
    tokio::spawn(async move {
        stream
            .for_each(|event| {
                if let Err(e) = event {
                    tracing::debug!(error = %e, "watch error (retrying)");
                }
                notify.notify_one();
                futures::future::ready(())
            })
            .await;
    });
    store
}

/// Registers every node (retrying briefly: a fresh apiserver may still be settling).
pub async fn register_nodes(shared: &Shared) -> Result<(), AgentError> {
    for (i, node) in shared.nodes.iter().enumerate() {
        let mut attempt = 0;
        loop {
            match nodes::register(&shared.client, node, i + 1, Timestamp::now()).await {
                Ok(()) => break,
                Err(e) if attempt < 10 => {
                    attempt += 1;
                    tracing::debug!(node = %node.name, error = %e, "node registration failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(source) => return Err(AgentError::Kube { what: format!("register node {}", node.name), source }),
            }
        }
    }
    Ok(())
}

struct Task {
    pods: watch::Sender<Arc<Pod>>,
    handle: JoinHandle<()>,
}

/// Runs until `stop` turns true, then stops every pod (waiting for each) before returning.
pub async fn run(shared: Arc<Shared>, pods: Store<Pod>, notify: Arc<Notify>, mut stop: watch::Receiver<bool>) {
    let since = Timestamp::now();
    let beat = shared.clone();
    let heartbeat = tokio::spawn(async move {
        loop {
            tokio::time::sleep(nodes::HEARTBEAT).await;
            for (i, node) in beat.nodes.iter().enumerate() {
                if let Err(e) = nodes::heartbeat(&beat.client, node, i + 1, since).await {
                    tracing::warn!(node = %node.name, error = %e, "heartbeat failed");
                }
            }
        }
    });
    let (stop_pods, stop_pods_rx) = watch::channel(false);
    let mut tasks: BTreeMap<String, Task> = BTreeMap::new();
    let mut finishing: Vec<JoinHandle<()>> = Vec::new();
    let mut seq = 0u64;
    loop {
        tokio::select! {
            () = notify.notified() => {}
            () = tokio::time::sleep(PASS_INTERVAL) => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() || stop.has_changed().is_err() {
            break;
        }
        let current = pods.state();
        for p in &current {
            let Some(uid) = p.metadata.uid.clone() else { continue };
            let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()).and_then(|n| shared.node_index(n)) else { continue };
            match tasks.get(&uid) {
                Some(task) => {
                    if task.pods.borrow().metadata.resource_version != p.metadata.resource_version {
                        task.pods.send_replace(p.clone());
                    }
                }
                None => {
                    seq += 1;
                    shared.registry().insert(uid.clone(), new_record(&shared, seq, p, node));
                    let (tx, rx) = watch::channel(p.clone());
                    let handle = tokio::spawn(pod::run(shared.clone(), uid.clone(), node, rx, stop_pods_rx.clone()));
                    tasks.insert(uid, Task { pods: tx, handle });
                }
            }
        }
        let gone: Vec<String> = tasks.keys().filter(|uid| !current.iter().any(|p| p.metadata.uid.as_ref() == Some(uid))).cloned().collect();
        for uid in gone {
            if let Some(task) = tasks.remove(&uid) {
                // Dropping the sender tells the task its pod is gone.
                drop(task.pods);
                finishing.push(task.handle);
            }
            shared.registry().remove(&uid);
        }
        finishing.retain(|h| !h.is_finished());
        shared.refresh_hosts();
    }
    heartbeat.abort();
    let _ = stop_pods.send(true);
    for handle in tasks.into_values().map(|t| t.handle).chain(finishing) {
        let _ = handle.await;
    }
}
