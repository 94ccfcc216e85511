//! Sorted sets: `ZADD` and its options, ranges by rank, score and lex (`ZRANGE` and its
//! legacy forms), the set algebra (`ZUNION`, `ZINTER`, `ZDIFF`, their `STORE` forms and
//! `ZINTERCARD`), pops, `ZRANDMEMBER` and `ZSCAN`, with Redis 7.0's replies and errors.
//!
//! Members carry the version of the write that last set their score (per-member LWW, see
//! DESIGN.md, Merge semantics). The blocking pops (`BZPOPMIN`, `BZMPOP`, ...) live in
//! `blocking.rs` and reuse `zpop`, `zmpop_args` and `zmpop_reply`.

use bytes::Bytes;
use rand::Rng;

use super::args::{cursor, eq_ignore_case, float, int, lex_bound, parse_float, scan_options, score_bound};
use super::flags::*;
use super::{CommandSpec, Exec, Keys};
use crate::db::entry::FieldMap;
use crate::db::zset::{LexBound, ScoreBound, SortedSet};
use crate::db::{Kind, Value};
use crate::error::{CmdError, Reply};
use crate::frame::Frame;
use crate::glob::glob_match;
use crate::hlc::Version;
use crate::parse::parse_i64;

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: $keys, run: $run, group: "sorted-set", summary: $summary }
    };
}

const KEY: Keys = Keys::Range(1, 1, 1);

pub const COMMANDS: &[CommandSpec] = &[
    spec!("zadd", -4, WRITE | DENYOOM | FAST, KEY, zadd, "Adds one or more members to a sorted set, or updates their scores. Creates the key if it doesn't exist."),
    spec!("zincrby", 4, WRITE | DENYOOM | FAST, KEY, zincrby, "Increments the score of a member in a sorted set."),
    spec!("zrem", -3, WRITE | FAST, KEY, zrem, "Removes one or more members from a sorted set. Deletes the sorted set if all members were removed."),
    spec!("zcard", 2, READONLY | FAST, KEY, zcard, "Returns the number of members in a sorted set."),
    spec!("zscore", 3, READONLY | FAST, KEY, zscore, "Returns the score of a member in a sorted set."),
    spec!("zmscore", -3, READONLY | FAST, KEY, zmscore, "Returns the score of one or more members in a sorted set."),
    spec!("zrank", 3, READONLY | FAST, KEY, zrank, "Returns the index of a member in a sorted set ordered by ascending scores."),
    spec!("zrevrank", 3, READONLY | FAST, KEY, zrevrank, "Returns the index of a member in a sorted set ordered by descending scores."),
    spec!("zcount", 4, READONLY | FAST, KEY, zcount, "Returns the count of members in a sorted set that have scores within a range."),
    spec!("zlexcount", 4, READONLY | FAST, KEY, zlexcount, "Returns the number of members in a sorted set within a lexicographical range."),
    spec!("zrange", -4, READONLY, KEY, zrange, "Returns members in a sorted set within a range of indexes."),
    spec!("zrevrange", -4, READONLY, KEY, zrevrange, "Returns members in a sorted set within a range of indexes in reverse order."),
    spec!("zrangebyscore", -4, READONLY, KEY, zrangebyscore, "Returns members in a sorted set within a range of scores."),
    spec!("zrevrangebyscore", -4, READONLY, KEY, zrevrangebyscore, "Returns members in a sorted set within a range of scores in reverse order."),
    spec!("zrangebylex", -4, READONLY, KEY, zrangebylex, "Returns members in a sorted set within a lexicographical range."),
    spec!("zrevrangebylex", -4, READONLY, KEY, zrevrangebylex, "Returns members in a sorted set within a lexicographical range in reverse order."),
    spec!("zrangestore", -5, WRITE | DENYOOM, Keys::Range(1, 2, 1), zrangestore, "Stores a range of members from sorted set in a key."),
    spec!("zremrangebyrank", 4, WRITE, KEY, zremrangebyrank, "Removes members in a sorted set within a range of indexes. Deletes the sorted set if all members were removed."),
    spec!("zremrangebyscore", 4, WRITE, KEY, zremrangebyscore, "Removes members in a sorted set within a range of scores. Deletes the sorted set if all members were removed."),
    spec!("zremrangebylex", 4, WRITE, KEY, zremrangebylex, "Removes members in a sorted set within a lexicographical range. Deletes the sorted set if all members were removed."),
    spec!("zunionstore", -4, WRITE | DENYOOM, Keys::Custom(store_keys), zunionstore, "Stores the union of multiple sorted sets in a key."),
    spec!("zinterstore", -4, WRITE | DENYOOM, Keys::Custom(store_keys), zinterstore, "Stores the intersect of multiple sorted sets in a key."),
    spec!("zdiffstore", -4, WRITE | DENYOOM, Keys::Custom(store_keys), zdiffstore, "Stores the difference of multiple sorted sets in a key."),
    spec!("zunion", -3, READONLY, Keys::Custom(numkeys_at_1), zunion, "Returns the union of multiple sorted sets."),
    spec!("zinter", -3, READONLY, Keys::Custom(numkeys_at_1), zinter, "Returns the intersect of multiple sorted sets."),
    spec!("zdiff", -3, READONLY, Keys::Custom(numkeys_at_1), zdiff, "Returns the difference between multiple sorted sets."),
    spec!("zintercard", -3, READONLY, Keys::Custom(numkeys_at_1), zintercard, "Returns the number of members of the intersect of multiple sorted sets."),
    spec!("zpopmin", -2, WRITE | FAST, KEY, zpopmin, "Returns the lowest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped."),
    spec!("zpopmax", -2, WRITE | FAST, KEY, zpopmax, "Returns the highest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped."),
    spec!("zmpop", -4, WRITE, Keys::Custom(numkeys_at_1), zmpop, "Returns the highest- or lowest-scoring members from one or more sorted sets after removing them. Deletes the sorted set if the last member was popped."),
    spec!("zrandmember", -2, READONLY, KEY, zrandmember, "Returns one or more random members from a sorted set."),
    spec!("zscan", -3, READONLY, KEY, zscan, "Iterates over members and scores of a sorted set."),
];

// ---------------------------------------------------------------------------------------
// Shared helpers (some are used by `blocking.rs` and `list.rs`).

/// Positions of the `numkeys`-counted keys that follow `argv[numkeys_idx]`, clamped to the
/// arguments present (the handler reports a bad count; this only decides what to lock).
pub(crate) fn numkeys_positions(argv: &[Bytes], numkeys_idx: usize) -> Vec<usize> {
    let Some(n) = argv.get(numkeys_idx).and_then(|a| parse_i64(a)) else {
        return Vec::new();
    };
    if n < 1 {
        return Vec::new();
    }
    let first = numkeys_idx + 1;
    let last = first.saturating_add(usize::try_from(n).unwrap_or(usize::MAX)).min(argv.len());
    (first..last).collect()
}

fn numkeys_at_1(argv: &[Bytes]) -> Vec<usize> {
    numkeys_positions(argv, 1)
}

/// `ZUNIONSTORE dst numkeys key...`: the destination plus the sources.
fn store_keys(argv: &[Bytes]) -> Vec<usize> {
    let mut keys: Vec<usize> = (1..argv.len().min(2)).collect();
    keys.extend(numkeys_positions(argv, 2));
    keys
}

/// Redis's `getRangeLongFromObjectOrReply(min, LONG_MAX, msg)`: a non-integer or a value
/// below `min` both answer `ERR <msg>`.
pub(crate) fn int_at_least(arg: &[u8], min: i64, msg: &str) -> Result<i64, CmdError> {
    match parse_i64(arg) {
        Some(n) if n >= min => Ok(n),
        _ => Err(CmdError::err(msg)),
    }
}

/// Redis's `getPositiveLongFromObjectOrReply` without a custom message.
pub(crate) fn positive(arg: &[u8]) -> Result<usize, CmdError> {
    int_at_least(arg, 0, "value is out of range, must be positive").map(|n| n as usize)
}

/// `member score member score ...` (flat, RESP2 style) or `[[member, score], ...]`.
pub(crate) fn scored_pairs(items: Vec<(Bytes, f64)>, nested: bool) -> Vec<Frame> {
    if nested {
        items.into_iter().map(|(m, s)| Frame::Array(vec![Frame::Bulk(m), Frame::Double(s)])).collect()
    } else {
        let mut out = Vec::with_capacity(items.len() * 2);
        for (m, s) in items {
            out.push(Frame::Bulk(m));
            out.push(Frame::Double(s));
        }
        out
    }
}

/// A member list, with scores when asked: flat in RESP2, `[member, score]` pairs in RESP3.
fn scored_reply(items: Vec<(Bytes, f64)>, withscores: bool, resp: u8) -> Frame {
    if withscores {
        Frame::Array(scored_pairs(items, resp >= 3))
    } else {
        Frame::Array(items.into_iter().map(|(m, _)| Frame::Bulk(m)).collect())
    }
}

/// The sorted set at `key` for a read command (counts a keyspace hit or miss).
fn read<'e>(exec: &'e mut Exec<'_, '_>, key: &[u8]) -> Result<Option<&'e SortedSet>, CmdError> {
    match exec.ctx.lookup_read(key).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::ZSet(z)) => Ok(Some(z)),
        Some(_) => Err(CmdError::WrongType),
    }
}

fn owned<'i>(items: impl Iterator<Item = (&'i Bytes, f64)>) -> Vec<(Bytes, f64)> {
    items.map(|(m, s)| (m.clone(), s)).collect()
}

/// Applies `LIMIT offset count` as Redis does: a negative offset yields nothing, a negative
/// count means no limit.
fn window<'i>(items: impl Iterator<Item = (&'i Bytes, f64)>, offset: i64, count: i64) -> Vec<(Bytes, f64)> {
    if offset < 0 {
        return Vec::new();
    }
    let take = if count < 0 { usize::MAX } else { count as usize };
    owned(items.skip(offset as usize).take(take))
}

// ---------------------------------------------------------------------------------------
// ZADD, ZINCRBY, ZREM

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
                z.insert(member.clone(), next, v);
                Ok((AddOutcome::Updated, next))
            } else {
                if restamp {
                    z.insert(member.clone(), next, v);
                }
                Ok((AddOutcome::Same, next))
            }
        }
        None if !f.xx => {
            z.insert(member.clone(), score, v);
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
    if f.incr {
        Ok(if processed > 0 { Frame::Double(last) } else { Frame::Null })
    } else {
        Ok(Frame::Integer(if ch { added + updated } else { added }))
    }
}

fn zadd(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zadd_generic(exec, argv, false)
}

fn zincrby(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zadd_generic(exec, argv, true)
}

fn zrem(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let deleted = exec.ctx.remove_elements::<SortedSet>(&argv[1], &argv[2..])?;
    Ok(Frame::Integer(deleted as i64))
}

// ---------------------------------------------------------------------------------------
// Point reads

fn zcard(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    Ok(Frame::Integer(read(exec, &argv[1])?.map_or(0, |z| z.len()) as i64))
}

fn zscore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let score = read(exec, &argv[1])?.and_then(|z| z.score(&argv[2]));
    Ok(score.map_or(Frame::Null, Frame::Double))
}

fn zmscore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let z = read(exec, &argv[1])?;
    let scores = argv[2..].iter().map(|m| z.as_ref().and_then(|z| z.score(m)).map_or(Frame::Null, Frame::Double)).collect();
    Ok(Frame::Array(scores))
}

fn zrank(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let rank = read(exec, &argv[1])?.and_then(|z| z.rank(&argv[2]));
    Ok(rank.map_or(Frame::Null, |r| Frame::Integer(r as i64)))
}

fn zrevrank(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let rank = read(exec, &argv[1])?.and_then(|z| z.rev_rank(&argv[2]));
    Ok(rank.map_or(Frame::Null, |r| Frame::Integer(r as i64)))
}

fn zcount(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (min, max) = (score_bound(&argv[2])?, score_bound(&argv[3])?);
    Ok(Frame::Integer(read(exec, &argv[1])?.map_or(0, |z| z.count_by_score(min, max)) as i64))
}

fn zlexcount(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (min, max) = (lex_bound(&argv[2])?, lex_bound(&argv[3])?);
    Ok(Frame::Integer(read(exec, &argv[1])?.map_or(0, |z| z.range_by_lex(&min, &max).count()) as i64))
}

// ---------------------------------------------------------------------------------------
// ZRANGE and friends

#[derive(Clone, Copy, PartialEq)]
enum By {
    Auto,
    Rank,
    Score,
    Lex,
}

enum Range {
    Rank(i64, i64),
    Score(ScoreBound, ScoreBound),
    Lex(LexBound, LexBound),
}

/// Members of ranks `start..=stop` (Redis's index rules, negative from the end).
fn rank_range(z: &SortedSet, start: i64, stop: i64, rev: bool) -> Vec<(Bytes, f64)> {
    let len = z.len() as i64;
    let mut start = if start < 0 { len + start } else { start };
    let stop = if stop < 0 { len + stop } else { stop };
    if start < 0 {
        start = 0;
    }
    if start > stop || start >= len {
        return Vec::new();
    }
    z.range_by_rank(start as usize, stop.min(len - 1) as usize, rev)
}

/// Redis's `zrangeGenericCommand`: `<src> <min> <max> [BYSCORE|BYLEX] [REV] [WITHSCORES]
/// [LIMIT offset count]` starting at `argv[src_idx]`; `dst` makes it ZRANGESTORE. `by` and
/// `rev` are fixed by the legacy commands and `Auto`/`None` for ZRANGE.
fn zrange_generic(exec: &mut Exec, argv: &[Bytes], src_idx: usize, dst: Option<&Bytes>, mut by: By, mut rev: Option<bool>) -> Reply {
    let mut withscores = false;
    let (mut offset, mut limit) = (0i64, -1i64);
    let mut j = src_idx + 3;
    while j < argv.len() {
        let left = argv.len() - j - 1;
        let a = &argv[j];
        if dst.is_none() && eq_ignore_case(a, "withscores") {
            withscores = true;
        } else if eq_ignore_case(a, "limit") && left >= 2 {
            offset = int(&argv[j + 1])?;
            limit = int(&argv[j + 2])?;
            j += 2;
        } else if rev.is_none() && eq_ignore_case(a, "rev") {
            rev = Some(true);
        } else if by == By::Auto && eq_ignore_case(a, "bylex") {
            by = By::Lex;
        } else if by == By::Auto && eq_ignore_case(a, "byscore") {
            by = By::Score;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let rev = rev.unwrap_or(false);
    if by == By::Auto {
        by = By::Rank;
    }
    if limit != -1 && by == By::Rank {
        return Err(CmdError::err("syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"));
    }
    if withscores && by == By::Lex {
        return Err(CmdError::err("syntax error, WITHSCORES not supported in combination with BYLEX"));
    }
    // Reversed score and lex ranges are given as `max min`.
    let (lo, hi) = if rev && by != By::Rank { (&argv[src_idx + 2], &argv[src_idx + 1]) } else { (&argv[src_idx + 1], &argv[src_idx + 2]) };
    let range = match by {
        By::Score => Range::Score(score_bound(lo)?, score_bound(hi)?),
        By::Lex => Range::Lex(lex_bound(lo)?, lex_bound(hi)?),
        By::Rank | By::Auto => Range::Rank(int(lo)?, int(hi)?),
    };

    let resp = exec.client.resp;
    let items = match read(exec, &argv[src_idx])? {
        None => Vec::new(),
        Some(z) => match &range {
            Range::Rank(start, stop) => rank_range(z, *start, *stop, rev),
            Range::Score(min, max) if rev => window(z.range_by_score(*min, *max).rev(), offset, limit),
            Range::Score(min, max) => window(z.range_by_score(*min, *max), offset, limit),
            Range::Lex(min, max) if rev => window(z.range_by_lex(min, max).rev(), offset, limit),
            Range::Lex(min, max) => window(z.range_by_lex(min, max), offset, limit),
        },
    };
    match dst {
        Some(dst) => Ok(Frame::Integer(store_items(exec, dst, items) as i64)),
        None => Ok(scored_reply(items, withscores, resp)),
    }
}

/// Replaces `dst` with a sorted set of `items` (deleting it when there are none). Returns
/// the stored cardinality.
fn store_items(exec: &mut Exec, dst: &[u8], items: Vec<(Bytes, f64)>) -> usize {
    // A whole-value write: `put` stamps every member with the write's version.
    let mut z = SortedSet::default();
    for (m, s) in items {
        z.insert(m, s, Version::ZERO);
    }
    store_set(exec, dst, z)
}

fn store_set(exec: &mut Exec, dst: &[u8], z: SortedSet) -> usize {
    let n = z.len();
    if n == 0 {
        exec.ctx.delete(dst);
    } else {
        exec.ctx.put(dst, Value::ZSet(Box::new(z)), false);
    }
    n
}

fn zrange(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zrange_generic(exec, argv, 1, None, By::Auto, None)
}

fn zrevrange(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zrange_generic(exec, argv, 1, None, By::Rank, Some(true))
}

fn zrangebyscore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zrange_generic(exec, argv, 1, None, By::Score, Some(false))
}

fn zrevrangebyscore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zrange_generic(exec, argv, 1, None, By::Score, Some(true))
}

fn zrangebylex(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zrange_generic(exec, argv, 1, None, By::Lex, Some(false))
}

fn zrevrangebylex(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zrange_generic(exec, argv, 1, None, By::Lex, Some(true))
}

fn zrangestore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zrange_generic(exec, argv, 2, Some(&argv[1]), By::Auto, None)
}

// ---------------------------------------------------------------------------------------
// ZREMRANGEBY*

/// Removes the members `select` picks from the set at `argv[1]`; replies with their count.
fn zremrange(exec: &mut Exec, argv: &[Bytes], select: impl FnOnce(&SortedSet) -> Vec<Bytes>) -> Reply {
    let removed = exec.ctx.edit(&argv[1], |z: &mut SortedSet, _| {
        let victims = select(z);
        for m in &victims {
            z.remove(m);
        }
        victims.len()
    })?;
    Ok(Frame::Integer(removed.unwrap_or(0) as i64))
}

fn zremrangebyrank(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (start, stop) = (int(&argv[2])?, int(&argv[3])?);
    zremrange(exec, argv, |z| rank_range(z, start, stop, false).into_iter().map(|(m, _)| m).collect())
}

fn zremrangebyscore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (min, max) = (score_bound(&argv[2])?, score_bound(&argv[3])?);
    zremrange(exec, argv, |z| z.range_by_score(min, max).map(|(m, _)| m.clone()).collect())
}

fn zremrangebylex(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (min, max) = (lex_bound(&argv[2])?, lex_bound(&argv[3])?);
    zremrange(exec, argv, |z| z.range_by_lex(&min, &max).map(|(m, _)| m.clone()).collect())
}

// ---------------------------------------------------------------------------------------
// ZUNION, ZINTER, ZDIFF (and STORE), ZINTERCARD

#[derive(Clone, Copy, PartialEq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

/// One input: its members and scores (a plain set's members score 1) and its weight.
struct Source {
    items: Vec<(Bytes, f64)>,
    weight: f64,
}

/// Redis's `zunionInterAggregate`, NaN conventions included.
fn aggregate(target: &mut f64, value: f64, how: Aggregate) {
    match how {
        Aggregate::Sum => {
            *target += value;
            if target.is_nan() {
                *target = 0.0;
            }
        }
        Aggregate::Min => {
            if value < *target {
                *target = value;
            }
        }
        Aggregate::Max => {
            if value > *target {
                *target = value;
            }
        }
    }
}

/// A weighted score, with Redis's `0 * inf = 0` convention.
fn weighted(score: f64, weight: f64) -> f64 {
    let s = score * weight;
    if s.is_nan() {
        0.0
    } else {
        s
    }
}

/// The members of a sorted set or set input (WRONGTYPE for anything else).
fn read_source(exec: &mut Exec, key: &[u8]) -> Result<Vec<(Bytes, f64)>, CmdError> {
    match exec.ctx.lookup_read(key).map(|e| &e.value) {
        None => Ok(Vec::new()),
        Some(Value::ZSet(z)) => Ok(owned(z.iter())),
        Some(Value::Set(s)) => Ok(s.keys().map(|m| (m.clone(), 1.0)).collect()),
        Some(_) => Err(CmdError::WrongType),
    }
}

fn lookup_map(items: &[(Bytes, f64)]) -> FieldMap<f64> {
    let mut map = FieldMap::with_capacity_and_hasher(items.len(), Default::default());
    for (m, s) in items {
        map.insert(m.clone(), *s);
    }
    map
}

/// Redis's `zunionInterDiffGenericCommand`: `numkeys key... [WEIGHTS w...] [AGGREGATE
/// SUM|MIN|MAX] [WITHSCORES]` from `argv[numkeys_idx]`, `[LIMIT n]` for ZINTERCARD.
fn setop_generic(exec: &mut Exec, argv: &[Bytes], dst: Option<&Bytes>, numkeys_idx: usize, op: SetOp, card_only: bool) -> Reply {
    let setnum = int(&argv[numkeys_idx])?;
    if setnum < 1 {
        let name = String::from_utf8_lossy(&argv[0]).to_ascii_lowercase();
        return Err(CmdError::err(format!("at least 1 input key is needed for '{name}' command")));
    }
    let first = numkeys_idx + 1;
    if setnum > (argv.len() - first) as i64 {
        return Err(CmdError::Syntax);
    }
    let setnum = setnum as usize;
    let mut sources = Vec::with_capacity(setnum);
    for key in &argv[first..first + setnum] {
        sources.push(Source { items: read_source(exec, key)?, weight: 1.0 });
    }

    let (mut how, mut withscores, mut limit) = (Aggregate::Sum, false, 0usize);
    let mut j = first + setnum;
    while j < argv.len() {
        let remaining = argv.len() - j;
        let a = &argv[j];
        if op != SetOp::Diff && !card_only && remaining > setnum && eq_ignore_case(a, "weights") {
            j += 1;
            for source in sources.iter_mut() {
                source.weight = parse_float(&argv[j]).ok_or_else(|| CmdError::err("weight value is not a float"))?;
                j += 1;
            }
        } else if op != SetOp::Diff && !card_only && remaining >= 2 && eq_ignore_case(a, "aggregate") {
            let b = &argv[j + 1];
            how = if eq_ignore_case(b, "sum") {
                Aggregate::Sum
            } else if eq_ignore_case(b, "min") {
                Aggregate::Min
            } else if eq_ignore_case(b, "max") {
                Aggregate::Max
            } else {
                return Err(CmdError::Syntax);
            };
            j += 2;
        } else if dst.is_none() && !card_only && eq_ignore_case(a, "withscores") {
            withscores = true;
            j += 1;
        } else if card_only && remaining >= 2 && eq_ignore_case(a, "limit") {
            limit = int_at_least(&argv[j + 1], 0, "LIMIT can't be negative")? as usize;
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }

    if op != SetOp::Diff {
        // Smallest first, as Redis: intersections probe the others with the smallest's members.
        sources.sort_by_key(|s| s.items.len());
    }
    // Stored results are whole-value writes: `put` stamps every member.
    let v = Version::ZERO;
    let mut result = SortedSet::default();
    match op {
        SetOp::Inter => {
            let others: Vec<(FieldMap<f64>, f64)> = sources[1..].iter().map(|s| (lookup_map(&s.items), s.weight)).collect();
            let mut cardinality = 0usize;
            'members: for (m, s) in &sources[0].items {
                let mut score = weighted(*s, sources[0].weight);
                for (map, weight) in &others {
                    match map.get(m) {
                        Some(&x) => aggregate(&mut score, x * weight, how),
                        None => continue 'members,
                    }
                }
                if card_only {
                    cardinality += 1;
                    if limit > 0 && cardinality >= limit {
                        break;
                    }
                } else {
                    result.insert(m.clone(), score, v);
                }
            }
            if card_only {
                return Ok(Frame::Integer(cardinality as i64));
            }
        }
        SetOp::Union => {
            let mut acc: FieldMap<f64> = FieldMap::default();
            for source in &sources {
                for (m, s) in &source.items {
                    let score = weighted(*s, source.weight);
                    match acc.get_mut(m) {
                        Some(existing) => aggregate(existing, score, how),
                        None => {
                            acc.insert(m.clone(), score);
                        }
                    }
                }
            }
            for (m, s) in acc {
                result.insert(m, s, v);
            }
        }
        SetOp::Diff => {
            let mut others: FieldMap<()> = FieldMap::default();
            for source in &sources[1..] {
                for (m, _) in &source.items {
                    others.insert(m.clone(), ());
                }
            }
            for (m, s) in &sources[0].items {
                if !others.contains_key(m) {
                    result.insert(m.clone(), *s, v);
                }
            }
        }
    }
    match dst {
        Some(dst) => Ok(Frame::Integer(store_set(exec, dst, result) as i64)),
        None => Ok(scored_reply(owned(result.iter()), withscores, exec.client.resp)),
    }
}

fn zunionstore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    setop_generic(exec, argv, Some(&argv[1]), 2, SetOp::Union, false)
}

fn zinterstore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    setop_generic(exec, argv, Some(&argv[1]), 2, SetOp::Inter, false)
}

fn zdiffstore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    setop_generic(exec, argv, Some(&argv[1]), 2, SetOp::Diff, false)
}

fn zunion(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    setop_generic(exec, argv, None, 1, SetOp::Union, false)
}

fn zinter(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    setop_generic(exec, argv, None, 1, SetOp::Inter, false)
}

fn zdiff(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    setop_generic(exec, argv, None, 1, SetOp::Diff, false)
}

fn zintercard(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    setop_generic(exec, argv, None, 1, SetOp::Inter, true)
}

// ---------------------------------------------------------------------------------------
// Pops

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
    Ok(popped.unwrap_or_default())
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

fn zpopmin(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zpop_command(exec, argv, false)
}

fn zpopmax(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zpop_command(exec, argv, true)
}

/// What `ZMPOP`/`BZMPOP` asked for.
pub(crate) struct ZmpopArgs {
    /// Indexes into `argv` of the keys, in order.
    pub keys: std::ops::Range<usize>,
    /// `MAX` (true) or `MIN`.
    pub max: bool,
    pub count: usize,
}

/// Parses `numkeys key... MIN|MAX [COUNT count]` with `numkeys` at `argv[numkeys_idx]`
/// (1 for ZMPOP, 2 for BZMPOP), with Redis's errors.
pub(crate) fn zmpop_args(argv: &[Bytes], numkeys_idx: usize) -> Result<ZmpopArgs, CmdError> {
    let numkeys = int_at_least(&argv[numkeys_idx], 1, "numkeys should be greater than 0")?;
    let first = numkeys_idx + 1;
    let where_idx = usize::try_from(numkeys).unwrap_or(usize::MAX).saturating_add(first);
    if where_idx >= argv.len() {
        return Err(CmdError::Syntax);
    }
    let max = if eq_ignore_case(&argv[where_idx], "min") {
        false
    } else if eq_ignore_case(&argv[where_idx], "max") {
        true
    } else {
        return Err(CmdError::Syntax);
    };
    let mut count = None;
    let mut j = where_idx + 1;
    while j < argv.len() {
        if count.is_none() && eq_ignore_case(&argv[j], "count") && j + 1 < argv.len() {
            count = Some(int_at_least(&argv[j + 1], 1, "count should be greater than 0")? as usize);
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    Ok(ZmpopArgs { keys: first..where_idx, max, count: count.unwrap_or(1) })
}

/// `[key, [[member, score], ...]]`, the ZMPOP/BZMPOP reply in both protocols.
pub(crate) fn zmpop_reply(key: &[u8], popped: Vec<(Bytes, f64)>) -> Frame {
    Frame::Array(vec![Frame::bulk(key), Frame::Array(scored_pairs(popped, true))])
}

fn zmpop(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let args = zmpop_args(argv, 1)?;
    for i in args.keys {
        let popped = zpop(exec, &argv[i], args.max, args.count)?;
        if !popped.is_empty() {
            return Ok(zmpop_reply(&argv[i], popped));
        }
    }
    Ok(Frame::NullArray)
}

// ---------------------------------------------------------------------------------------
// ZRANDMEMBER, ZSCAN

/// Replies longer than this are refused rather than built (a negative ZRANDMEMBER count
/// repeats members, so its reply is not bounded by the set's size).
const MAX_RANDOM_REPLY: u64 = 1 << 24;

fn zrandmember(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    if argv.len() < 3 {
        let Some(z) = read(exec, &argv[1])?.filter(|z| !z.is_empty()) else {
            return Ok(Frame::Null);
        };
        let pick = rand::rng().random_range(0..z.len());
        return Ok(z.iter().nth(pick).map_or(Frame::Null, |(m, _)| Frame::Bulk(m.clone())));
    }
    let l = match parse_i64(&argv[2]) {
        Some(i64::MIN) => return Err(CmdError::err(format!("value is out of range, value must between {} and {}", -i64::MAX, i64::MAX))),
        Some(n) => n,
        None => return Err(CmdError::NotInteger),
    };
    if argv.len() > 4 || (argv.len() == 4 && !eq_ignore_case(&argv[3], "withscores")) {
        return Err(CmdError::Syntax);
    }
    let withscores = argv.len() == 4;
    if withscores && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&l) {
        return Err(CmdError::err("value is out of range"));
    }
    let resp = exec.client.resp;
    let Some(z) = read(exec, &argv[1])? else {
        return Ok(Frame::Array(Vec::new()));
    };
    let size = z.len();
    if l == 0 || size == 0 {
        return Ok(Frame::Array(Vec::new()));
    }
    let mut rng = rand::rng();
    let items: Vec<(Bytes, f64)> = if l < 0 {
        // Repetitions allowed, in random order.
        let count = l.unsigned_abs();
        if count > MAX_RANDOM_REPLY {
            return Err(CmdError::err("value is out of range"));
        }
        let all = owned(z.iter());
        (0..count).map(|_| all[rng.random_range(0..size)].clone()).collect()
    } else if l as u64 >= size as u64 {
        owned(z.iter())
    } else {
        let mut picks = rand::seq::index::sample(&mut rng, size, l as usize).into_vec();
        picks.sort_unstable();
        let mut chosen = Vec::with_capacity(picks.len());
        let mut next = picks.iter().peekable();
        for (i, (m, s)) in z.iter().enumerate() {
            match next.peek() {
                Some(&&p) if p == i => {
                    chosen.push((m.clone(), s));
                    next.next();
                }
                Some(_) => {}
                None => break,
            }
        }
        // Redis returns a unique sample in no particular order.
        for i in (1..chosen.len()).rev() {
            chosen.swap(i, rng.random_range(0..=i));
        }
        chosen
    };
    Ok(scored_reply(items, withscores, resp))
}

/// ZSCAN returns the whole set in one reply with cursor 0 (as Redis does for small sets).
fn zscan(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    cursor(&argv[2])?;
    let opts = scan_options(&argv[3..], false);
    let empty = || Frame::Array(vec![Frame::bulk("0"), Frame::Array(Vec::new())]);
    let Some(z) = read(exec, &argv[1])? else {
        return Ok(empty());
    };
    let opts = opts?;
    let mut out = Vec::new();
    for (m, s) in z.iter() {
        if opts.pattern.as_ref().is_some_and(|p| !glob_match(p, m, false)) {
            continue;
        }
        out.push(Frame::Bulk(m.clone()));
        out.push(Frame::bulk_f64(s));
    }
    Ok(Frame::Array(vec![Frame::bulk("0"), Frame::Array(out)]))
}
