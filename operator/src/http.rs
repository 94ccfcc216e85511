//! The operator's HTTP endpoint: `/metrics` (Prometheus text) and `/healthz` (the process
//! serves; used by the liveness and readiness probes of every replica, leader or not).

use std::future::Future;
use std::net::SocketAddr;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use crate::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("failed to bind the metrics address {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("failed to serve HTTP on {addr}: {source}")]
    Serve { addr: SocketAddr, source: std::io::Error },
}

pub fn router(metrics: Metrics) -> Router {
    Router::new().route("/metrics", get(render)).route("/healthz", get(|| async { "ok\n" })).with_state(metrics)
}

async fn render(State(metrics): State<Metrics>) -> (StatusCode, String) {
    match metrics.render() {
        Ok(text) => (StatusCode::OK, text),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("failed to render metrics: {e}\n")),
    }
}

/// Serves until `shutdown` resolves.
pub async fn serve(addr: SocketAddr, metrics: Metrics, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), HttpError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| HttpError::Bind { addr, source })?;
    tracing::info!(%addr, "serving /metrics and /healthz");
    serve_on(listener, metrics, shutdown).await
}

/// Serves on a bound listener until `shutdown` resolves.
pub async fn serve_on(listener: tokio::net::TcpListener, metrics: Metrics, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), HttpError> {
    let addr = listener.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    axum::serve(listener, router(metrics)).with_graceful_shutdown(shutdown).await.map_err(|source| HttpError::Serve { addr, source })
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connects");
        stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes()).await.expect("writes");
        let mut response = String::new();
        stream.read_to_string(&mut response).await.expect("reads");
        response
    }

    #[tokio::test]
    async fn serves_healthz_and_metrics_until_shutdown() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("local address");
        let metrics = Metrics::new().expect("metrics");
        drop(metrics.reconcile());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_on(listener, metrics, async move {
            let _ = stopped.await;
        }));
        let health = get(addr, "/healthz").await;
        assert!(health.starts_with("HTTP/1.1 200") && health.ends_with("ok\n"), "{health}");
        let text = get(addr, "/metrics").await;
        assert!(text.contains("keymesh_operator_reconciles_total 1"), "{text}");
        let _ = stop.send(());
        server.await.expect("server task").expect("server ends cleanly");
    }
}
