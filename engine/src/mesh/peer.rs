//! Who is on the other end of a mesh-port connection. The server's mesh-port I/O
//! (`tls::mesh_io`) fills it in for every connection; the mesh stream and the admin API decide
//! from it whether a caller may do anything (`require_tls`).

use std::net::SocketAddr;

/// Who is on the other end of a mesh-port connection; tonic puts it in every request's
/// extensions.
#[derive(Debug, Clone, Copy)]
pub struct MeshPeer {
    pub remote: Option<SocketAddr>,
    pub tls: bool,
    /// The client presented a certificate that the CA verified in the handshake (an invalid
    /// one fails the handshake, so presented means verified).
    pub verified_certificate: bool,
}

impl MeshPeer {
    /// The peer of `request`.
    pub fn of<T>(request: &tonic::Request<T>) -> MeshPeer {
        request.extensions().get::<MeshPeer>().copied().unwrap_or(MeshPeer { remote: request.remote_addr(), tls: false, verified_certificate: false })
    }

    /// `Err` with the reason when `tls-replication yes` forbids this connection: the mesh stream
    /// (`certificate`) needs TLS with a verified client certificate, the admin API TLS.
    /// `replication`: whether the node runs its mesh on TLS (`tls-replication yes`).
    pub fn require_tls(&self, replication: bool, certificate: bool) -> Result<(), String> {
        if !replication {
            return Ok(());
        }
        if !self.tls {
            return Err("this node requires TLS on the mesh port (tls-replication yes); the connection was plain text".into());
        }
        if certificate && !self.verified_certificate {
            return Err("this node requires a client certificate from its CA on the mesh stream (tls-replication yes); none was presented".into());
        }
        Ok(())
    }
}
