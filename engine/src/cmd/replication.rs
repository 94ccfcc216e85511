//! Replication commands: `REPLICAOF host port` (add a mesh peer), `REPLICAOF NO ONE` (remove
//! every peer), its old name `SLAVEOF`, and `ROLE`; `SYNC` and `REPLCONF` as far as
//! `redis-cli --rdb` uses them: a one-off RDB file of the keyspace, streamed (`persist::rdb::send_sync`).
//!
//! As in KeyDB, a node with `active-replica yes` and `multi-master yes` adds a master per
//! `REPLICAOF` instead of replacing its one master. KeyMesh has no read-only replicas, so
//! `REPLICAOF host port` on a node without both settings is an error rather than a replica
//! that drops its data.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::args::eq_ignore_case;
use super::flags::*;
use super::{CommandSpec, Exec, Keys};
use crate::blocking::Waiter;
use crate::client::BlockRequest;
use crate::db::Kind;
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
    spec!("sync", 1, ADMIN | NO_MULTI, sync, "Sends the keyspace as an RDB file (redis-cli --rdb), then closes the connection."),
    spec!("psync", -3, ADMIN | NO_MULTI, psync, "An internal command used in replication."),
    spec!("replconf", -1, ADMIN | NO_MULTI, replconf, "An internal command for configuring the replication stream."),
    spec!("wait", 3, 0, wait, "Blocks until the asynchronous replication of all preceding write commands sent by the connection is completed."),
];

/// How often a blocked `WAIT` checks whether its client went away (`CLIENT UNBLOCK`, a closed
/// connection) while no Ack comes; every Ack wakes it as well (`mesh::acks`).
const WAIT_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Peers (distinct nodes, their snapshot sent) that acknowledged this node's backlog through
/// `seq`: Redis's `replicationCountAcksByOffset`.
fn acked_through(server: &crate::server::Server, seq: u64) -> i64 {
    let subscribers = server.mesh.subscribers.lock();
    let mut nodes: Vec<&str> = subscribers
        .iter()
        .filter(|s| !s.syncing.load(Ordering::Relaxed) && s.applied_seq.load(Ordering::Relaxed) >= seq)
        .map(|s| s.node_name.as_str())
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes.len() as i64
}

/// `WAIT numreplicas timeout`: how many peers merged this client's last write (all connected
/// peers before its first), waiting up to `timeout` ms (0: no limit) for `numreplicas` of them.
/// A peer counts once its Ack covers the write's backlog sequence: it has merged it (not
/// necessarily saved it). Inside `MULTI` it answers at once, as Redis.
fn wait(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let wanted = super::args::int(&argv[1])?;
    let ms = super::args::int(&argv[2]).map_err(|_| CmdError::err("timeout is not an integer or out of range"))?;
    if ms < 0 {
        return Err(CmdError::err("timeout is negative"));
    }
    let server = exec.server;
    let seq = exec.publish_writes();
    let acked = acked_through(server, seq);
    if acked >= wanted || exec.client.in_exec || exec.client.serving_wakeup {
        return Ok(Frame::Integer(acked));
    }
    let Some(server) = server.handle() else {
        return Ok(Frame::Integer(acked));
    };
    let command = super::TABLE.find(&argv[0]).ok_or_else(|| CmdError::err("WAIT missing from the table"))?;
    // No keys: only this command's own task answers it (or CLIENT UNBLOCK, with the count
    // it had when it blocked).
    let (waiter, reply) = Waiter::new(exec.client, command, argv.to_vec(), Vec::new(), Kind::List, Frame::Integer(acked));
    exec.server.blocking.register(waiter.clone());
    exec.client.block = Some(BlockRequest { waiter: waiter.clone(), reply, timeout: None });
    exec.client.would_block = true;
    let deadline = (ms > 0).then(|| tokio::time::Instant::now() + std::time::Duration::from_millis(ms as u64));
    // The peers ack this write at once instead of within their ack interval.
    server.mesh.acks.request(seq);
    tokio::spawn(async move {
        let acks = &server.mesh.acks;
        loop {
            // Taken before counting: an Ack that comes while we count still wakes us.
            let next_ack = acks.next_ack();
            let acked = acked_through(&server, seq);
            let now = tokio::time::Instant::now();
            if acked >= wanted || deadline.is_some_and(|d| now >= d) {
                waiter.answer(Frame::Integer(acked));
                return;
            }
            if waiter.cancelled.load(Ordering::Acquire) {
                return;
            }
            let poll = now + WAIT_POLL;
            tokio::select! {
                _ = next_ack => {}
                _ = tokio::time::sleep_until(deadline.map_or(poll, |d| d.min(poll))) => {}
            }
        }
    });
    Ok(Frame::Integer(acked))
}

fn replicaof(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let server = exec.server;
    if eq_ignore_case(&argv[1], "no") && eq_ignore_case(&argv[2], "one") {
        server.mesh.clear_peers();
        server.config.write().replicaof.clear();
        return Ok(Frame::Simple("OK"));
    }
    if !server.settings().mesh_mode {
        return Err(CmdError::err(
            "REPLICAOF needs 'active-replica yes' and 'multi-master yes': KeyMesh has no read-only replicas, every node is a master of a mesh",
        ));
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

/// `SYNC`: the keyspace as an RDB file (version 10, which Redis 7.0 loads), streamed in
/// Redis's diskless `$EOF:<mark>` framing once this reply slot is reached, then the connection
/// closes, as Redis closes an `rdb-only` replica's (`persist::rdb::send_sync`). KeyMesh has no
/// replication stream to follow it with: nodes replicate over the mesh.
fn sync(exec: &mut Exec, _argv: &[Bytes]) -> Reply {
    exec.client.send_rdb = true;
    exec.client.closing = true;
    Ok(Frame::Sequence(Vec::new()))
}

fn psync(_exec: &mut Exec, _argv: &[Bytes]) -> Reply {
    Err(CmdError::err(
        "PSYNC is not supported: KeyMesh nodes replicate over the mesh (REPLICAOF with active-replica); SYNC sends a one-off RDB file (redis-cli --rdb)",
    ))
}

/// `REPLCONF`: the options `redis-cli --rdb` sends before `SYNC` (`capa`, `rdb-only`, an empty
/// `rdb-filter-only`) are accepted; anything a replica would need a stream for is refused, so
/// `redis-cli --functions-rdb` (`rdb-filter-only functions`) stops with that error.
fn replconf(_exec: &mut Exec, argv: &[Bytes]) -> Reply {
    if argv.len().is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    for pair in argv[1..].chunks(2) {
        let accepted = eq_ignore_case(&pair[0], "capa")
            || (eq_ignore_case(&pair[0], "rdb-only") && matches!(&pair[1][..], b"0" | b"1"))
            || (eq_ignore_case(&pair[0], "rdb-filter-only") && pair[1].is_empty());
        if !accepted {
            return Err(CmdError::err(format!(
                "REPLCONF {} {} is not supported: KeyMesh sends a one-off RDB file (SYNC) and replicates over the mesh",
                String::from_utf8_lossy(&pair[0]),
                String::from_utf8_lossy(&pair[1])
            )));
        }
    }
    Ok(Frame::Simple("OK"))
}
