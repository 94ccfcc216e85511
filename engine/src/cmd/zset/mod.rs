//! Sorted sets: `ZADD` and its options, ranges by rank, score and lex (`ZRANGE` and its
//! legacy forms), the set algebra (`ZUNION`, `ZINTER`, `ZDIFF`, their `STORE` forms and
//! `ZINTERCARD`), pops, `ZRANDMEMBER` and `ZSCAN`, with Redis 7.0's replies and errors.
//!
//! Members carry the version of the write that last set their score (per-member LWW, see
//! DESIGN.md, Merge semantics). The blocking pops (`BZPOPMIN`, `BZMPOP`, ...) live in
//! `blocking.rs` and reuse `zpop` and `zmpop_reply`; the `*MPOP` arguments are parsed by
//! `args::mpop_args`.
//!
//! One file per concern: this one holds the command table and the reply and storage helpers
//! the others share; `write` (ZADD, ZINCRBY, ZREM, ZREMRANGEBY*), `range` (point reads and
//! ZRANGE in all its forms), `algebra` (ZUNION, ZINTER, ZDIFF, ZINTERCARD), `pop` (ZPOPMIN,
//! ZPOPMAX, ZMPOP) and `members` (ZRANDMEMBER, ZSCAN).

mod algebra;
mod members;
mod pop;
mod range;
mod write;

use bytes::Bytes;

use super::args::{numkeys_at_1, numkeys_positions};
use super::flags::*;
use super::{CommandSpec, Exec, Keys};
use crate::db::fieldmap::Name;
use crate::db::zset::SortedSet;
use crate::db::Value;
use crate::error::CmdError;
use crate::frame::Frame;
use crate::hlc::Version;
use crate::notify::class;
use algebra::*;
use members::*;
pub(crate) use pop::{min_max, zmpop_reply, zpop};
use pop::{zmpop, zpopmax, zpopmin};
use range::*;
use write::*;

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
// Shared helpers.

/// `ZUNIONSTORE dst numkeys key...`: the destination plus the sources.
fn store_keys(argv: &[Bytes]) -> Vec<usize> {
    let mut keys: Vec<usize> = (1..argv.len().min(2)).collect();
    keys.extend(numkeys_positions(argv, 2));
    keys
}

/// `member score member score ...` (flat, RESP2 style) or `[[member, score], ...]`.
fn scored_pairs(items: Vec<(Bytes, f64)>, nested: bool) -> Vec<Frame> {
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

fn owned<'i>(items: impl Iterator<Item = (&'i Name, f64)>) -> Vec<(Bytes, f64)> {
    items.map(|(m, s)| (m.to_bytes(), s)).collect()
}

/// Applies `LIMIT offset count` as Redis does: a negative offset yields nothing, a negative
/// count means no limit.
fn window<'i>(items: impl Iterator<Item = (&'i Name, f64)>, offset: i64, count: i64) -> Vec<(Bytes, f64)> {
    if offset < 0 {
        return Vec::new();
    }
    let take = if count < 0 { usize::MAX } else { count as usize };
    owned(items.skip(offset as usize).take(take))
}

/// Replaces `dst` with a sorted set of `items` (deleting it when there are none). Returns
/// the stored cardinality.
fn store_items(exec: &mut Exec, dst: &[u8], items: Vec<(Bytes, f64)>, event: &'static str) -> usize {
    // A whole-value write: `put` stamps every member with the write's version.
    let mut z = SortedSet::default();
    for (m, s) in items {
        z.insert(m, s, Version::ZERO);
    }
    store_set(exec, dst, z, event)
}

/// `event`: the keyspace event of the command that stored (`zunionstore`, ...).
fn store_set(exec: &mut Exec, dst: &[u8], z: SortedSet, event: &'static str) -> usize {
    let n = z.len();
    if n == 0 {
        if exec.ctx.delete(dst) {
            exec.ctx.notify(class::GENERIC, "del", dst);
        }
    } else {
        exec.ctx.put(dst, Value::ZSet(Box::new(z)), false);
        exec.ctx.notify(class::ZSET, event, dst);
    }
    n
}
