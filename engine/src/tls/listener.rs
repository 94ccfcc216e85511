//! The client port over TLS (`tls-port`): each accepted connection gets a handshake bounded by
//! `HANDSHAKE_TIMEOUT` on its own task (a client that stalls mid-handshake costs one task and
//! one socket until then, never the accept loop), then is served like a plain connection. A
//! plain-text client on this port, a client with a certificate from another CA or an expired
//! one, or none when `tls-auth-clients yes`, fails the handshake: the connection is closed and
//! the failure counted (`keymesh_tls_handshake_failures_total{port="client"}`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::TlsAcceptor;
use tracing::debug;

use crate::server::Server;

/// The longest a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the TLS handshake of a connection accepted on the TLS port (`server::accept_loop`),
/// then serves it; a handshake that fails or stalls past `HANDSHAKE_TIMEOUT` closes it.
pub async fn handshake(server: Arc<Server>, socket: tokio::net::TcpStream, addr: SocketAddr) {
    let Some(tls) = server.tls.as_ref() else { return };
    let laddr = socket.local_addr().unwrap_or(addr);
    crate::connection::tune_socket(&server, &socket);
    let acceptor = TlsAcceptor::from(tls.current().client.clone());
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
        Ok(Ok(stream)) => {
            let (reader, writer) = tokio::io::split(stream);
            crate::connection::serve_split(server, reader, writer, addr, laddr).await;
        }
        Ok(Err(e)) => {
            tls.metrics.handshake_failures.with_label_values(&["client"]).inc();
            debug!(%addr, error = %e, "TLS handshake failed");
        }
        Err(_) => {
            tls.metrics.handshake_failures.with_label_values(&["client"]).inc();
            debug!(%addr, "TLS handshake timed out");
        }
    }
}
