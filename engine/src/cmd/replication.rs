//! Replication commands: `REPLICAOF host port` (add a mesh peer), `REPLICAOF NO ONE` (remove
//! every peer), its old name `SLAVEOF`, and `ROLE`.
//!
//! As in KeyDB, a node with `active-replica yes` and `multi-master yes` adds a master per
//! `REPLICAOF` instead of replacing its one master. KeyMesh has no read-only replicas, so
//! `REPLICAOF host port` on a node without both settings is an error rather than a replica
//! that drops its data.

use bytes::Bytes;

use super::args::eq_ignore_case;
use super::flags::*;
use super::{CommandSpec, Exec, Keys};
use crate::error::{CmdError, Reply};
use crate::frame::Frame;
use crate::mesh::PeerAddr;

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: Keys::None, run: $run, group: "server", summary: $summary }
    };
}

pub const COMMANDS: &[CommandSpec] = &[
    spec!("replicaof", 3, ADMIN | NO_MULTI | STALE, replicaof, "Configures a server as replica of another, or promotes it to a master."),
    spec!("slaveof", 3, ADMIN | NO_MULTI | STALE, replicaof, "Sets a Redis server as a replica of another, or promotes it to being a master."),
    spec!("role", 1, FAST | LOADING | STALE, role, "Returns the replication role."),
];

fn replicaof(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let server = exec.server;
    if eq_ignore_case(&argv[1], "no") && eq_ignore_case(&argv[2], "one") {
        server.mesh.clear_peers();
        server.config.write().replicaof.clear();
        return Ok(Frame::Simple("OK"));
    }
    {
        let config = server.config.read();
        if !config.flag("active-replica") || !config.flag("multi-master") {
            return Err(CmdError::err(
                "REPLICAOF needs 'active-replica yes' and 'multi-master yes': KeyMesh has no read-only replicas, every node is a master of a mesh",
            ));
        }
    }
    let host = String::from_utf8_lossy(&argv[1]).into_owned();
    let port: u16 = std::str::from_utf8(&argv[2]).ok().and_then(|p| p.parse().ok()).filter(|&p| p > 0).ok_or_else(|| CmdError::err("Invalid master port"))?;
    let peer = PeerAddr::from_client_port(&host, port).map_err(CmdError::err)?;
    server.mesh.add_peer(peer);
    let mut config = server.config.write();
    if !config.replicaof.iter().any(|(h, p)| *h == host && *p == port) {
        config.replicaof.push((host, port));
    }
    Ok(Frame::Simple("OK"))
}

fn role(exec: &mut Exec, _argv: &[Bytes]) -> Reply {
    Ok(exec.server.mesh.role())
}
