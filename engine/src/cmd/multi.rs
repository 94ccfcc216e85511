//! Transactions: `MULTI`, `EXEC`, `DISCARD`, `WATCH`, `UNWATCH`.
//!
//! `EXEC` locks every shard its queued commands touch (all shards when one of them walks
//! whole databases or switches database) plus the shards of watched keys, checks the
//! watches, and runs the queue under those locks: the transaction is atomic across shards.
//! `WATCH` registers a flag on each key's shard; any write to the key sets it (Redis's
//! `touchWatchedKey`), and a key that was live when watched and has expired by `EXEC` also
//! aborts the transaction.

use crate::clock::Stopwatch;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::flags::*;
use super::{log_if_slow, record, show_to_monitors, CommandSpec, Exec, Keys, Source, TABLE};
use crate::client::{ClientState, MultiState, Watched};
use crate::db::ctx::Ctx;
use crate::error::{CmdError, Reply};
use crate::frame::{Frame, OK};
use crate::server::Server;

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: $keys, run: $run, group: "transactions", summary: $summary }
    };
}

pub const COMMANDS: &[CommandSpec] = &[
    spec!("multi", 1, FAST | IMMEDIATE, Keys::None, multi, "Starts a transaction."),
    spec!("exec", 1, IMMEDIATE | SKIP_SLOWLOG, Keys::None, exec_queue, "Executes all commands in a transaction."),
    spec!("discard", 1, FAST | IMMEDIATE, Keys::None, discard, "Discards a transaction."),
    spec!("watch", -2, FAST | IMMEDIATE, Keys::Range(1, -1, 1), watch, "Monitors changes to keys to determine the execution of a transaction."),
    spec!("unwatch", 1, FAST, Keys::None, unwatch, "Forgets about watched keys of a transaction."),
];

fn multi(exec: &mut Exec, _argv: &[Bytes]) -> Reply {
    if exec.client.multi.is_some() {
        return Err(CmdError::err("MULTI calls can not be nested"));
    }
    exec.client.multi = Some(MultiState::default());
    exec.client.handle.in_multi.store(true, Ordering::Relaxed);
    Ok(OK)
}

fn discard(exec: &mut Exec, _argv: &[Bytes]) -> Reply {
    if exec.client.multi.take().is_none() {
        return Err(CmdError::err("DISCARD without MULTI"));
    }
    exec.client.handle.in_multi.store(false, Ordering::Relaxed);
    unwatch_all(exec.server, exec.client);
    Ok(OK)
}

fn watch(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    if exec.client.multi.is_some() {
        return Err(CmdError::err("WATCH inside MULTI is not allowed"));
    }
    let db = exec.client.db;
    for key in &argv[1..] {
        if exec.client.watched.iter().any(|w| w.db == db && w.key[..] == key[..]) {
            continue;
        }
        // Looking the key up expires it if it is stale, so a stale key counts as absent.
        let live = exec.ctx.get(key).is_some();
        let flag = exec.client.watch_flag.clone();
        exec.ctx.shard_mut(db, key).watch(key, flag);
        exec.client.watched.push(Watched { db, key: key[..].into(), live_at_watch: live });
    }
    Ok(OK)
}

fn unwatch(exec: &mut Exec, _argv: &[Bytes]) -> Reply {
    unwatch_all(exec.server, exec.client);
    Ok(OK)
}

/// Forgets every watched key and clears the dirty flag.
pub fn unwatch_all(server: &Server, client: &mut ClientState) {
    let store = &server.store;
    for w in client.watched.drain(..) {
        store.lock_shard(w.db, store.shard_of(&w.key)).unwatch(&w.key, &client.watch_flag);
    }
    client.watch_flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
}

fn exec_queue(exec: &mut Exec, _argv: &[Bytes]) -> Reply {
    let server = exec.server;
    let Some(multi) = exec.client.multi.take() else {
        return Err(CmdError::err("EXEC without MULTI"));
    };
    exec.client.handle.in_multi.store(false, Ordering::Relaxed);
    if multi.failed {
        unwatch_all(server, exec.client);
        return Err(CmdError::Raw("EXECABORT Transaction discarded because of previous errors.".into()));
    }
    // Writes queued before the node started leaving the mesh must not run after it did.
    if multi.queue.iter().any(|(index, _)| TABLE.specs[*index].flags & WRITE != 0) && !exec.client.writes.admit(&server.mesh) {
        unwatch_all(server, exec.client);
        return Err(CmdError::Raw("EXECABORT Transaction discarded because this node is leaving the mesh (READONLY).".into()));
    }
    let locks = lock_transaction(server, exec.client, &multi.queue);
    let mut ctx = Ctx::new(&server.store, exec.client.db, server.store.hlc.wall_ms(), locks);
    if watch_broken(&mut ctx, exec.client) {
        drop(ctx);
        unwatch_all(server, exec.client);
        return Ok(Frame::NullArray);
    }
    exec.client.in_exec = true;
    let mut inner = Exec { ctx, server, client: &mut *exec.client };
    let mut replies = Vec::with_capacity(multi.queue.len());
    for (index, argv) in &multi.queue {
        let timer = Stopwatch::start();
        inner.ctx.no_touch = super::no_touch(inner.client, TABLE.specs[*index]);
        let reply = (TABLE.specs[*index].run)(&mut inner, argv);
        let duration_us = timer.elapsed_us();
        record(*index, argv, duration_us, &reply);
        log_if_slow(server, inner.client, TABLE.specs[*index], argv, duration_us);
        show_to_monitors(server, inner.client.db, Source::Client(&inner.client.handle.addr), TABLE.specs[*index], argv);
        if server.store.tracking.load(Ordering::Relaxed) {
            let mut read = super::tracking::read_keys(inner.client, TABLE.specs[*index], argv);
            inner.client.tracking_reads.append(&mut read);
        }
        replies.push(reply.unwrap_or_else(Frame::from));
    }
    let ready = std::mem::take(&mut inner.ctx.ready_keys);
    let effects = std::mem::take(&mut inner.ctx.effects);
    let events = inner.ctx.take_events();
    // EXEC's own `run_command` invalidates what the transaction modified.
    exec.ctx.modified = std::mem::take(&mut inner.ctx.modified);
    drop(inner);
    // Published with the client's other writes, by EXEC's own `run_command`.
    exec.ctx.effects.append(effects);
    if !events.is_empty() {
        server.store.notify.publish(events);
    }
    exec.client.in_exec = false;
    unwatch_all(server, exec.client);
    if !ready.is_empty() {
        super::blocking::wake_ready(server, ready);
    }
    Ok(Frame::Array(replies))
}

fn lock_transaction<'a>(server: &'a Server, client: &ClientState, queue: &[(usize, Vec<Bytes>)]) -> crate::db::Locks<'a> {
    let store = &server.store;
    let whole = queue.iter().any(|(i, _)| {
        let spec = TABLE.specs[*i];
        matches!(spec.keys, Keys::Whole | Keys::Database) || spec.flags & CROSS_DB != 0
    });
    if whole {
        return store.lock_all();
    }
    let mut wanted: Vec<(usize, usize)> = queue
        .iter()
        .flat_map(|(i, argv)| TABLE.specs[*i].key_positions(argv).into_iter().map(|p| (client.db, store.shard_of(&argv[p]))).collect::<Vec<_>>())
        .collect();
    wanted.extend(client.watched.iter().map(|w| (w.db, store.shard_of(&w.key))));
    store.lock_many(wanted)
}

/// Was a watched key written, or has one that was live when watched expired since?
fn watch_broken(ctx: &mut Ctx, client: &ClientState) -> bool {
    if client.watch_flag.load(Ordering::Acquire) {
        return true;
    }
    let now = ctx.now_ms;
    client.watched.iter().any(|w| w.live_at_watch && ctx.shard_mut(w.db, &w.key).raw(&w.key).is_some_and(|e| e.is_expired(now)))
}
