//! Pops: `ZPOPMIN`, `ZPOPMAX` and `ZMPOP` (the blocking forms, in `blocking.rs`, reuse
//! `zpop` and `zmpop_reply`).

use bytes::Bytes;

use super::scored_pairs;
use crate::cmd::args::{eq_ignore_case, mpop_args, positive};
use crate::cmd::Exec;
use crate::db::zset::SortedSet;
use crate::db::Kind;
use crate::error::{CmdError, Reply};
use crate::frame::Frame;
use crate::notify::class;

/// Pops up to `count` lowest-scoring (`max == false`) or highest-scoring members from the
/// sorted set at `key`, in pop order. A missing key (or `count == 0`) pops nothing; a key of
/// another type is WRONGTYPE. Deletes the key when it empties, wakes waiters, bumps dirty.
pub(crate) fn zpop(exec: &mut Exec, key: &[u8], max: bool, count: usize) -> Result<Vec<(Bytes, f64)>, CmdError> {
    match exec.ctx.kind(key) {
        None => return Ok(Vec::new()),
        Some(Kind::ZSet) => {}
        Some(_) => return Err(CmdError::WrongType),
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    let popped = exec.ctx.edit(key, |z: &mut SortedSet, _| {
        let mut popped = Vec::with_capacity(count.min(z.len()));
        while popped.len() < count {
            let Some((m, s)) = z.first(max) else { break };
            z.remove(&m);
            popped.push((m, s));
        }
        popped
    })?;
    let popped = popped.unwrap_or_default();
    if !popped.is_empty() {
        exec.ctx.notify(class::ZSET, if max { "zpopmax" } else { "zpopmin" }, key);
    }
    Ok(popped)
}

/// ZPOPMIN/ZPOPMAX `key [count]`: flat pairs, nested in RESP3 when a count is given.
fn zpop_command(exec: &mut Exec, argv: &[Bytes], max: bool) -> Reply {
    if argv.len() > 3 {
        return Err(CmdError::Syntax);
    }
    let count = match argv.get(2) {
        Some(arg) => Some(positive(arg)?),
        None => None,
    };
    let nested = exec.client.resp >= 3 && count.is_some();
    let popped = zpop(exec, &argv[1], max, count.unwrap_or(1))?;
    Ok(Frame::Array(scored_pairs(popped, nested)))
}

pub(super) fn zpopmin(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zpop_command(exec, argv, false)
}

pub(super) fn zpopmax(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zpop_command(exec, argv, true)
}

/// `MIN` (false) or `MAX` (true): the end a `ZMPOP`/`BZMPOP` pops from.
pub(crate) fn min_max(arg: &[u8]) -> Result<bool, CmdError> {
    if eq_ignore_case(arg, "min") {
        Ok(false)
    } else if eq_ignore_case(arg, "max") {
        Ok(true)
    } else {
        Err(CmdError::Syntax)
    }
}

/// `[key, [[member, score], ...]]`, the ZMPOP/BZMPOP reply in both protocols.
pub(crate) fn zmpop_reply(key: &[u8], popped: Vec<(Bytes, f64)>) -> Frame {
    Frame::Array(vec![Frame::bulk(key), Frame::Array(scored_pairs(popped, true))])
}

pub(super) fn zmpop(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let args = mpop_args(argv, 1, min_max)?;
    for i in args.keys {
        let popped = zpop(exec, &argv[i], args.end, args.count)?;
        if !popped.is_empty() {
            return Ok(zmpop_reply(&argv[i], popped));
        }
    }
    Ok(Frame::NullArray)
}
