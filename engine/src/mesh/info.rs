//! `INFO replication` and `ROLE` in KeyDB's shapes, plus KeyMesh's per-peer fields.
//!
//! KeyDB numbers its masters: the first one's fields are `master_host`, `master_port`, ...;
//! the next ones' are `master_1_host`, `master_2_host`, ... (tools written for one master keep
//! working). Each master block adds `master[_N]_lag_ops`, `_last_ack_age_ms`,
//! `_clock_skew_ms`, `_link_state`, `_node_name`, `_initial_sync_done`, `_partial_resyncs`,
//! `_full_resyncs` and `_last_error`. The offset merged from a master is Redis's
//! `slave_repl_offset` for the first, `master_N_repl_offset` for the next ones: `master_repl_offset`
//! is the node's own, once. Subscribers are listed as Redis lists replicas:
//! `slaveN:ip=..,port=..,state=online|wait_bgsave,offset=<acked seq>,lag=<s since ack>`.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{LinkPhase, Mesh};
use crate::frame::Frame;

pub fn replication(mesh: &Mesh) -> String {
    let links = mesh.link_statuses();
    let subscribers = mesh.subscriber_infos();
    let mut out = String::from("# Replication\r\n");
    let role = if links.is_empty() { "master" } else { "active-replica" };
    let _ = write!(out, "role:{role}\r\n");
    if !links.is_empty() {
        let up = links.iter().filter(|(_, s)| s.phase == LinkPhase::Connected).count();
        let global = if up == links.len() { "up" } else { "down" };
        let _ = write!(out, "master_global_link_status:{global}\r\nconnected_masters:{up}\r\n");
    }
    for (i, (peer, s)) in links.iter().enumerate() {
        let p = if i == 0 { "master".to_string() } else { format!("master_{i}") };
        // Not `master_repl_offset` for the first: that name is the node's own offset (below).
        let offset = if i == 0 { "slave_repl_offset".to_string() } else { format!("{p}_repl_offset") };
        let link = if s.phase == LinkPhase::Connected { "up" } else { "down" };
        let io = s.last_io.map_or(-1, |t| t.elapsed().as_secs() as i64);
        let _ = write!(
            out,
            "{p}_host:{}\r\n{p}_port:{}\r\n{p}_link_status:{link}\r\n{p}_last_io_seconds_ago:{io}\r\n{p}_sync_in_progress:{}\r\n",
            peer.host,
            peer.client_port(),
            (s.phase == LinkPhase::Syncing) as u8,
        );
        if let Some(since) = s.down_since.filter(|_| link == "down") {
            let _ = write!(out, "{p}_link_down_since_seconds:{}\r\n", since.elapsed().as_secs());
        }
        let _ = write!(
            out,
            "{p}_mesh_port:{}\r\n{p}_node_name:{}\r\n{p}_link_state:{}\r\n{p}_initial_sync_done:{}\r\n{offset}:{}\r\n{p}_lag_ops:{}\r\n{p}_last_ack_age_ms:{}\r\n{p}_clock_skew_ms:{}\r\n{p}_partial_resyncs:{}\r\n{p}_full_resyncs:{}\r\n{p}_last_error:{}\r\n",
            peer.mesh_port,
            s.node_name,
            s.phase.as_str(),
            s.initial_sync_done as u8,
            s.applied_seq,
            s.lag(),
            s.last_ack_age_ms(),
            s.skew_ms,
            s.partial_resyncs,
            s.full_resyncs,
            s.last_error.replace(['\r', '\n'], " "),
        );
    }
    if !links.is_empty() {
        out.push_str("slave_read_only:0\r\n");
    }
    let _ = write!(out, "connected_slaves:{}\r\n", subscribers.len());
    for (i, sub) in subscribers.iter().enumerate() {
        let (ip, port) = sub.addr.map_or(("?".to_string(), 0), |a| (a.ip().to_string(), a.port()));
        let state = if sub.syncing.load(Ordering::Relaxed) { "wait_bgsave" } else { "online" };
        let _ = write!(
            out,
            "slave{i}:ip={ip},port={port},state={state},offset={},lag={},node={},skew_ms={}\r\n",
            sub.applied_seq.load(Ordering::Relaxed),
            sub.last_ack_age().as_secs(),
            sub.node_name,
            sub.skew_ms.load(Ordering::Relaxed),
        );
    }
    let ready = mesh.readiness();
    let refusals = mesh.refusals();
    let _ = write!(
        out,
        "master_replid:{}\r\nmaster_repl_offset:{}\r\nrepl_backlog_active:1\r\nrepl_backlog_histlen:{}\r\nmesh_ready:{}\r\nmesh_synced:{}\r\nmesh_ready_reason:{}\r\nskewed_receives:{}\r\nmesh_stale:{}\r\nmesh_wipes:{}\r\nmesh_tombstones:{}\r\nmesh_draining:{}\r\nmesh_protocol_version:{}\r\nmesh_refused_subscribers:{}\r\nmesh_last_refusal:{}\r\n\r\n",
        mesh.run_id(),
        mesh.log.next_seq().saturating_sub(1),
        mesh.log.held_bytes(),
        ready.is_ok() as u8,
        mesh.synced() as u8,
        ready.err().unwrap_or_default(),
        mesh.store.hlc.skewed_receives(),
        mesh.stale() as u8,
        mesh.metrics.wipes.get(),
        mesh.store.tombstones_held(),
        mesh.draining() as u8,
        super::MESH_PROTOCOL_VERSION,
        ["auth", "protocol", "tls"].iter().map(|r| mesh.metrics.refused_subscribers.with_label_values(&[r]).get()).sum::<u64>(),
        refusals.last().map(|r| r.replace(['\r', '\n'], " ")).unwrap_or_default(),
    );
    out
}

/// `ROLE`: `master` with its subscribers when no peer is configured; otherwise one
/// `active-replica` entry per peer (a bare entry for a single peer), as KeyDB replies.
pub fn role(mesh: &Mesh) -> Frame {
    let links = mesh.link_statuses();
    if links.is_empty() {
        let subs = mesh
            .subscriber_infos()
            .iter()
            .map(|s| {
                let (ip, port) = s.addr.map_or(("?".to_string(), 0), |a| (a.ip().to_string(), a.port()));
                Frame::Array(vec![Frame::bulk(ip), Frame::bulk(port.to_string()), Frame::bulk(s.applied_seq.load(Ordering::Relaxed).to_string())])
            })
            .collect();
        return Frame::Array(vec![Frame::bulk("master"), Frame::Integer(mesh.log.next_seq().saturating_sub(1) as i64), Frame::Array(subs)]);
    }
    let mut entries: Vec<Frame> = links
        .iter()
        .map(|(peer, s)| {
            let state = match s.phase {
                LinkPhase::Connecting => "connecting",
                LinkPhase::Syncing => "sync",
                LinkPhase::Connected => "connected",
                LinkPhase::Down | LinkPhase::Itself => "connect",
            };
            let offset = if s.synced_run_id.is_empty() { -1 } else { s.applied_seq as i64 };
            Frame::Array(vec![
                Frame::Bulk(Bytes::from_static(b"active-replica")),
                Frame::bulk(&peer.host),
                Frame::Integer(peer.client_port() as i64),
                Frame::bulk(state),
                Frame::Integer(offset),
            ])
        })
        .collect();
    if entries.len() == 1 {
        return entries.remove(0);
    }
    Frame::Array(entries)
}
