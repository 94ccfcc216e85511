//! Reconciles against a mocked API server and a fake mesh: each scenario lists, in order, the
//! requests one reconcile must make, and checks what it applied, wrote and published.

use std::sync::Arc;

use serde_json::Value;

use super::*;
use crate::fixtures::{auth_secret, endpoints, node, pod, statefulset, test_context, timeout_after_5s, ApiServerVerifier, FakeMesh};
use crate::names::ClusterNames;
use crate::test_support::{cluster, engine, full_mesh};

const PDB_V1BETA1: &str = "/apis/policy/v1beta1/namespaces/cache/poddisruptionbudgets/demo";
const CONFIG_MAPS: &str = "/api/v1/namespaces/cache/configmaps";
const NODE_TUNING: &str = "/apis/apps/v1/namespaces/cache/daemonsets/demo-node-tuning";

/// The revision (template hash) and settings hash a spec builds.
fn hashes(c: &CacheCluster) -> (String, String) {
    let spec = validate(c).expect("a valid spec");
    let names = ClusterNames::new("demo", "cache", "cluster.local");
    let settings = engine_settings(&spec, &names, None);
    (pod_template(&spec, &names, &settings, None).hash, settings.hash)
}

/// One pod as the scenario's API server shows it.
#[derive(Clone, Copy)]
struct PodView {
    ordinal: u32,
    ready: bool,
    serving: Option<bool>,
}

fn running(n: u32) -> Vec<PodView> {
    (0..n).map(|ordinal| PodView { ordinal, ready: true, serving: Some(true) }).collect()
}

/// What the API server holds when a scenario's reconcile starts.
enum Scenario {
    /// A new cluster on a Kubernetes 1.20 API server (policy/v1beta1 only): nothing exists.
    Create,
    /// Everything exists and runs the spec's revision; the client Service routes to
    /// `endpoints`; the reconcile sets the gates of `gates` (in that order).
    Existing { statefulset_replicas: i32, pods: Vec<PodView>, endpoints: Vec<u32>, gates: Vec<&'static str>, status_write: bool },
    /// A spec that fails validation: only the status is written.
    InvalidSpec,
}

fn node_of(ordinal: u32) -> &'static str {
    ["node-a", "node-b", "node-c"][ordinal as usize % 3]
}

impl ApiServerVerifier {
    fn run(mut self, scenario: Scenario, cluster: CacheCluster, events: &'static [&'static str]) -> tokio::task::JoinHandle<ApiServerVerifier> {
        let (revision, settings) = if matches!(scenario, Scenario::InvalidSpec) { Default::default() } else { hashes(&cluster) };
        tokio::spawn(async move {
            match scenario {
                Scenario::Create => {
                    self.handle_discovery(&["v1beta1"], false).await;
                    self.handle_get("/api/v1/namespaces/cache/secrets/demo-auth", None).await;
                    self.handle_get("/apis/apps/v1/namespaces/cache/statefulsets/demo", None).await;
                    self.handle_list_pods(vec![]).await;
                    self.handle_get("/api/v1/namespaces/cache/endpoints/demo", None).await;
                    self.handle_get(NODE_TUNING, None).await;
                    self.handle_applies(&settings).await;
                    self.handle_status(&cluster).await;
                    self.handle_list(CONFIG_MAPS, "ConfigMapList", vec![]).await;
                }
                Scenario::Existing { statefulset_replicas, pods, endpoints: routed, gates, status_write } => {
                    self.handle_discovery(&["v1beta1"], false).await;
                    self.handle_get("/api/v1/namespaces/cache/secrets/demo-auth", Some(auth_secret("s3cret"))).await;
                    self.handle_get("/apis/apps/v1/namespaces/cache/statefulsets/demo", Some(statefulset(statefulset_replicas, &revision))).await;
                    let views: Vec<Value> = pods.iter().map(|p| pod(p.ordinal, p.ready, node_of(p.ordinal), &revision, p.serving)).collect();
                    self.handle_list_pods(views).await;
                    self.handle_get("/api/v1/namespaces/cache/endpoints/demo", Some(endpoints(&routed))).await;
                    for (i, name) in ["node-a", "node-b", "node-c"].into_iter().enumerate().take(pods.len().min(3)) {
                        self.handle_get(&format!("/api/v1/nodes/{name}"), Some(node(name, &format!("zone-{i}")))).await;
                    }
                    self.handle_get(NODE_TUNING, None).await;
                    self.handle_applies(&settings).await;
                    for pod in gates {
                        self.handle_gate(pod).await;
                    }
                    if status_write {
                        self.handle_status(&cluster).await;
                    }
                    self.handle_list(CONFIG_MAPS, "ConfigMapList", vec![]).await;
                }
                Scenario::InvalidSpec => {
                    self.handle_status(&cluster).await;
                }
            }
            self.finish(events).await
        })
    }

    /// The applies of a default spec, in the documented order.
    async fn handle_applies(&mut self, settings: &str) {
        self.handle_apply("/api/v1/namespaces/cache/secrets/demo-auth").await;
        self.handle_apply(&format!("{CONFIG_MAPS}/demo-config-{settings}")).await;
        self.handle_apply(&format!("{CONFIG_MAPS}/demo-peers")).await;
        self.handle_apply("/api/v1/namespaces/cache/services/demo-headless").await;
        self.handle_apply("/api/v1/namespaces/cache/services/demo").await;
        self.handle_apply("/apis/networking.k8s.io/v1/namespaces/cache/networkpolicies/demo").await;
        self.handle_apply("/apis/apps/v1/namespaces/cache/statefulsets/demo").await;
        self.handle_apply(PDB_V1BETA1).await;
    }
}

fn applied<'a>(verifier: &'a ApiServerVerifier, key: &str) -> &'a Value {
    verifier.applied.get(key).unwrap_or_else(|| panic!("{key} was not applied; applied: {:?}", verifier.applied.keys()))
}

fn config_peers(verifier: &ApiServerVerifier) -> Vec<String> {
    let config = applied(verifier, "ConfigMap/demo-peers")["data"]["peers.conf"].as_str().unwrap_or_default().to_string();
    config.lines().filter_map(|l| l.strip_prefix("replicaof ")).map(|l| l.split('.').next().unwrap_or_default().to_string()).collect()
}

fn partition(verifier: &ApiServerVerifier) -> Value {
    applied(verifier, "StatefulSet/demo")["spec"]["updateStrategy"]["rollingUpdate"]["partition"].clone()
}

fn existing(statefulset_replicas: i32, pods: Vec<PodView>, status_write: bool) -> Scenario {
    let endpoints = pods.iter().filter(|p| p.ready && p.serving == Some(true)).map(|p| p.ordinal).collect();
    Scenario::Existing { statefulset_replicas, pods, endpoints, gates: vec![], status_write }
}

/// A cluster whose status is what a reconcile of `members` computes (a previous reconcile).
async fn with_status(spec_yaml: &str, statefulset_replicas: i32, members: Vec<crate::mesh::MemberState>) -> CacheCluster {
    let mut c = cluster(spec_yaml);
    let pods = running(members.len() as u32);
    let (ctx, verifier) = test_context(FakeMesh::new(members));
    let server = verifier.run(existing(statefulset_replicas, pods, true), c.clone(), &["Running"]);
    reconcile(Arc::new(c.clone()), ctx).await.expect("the previous reconcile succeeds");
    let verifier = timeout_after_5s(server).await;
    c.status = Some(serde_json::from_value(verifier.statuses[0].clone()).expect("a status"));
    c
}

#[tokio::test]
async fn create_applies_every_child_in_order_and_reports_pending() {
    let c = cluster("{}");
    let (ctx, verifier) = test_context(FakeMesh::new(vec![]));
    let server = verifier.run(Scenario::Create, c.clone(), &["Creating", "Pending"]);
    let action = reconcile(Arc::new(c), ctx).await.expect("reconciles");
    let verifier = timeout_after_5s(server).await;
    assert_eq!(action, Action::requeue(REQUEUE_SCALING));
    let sts = applied(&verifier, "StatefulSet/demo");
    assert_eq!(sts["spec"]["replicas"], 3, "{sts:#}");
    assert_eq!(partition(&verifier), 0, "a new cluster's pods are all created from the spec's template");
    let password = &applied(&verifier, "Secret/demo-auth")["data"]["password"];
    assert!(password.as_str().is_some_and(|p| p.len() > 20), "a generated password: {password}");
    assert_eq!(applied(&verifier, "PodDisruptionBudget/demo")["apiVersion"], "policy/v1beta1", "Kubernetes 1.20 gets policy/v1beta1");
    assert_eq!(config_peers(&verifier), ["demo-0", "demo-1", "demo-2"], "founding members name each other");
    assert_eq!(verifier.statuses[0]["phase"], "Pending", "{:#}", verifier.statuses[0]);
}

#[tokio::test]
async fn re_reconciling_a_running_cluster_changes_nothing() {
    let c = with_status("{}", 3, full_mesh(3)).await;
    assert_eq!(c.status.as_ref().and_then(|s| s.phase), Some(Phase::Running), "{c:#?}");
    let mesh = FakeMesh::new(full_mesh(3));
    let (ctx, verifier) = test_context(mesh.clone());
    let server = verifier.run(existing(3, running(3), false), c.clone(), &[]);
    let action = reconcile(Arc::new(c), ctx).await.expect("reconciles");
    let verifier = timeout_after_5s(server).await;
    assert_eq!(action, Action::requeue(REQUEUE_STEADY));
    assert!(verifier.statuses.is_empty(), "an unchanged status is not written: {:?}", verifier.statuses);
    assert!(mesh.calls().is_empty() && mesh.handoffs().is_empty(), "no peer list or handoff changes: {:?} {:?}", mesh.calls(), mesh.handoffs());
    assert_eq!(
        mesh.passwords_seen.lock().expect("lock").first().cloned().flatten().as_deref(),
        Some("s3cret"),
        "engines are called with the Secret's password"
    );
    assert!(
        verifier.applied["Secret/demo-auth"]["data"]["password"] == serde_json::to_value(k8s_openapi::ByteString(b"s3cret".to_vec())).expect("base64"),
        "the password is never rotated"
    );
}

#[tokio::test]
async fn new_pods_get_their_readiness_gate_opened() {
    let c = with_status("{}", 3, full_mesh(3)).await;
    let mesh = FakeMesh::new(full_mesh(3));
    let (ctx, verifier) = test_context(mesh);
    let mut pods = running(3);
    pods[1].serving = None;
    let scenario = Scenario::Existing { statefulset_replicas: 3, pods, endpoints: vec![0, 2], gates: vec!["demo-1"], status_write: true };
    let server = verifier.run(scenario, c.clone(), &["Degraded"]);
    reconcile(Arc::new(c), ctx).await.expect("reconciles");
    timeout_after_5s(server).await;
}

#[tokio::test]
async fn a_live_setting_reaches_every_engine_without_a_new_revision() {
    let c = with_status("{}", 3, full_mesh(3)).await;
    let mut changed = c.clone();
    changed.spec.engine.eviction_policy = crate::api::EvictionPolicy::AllkeysLru;
    assert_eq!(hashes(&c), hashes(&changed), "a live setting changes neither the revision nor the settings ConfigMap");
    let mesh = FakeMesh::new(full_mesh(3));
    let (ctx, verifier) = test_context(mesh.clone());
    let events = &["ConfigApplied", "ConfigApplied", "ConfigApplied"];
    let server = verifier.run(existing(3, running(3), false), changed.clone(), events);
    reconcile(Arc::new(changed), ctx).await.expect("reconciles");
    let verifier = timeout_after_5s(server).await;
    let configs = mesh.configs();
    assert_eq!(configs.len(), 3, "{configs:?}");
    assert!(configs.iter().all(|(_, values)| values.get("maxmemory-policy").map(String::as_str) == Some("allkeys-lru")), "{configs:?}");
    assert_eq!(partition(&verifier), 0, "no pod is replaced");
}

#[tokio::test]
async fn a_version_change_freezes_the_partition_and_takes_the_highest_pod_out_of_service() {
    let c = with_status("{}", 3, full_mesh(3)).await;
    let mut upgraded = c.clone();
    upgraded.spec.version = Some("0.2.0".into());
    upgraded.metadata.generation = Some(2);
    let mesh = FakeMesh::new(full_mesh(3));
    let (ctx, mut verifier) = test_context(mesh.clone());
    // The live StatefulSet and pods run the old revision.
    let (old_revision, old_settings) = hashes(&c);
    let (_, new_settings) = hashes(&upgraded);
    let cluster = upgraded.clone();
    let server = tokio::spawn(async move {
        verifier.handle_discovery(&["v1beta1"], false).await;
        verifier.handle_get("/api/v1/namespaces/cache/secrets/demo-auth", Some(auth_secret("s3cret"))).await;
        verifier.handle_get("/apis/apps/v1/namespaces/cache/statefulsets/demo", Some(statefulset(3, &old_revision))).await;
        verifier.handle_list_pods((0..3).map(|i| pod(i, true, node_of(i), &old_revision, Some(true))).collect()).await;
        verifier.handle_get("/api/v1/namespaces/cache/endpoints/demo", Some(endpoints(&[0, 1, 2]))).await;
        for (i, name) in ["node-a", "node-b", "node-c"].into_iter().enumerate() {
            verifier.handle_get(&format!("/api/v1/nodes/{name}"), Some(node(name, &format!("zone-{i}")))).await;
        }
        verifier.handle_get(NODE_TUNING, None).await;
        assert_eq!(old_settings, new_settings, "a version change keeps the settings");
        verifier.handle_applies(&new_settings).await;
        assert_eq!(verifier.handle_gate("demo-2").await, "False", "the highest pod leaves the Service first");
        verifier.handle_status(&cluster).await;
        verifier.finish(&["HandingOff", "Upgrading", "ReplacingPod", "Upgrading"]).await
    });
    let action = reconcile(Arc::new(upgraded), ctx).await.expect("reconciles");
    let verifier = timeout_after_5s(server).await;
    assert_eq!(action, Action::requeue(REQUEUE_HANDOFF));
    assert_eq!(partition(&verifier), 3, "nothing is replaced before its handoff");
    let status = &verifier.statuses[0];
    assert_eq!((status["phase"].as_str(), status["upgrade"]["state"].as_str()), (Some("Upgrading"), Some("Rolling")), "{status:#}");
    assert_eq!(status["upgrade"]["currentPod"], "demo-2", "{status:#}");
    assert_eq!(status["currentVersion"], "0.1.0", "the version moves only when every pod runs it: {status:#}");
    assert!(mesh.handoffs().is_empty(), "the engine's handoff waits until the pod is out of the endpoints");
}

#[tokio::test]
async fn scale_up_grows_the_statefulset_and_new_pods_sync_from_the_old_members() {
    let mut c = with_status("{}", 3, full_mesh(3)).await;
    c.spec.replicas = 5;
    let mesh = FakeMesh::new(full_mesh(3));
    let (ctx, verifier) = test_context(mesh.clone());
    let server = verifier.run(existing(3, running(3), true), c.clone(), &["ScalingUp", "Scaling"]);
    let action = reconcile(Arc::new(c), ctx).await.expect("reconciles");
    let verifier = timeout_after_5s(server).await;
    assert_eq!(action, Action::requeue(REQUEUE_SCALING));
    assert_eq!(applied(&verifier, "StatefulSet/demo")["spec"]["replicas"], 5);
    assert_eq!(config_peers(&verifier), ["demo-0", "demo-1", "demo-2"], "new pods sync from the old members only");
    assert_eq!(verifier.statuses[0]["phase"], "Scaling", "{:#}", verifier.statuses[0]);
    assert!(mesh.calls().is_empty(), "nobody lists a pod before it synced: {:?}", mesh.calls());
}

#[tokio::test]
async fn scale_up_adds_a_synced_pod_to_every_peer_list() {
    let mut c = with_status("{}", 3, full_mesh(3)).await;
    c.spec.replicas = 4;
    let mut members = full_mesh(3);
    members.push(engine(3, &[0, 1, 2], true));
    let mesh = FakeMesh::new(members);
    let (ctx, verifier) = test_context(mesh.clone());
    let events = &["PeersAdded", "Scaling"];
    let server = verifier.run(existing(4, running(4), true), c.clone(), events);
    reconcile(Arc::new(c), ctx).await.expect("reconciles");
    let verifier = timeout_after_5s(server).await;
    let mut calls = mesh.calls();
    calls.sort();
    assert_eq!(
        calls,
        [
            ("demo-0".to_string(), vec!["demo-1".to_string(), "demo-2".into(), "demo-3".into()]),
            ("demo-1".to_string(), vec!["demo-0".to_string(), "demo-2".into(), "demo-3".into()]),
            ("demo-2".to_string(), vec!["demo-0".to_string(), "demo-1".into(), "demo-3".into()]),
        ]
    );
    assert_eq!(config_peers(&verifier), ["demo-0", "demo-1", "demo-2", "demo-3"]);
}

#[tokio::test]
async fn scale_down_hands_leaving_pods_off_removes_them_from_peer_lists_then_shrinks() {
    let mut c = with_status("replicas: 5", 5, full_mesh(5)).await;
    c.spec.replicas = 3;
    let mesh = FakeMesh::new(full_mesh(5));
    let step = |scenario: Scenario, c: &CacheCluster, events: &'static [&'static str]| {
        let (ctx, verifier) = test_context(mesh.clone());
        let server = verifier.run(scenario, c.clone(), events);
        let c = c.clone();
        async move {
            reconcile(Arc::new(c), ctx).await.expect("reconciles");
            timeout_after_5s(server).await
        }
    };

    // 1. The leaving pods 3 and 4 leave the client Service (their gates close); nothing else.
    let scenario =
        Scenario::Existing { statefulset_replicas: 5, pods: running(5), endpoints: vec![0, 1, 2, 3, 4], gates: vec!["demo-3", "demo-4"], status_write: true };
    let verifier = step(scenario, &c, &["HandingOff", "HandingOff", "Scaling"]).await;
    assert_eq!(applied(&verifier, "StatefulSet/demo")["spec"]["replicas"], 5, "no shrink while leaving pods are handed off");
    assert!(mesh.calls().is_empty() && mesh.handoffs().is_empty(), "{:?} {:?}", mesh.calls(), mesh.handoffs());
    c.status = Some(serde_json::from_value(verifier.statuses[0].clone()).expect("a status"));

    // 2. Out of the endpoints: their engines hand their clients off.
    let mut pods = running(5);
    for p in &mut pods[3..] {
        p.serving = Some(false);
    }
    let scenario = Scenario::Existing { statefulset_replicas: 5, pods: pods.clone(), endpoints: vec![0, 1, 2], gates: vec![], status_write: true };
    let verifier = step(scenario, &c, &["ClosingClients", "ClosingClients"]).await;
    assert_eq!(mesh.handoffs(), [("demo-3".to_string(), true), ("demo-4".to_string(), true)]);
    assert!(mesh.calls().is_empty(), "still listed until the remaining members confirm their writes");
    if let Some(status) = verifier.statuses.first() {
        c.status = Some(serde_json::from_value(status.clone()).expect("a status"));
    }

    // 3. Handed off, and every remaining member confirms: they are removed from the peer lists.
    let scenario = Scenario::Existing { statefulset_replicas: 5, pods: pods.clone(), endpoints: vec![0, 1, 2], gates: vec![], status_write: true };
    let verifier = step(scenario, &c, &["PeersRemoved", "PeersRemoved"]).await;
    assert_eq!(applied(&verifier, "StatefulSet/demo")["spec"]["replicas"], 5, "no shrink while members list leaving pods");
    assert_eq!(config_peers(&verifier), ["demo-0", "demo-1", "demo-2"]);
    let mut calls = mesh.calls();
    calls.sort();
    let rewired: Vec<&str> = calls.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(rewired, ["demo-0", "demo-1", "demo-2"], "only remaining members are rewired: {calls:?}");
    assert!(calls.iter().all(|(_, peers)| !peers.iter().any(|p| p == "demo-3" || p == "demo-4")), "{calls:?}");
    c.status = Some(serde_json::from_value(verifier.statuses[0].clone()).expect("a status"));

    // 4. Nobody lists a leaving pod: the StatefulSet shrinks.
    let scenario = Scenario::Existing { statefulset_replicas: 5, pods, endpoints: vec![0, 1, 2], gates: vec![], status_write: true };
    let verifier = step(scenario, &c, &["ScalingDown"]).await;
    assert_eq!(applied(&verifier, "StatefulSet/demo")["spec"]["replicas"], 3, "shrinks once no member lists a leaving pod");
    assert_eq!(mesh.calls().len(), 3, "no further peer changes");
}

#[tokio::test]
async fn an_invalid_spec_is_reported_and_waits_for_a_change() {
    let c = cluster("tls: {enabled: true, secretName: ''}\nengine: {extraConfig: {port: '7000'}}");
    let (ctx, verifier) = test_context(FakeMesh::new(vec![]));
    let server = verifier.run(Scenario::InvalidSpec, c.clone(), &["InvalidSpec"]);
    let error = reconcile(Arc::new(c.clone()), ctx.clone()).await.expect_err("an invalid spec fails the reconcile");
    let verifier = timeout_after_5s(server).await;
    assert!(matches!(error, Error::InvalidSpec(_)), "{error}");
    assert_eq!(error_policy(Arc::new(c), &error, ctx), Action::await_change(), "no requeue: wait for the spec to change");
    let status = &verifier.statuses[0];
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let ready = status["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Ready")).cloned().unwrap_or_default();
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(message.contains("spec.tls.secretName") && message.contains("spec.engine.extraConfig.port"), "{status:#}");
}

#[tokio::test]
async fn transient_errors_back_off() {
    let c = cluster("{}");
    let (ctx, mut verifier) = test_context(FakeMesh::new(vec![]));
    let server = tokio::spawn(async move {
        verifier.handle_get("/apis", None).await;
        verifier
    });
    let error = reconcile(Arc::new(c.clone()), ctx.clone()).await.expect_err("discovery fails");
    timeout_after_5s(server).await;
    assert!(matches!(error, Error::Discovery(_)), "{error}");
    let delays: Vec<Action> = (0..3).map(|_| error_policy(Arc::new(c.clone()), &error, ctx.clone())).collect();
    assert_eq!(delays, [Action::requeue(BACKOFF_BASE), Action::requeue(BACKOFF_BASE * 2), Action::requeue(BACKOFF_BASE * 4)]);
    let metrics = ctx.metrics.render().expect("metrics");
    assert!(metrics.contains("keymesh_operator_reconcile_errors_total{kind=\"discovery\"} 1"), "{metrics}");
}

/// One reconcile of a new cluster with persistence, on a fresh operator (it asks for the
/// server's version).
async fn create_with_persistence(mut verifier: ApiServerVerifier, cluster: &CacheCluster, settings: &str) -> ApiServerVerifier {
    verifier.handle_discovery(&["v1beta1"], false).await;
    verifier.handle_get("/version", Some(serde_json::json!({"major": "1", "minor": "20", "gitVersion": "v1.20.2"}))).await;
    verifier.handle_get("/api/v1/namespaces/cache/secrets/demo-auth", None).await;
    verifier.handle_get("/apis/apps/v1/namespaces/cache/statefulsets/demo", None).await;
    verifier.handle_list_pods(vec![]).await;
    verifier.handle_get("/api/v1/namespaces/cache/endpoints/demo", None).await;
    verifier.handle_get(NODE_TUNING, None).await;
    verifier.handle_applies(settings).await;
    verifier.handle_list("/api/v1/namespaces/cache/persistentvolumeclaims", "PersistentVolumeClaimList", vec![]).await;
    verifier.handle_status(cluster).await;
    verifier.handle_list(CONFIG_MAPS, "ConfigMapList", vec![]).await;
    verifier
}

/// A new cluster with persistence on a Kubernetes 1.20 API server: the StatefulSet carries the claim template (no retention policy: 1.20
/// drops it) and mounts it as the engine's `dir`, the engine snapshots on a schedule, and the
/// claims are listed for the operator's own retention (none exist yet).
#[tokio::test]
async fn persistence_builds_claims_and_asks_the_server_version_once() {
    let c = cluster("persistence: {enabled: true, size: 2Gi, snapshotIntervalSeconds: 60, retainOnDelete: false}");
    let (_, settings) = hashes(&c);
    let (ctx, verifier) = test_context(FakeMesh::new(vec![]));
    let (first, settings_first) = (c.clone(), settings.clone());
    let server = tokio::spawn(async move { create_with_persistence(verifier, &first, &settings_first).await.finish(&["Creating", "Pending"]).await });
    reconcile(Arc::new(c), ctx).await.expect("reconciles");
    let verifier = timeout_after_5s(server).await;
    let sts = applied(&verifier, "StatefulSet/demo").clone();
    let templates = &sts["spec"]["volumeClaimTemplates"];
    assert_eq!(templates[0]["metadata"]["name"], "data", "{sts:#}");
    assert_eq!(templates[0]["spec"]["resources"]["requests"]["storage"], "2Gi", "{sts:#}");
    assert!(sts["spec"].get("persistentVolumeClaimRetentionPolicy").is_none(), "1.20 has no retention policy: {sts:#}");
    let mounts = &sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"];
    assert!(mounts.as_array().is_some_and(|m| m.iter().any(|m| m["name"] == "data" && m["mountPath"] == "/var/lib/keymesh")), "{mounts:#}");
    let config = applied(&verifier, &format!("ConfigMap/demo-config-{settings}"))["data"]["keymesh.conf"].as_str().unwrap_or_default().to_string();
    assert!(config.lines().any(|l| l == "dir /var/lib/keymesh") && config.lines().any(|l| l == "save 60 1"), "{config}");
}

/// The server's version is asked once per operator process.
#[tokio::test]
async fn the_retention_policy_capability_is_asked_once() {
    let (ctx, mut verifier) = test_context(FakeMesh::new(vec![]));
    let server = tokio::spawn(async move {
        verifier.handle_get("/version", Some(serde_json::json!({"major": "1", "minor": "29", "gitVersion": "v1.29.0"}))).await;
        verifier.finish(&[]).await
    });
    assert!(ctx.pvc_retention_policy().await.expect("asks"), "1.29 has it");
    assert!(ctx.pvc_retention_policy().await.expect("cached"), "answered from the cache");
    timeout_after_5s(server).await;
}
