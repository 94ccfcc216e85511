//! Writes: `ZADD` (and `ZINCRBY`, which Redis runs as `ZADD ... INCR`), `ZREM` and the
//! `ZREMRANGEBY*` family.

use bytes::Bytes;

use super::range::rank_range;
use crate::cmd::args::{eq_ignore_case, float, int, lex_bound, score_bound};
use crate::cmd::Exec;
use crate::db::zset::SortedSet;
use crate::db::Kind;
use crate::error::{CmdError, Reply};
use crate::frame::Frame;
use crate::hlc::Version;
use crate::notify::class;

#[derive(Clone, Copy, Default)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    incr: bool,
}

#[derive(PartialEq)]
enum AddOutcome {
    Added,
    Updated,
    /// Processed, score unchanged.
    Same,
    /// Skipped because of NX, XX, GT or LT.
    Nop,
}

fn nan_error() -> CmdError {
    CmdError::err("resulting score is not a number (NaN)")
}

/// Redis's `zsetAdd`: adds or updates one member under the ZADD flags. In a mesh
/// (`restamp`), re-adding a member with its current score is a write too (its version moves
/// on), so it survives an older concurrent `ZREM` or `DEL` made elsewhere.
fn add_one(z: &mut SortedSet, member: &Bytes, score: f64, f: AddFlags, v: Version, restamp: bool) -> Result<(AddOutcome, f64), CmdError> {
    match z.score(member) {
        Some(current) => {
            if f.nx {
                return Ok((AddOutcome::Nop, current));
            }
            let mut next = score;
            if f.incr {
                next += current;
                if next.is_nan() {
                    return Err(nan_error());
                }
            }
            if (f.lt && next >= current) || (f.gt && next <= current) {
                return Ok((AddOutcome::Nop, current));
            }
            if next != current {
                z.insert(&member[..], next, v);
                Ok((AddOutcome::Updated, next))
            } else {
                if restamp {
                    z.insert(&member[..], next, v);
                }
                Ok((AddOutcome::Same, next))
            }
        }
        None if !f.xx => {
            z.insert(&member[..], score, v);
            Ok((AddOutcome::Added, score))
        }
        None => Ok((AddOutcome::Nop, score)),
    }
}

/// ZADD and ZINCRBY (which Redis runs as `ZADD key INCR increment member`).
fn zadd_generic(exec: &mut Exec, argv: &[Bytes], incr: bool) -> Reply {
    let mut f = AddFlags { incr, ..AddFlags::default() };
    let mut ch = false;
    let mut i = 2;
    while i < argv.len() {
        let a = &argv[i];
        if eq_ignore_case(a, "nx") {
            f.nx = true;
        } else if eq_ignore_case(a, "xx") {
            f.xx = true;
        } else if eq_ignore_case(a, "ch") {
            ch = true;
        } else if eq_ignore_case(a, "incr") {
            f.incr = true;
        } else if eq_ignore_case(a, "gt") {
            f.gt = true;
        } else if eq_ignore_case(a, "lt") {
            f.lt = true;
        } else {
            break;
        }
        i += 1;
    }
    let elements = argv.len() - i;
    if elements == 0 || !elements.is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    if f.nx && f.xx {
        return Err(CmdError::err("XX and NX options at the same time are not compatible"));
    }
    if (f.gt && f.lt) || (f.nx && (f.gt || f.lt)) {
        return Err(CmdError::err("GT, LT, and/or NX options at the same time are not compatible"));
    }
    if f.incr && elements > 2 {
        return Err(CmdError::err("INCR option supports a single increment-element pair"));
    }
    let scores = argv[i..].chunks(2).map(|pair| float(&pair[0])).collect::<Result<Vec<f64>, _>>()?;

    let key = &argv[1];
    let existed = match exec.ctx.kind(key) {
        None => false,
        Some(Kind::ZSet) => true,
        Some(_) => return Err(CmdError::WrongType),
    };
    if !existed && f.xx {
        return Ok(if f.incr { Frame::Null } else { Frame::Integer(0) });
    }
    let restamp = exec.ctx.store.replicating();
    let (added, updated, processed, last) = exec.ctx.edit_or_create(key, |z: &mut SortedSet, v| {
        let (mut added, mut updated, mut processed, mut last) = (0i64, 0i64, 0i64, 0.0);
        for (pair, &score) in argv[i..].chunks(2).zip(&scores) {
            let (outcome, s) = add_one(z, &pair[1], score, f, v, restamp)?;
            match outcome {
                AddOutcome::Added => added += 1,
                AddOutcome::Updated => updated += 1,
                AddOutcome::Same | AddOutcome::Nop => {}
            }
            if outcome != AddOutcome::Nop {
                processed += 1;
            }
            last = s;
        }
        Ok::<_, CmdError>((added, updated, processed, last))
    })??;
    if added + updated > 0 {
        exec.ctx.notify(class::ZSET, if f.incr { "zincr" } else { "zadd" }, key);
    }
    if f.incr {
        Ok(if processed > 0 { Frame::Double(last) } else { Frame::Null })
    } else {
        Ok(Frame::Integer(if ch { added + updated } else { added }))
    }
}

pub(super) fn zadd(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zadd_generic(exec, argv, false)
}

pub(super) fn zincrby(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zadd_generic(exec, argv, true)
}

pub(super) fn zrem(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let deleted = exec.ctx.remove_elements::<SortedSet>(&argv[1], &argv[2..])?;
    if deleted > 0 {
        exec.ctx.notify(class::ZSET, "zrem", &argv[1]);
    }
    Ok(Frame::Integer(deleted as i64))
}

/// Removes the members `select` picks from the set at `argv[1]`; replies with their count.
fn zremrange(exec: &mut Exec, argv: &[Bytes], event: &'static str, select: impl FnOnce(&SortedSet) -> Vec<Bytes>) -> Reply {
    let removed = exec.ctx.edit(&argv[1], |z: &mut SortedSet, _| {
        let victims = select(z);
        for m in &victims {
            z.remove(m);
        }
        victims.len()
    })?;
    let removed = removed.unwrap_or(0);
    if removed > 0 {
        exec.ctx.notify(class::ZSET, event, &argv[1]);
    }
    Ok(Frame::Integer(removed as i64))
}

pub(super) fn zremrangebyrank(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (start, stop) = (int(&argv[2])?, int(&argv[3])?);
    zremrange(exec, argv, "zremrangebyrank", |z| rank_range(z, start, stop, false).into_iter().map(|(m, _)| m).collect())
}

pub(super) fn zremrangebyscore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (min, max) = (score_bound(&argv[2])?, score_bound(&argv[3])?);
    zremrange(exec, argv, "zremrangebyscore", |z| z.range_by_score(min, max).map(|(m, _)| m.to_bytes()).collect())
}

pub(super) fn zremrangebylex(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (min, max) = (lex_bound(&argv[2])?, lex_bound(&argv[3])?);
    zremrange(exec, argv, "zremrangebylex", |z| z.range_by_lex(&min, &max).map(|(m, _)| m.to_bytes()).collect())
}
