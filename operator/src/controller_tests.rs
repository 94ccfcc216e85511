//! Reconciles against a mocked API server and a fake mesh: each scenario lists, in order, the
//! requests one reconcile must make, and checks what it applied, wrote and published.

use std::sync::Arc;

use serde_json::Value;

use super::*;
use crate::fixtures::{auth_secret, node, pod, statefulset, test_context, timeout_after_5s, ApiServerVerifier, FakeMesh};
use crate::test_support::{cluster, engine, full_mesh};

const PDB_V1BETA1: &str = "/apis/policy/v1beta1/namespaces/cache/poddisruptionbudgets/demo";

/// What the API server holds when a scenario's reconcile starts.
enum Scenario {
    /// A new cluster on a Kubernetes 1.20 API server (policy/v1beta1 only): nothing exists.
    Create,
    /// Everything exists; `pods` pods run on three nodes.
    Existing { statefulset_replicas: i32, pods: u32, status_write: bool },
    /// A spec that fails validation: only the status is written.
    InvalidSpec,
}

fn node_of(ordinal: u32) -> &'static str {
    ["node-a", "node-b", "node-c"][ordinal as usize % 3]
}

impl ApiServerVerifier {
    fn run(mut self, scenario: Scenario, cluster: CacheCluster, events: &'static [&'static str]) -> tokio::task::JoinHandle<ApiServerVerifier> {
        tokio::spawn(async move {
            match scenario {
                Scenario::Create => {
                    self.handle_discovery(&["v1beta1"], false).await;
                    self.handle_get("/api/v1/namespaces/cache/secrets/demo-auth", None).await;
                    self.handle_get("/apis/apps/v1/namespaces/cache/statefulsets/demo", None).await;
                    self.handle_list_pods(vec![]).await;
                    self.handle_applies().await;
                    self.handle_status(&cluster).await;
                }
                Scenario::Existing { statefulset_replicas, pods, status_write } => {
                    self.handle_discovery(&["v1beta1"], false).await;
                    self.handle_get("/api/v1/namespaces/cache/secrets/demo-auth", Some(auth_secret("s3cret"))).await;
                    self.handle_get("/apis/apps/v1/namespaces/cache/statefulsets/demo", Some(statefulset(statefulset_replicas))).await;
                    self.handle_list_pods((0..pods).map(|i| pod(i, true, node_of(i))).collect()).await;
                    for (i, name) in ["node-a", "node-b", "node-c"].into_iter().enumerate().take(pods.min(3) as usize) {
                        self.handle_get(&format!("/api/v1/nodes/{name}"), Some(node(name, &format!("zone-{i}")))).await;
                    }
                    self.handle_applies().await;
                    if status_write {
                        self.handle_status(&cluster).await;
                    }
                }
                Scenario::InvalidSpec => {
                    self.handle_status(&cluster).await;
                }
            }
            self.finish(events).await
        })
    }

    /// The applies of a default spec, in the documented order.
    async fn handle_applies(&mut self) {
        self.handle_apply("/api/v1/namespaces/cache/secrets/demo-auth").await;
        self.handle_apply("/api/v1/namespaces/cache/configmaps/demo-config").await;
        self.handle_apply("/api/v1/namespaces/cache/services/demo-headless").await;
        self.handle_apply("/api/v1/namespaces/cache/services/demo").await;
        self.handle_apply("/apis/apps/v1/namespaces/cache/statefulsets/demo").await;
        self.handle_apply(PDB_V1BETA1).await;
    }
}

fn applied<'a>(verifier: &'a ApiServerVerifier, key: &str) -> &'a Value {
    verifier.applied.get(key).unwrap_or_else(|| panic!("{key} was not applied; applied: {:?}", verifier.applied.keys()))
}

fn config_peers(verifier: &ApiServerVerifier) -> Vec<String> {
    let config = applied(verifier, "ConfigMap/demo-config")["data"]["keymesh.conf"].as_str().unwrap_or_default().to_string();
    config.lines().filter_map(|l| l.strip_prefix("replicaof ")).map(|l| l.split('.').next().unwrap_or_default().to_string()).collect()
}

/// A cluster whose status is what a reconcile of `members` computes (a previous reconcile).
async fn with_status(spec_yaml: &str, statefulset_replicas: i32, members: Vec<crate::mesh::MemberState>) -> CacheCluster {
    let mut c = cluster(spec_yaml);
    let pods = members.len() as u32;
    let (ctx, verifier) = test_context(FakeMesh::new(members));
    let server = verifier.run(Scenario::Existing { statefulset_replicas, pods, status_write: true }, c.clone(), &["Running"]);
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
    let server = verifier.run(Scenario::Existing { statefulset_replicas: 3, pods: 3, status_write: false }, c.clone(), &[]);
    let action = reconcile(Arc::new(c), ctx).await.expect("reconciles");
    let verifier = timeout_after_5s(server).await;
    assert_eq!(action, Action::requeue(REQUEUE_STEADY));
    assert!(verifier.statuses.is_empty(), "an unchanged status is not written: {:?}", verifier.statuses);
    assert!(mesh.calls().is_empty(), "no peer list changes: {:?}", mesh.calls());
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
async fn scale_up_grows_the_statefulset_and_new_pods_sync_from_the_old_members() {
    let mut c = with_status("{}", 3, full_mesh(3)).await;
    c.spec.replicas = 5;
    let mesh = FakeMesh::new(full_mesh(3));
    let (ctx, verifier) = test_context(mesh.clone());
    let server = verifier.run(Scenario::Existing { statefulset_replicas: 3, pods: 3, status_write: true }, c.clone(), &["ScalingUp", "Scaling"]);
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
    let server = verifier.run(Scenario::Existing { statefulset_replicas: 4, pods: 4, status_write: true }, c.clone(), events);
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
async fn scale_down_removes_leaving_pods_from_peer_lists_then_shrinks() {
    let mut c = with_status("replicas: 5", 5, full_mesh(5)).await;
    c.spec.replicas = 3;
    let mesh = FakeMesh::new(full_mesh(5));

    // First reconcile: the leaving pods 3 and 4 are drained (they refuse writes) but stay in
    // every peer list until the remaining members have merged their last writes.
    let (ctx, verifier) = test_context(mesh.clone());
    let events = &["Draining", "Draining", "Scaling"];
    let server = verifier.run(Scenario::Existing { statefulset_replicas: 5, pods: 5, status_write: true }, c.clone(), events);
    reconcile(Arc::new(c.clone()), ctx).await.expect("reconciles");
    let verifier = timeout_after_5s(server).await;
    assert_eq!(applied(&verifier, "StatefulSet/demo")["spec"]["replicas"], 5, "no shrink while leaving pods drain");
    assert!(mesh.calls().is_empty(), "no peer list changes before the leaving pods' writes are merged: {:?}", mesh.calls());
    assert!(mesh.draining("demo-3") && mesh.draining("demo-4") && !mesh.draining("demo-0"), "the leaving pods are drained");

    // Second reconcile: every remaining member's link to them is connected with no lag, so
    // the StatefulSet keeps 5 pods while the remaining members drop 3 and 4.
    c.status = Some(serde_json::from_value(verifier.statuses[0].clone()).expect("a status"));
    let (ctx, verifier) = test_context(mesh.clone());
    let events = &["PeersRemoved", "PeersRemoved"];
    let server = verifier.run(Scenario::Existing { statefulset_replicas: 5, pods: 5, status_write: true }, c.clone(), events);
    reconcile(Arc::new(c.clone()), ctx).await.expect("reconciles");
    let verifier = timeout_after_5s(server).await;
    assert_eq!(applied(&verifier, "StatefulSet/demo")["spec"]["replicas"], 5, "no shrink while members list leaving pods");
    assert_eq!(config_peers(&verifier), ["demo-0", "demo-1", "demo-2"]);
    let mut calls = mesh.calls();
    calls.sort();
    let pods: Vec<&str> = calls.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(pods, ["demo-0", "demo-1", "demo-2"], "only remaining members are rewired: {calls:?}");
    assert!(calls.iter().all(|(_, peers)| !peers.iter().any(|p| p == "demo-3" || p == "demo-4")), "{calls:?}");

    // Third reconcile: nobody lists a leaving pod, so the StatefulSet shrinks.
    c.status = Some(serde_json::from_value(verifier.statuses[0].clone()).expect("a status"));
    let (ctx, verifier) = test_context(mesh.clone());
    let server = verifier.run(Scenario::Existing { statefulset_replicas: 5, pods: 5, status_write: true }, c.clone(), &["ScalingDown"]);
    reconcile(Arc::new(c), ctx).await.expect("reconciles");
    let verifier = timeout_after_5s(server).await;
    assert_eq!(applied(&verifier, "StatefulSet/demo")["spec"]["replicas"], 3, "shrinks once no member lists a leaving pod");
    assert_eq!(mesh.calls().len(), 3, "no further peer changes");
}

#[tokio::test]
async fn an_invalid_spec_is_reported_and_waits_for_a_change() {
    let c = cluster("tls: {enabled: true}\nengine: {extraConfig: {port: '7000'}}");
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
    assert!(message.contains("spec.tls.enabled") && message.contains("spec.engine.extraConfig.port"), "{status:#}");
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
