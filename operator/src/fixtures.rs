//! Test fixtures for reconciling against a mocked API server (the kube-rs controller-rs
//! pattern): `ApiServerVerifier` answers the requests a reconcile makes, one handler per
//! expected request, asserting each request's method, path and body; `FakeMesh` stands in for
//! the engines' admin API.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use keymesh_proto::{NodeStatus, Peer, PeerStatus};
use kube::client::Body;
use kube::runtime::events::{Recorder, Reporter};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tower::{BoxError, Service};

use crate::api::CacheCluster;
use crate::controller::Context;
use crate::mesh::{Member, MeshClient, MeshError};
use crate::metrics::Metrics;

/// What a mocked server receives: each request a client sends, with the means to answer it.
pub type MockRequests<Req, Resp> = mpsc::UnboundedReceiver<(Req, Reply<Resp>)>;

/// How a mocked server answers one request.
pub struct Reply<Resp>(oneshot::Sender<Resp>);

impl<Resp> Reply<Resp> {
    /// Answers the request. A client that stopped waiting for the answer is no failure of the
    /// server's: the test's own assertions say what the client had to do.
    pub fn send_response(self, response: Resp) {
        let _ = self.0.send(response);
    }
}

/// A tower service that hands every request to the returned receiver and waits for the answer
/// sent back through its `Reply` (what `tower-test`'s `mock::pair` does). Not `tower-test`
/// itself: it turns on tokio's `test-util` feature, and features are unified per build, so the
/// workspace's test build would compile tokio and every crate above it (hyper, kube, tonic, the
/// engine) a second time, and the tests would run a server built unlike the one that ships.
pub fn mock_service<Req: Send + 'static, Resp: Send + 'static>(
) -> (impl Service<Req, Response = Resp, Error = BoxError, Future: Send + 'static> + Send + 'static, MockRequests<Req, Resp>) {
    let (requests, received) = mpsc::unbounded_channel();
    let service = tower::service_fn(move |request: Req| {
        let requests = requests.clone();
        async move {
            let (reply, answer) = oneshot::channel();
            requests.send((request, Reply(reply))).map_err(|_| BoxError::from("the mocked server is gone"))?;
            answer.await.map_err(|_| BoxError::from("the mocked server dropped the request unanswered"))
        }
    });
    (service, received)
}

type ApiServerHandle = MockRequests<Request<Body>, Response<Body>>;

/// A mocked API server; its handlers consume the requests of one reconcile in order.
pub struct ApiServerVerifier {
    handle: ApiServerHandle,
    /// Reasons of the Events the reconcile published.
    pub events: Vec<String>,
    /// Bodies of the server-side applies, by `<kind>/<name>`.
    pub applied: BTreeMap<String, Value>,
    /// The statuses written.
    pub statuses: Vec<Value>,
}

/// A `Context` talking to a mocked API server and a fake mesh.
pub fn test_context(mesh: Arc<FakeMesh>) -> (Arc<Context>, ApiServerVerifier) {
    let (service, handle) = mock_service::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let recorder = Recorder::new(client.clone(), Reporter { controller: "keymesh-operator".into(), instance: Some("test".into()) });
    let metrics = Metrics::new().expect("metrics register");
    let ctx = Context::new(client, mesh, recorder, metrics, "cluster.local", "keymesh/keymesh-operator:test");
    (Arc::new(ctx), ApiServerVerifier { handle, events: Vec::new(), applied: BTreeMap::new(), statuses: Vec::new() })
}

/// Waits for a mocked API server's scenario to finish, failing after a few seconds.
pub async fn timeout_after_5s<T>(handle: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), handle).await.expect("the mocked API server's scenario timed out").expect("the scenario's assertions hold")
}

fn json_response(code: StatusCode, body: &Value) -> Response<Body> {
    Response::builder().status(code).body(Body::from(serde_json::to_vec(body).expect("JSON"))).expect("a response")
}

fn not_found(what: &str) -> Response<Body> {
    json_response(
        StatusCode::NOT_FOUND,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": format!("{what} not found")}),
    )
}

impl ApiServerVerifier {
    /// The next request that is not an Event; Events are answered and recorded on the way.
    async fn next(&mut self) -> (Request<Body>, Reply<Response<Body>>) {
        loop {
            let (request, send) = self.handle.recv().await.expect("the reconcile made another request");
            if let Some((request, send)) = self.answer_event(request, send).await {
                return (request, send);
            }
        }
    }

    /// Answers and records an Event; gives any other request back.
    async fn answer_event(&mut self, request: Request<Body>, send: Reply<Response<Body>>) -> Option<(Request<Body>, Reply<Response<Body>>)> {
        if request.method() != http::Method::POST || !request.uri().path().ends_with("/events") {
            return Some((request, send));
        }
        assert_eq!(request.uri().path(), "/apis/events.k8s.io/v1/namespaces/cache/events", "Events go to the cluster's namespace");
        let body = body_json(request).await;
        self.events.push(body["reason"].as_str().unwrap_or_default().to_string());
        send.send_response(json_response(StatusCode::CREATED, &body));
        None
    }

    /// `GET /apis`: the `policy` versions the server serves, and whether the ServiceMonitor
    /// CRD exists.
    pub async fn handle_discovery(&mut self, policy_versions: &[&str], service_monitor: bool) {
        let (request, send) = self.next().await;
        assert_eq!((request.method(), request.uri().path()), (&http::Method::GET, "/apis"), "expected discovery");
        let mut groups = vec![
            json!({"name": "policy", "versions": policy_versions.iter().map(|v| json!({"groupVersion": format!("policy/{v}"), "version": v})).collect::<Vec<_>>()}),
        ];
        if service_monitor {
            groups.push(json!({"name": "monitoring.coreos.com", "versions": [{"groupVersion": "monitoring.coreos.com/v1", "version": "v1"}]}));
        }
        send.send_response(json_response(StatusCode::OK, &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})));
    }

    /// `GET` of one object: answered with `object`, or 404.
    pub async fn handle_get(&mut self, path: &str, object: Option<Value>) {
        let (request, send) = self.next().await;
        assert_eq!((request.method(), request.uri().path()), (&http::Method::GET, path), "expected a GET of {path}");
        send.send_response(match object {
            Some(object) => json_response(StatusCode::OK, &object),
            None => not_found(path),
        });
    }

    /// `GET` of the cluster's pods by label selector.
    pub async fn handle_list_pods(&mut self, pods: Vec<Value>) {
        let (request, send) = self.next().await;
        assert_eq!((request.method(), request.uri().path()), (&http::Method::GET, "/api/v1/namespaces/cache/pods"), "expected the pod list");
        let query = request.uri().query().unwrap_or_default().to_string();
        assert!(
            query.contains("labelSelector=app.kubernetes.io%2Finstance%3Ddemo%2Capp.kubernetes.io%2Fname%3Dkeymesh"),
            "pods listed without the selector: {query}"
        );
        send.send_response(json_response(StatusCode::OK, &json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": pods})));
    }

    /// `GET` of a list (`kind` e.g. `ConfigMapList`) at `path`, answered with `items`.
    pub async fn handle_list(&mut self, path: &str, kind: &str, items: Vec<Value>) {
        let (request, send) = self.next().await;
        assert_eq!((request.method(), request.uri().path()), (&http::Method::GET, path), "expected a list of {path}");
        send.send_response(json_response(StatusCode::OK, &json!({"kind": kind, "apiVersion": "v1", "metadata": {}, "items": items})));
    }

    /// A strategic merge patch of a pod's status setting its `keymesh.io/serving` condition.
    /// Returns the condition's status.
    pub async fn handle_gate(&mut self, pod: &str) -> String {
        let (request, send) = self.next().await;
        let path = format!("/api/v1/namespaces/cache/pods/{pod}/status");
        assert_eq!((request.method(), request.uri().path()), (&http::Method::PATCH, path.as_str()), "expected the gate of {pod}");
        let content_type = request.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        assert_eq!(content_type, "application/strategic-merge-patch+json", "a gate is a strategic merge patch (conditions merge by type)");
        let body = body_json(request).await;
        let condition = &body["status"]["conditions"][0];
        assert_eq!(condition["type"], "keymesh.io/serving", "{body}");
        send.send_response(json_response(StatusCode::OK, &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod}})));
        condition["status"].as_str().unwrap_or_default().to_string()
    }

    /// A server-side apply of `path` by the operator's field manager, forced; answered with
    /// the applied object. Returns the body.
    pub async fn handle_apply(&mut self, path: &str) -> Value {
        let (request, send) = self.next().await;
        assert_eq!((request.method(), request.uri().path()), (&http::Method::PATCH, path), "expected an apply of {path}");
        let query = request.uri().query().unwrap_or_default().to_string();
        assert!(query.contains("fieldManager=keymesh-operator") && query.contains("force=true"), "apply of {path} without the field manager or force: {query}");
        let content_type = request.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        assert_eq!(content_type, "application/apply-patch+yaml", "apply of {path} is not server-side apply");
        let body = body_json(request).await;
        let key = format!("{}/{}", body["kind"].as_str().unwrap_or_default(), body["metadata"]["name"].as_str().unwrap_or_default());
        self.applied.insert(key, body.clone());
        send.send_response(json_response(StatusCode::OK, &body));
        body
    }

    /// The status subresource of `cluster`, applied; answered with the cluster carrying it.
    /// Returns the status.
    pub async fn handle_status(&mut self, cluster: &CacheCluster) -> Value {
        let path = "/apis/keymesh.io/v1alpha1/namespaces/cache/cacheclusters/demo/status";
        let body = self.handle_apply_raw(path).await;
        let (send, status) = body;
        let mut object = serde_json::to_value(cluster).expect("cluster JSON");
        object["status"] = status.clone();
        send.send_response(json_response(StatusCode::OK, &object));
        self.statuses.push(status.clone());
        status
    }

    async fn handle_apply_raw(&mut self, path: &str) -> (Reply<Response<Body>>, Value) {
        let (request, send) = self.next().await;
        assert_eq!((request.method(), request.uri().path()), (&http::Method::PATCH, path), "expected a patch of {path}");
        let body = body_json(request).await;
        (send, body["status"].clone())
    }

    /// Answers the Events still to come, checks they are exactly `events`, and that nothing
    /// else was requested.
    pub async fn finish(mut self, events: &[&str]) -> ApiServerVerifier {
        while self.events.len() < events.len() {
            let next = tokio::time::timeout(Duration::from_secs(2), self.handle.recv()).await;
            let Ok(Some((request, send))) = next else {
                panic!("expected Events {events:?}, got {:?}", self.events);
            };
            if let Some((request, _)) = self.answer_event(request, send).await {
                panic!("unexpected request {} {} while waiting for Events {events:?}", request.method(), request.uri());
            }
        }
        assert_eq!(self.events, events, "Events published");
        self
    }
}

async fn body_json(request: Request<Body>) -> Value {
    let bytes = request.into_body().collect_bytes().await.expect("a request body");
    if bytes.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(&bytes).expect("a JSON request body")
}

/// A pod of the `demo` cluster as the API server returns it, created from revision `revision`,
/// with its containers ready or not and its `keymesh.io/serving` gate set to `serving`.
pub fn pod(ordinal: u32, ready: bool, node: &str, revision: &str, serving: Option<bool>) -> Value {
    let flag = |b: bool| if b { "True" } else { "False" };
    let mut conditions =
        vec![json!({"type": "ContainersReady", "status": flag(ready)}), json!({"type": "Ready", "status": flag(ready && serving == Some(true))})];
    if let Some(serving) = serving {
        conditions.push(json!({"type": "keymesh.io/serving", "status": flag(serving), "lastTransitionTime": "2020-01-01T00:00:00Z"}));
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("demo-{ordinal}"), "namespace": "cache",
            "labels": {"app.kubernetes.io/name": "keymesh", "app.kubernetes.io/instance": "demo"},
            "annotations": {"keymesh.io/template-hash": revision}},
        "spec": {"nodeName": node, "containers": [{"name": "keymesh", "image": "keymesh/keymesh-server"}]},
        "status": {"podIP": format!("10.0.0.{ordinal}"), "conditions": conditions}
    })
}

/// The client Service's Endpoints, listing `pods` as ready addresses.
pub fn endpoints(pods: &[u32]) -> Value {
    let addresses: Vec<Value> =
        pods.iter().map(|i| json!({"ip": format!("10.0.0.{i}"), "targetRef": {"kind": "Pod", "name": format!("demo-{i}"), "namespace": "cache"}})).collect();
    json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "demo", "namespace": "cache"}, "subsets": [{"addresses": addresses}]})
}

pub fn node(name: &str, zone: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}}})
}

/// The live StatefulSet: `replicas` pods of template revision `revision`, partition 0.
pub fn statefulset(replicas: i32, revision: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "demo", "namespace": "cache"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app.kubernetes.io/instance": "demo"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "template": {"metadata": {"annotations": {"keymesh.io/template-hash": revision}}}}})
}

pub fn auth_secret(password: &str) -> Value {
    use k8s_openapi::ByteString;
    let data = serde_json::to_value(ByteString(password.as_bytes().to_vec())).expect("base64");
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "demo-auth", "namespace": "cache"}, "data": {"password": data}})
}

/// The engines' admin API, in memory: statuses by pod, and every `SetPeers`, `Handoff` and
/// `SetConfig` call.
#[derive(Default)]
pub struct FakeMesh {
    statuses: Mutex<BTreeMap<String, NodeStatus>>,
    pub set_peers_calls: Mutex<Vec<(String, Vec<String>)>>,
    pub handoff_calls: Mutex<Vec<(String, bool)>>,
    pub set_config_calls: Mutex<Vec<(String, BTreeMap<String, String>)>>,
    pub save_calls: Mutex<Vec<String>>,
    pub passwords_seen: Mutex<Vec<Option<String>>>,
}

impl FakeMesh {
    pub fn new(members: Vec<crate::mesh::MemberState>) -> Arc<FakeMesh> {
        let mesh = FakeMesh::default();
        for m in members {
            if let Ok(status) = m.status {
                mesh.lock_statuses().insert(m.member.pod, status);
            }
        }
        Arc::new(mesh)
    }

    fn lock_statuses(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, NodeStatus>> {
        self.statuses.lock().expect("statuses lock")
    }

    /// `(pod, first DNS label of every peer)` for every SetPeers call so far.
    pub fn calls(&self) -> Vec<(String, Vec<String>)> {
        self.set_peers_calls.lock().expect("calls lock").clone()
    }

    /// `(pod, start)` for every Handoff call so far.
    pub fn handoffs(&self) -> Vec<(String, bool)> {
        self.handoff_calls.lock().expect("calls lock").clone()
    }

    /// Every SetConfig call so far.
    pub fn configs(&self) -> Vec<(String, BTreeMap<String, String>)> {
        self.set_config_calls.lock().expect("calls lock").clone()
    }

    fn with_status<R>(&self, member: &Member, f: impl FnOnce(&mut NodeStatus) -> R) -> Result<R, MeshError> {
        let mut statuses = self.lock_statuses();
        let status = statuses.get_mut(&member.pod).ok_or_else(|| MeshError::Connect {
            pod: member.pod.clone(),
            endpoint: member.admin_endpoint.clone(),
            message: "connection refused".into(),
        })?;
        Ok(f(status))
    }
}

#[tonic::async_trait]
impl MeshClient for FakeMesh {
    async fn status(&self, member: &Member, password: Option<&str>, config_keys: &[String]) -> Result<NodeStatus, MeshError> {
        self.passwords_seen.lock().expect("lock").push(password.map(str::to_string));
        self.with_status(member, |status| {
            let mut status = status.clone();
            status.config.retain(|k, _| config_keys.contains(k));
            status
        })
    }

    async fn set_peers(&self, member: &Member, peers: Vec<Peer>, _password: Option<&str>) -> Result<Vec<Peer>, MeshError> {
        let short: Vec<String> = peers.iter().map(|p| p.host.split('.').next().unwrap_or_default().to_string()).collect();
        self.set_peers_calls.lock().expect("calls lock").push((member.pod.clone(), short));
        if let Some(status) = self.lock_statuses().get_mut(&member.pod) {
            status.peers = peers
                .iter()
                .map(|p| PeerStatus {
                    peer: Some(p.clone()),
                    node_name: p.host.split('.').next().unwrap_or_default().into(),
                    link: "connected".into(),
                    ..PeerStatus::default()
                })
                .collect();
        }
        Ok(peers)
    }

    /// A fake engine has no clients: a started handoff is done at once.
    async fn handoff(&self, member: &Member, start: bool, _grace_ms: u64, _password: Option<&str>) -> Result<NodeStatus, MeshError> {
        self.handoff_calls.lock().expect("calls lock").push((member.pod.clone(), start));
        self.with_status(member, |status| {
            status.handoff = if start { "done" } else { "serving" }.to_string();
            status.draining = start;
            status.clone()
        })
    }

    async fn set_config(&self, member: &Member, values: BTreeMap<String, String>, _password: Option<&str>) -> Result<NodeStatus, MeshError> {
        self.set_config_calls.lock().expect("calls lock").push((member.pod.clone(), values.clone()));
        self.with_status(member, |status| {
            status.config.extend(values);
            status.clone()
        })
    }

    /// A fake engine snapshots at once.
    async fn save(&self, member: &Member, _password: Option<&str>) -> Result<NodeStatus, MeshError> {
        self.save_calls.lock().expect("calls lock").push(member.pod.clone());
        self.with_status(member, |status| {
            let (last_seq, draining) = (status.last_seq, status.draining);
            let snapshot = status.snapshot.get_or_insert_with(Default::default);
            snapshot.last_ok = true;
            snapshot.last_save_seq = last_seq;
            snapshot.last_save_after_handoff = draining;
            snapshot.last_save_unix_ms = 1;
            status.clone()
        })
    }
}
