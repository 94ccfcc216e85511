//! The operator's `Admin` service, served on the mesh port beside the mesh's own service
//! (`server::serve_mesh_port`): `Status` (this node's readiness, sync
//! state, per-peer links, its last originated sequence, handoff phase and the config values
//! asked for), `SetPeers` (replace the whole peer list at once), `Handoff` (hand the clients
//! off before the node leaves the mesh, see `crate::handoff`) and `SetConfig` (directives that
//! change live, as `CONFIG SET`) and `Save` (a background snapshot, as `BGSAVE`; its outcome in
//! `NodeStatus.snapshot`).
//!
//! Guarded like the mesh stream: when `requirepass` is set, calls must carry it in the
//! `authorization` metadata (`Bearer <password>`), or they get `unauthenticated`; with
//! `tls-replication yes` they must come over TLS.

use std::sync::Arc;
use std::time::Duration;

use keymesh_proto as pb;
use keymesh_proto::admin_server::AdminServer;
use tonic::{Request, Response, Status};

use crate::mesh::{Host, PeerAddr};
use crate::server::Server;

/// The longest grace a handoff may ask for: a handoff must end.
const MAX_HANDOFF_GRACE: Duration = Duration::from_secs(300);

pub fn service(server: Arc<Server>) -> AdminServer<AdminService> {
    AdminServer::new(AdminService { server })
}

pub struct AdminService {
    server: Arc<Server>,
}

impl AdminService {
    fn authorize<T>(&self, request: &Request<T>) -> Result<(), Status> {
        crate::mesh::MeshPeer::of(request).require_tls(self.server.tls_replication(), false).map_err(Status::unauthenticated)?;
        let given = request.metadata().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
        if self.server.password_ok(given.strip_prefix("Bearer ").unwrap_or(given).as_bytes()) {
            Ok(())
        } else {
            Err(Status::unauthenticated("the admin API needs 'authorization: Bearer <requirepass>'"))
        }
    }

    /// The node's status, with the server-level fields the mesh does not know and the values
    /// of `config_keys`.
    fn status(&self, config_keys: &[String]) -> pb::NodeStatus {
        let server = &self.server;
        let mut status = server.mesh.status();
        status.ready = server.readiness().is_ok();
        status.version = server.version.clone();
        status.handoff = server.handoff.phase().as_str().to_string();
        status.clients = server.clients.count() as u64;
        status.kernel_warnings = server.kernel.get().warnings.into_iter().map(|(_, w)| w).collect();
        let config = server.config.read();
        status.snapshot = Some(server.persist.status(!server.settings().save.is_empty()));
        status.config = config_keys.iter().map(|k| (k.clone(), config.get(k).to_string())).collect();
        status
    }
}

#[tonic::async_trait]
impl pb::admin_server::Admin for AdminService {
    async fn status(&self, request: Request<pb::StatusRequest>) -> Result<Response<pb::NodeStatus>, Status> {
        self.authorize(&request)?;
        Ok(Response::new(self.status(&request.into_inner().config_keys)))
    }

    async fn set_peers(&self, request: Request<pb::SetPeersRequest>) -> Result<Response<pb::SetPeersReply>, Status> {
        self.authorize(&request)?;
        let mut peers = Vec::new();
        for p in request.into_inner().peers {
            let port =
                u16::try_from(p.port).ok().filter(|&p| p != 0).ok_or_else(|| Status::invalid_argument(format!("peer {}: invalid port {}", p.host, p.port)))?;
            if p.host.is_empty() {
                return Err(Status::invalid_argument("peer with an empty host"));
            }
            peers.push(PeerAddr { host: p.host, mesh_port: port });
        }
        let now = self.server.mesh.set_peers(peers);
        let peers = now.into_iter().map(|p| pb::Peer { host: p.host, port: p.mesh_port as u32 }).collect();
        Ok(Response::new(pb::SetPeersReply { peers }))
    }

    async fn handoff(&self, request: Request<pb::HandoffRequest>) -> Result<Response<pb::NodeStatus>, Status> {
        self.authorize(&request)?;
        let request = request.into_inner();
        if request.start {
            self.server.handoff.start(&self.server, Duration::from_millis(request.grace_ms).min(MAX_HANDOFF_GRACE));
        } else {
            self.server.handoff.cancel(&self.server);
        }
        Ok(Response::new(self.status(&[])))
    }

    async fn set_config(&self, request: Request<pb::SetConfigRequest>) -> Result<Response<pb::NodeStatus>, Status> {
        self.authorize(&request)?;
        let values = request.into_inner().values;
        self.server.set_live_config(values.iter().map(|(k, v)| (k.as_str(), v.as_str()))).map_err(Status::invalid_argument)?;
        let keys: Vec<String> = values.into_keys().collect();
        Ok(Response::new(self.status(&keys)))
    }

    async fn save(&self, request: Request<pb::SaveRequest>) -> Result<Response<pb::NodeStatus>, Status> {
        self.authorize(&request)?;
        match crate::persist::bgsave(self.server.clone()) {
            // One running already: its outcome shows in the status, as this one's would.
            Ok(()) | Err(crate::persist::PersistError::InProgress) => Ok(Response::new(self.status(&[]))),
            Err(e) => Err(Status::internal(e.to_string())),
        }
    }
}
