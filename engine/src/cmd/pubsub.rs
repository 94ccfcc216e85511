//! Pub/sub commands. Subscription confirmations are push frames (`>` in RESP3, arrays in
//! RESP2), one per channel, as Redis sends them.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::args::eq_ignore_case;
use super::flags::*;
use super::{unknown_subcommand, wrong_arity, CommandSpec, Exec, Keys};
use crate::client::ClientState;
use crate::error::{CmdError, Reply};
use crate::frame::Frame;
use crate::server::Server;

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: Keys::None, run: $run, group: "pubsub", summary: $summary }
    };
}

pub const COMMANDS: &[CommandSpec] = &[
    spec!("subscribe", -2, PUBSUB, subscribe, "Listens for messages published to channels."),
    spec!("unsubscribe", -1, PUBSUB, unsubscribe, "Stops listening to messages posted to channels."),
    spec!("psubscribe", -2, PUBSUB, psubscribe, "Listens for messages published to channels that match one or more patterns."),
    spec!("punsubscribe", -1, PUBSUB, punsubscribe, "Stops listening to messages published to channels that match one or more patterns."),
    spec!("publish", 3, PUBSUB | FAST, publish, "Posts a message to a channel."),
    spec!("pubsub", -2, PUBSUB, pubsub, "A container for Pub/Sub commands."),
];

fn confirmation(kind: &'static str, name: Option<Bytes>, count: usize) -> Frame {
    Frame::Push(vec![Frame::bulk(kind), name.map_or(Frame::Null, Frame::Bulk), Frame::Integer(count as i64)])
}

fn sync_count(client: &ClientState) {
    client.handle.subscriptions.store(client.subscriptions(), Ordering::Relaxed);
}

fn subscribe(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let mut replies = Vec::new();
    for channel in &argv[1..] {
        if exec.client.channels.insert(channel.clone()) {
            exec.server.pubsub.subscribe(channel, &exec.client.handle);
        }
        replies.push(confirmation("subscribe", Some(channel.clone()), exec.client.subscriptions()));
    }
    sync_count(exec.client);
    Ok(Frame::Sequence(replies))
}

fn psubscribe(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let mut replies = Vec::new();
    for pattern in &argv[1..] {
        if exec.client.patterns.insert(pattern.clone()) {
            exec.server.pubsub.psubscribe(pattern, &exec.client.handle);
        }
        replies.push(confirmation("psubscribe", Some(pattern.clone()), exec.client.subscriptions()));
    }
    sync_count(exec.client);
    Ok(Frame::Sequence(replies))
}

fn unsubscribe(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let names: Vec<Bytes> = if argv.len() > 1 { argv[1..].to_vec() } else { exec.client.channels.iter().cloned().collect() };
    let mut replies = Vec::new();
    for channel in names {
        if exec.client.channels.remove(&channel) {
            exec.server.pubsub.unsubscribe(&channel, exec.client.id);
        }
        replies.push(confirmation("unsubscribe", Some(channel), exec.client.subscriptions()));
    }
    if replies.is_empty() {
        replies.push(confirmation("unsubscribe", None, exec.client.subscriptions()));
    }
    sync_count(exec.client);
    Ok(Frame::Sequence(replies))
}

fn punsubscribe(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let names: Vec<Bytes> = if argv.len() > 1 { argv[1..].to_vec() } else { exec.client.patterns.iter().cloned().collect() };
    let mut replies = Vec::new();
    for pattern in names {
        if exec.client.patterns.remove(&pattern) {
            exec.server.pubsub.punsubscribe(&pattern, exec.client.id);
        }
        replies.push(confirmation("punsubscribe", Some(pattern), exec.client.subscriptions()));
    }
    if replies.is_empty() {
        replies.push(confirmation("punsubscribe", None, exec.client.subscriptions()));
    }
    sync_count(exec.client);
    Ok(Frame::Sequence(replies))
}

/// Drops every subscription without replies (disconnect, `RESET`).
pub fn unsubscribe_all(server: &Server, client: &mut ClientState) {
    for channel in client.channels.drain() {
        server.pubsub.unsubscribe(&channel, client.id);
    }
    for pattern in client.patterns.drain() {
        server.pubsub.punsubscribe(&pattern, client.id);
    }
    sync_count(client);
}

fn publish(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    // Subscribers on every node of the mesh receive it; the count is this node's, as in KeyDB.
    exec.ctx.emit_publish(&argv[1], &argv[2]);
    Ok(Frame::Integer(exec.server.pubsub.publish(&argv[1], &argv[2]) as i64))
}

fn pubsub(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let pubsub = &exec.server.pubsub;
    let sub = &argv[1];
    if eq_ignore_case(sub, "channels") {
        if argv.len() > 3 {
            return Err(wrong_arity("pubsub|channels"));
        }
        return Ok(Frame::Array(pubsub.channels(argv.get(2).map(|p| &p[..])).into_iter().map(Frame::Bulk).collect()));
    }
    if eq_ignore_case(sub, "numsub") {
        let mut pairs = Vec::new();
        for channel in &argv[2..] {
            pairs.push(Frame::Bulk(channel.clone()));
            pairs.push(Frame::Integer(pubsub.numsub(channel) as i64));
        }
        return Ok(Frame::Array(pairs));
    }
    if eq_ignore_case(sub, "numpat") {
        if argv.len() != 2 {
            return Err(wrong_arity("pubsub|numpat"));
        }
        return Ok(Frame::Integer(pubsub.numpat() as i64));
    }
    if eq_ignore_case(sub, "shardchannels") {
        return Ok(Frame::Array(vec![]));
    }
    if eq_ignore_case(sub, "shardnumsub") {
        let pairs = argv[2..].iter().flat_map(|c| [Frame::Bulk(c.clone()), Frame::Integer(0)]).collect();
        return Ok(Frame::Array(pairs));
    }
    Err::<Frame, CmdError>(unknown_subcommand(sub, "pubsub"))
}
