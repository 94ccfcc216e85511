//! The mesh port's connections, plain or TLS on the same port.
//!
//! A TLS client's first byte is a handshake record (0x16); an HTTP/2 client's is the preface's
//! `P`. Peeking at it lets one listener take both, so a cluster that turns TLS on or off pod by
//! pod never splits the mesh: an old node's plain link and a new node's TLS link reach the same
//! port. Whether a plain connection may *do* anything is decided per request
//! (`MeshPeer::require_tls`): with `tls-replication yes` the mesh stream needs TLS and a client
//! certificate from the CA, the admin API needs TLS.
//!
//! Handshakes run on their own tasks, bounded by `listener::HANDSHAKE_TIMEOUT`, so a stalled
//! one never holds up the accept loop; failures are counted
//! (`keymesh_tls_handshake_failures_total{port="mesh"}`) and noted as refusals (`INFO`).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;
use tracing::{debug, warn};

use super::listener::HANDSHAKE_TIMEOUT;
pub use crate::mesh::MeshPeer;
use crate::server::Server;

/// The first byte of a TLS record carrying a handshake.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// A mesh-port connection.
pub enum MeshIo {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connected for MeshIo {
    type ConnectInfo = MeshPeer;

    fn connect_info(&self) -> MeshPeer {
        match self {
            MeshIo::Plain(s) => MeshPeer { remote: s.peer_addr().ok(), tls: false, verified_certificate: false },
            MeshIo::Tls(s) => {
                let (tcp, session) = s.get_ref();
                MeshPeer { remote: tcp.peer_addr().ok(), tls: true, verified_certificate: session.peer_certificates().is_some_and(|c| !c.is_empty()) }
            }
        }
    }
}

impl AsyncRead for MeshIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MeshIo::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MeshIo::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for MeshIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MeshIo::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MeshIo::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    // Forwarded, or HTTP/2 would take this stream for one without vectored writes: it then
    // writes each DATA frame in two syscalls (its head with the first KiB, then the rest)
    // instead of one writev of head and payload.
    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MeshIo::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            MeshIo::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MeshIo::Plain(s) => s.is_write_vectored(),
            MeshIo::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MeshIo::Plain(s) => Pin::new(s).poll_flush(cx),
            MeshIo::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MeshIo::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MeshIo::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Accepts on `listener` until shutdown and yields each connection once it is known to be
/// plain or has finished its TLS handshake.
pub fn incoming(server: Arc<Server>, listener: TcpListener) -> ReceiverStream<io::Result<MeshIo>> {
    let (sender, receiver) = mpsc::channel(64);
    tokio::spawn(async move {
        let mut stop = server.shutdown_signal();
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = stop.changed() => return,
                _ = sender.closed() => return,
            };
            match accepted {
                Ok((socket, addr)) => {
                    let _ = socket.set_nodelay(true);
                    let (server, sender) = (server.clone(), sender.clone());
                    tokio::spawn(async move {
                        if let Some(io) = classify(&server, socket, addr).await {
                            let _ = sender.send(Ok(io)).await;
                        }
                    });
                }
                Err(e) => {
                    warn!(error = %e, "mesh accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    });
    ReceiverStream::new(receiver)
}

/// Plain, or TLS after a handshake; `None` when the connection is dropped (a failed or stalled
/// handshake, or a peer that sent nothing in time).
async fn classify(server: &Arc<Server>, socket: TcpStream, addr: SocketAddr) -> Option<MeshIo> {
    let mut first = [0u8; 1];
    let peeked = tokio::time::timeout(HANDSHAKE_TIMEOUT, socket.peek(&mut first)).await;
    let is_tls = matches!(peeked, Ok(Ok(1))) && first[0] == TLS_HANDSHAKE_RECORD;
    if !matches!(peeked, Ok(Ok(1))) {
        debug!(%addr, "mesh connection sent nothing; closing");
        return None;
    }
    let tls = match (&server.tls, is_tls) {
        (_, false) => return Some(MeshIo::Plain(socket)),
        (Some(tls), true) => tls,
        (None, true) => {
            debug!(%addr, "TLS on the mesh port of a node without a certificate; closing");
            return None;
        }
    };
    let acceptor = TlsAcceptor::from(tls.current().mesh.clone());
    let failure = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
        Ok(Ok(stream)) => return Some(MeshIo::Tls(Box::new(stream))),
        Ok(Err(e)) => format!("TLS handshake failed: {e}"),
        Err(_) => "TLS handshake timed out".to_string(),
    };
    tls.metrics.handshake_failures.with_label_values(&["mesh"]).inc();
    server.mesh.note_refusal(&addr.to_string(), "tls", &failure);
    None
}
