//! The HTTP endpoint on `metrics-port`: `/metrics` (Prometheus text), `/healthz` (the
//! process serves), `/readyz` (the node may receive client traffic; see DESIGN.md,
//! Readiness).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use crate::server::Server;

pub fn router(server: Arc<Server>) -> Router {
    Router::new().route("/metrics", get(metrics)).route("/healthz", get(|| async { "ok\n" })).route("/readyz", get(readyz)).with_state(server)
}

async fn metrics(State(server): State<Arc<Server>>) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    let body = server.metrics.render(&server);
    (StatusCode::OK, [("content-type", "text/plain; version=0.0.4")], body)
}

async fn readyz(State(server): State<Arc<Server>>) -> (StatusCode, String) {
    match server.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n".into()),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {reason}\n")),
    }
}
