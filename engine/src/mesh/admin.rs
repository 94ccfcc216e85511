//! The operator's `Admin` service on the mesh port: `Status` (this node's readiness, sync
//! state and per-peer links), `SetPeers` (replace the whole peer list at once) and
//! `SetDraining` (a node leaving the mesh refuses writes while its peers take its last ones).
//!
//! Guarded like the mesh stream: when `requirepass` is set, calls must carry it in the
//! `authorization` metadata (`Bearer <password>`), or they get `unauthenticated`.

use std::sync::Arc;

use keymesh_proto as pb;
use keymesh_proto::admin_server::AdminServer;
use tonic::{Request, Response, Status};

use super::PeerAddr;
use crate::server::Server;

pub fn service(server: Arc<Server>) -> AdminServer<AdminService> {
    AdminServer::new(AdminService { server })
}

pub struct AdminService {
    server: Arc<Server>,
}

impl AdminService {
    fn authorize<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let requirepass = self.server.config.read().get("requirepass").to_string();
        if requirepass.is_empty() {
            return Ok(());
        }
        let given = request.metadata().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
        if given.strip_prefix("Bearer ").unwrap_or(given) == requirepass {
            Ok(())
        } else {
            Err(Status::unauthenticated("the admin API needs 'authorization: Bearer <requirepass>'"))
        }
    }
}

#[tonic::async_trait]
impl pb::admin_server::Admin for AdminService {
    async fn status(&self, request: Request<pb::StatusRequest>) -> Result<Response<pb::NodeStatus>, Status> {
        self.authorize(&request)?;
        let mut status = self.server.mesh.status();
        status.ready = self.server.readiness().is_ok();
        Ok(Response::new(status))
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

    async fn set_draining(&self, request: Request<pb::SetDrainingRequest>) -> Result<Response<pb::NodeStatus>, Status> {
        self.authorize(&request)?;
        self.server.mesh.set_draining(request.into_inner().draining);
        let mut status = self.server.mesh.status();
        status.ready = self.server.readiness().is_ok();
        Ok(Response::new(status))
    }
}
