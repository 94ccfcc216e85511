//! Blocking pops: `BLPOP BRPOP BRPOPLPUSH BLMOVE BLMPOP BZPOPMIN BZPOPMAX BZMPOP`.
//!
//! Each first tries its non-blocking form (the list and zset families' helpers). If nothing
//! was there it registers a waiter while still holding its keys' shard locks (see
//! `crate::blocking`) and the connection waits; a later push re-runs the same command on the
//! client's behalf. Inside `MULTI`, or with nothing to pop during a wake-up, it answers the
//! timeout reply at once, as Redis does.

use std::time::Duration;

use bytes::Bytes;

use super::args::{mpop_args, numkeys_positions};
use super::flags::*;
use super::list::{lmpop_reply, move_element, pop_from, side};
use super::zset::{min_max, zmpop_reply, zpop};
use super::{CommandSpec, Exec, Keys, TABLE};
use crate::blocking::Waiter;
use crate::client::BlockRequest;
use crate::db::Kind;
use crate::db::{Key, KeyHint};
use crate::error::{CmdError, Reply};
use crate::frame::Frame;
use crate::server::Server;

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: $keys, run: $run, group: "list", summary: $summary }
    };
}

pub const COMMANDS: &[CommandSpec] = &[
    spec!(
        "blpop",
        -3,
        WRITE | BLOCKING,
        Keys::Range(1, -2, 1),
        blpop,
        "Removes and returns the first element in a list. Blocks until an element is available otherwise."
    ),
    spec!(
        "brpop",
        -3,
        WRITE | BLOCKING,
        Keys::Range(1, -2, 1),
        brpop,
        "Removes and returns the last element in a list. Blocks until an element is available otherwise."
    ),
    spec!(
        "brpoplpush",
        4,
        WRITE | DENYOOM | BLOCKING,
        Keys::Range(1, 2, 1),
        brpoplpush,
        "Pops an element from a list, pushes it to another list and returns it."
    ),
    spec!("blmove", 6, WRITE | DENYOOM | BLOCKING, Keys::Range(1, 2, 1), blmove, "Pops an element from a list, pushes it to another list and returns it."),
    spec!("blmpop", -5, WRITE | BLOCKING, Keys::Custom(blmpop_keys), blmpop, "Pops the first element from one of multiple lists."),
    spec!(
        "bzpopmin",
        -3,
        WRITE | FAST | BLOCKING,
        Keys::Range(1, -2, 1),
        bzpopmin,
        "Removes and returns the member with the lowest score from one or more sorted sets."
    ),
    spec!(
        "bzpopmax",
        -3,
        WRITE | FAST | BLOCKING,
        Keys::Range(1, -2, 1),
        bzpopmax,
        "Removes and returns the member with the highest score from one or more sorted sets."
    ),
    spec!("bzmpop", -5, WRITE | BLOCKING, Keys::Custom(blmpop_keys), bzmpop, "Removes and returns a member by score from one or more sorted sets."),
];

fn blmpop_keys(argv: &[Bytes]) -> Vec<usize> {
    numkeys_positions(argv, 2)
}

/// Redis's blocking timeout: seconds as a float, 0 = forever, never negative.
fn timeout(arg: &[u8]) -> Result<Option<Duration>, CmdError> {
    let secs = super::args::parse_float(arg).filter(|s| s.is_finite()).ok_or_else(|| CmdError::err("timeout is not a float or out of range"))?;
    if secs < 0.0 {
        return Err(CmdError::err("timeout is negative"));
    }
    if secs * 1000.0 > i64::MAX as f64 / 2.0 {
        return Err(CmdError::err("timeout is out of range"));
    }
    Ok((secs > 0.0).then(|| Duration::from_secs_f64(secs)))
}

/// Answers at once if `found` is a reply; otherwise blocks on `keys` (or times out at once
/// inside a transaction or a wake-up attempt).
fn or_block(exec: &mut Exec, argv: &[Bytes], keys: Vec<Bytes>, wait: Option<Duration>, found: Option<Frame>) -> Reply {
    if let Some(frame) = found {
        return Ok(frame);
    }
    exec.client.would_block = true;
    if exec.client.in_exec || exec.client.serving_wakeup {
        return Ok(Frame::NullArray);
    }
    let command = TABLE.find(&argv[0]).ok_or_else(|| CmdError::err("blocking command missing from the table"))?;
    let wants = if TABLE.specs[command].name.starts_with("bz") { Kind::ZSet } else { Kind::List };
    let (waiter, reply) = Waiter::new(exec.client, command, argv.to_vec(), keys, wants, Frame::NullArray);
    exec.server.blocking.register(waiter.clone());
    exec.client.block = Some(BlockRequest { waiter, reply, timeout: wait });
    Ok(Frame::NullArray)
}

fn bpop(exec: &mut Exec, argv: &[Bytes], left: bool) -> Reply {
    let wait = timeout(&argv[argv.len() - 1])?;
    let keys = &argv[1..argv.len() - 1];
    let mut found = None;
    for key in keys {
        if let Some(value) = pop_from(exec, key, left, 1)?.pop() {
            found = Some(Frame::Array(vec![Frame::Bulk(key.clone()), Frame::Bulk(value)]));
            break;
        }
    }
    or_block(exec, argv, keys.to_vec(), wait, found)
}

fn blpop(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    bpop(exec, argv, true)
}

fn brpop(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    bpop(exec, argv, false)
}

fn bmove(exec: &mut Exec, argv: &[Bytes], from_left: bool, to_left: bool, wait: Option<Duration>) -> Reply {
    let moved = move_element(exec, &argv[1], &argv[2], from_left, to_left)?;
    let found = (!matches!(moved, Frame::Null)).then_some(moved);
    or_block(exec, argv, vec![argv[1].clone()], wait, found)
}

fn brpoplpush(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let wait = timeout(&argv[3])?;
    bmove(exec, argv, false, true, wait)
}

fn blmove(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (from_left, to_left) = (side(&argv[3])?, side(&argv[4])?);
    let wait = timeout(&argv[5])?;
    bmove(exec, argv, from_left, to_left, wait)
}

fn blmpop(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let wait = timeout(&argv[1])?;
    let args = mpop_args(argv, 2, side)?;
    let mut found = None;
    for i in args.keys.clone() {
        let popped = pop_from(exec, &argv[i], args.end, args.count)?;
        if !popped.is_empty() {
            found = Some(lmpop_reply(&argv[i], popped));
            break;
        }
    }
    or_block(exec, argv, argv[args.keys].to_vec(), wait, found)
}

fn bzpop(exec: &mut Exec, argv: &[Bytes], max: bool) -> Reply {
    let wait = timeout(&argv[argv.len() - 1])?;
    let keys = &argv[1..argv.len() - 1];
    let mut found = None;
    for key in keys {
        if let Some((member, score)) = zpop(exec, key, max, 1)?.pop() {
            found = Some(Frame::Array(vec![Frame::Bulk(key.clone()), Frame::Bulk(member), Frame::Double(score)]));
            break;
        }
    }
    or_block(exec, argv, keys.to_vec(), wait, found)
}

fn bzpopmin(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    bzpop(exec, argv, false)
}

fn bzpopmax(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    bzpop(exec, argv, true)
}

fn bzmpop(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let wait = timeout(&argv[1])?;
    let args = mpop_args(argv, 2, min_max)?;
    let mut found = None;
    for i in args.keys.clone() {
        let popped = zpop(exec, &argv[i], args.end, args.count)?;
        if !popped.is_empty() {
            found = Some(zmpop_reply(&argv[i], popped));
            break;
        }
    }
    or_block(exec, argv, argv[args.keys].to_vec(), wait, found)
}

/// Serves clients blocked on keys that became ready (after a command, a transaction or a merge
/// from a peer), re-running each waiter's command through the command layer.
pub fn wake_ready(server: &Server, ready: Vec<(usize, Key)>) {
    server.blocking.wake(&server.store, ready, |client, command, argv| super::run_command(server, client, command, argv, KeyHint::NONE));
}
