//! The acting gate: every mutating call this replica makes — Kubernetes writes through its
//! client, engine admin calls through its mesh client — passes it, and it lets a call through
//! only while this replica's leadership is known to hold (until its last successful renewal
//! plus the renew deadline, by this process's monotonic clock), with a timeout that ends the
//! call by that deadline. A leader that cannot renew therefore stops acting before its lease
//! can expire, without any call site having to remember to check.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::{Method, Request};
use keymesh_proto::{NodeStatus, Peer};
use tower::{BoxError, Layer, Service};

use crate::mesh::{Member, MeshClient, MeshError};
use crate::metrics::Metrics;

/// "Acting forever": leader election is disabled.
const ALWAYS: u64 = u64::MAX;

/// Why a mutating call was refused.
#[derive(Debug, thiserror::Error)]
#[error("refused a mutating call: this replica is not acting as the leader (its lease is not renewed)")]
pub struct NotActing;

/// See the module docs.
pub struct LeaderGate {
    epoch: Instant,
    /// Milliseconds after `epoch` until which this replica may act; 0: not acting.
    acting_until_ms: AtomicU64,
    metrics: Metrics,
}

impl LeaderGate {
    pub fn new(metrics: Metrics) -> Arc<LeaderGate> {
        Arc::new(LeaderGate { epoch: Instant::now(), acting_until_ms: AtomicU64::new(0), metrics })
    }

    /// A gate that always lets calls through (no leader election).
    pub fn always(metrics: Metrics) -> Arc<LeaderGate> {
        let gate = LeaderGate::new(metrics);
        gate.acting_until_ms.store(ALWAYS, Ordering::SeqCst);
        gate
    }

    /// Acts until `until` (a renewal that started at `until - renew_deadline` succeeded).
    pub fn act_until(&self, until: Instant) {
        let ms = u64::try_from(until.saturating_duration_since(self.epoch).as_millis()).unwrap_or(ALWAYS - 1);
        self.acting_until_ms.store(ms.max(1), Ordering::SeqCst);
    }

    /// Stops acting at once.
    pub fn revoke(&self) {
        self.acting_until_ms.store(0, Ordering::SeqCst);
    }

    /// How long this replica may still act; `None` when it may not.
    pub fn remaining(&self) -> Option<Duration> {
        let until = self.acting_until_ms.load(Ordering::SeqCst);
        if until == ALWAYS {
            return Some(Duration::from_secs(3600));
        }
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        (until > now).then(|| Duration::from_millis(until - now))
    }

    /// Lets a mutating call on `target` through, counting it, or refuses it.
    fn admit(&self, target: &str) -> Result<Duration, NotActing> {
        match self.remaining() {
            Some(remaining) => {
                self.metrics.mutating_calls.with_label_values(&[target]).inc();
                let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
                self.metrics.last_mutating_call.set(now);
                Ok(remaining)
            }
            None => {
                self.metrics.refused_calls.inc();
                Err(NotActing)
            }
        }
    }

    /// Runs a mutating call on `target` through the gate: refused when not acting, cut off at
    /// the acting deadline.
    pub async fn act<T, E: From<NotActing>>(&self, target: &str, call: impl Future<Output = Result<T, E>>) -> Result<T, E> {
        let remaining = self.admit(target)?;
        tokio::time::timeout(remaining, call).await.map_err(|_| E::from(NotActing))?
    }

    /// The tower layer for the Kubernetes client.
    pub fn layer(self: &Arc<Self>) -> GateLayer {
        GateLayer { gate: self.clone() }
    }
}

/// Gates the non-read requests of a Kubernetes client (everything but GET and HEAD: watches
/// and lists are GETs).
#[derive(Clone)]
pub struct GateLayer {
    gate: Arc<LeaderGate>,
}

impl<S> Layer<S> for GateLayer {
    type Service = Gated<S>;

    fn layer(&self, inner: S) -> Gated<S> {
        Gated { inner, gate: self.gate.clone() }
    }
}

#[derive(Clone)]
pub struct Gated<S> {
    inner: S,
    gate: Arc<LeaderGate>,
}

impl<S, B> Service<Request<B>> for Gated<S>
where
    S: Service<Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if request.method() == Method::GET || request.method() == Method::HEAD {
            let call = self.inner.call(request);
            return Box::pin(async move { call.await.map_err(Into::into) });
        }
        match self.gate.admit("kubernetes") {
            Err(refused) => Box::pin(std::future::ready(Err(BoxError::from(refused)))),
            Ok(remaining) => {
                let call = self.inner.call(request);
                Box::pin(async move {
                    match tokio::time::timeout(remaining, call).await {
                        Ok(result) => result.map_err(Into::into),
                        Err(_) => Err(BoxError::from(NotActing)),
                    }
                })
            }
        }
    }
}

/// The engines' admin API behind the gate: reads pass, writes (peer lists, handoffs, settings)
/// need the gate.
pub struct GatedMeshClient<M> {
    pub inner: M,
    pub gate: Arc<LeaderGate>,
}

impl From<NotActing> for MeshError {
    fn from(e: NotActing) -> MeshError {
        MeshError::Invalid { pod: String::new(), call: "mutating call", message: e.to_string() }
    }
}

#[tonic::async_trait]
impl<M: MeshClient> MeshClient for GatedMeshClient<M> {
    async fn status(&self, member: &Member, password: Option<&str>, config_keys: &[String]) -> Result<NodeStatus, MeshError> {
        self.inner.status(member, password, config_keys).await
    }

    async fn set_peers(&self, member: &Member, peers: Vec<Peer>, password: Option<&str>) -> Result<Vec<Peer>, MeshError> {
        self.gate.act("engine", self.inner.set_peers(member, peers, password)).await
    }

    async fn handoff(&self, member: &Member, start: bool, grace_ms: u64, password: Option<&str>) -> Result<NodeStatus, MeshError> {
        self.gate.act("engine", self.inner.handoff(member, start, grace_ms, password)).await
    }

    async fn set_config(&self, member: &Member, values: BTreeMap<String, String>, password: Option<&str>) -> Result<NodeStatus, MeshError> {
        self.gate.act("engine", self.inner.set_config(member, values, password)).await
    }

    async fn save(&self, member: &Member, password: Option<&str>) -> Result<NodeStatus, MeshError> {
        self.gate.act("engine", self.inner.save(member, password)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn calls_pass_only_while_acting_and_are_cut_off_at_the_deadline() {
        let metrics = Metrics::new().expect("metrics");
        let gate = LeaderGate::new(metrics.clone());
        let call = || async { Ok::<_, MeshError>(7) };
        assert!(gate.act("engine", call()).await.is_err(), "not acting before the first renewal");
        gate.act_until(Instant::now() + Duration::from_millis(200));
        assert_eq!(gate.act("engine", call()).await.ok(), Some(7));
        let slow = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, MeshError>(8)
        };
        let started = Instant::now();
        assert!(gate.act("engine", slow).await.is_err(), "a call still running at the deadline is cut off");
        assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
        assert!(gate.act("engine", call()).await.is_err(), "and nothing passes after it");
        gate.act_until(Instant::now() + Duration::from_secs(10));
        gate.revoke();
        assert!(gate.act("engine", call()).await.is_err(), "revoked at once");
        let text = metrics.render().expect("renders");
        assert!(text.contains("keymesh_operator_mutating_calls_total{target=\"engine\"} 2"), "{text}");
        assert!(text.contains("keymesh_operator_refused_calls_total 3"), "{text}");
    }

    #[tokio::test]
    async fn the_kubernetes_client_layer_gates_writes_and_passes_reads() {
        let gate = LeaderGate::new(Metrics::new().expect("metrics"));
        let (service, mut handle) = crate::fixtures::mock_service::<Request<String>, http::Response<String>>();
        let mut gated = gate.layer().layer(service);
        let answer = tokio::spawn(async move {
            while let Some((request, send)) = handle.recv().await {
                send.send_response(http::Response::new(request.method().to_string()));
            }
        });
        let get = Request::get("/api/v1/pods").body(String::new()).expect("request");
        let patch = Request::patch("/api/v1/pods/x").body(String::new()).expect("request");
        std::future::poll_fn(|cx| gated.poll_ready(cx)).await.expect("ready");
        assert_eq!(gated.call(get).await.expect("a read passes").into_body(), "GET");
        std::future::poll_fn(|cx| gated.poll_ready(cx)).await.expect("ready");
        let refused = gated.call(patch).await.expect_err("a write is refused while not acting");
        assert!(refused.to_string().contains("not acting as the leader"), "{refused}");
        gate.act_until(Instant::now() + Duration::from_secs(10));
        let patch = Request::patch("/api/v1/pods/x").body(String::new()).expect("request");
        std::future::poll_fn(|cx| gated.poll_ready(cx)).await.expect("ready");
        assert_eq!(gated.call(patch).await.expect("a write passes while acting").into_body(), "PATCH");
        drop(gated);
        answer.abort();
    }
}
