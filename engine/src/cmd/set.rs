//! Sets: membership, random picks and pops, `SMOVE`, the algebra (`SINTER`, `SUNION`,
//! `SDIFF`, their `STORE` forms, `SINTERCARD`) and `SSCAN`.
//!
//! Each member maps to the version that added it, so replication can merge sets member by
//! member (DESIGN.md, Merge semantics).

use bytes::Bytes;

use super::args::{count, cursor, eq_ignore_case, int, scan_options};
use super::flags::*;
use super::{CommandSpec, Exec, Keys};
use crate::db::entry::{Collection, FieldMap};
use crate::db::fieldmap::Name;
use crate::db::{Kind, Value};
use crate::error::{CmdError, Reply};
use crate::frame::Frame;
use crate::glob::glob_match;
use crate::hlc::Version;
use crate::notify::class;
use crate::parse::parse_i64;

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: $keys, run: $run, group: "set", summary: $summary }
    };
}

const KEY: Keys = Keys::Range(1, 1, 1);
const ALL: Keys = Keys::Range(1, -1, 1);

pub const COMMANDS: &[CommandSpec] = &[
    spec!("sadd", -3, WRITE | DENYOOM | FAST, KEY, sadd, "Adds one or more members to a set. Creates the key if it doesn't exist."),
    spec!("srem", -3, WRITE | FAST, KEY, srem, "Removes one or more members from a set. Deletes the set if the last member was removed."),
    spec!("sismember", 3, READONLY | FAST, KEY, sismember, "Determines whether a member belongs to a set."),
    spec!("smismember", -3, READONLY | FAST, KEY, smismember, "Determines whether multiple members belong to a set."),
    spec!("smembers", 2, READONLY, KEY, smembers, "Returns all members of a set."),
    spec!("scard", 2, READONLY | FAST, KEY, scard, "Returns the number of members in a set."),
    spec!(
        "spop",
        -2,
        WRITE | FAST,
        KEY,
        spop,
        "Returns one or more random members from a set after removing them. Deletes the set if the last member was popped."
    ),
    spec!("srandmember", -2, READONLY, KEY, srandmember, "Get one or multiple random members from a set"),
    spec!("smove", 4, WRITE | FAST, Keys::Range(1, 2, 1), smove, "Moves a member from one set to another."),
    spec!("sinter", -2, READONLY, ALL, sinter, "Returns the intersect of multiple sets."),
    spec!("sintercard", -3, READONLY, Keys::Custom(intercard_keys), sintercard, "Returns the number of members of the intersect of multiple sets."),
    spec!("sinterstore", -3, WRITE | DENYOOM, ALL, sinterstore, "Stores the intersect of multiple sets in a key."),
    spec!("sunion", -2, READONLY, ALL, sunion, "Returns the union of multiple sets."),
    spec!("sunionstore", -3, WRITE | DENYOOM, ALL, sunionstore, "Stores the union of multiple sets in a key."),
    spec!("sdiff", -2, READONLY, ALL, sdiff, "Returns the difference of multiple sets."),
    spec!("sdiffstore", -3, WRITE | DENYOOM, ALL, sdiffstore, "Stores the difference of multiple sets in a key."),
    spec!("sscan", -3, READONLY, KEY, sscan, "Iterates over members of a set."),
];

/// The result of set algebra, before it is replied or stored.
type Members = std::collections::HashSet<Name, foldhash::fast::RandomState>;

/// The set at `key` for a read command. Unlike `Ctx::set` it counts a keyspace hit or miss,
/// as Redis's `lookupKeyRead` does.
fn read<'e>(exec: &'e mut Exec<'_, '_>, key: &[u8]) -> Result<Option<&'e FieldMap<Version>>, CmdError> {
    match exec.ctx.lookup_read(key).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Set(s)) => Ok(Some(s)),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// Stored members as bulk replies, each a copy (`args::own` says why).
fn bulks<'a, N: AsRef<[u8]> + 'a>(members: impl IntoIterator<Item = &'a N>) -> Vec<Frame> {
    members.into_iter().map(Frame::bulk).collect()
}

/// Members this command owns (its copies, or popped ones) as bulk replies.
fn owned_bulks(members: impl IntoIterator<Item = impl Into<Bytes>>) -> Vec<Frame> {
    members.into_iter().map(|m| Frame::Bulk(m.into())).collect()
}

/// The count of `SRANDMEMBER`/`HRANDFIELD`: any long except LONG_MIN, whose negation
/// (the "may repeat" form) would overflow. Redis's message names the range.
pub(super) fn random_count(arg: &[u8]) -> Result<i64, CmdError> {
    match int(arg)? {
        i64::MIN => Err(CmdError::err(format!("value is out of range, value must between {} and {}", -i64::MAX, i64::MAX))),
        n => Ok(n),
    }
}

fn sadd(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    // In a mesh, re-adding a member is a write too (its add version moves on), so it survives a
    // concurrent SREM or DEL elsewhere that is older, as an LWW element set says. Standalone,
    // an existing key that gained no member is untouched (Redis neither signals WATCH nor
    // counts a change then).
    let replicating = exec.ctx.store.replicating();
    let added = exec.ctx.edit_or_create(&argv[1], |set: &mut Collection<Version>, v| {
        let mut added = 0;
        for m in &argv[2..] {
            added += if replicating { set.insert_copied(m, v).is_none() } else { set.insert_if_absent(m, v) } as i64;
        }
        added
    })?;
    if added > 0 {
        exec.ctx.notify(class::SET, "sadd", &argv[1]);
    }
    Ok(Frame::Integer(added))
}

fn srem(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let removed = exec.ctx.remove_elements::<Collection<Version>>(&argv[1], &argv[2..])?;
    if removed > 0 {
        exec.ctx.notify(class::SET, "srem", &argv[1]);
    }
    Ok(Frame::Integer(removed as i64))
}

fn sismember(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let found = read(exec, &argv[1])?.is_some_and(|s| s.contains_key(&argv[2]));
    Ok(Frame::Integer(found as i64))
}

fn smismember(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    // A missing key is an empty set: one 0 per member.
    let set = read(exec, &argv[1])?;
    let found = argv[2..].iter().map(|m| Frame::Integer(set.is_some_and(|s| s.contains_key(m)) as i64));
    Ok(Frame::Array(found.collect()))
}

fn smembers(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let members = read(exec, &argv[1])?.map(|s| bulks(s.keys()));
    Ok(Frame::Set(members.unwrap_or_default()))
}

fn scard(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    Ok(Frame::Integer(read(exec, &argv[1])?.map_or(0, |s| s.len()) as i64))
}

/// `SPOP key [count]`.
fn spop(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    match argv.len() {
        2 => spop_one(exec, &argv[1]),
        3 => {
            let n = count(&argv[2])?;
            spop_many(exec, &argv[1], n)
        }
        _ => Err(CmdError::Syntax),
    }
}

fn spop_one(exec: &mut Exec, key: &[u8]) -> Reply {
    let member = exec.ctx.edit(key, |set: &mut Collection<Version>, _| {
        let member = set.random(&mut rand::rng()).map(|(m, _)| m.clone());
        if let Some(m) = &member {
            set.remove(m);
        }
        member
    })?;
    let member = member.flatten();
    if member.is_some() {
        exec.ctx.notify(class::SET, "spop", key);
    }
    Ok(member.map_or(Frame::Null, |m| Frame::Bulk(m.into())))
}

fn spop_many(exec: &mut Exec, key: &[u8], n: usize) -> Reply {
    if n == 0 {
        // Still type-checked, as Redis does.
        exec.ctx.set(key)?;
        return Ok(Frame::Set(Vec::new()));
    }
    let popped = exec.ctx.edit(key, |set: &mut Collection<Version>, _| {
        if n >= set.len() {
            set.drain().into_iter().map(|(m, _)| m).collect()
        } else {
            let count = i64::try_from(n).unwrap_or(i64::MAX);
            let picks: Vec<Name> = set.sample(count, &mut rand::rng()).into_iter().map(|(m, _)| m.clone()).collect();
            for m in &picks {
                set.remove(m);
            }
            picks
        }
    })?;
    let popped = popped.unwrap_or_default();
    if !popped.is_empty() {
        exec.ctx.notify(class::SET, "spop", key);
    }
    Ok(Frame::Set(owned_bulks(popped)))
}

/// `SRANDMEMBER key [count]`.
fn srandmember(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    match argv.len() {
        2 => {
            let member = read(exec, &argv[1])?.and_then(|s| s.random(&mut rand::rng())).map(|(m, _)| m);
            Ok(member.map_or(Frame::Null, Frame::bulk))
        }
        3 => {
            let n = random_count(&argv[2])?;
            let Some(set) = read(exec, &argv[1])? else {
                return Ok(Frame::Array(Vec::new()));
            };
            let picks = set.sample(n, &mut rand::rng());
            Ok(Frame::Array(bulks(picks.into_iter().map(|(m, _)| m))))
        }
        _ => Err(CmdError::Syntax),
    }
}

/// `SMOVE src dst member`, with Redis's order of checks: a missing source is 0 whatever
/// `dst` holds; then both types; moving within one key only reports membership.
fn smove(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (src, dst, member) = (&argv[1], &argv[2], &argv[3]);
    let Some(src_kind) = exec.ctx.kind(src) else {
        return Ok(Frame::Integer(0));
    };
    if src_kind != Kind::Set || exec.ctx.kind(dst).is_some_and(|k| k != Kind::Set) {
        return Err(CmdError::WrongType);
    }
    if src == dst {
        let found = exec.ctx.set(src)?.is_some_and(|s| s.contains_key(member));
        return Ok(Frame::Integer(found as i64));
    }
    // A conditional move: a member this node does not hold in `src` moves nothing.
    let removed = exec.ctx.edit(src, |set: &mut Collection<Version>, _| set.remove(member).is_some())?;
    if removed != Some(true) {
        return Ok(Frame::Integer(0));
    }
    exec.ctx.notify(class::SET, "srem", src);
    let added = exec.ctx.edit_or_create(dst, |set: &mut Collection<Version>, v| {
        let added = !set.contains_key(member);
        if added {
            set.insert_copied(member, v);
        }
        added
    })?;
    if added {
        exec.ctx.notify(class::SET, "sadd", dst);
    }
    Ok(Frame::Integer(1))
}

/// Looks every source key up once, as Redis does before any algebra: WRONGTYPE if any of
/// them holds another type (even after a missing one), else each set's size (`None` when
/// missing).
fn lookup_all(exec: &mut Exec, keys: &[Bytes]) -> Result<Vec<Option<usize>>, CmdError> {
    keys.iter().map(|k| Ok(read(exec, k)?.map(|s| s.len()))).collect()
}

/// The members of a set already type-checked by `lookup_all` (empty when missing).
fn members(exec: &mut Exec, key: &[u8]) -> Result<Members, CmdError> {
    Ok(exec.ctx.set(key)?.map(|s| s.keys().cloned().collect()).unwrap_or_default())
}

/// The intersection: start from the smallest set and keep what every other set holds.
fn inter(exec: &mut Exec, keys: &[Bytes]) -> Result<Members, CmdError> {
    let sizes = lookup_all(exec, keys)?;
    if sizes.contains(&None) {
        return Ok(Members::default());
    }
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| sizes[i]);
    let mut out = members(exec, &keys[order[0]])?;
    for &i in &order[1..] {
        if out.is_empty() {
            break;
        }
        if let Some(set) = exec.ctx.set(&keys[i])? {
            out.retain(|m| set.contains_key(m));
        }
    }
    Ok(out)
}

fn union(exec: &mut Exec, keys: &[Bytes]) -> Result<Members, CmdError> {
    lookup_all(exec, keys)?;
    let mut out = Members::default();
    for k in keys {
        if let Some(set) = exec.ctx.set(k)? {
            for m in set.keys() {
                if !out.contains(m) {
                    out.insert(m.clone());
                }
            }
        }
    }
    Ok(out)
}

/// The first set less all the others, walking whichever side of each step is smaller.
fn diff(exec: &mut Exec, keys: &[Bytes]) -> Result<Members, CmdError> {
    lookup_all(exec, keys)?;
    let mut out = members(exec, &keys[0])?;
    for k in &keys[1..] {
        if out.is_empty() {
            break;
        }
        let Some(set) = exec.ctx.set(k)? else {
            continue;
        };
        if set.len() < out.len() {
            for m in set.keys() {
                out.remove(m);
            }
        } else {
            out.retain(|m| !set.contains_key(m));
        }
    }
    Ok(out)
}

/// Replaces `dst` with `members` (deleting it when empty) and replies with the size.
fn store(exec: &mut Exec, dst: &[u8], members: Members, event: &'static str) -> Reply {
    let len = members.len();
    if len == 0 {
        if exec.ctx.delete(dst) {
            exec.ctx.notify(class::GENERIC, "del", dst);
        }
        return Ok(Frame::Integer(0));
    }
    // A whole-value write: `put` stamps every member with the write's version.
    let set: Collection<Version> = members.into_iter().map(|m| (m, Version::ZERO)).collect();
    exec.ctx.put(dst, Value::Set(Box::new(set)), false);
    exec.ctx.notify(class::SET, event, dst);
    Ok(Frame::Integer(len as i64))
}

fn sinter(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    Ok(Frame::Set(owned_bulks(inter(exec, &argv[1..])?)))
}

fn sunion(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    Ok(Frame::Set(owned_bulks(union(exec, &argv[1..])?)))
}

fn sdiff(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    Ok(Frame::Set(owned_bulks(diff(exec, &argv[1..])?)))
}

fn sinterstore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let members = inter(exec, &argv[2..])?;
    store(exec, &argv[1], members, "sinterstore")
}

fn sunionstore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let members = union(exec, &argv[2..])?;
    store(exec, &argv[1], members, "sunionstore")
}

fn sdiffstore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let members = diff(exec, &argv[2..])?;
    store(exec, &argv[1], members, "sdiffstore")
}

/// `SINTERCARD numkeys key... [LIMIT n]`: the keys are the `numkeys` after it (none when
/// numkeys is bad; the command then fails before touching any key).
fn intercard_keys(argv: &[Bytes]) -> Vec<usize> {
    let n = argv.get(1).and_then(|a| parse_i64(a)).unwrap_or(0).max(0) as usize;
    (2..argv.len().min(n.saturating_add(2))).collect()
}

fn sintercard(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let numkeys = match parse_i64(&argv[1]) {
        Some(n) if n >= 1 => n as usize,
        _ => return Err(CmdError::err("numkeys should be greater than 0")),
    };
    if numkeys > argv.len() - 2 {
        return Err(CmdError::err("Number of keys can't be greater than number of args"));
    }
    let mut limit = 0;
    let mut i = 2 + numkeys;
    while i < argv.len() {
        if !(eq_ignore_case(&argv[i], "limit") && i + 1 < argv.len()) {
            return Err(CmdError::Syntax);
        }
        limit = match parse_i64(&argv[i + 1]) {
            Some(n) if n >= 0 => n as usize,
            _ => return Err(CmdError::err("LIMIT can't be negative")),
        };
        i += 2;
    }
    let card = inter(exec, &argv[2..2 + numkeys])?.len();
    // LIMIT 0 means no limit.
    Ok(Frame::Integer(if limit == 0 { card } else { card.min(limit) } as i64))
}

/// `SSCAN key cursor [MATCH p] [COUNT n]`. Returns the whole set in one reply with cursor 0:
/// SCAN's contract allows it (COUNT is only a hint), and a set lives in one shard, so there
/// is no other work to interleave with.
fn sscan(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    cursor(&argv[2])?;
    // Redis looks the key up before parsing the options: a missing key never errors.
    let Some(set) = read(exec, &argv[1])? else {
        return Ok(Frame::Array(vec![Frame::bulk("0"), Frame::Array(Vec::new())]));
    };
    let opts = scan_options(&argv[3..], false)?;
    let matching = set.keys().filter(|m| opts.pattern.as_ref().is_none_or(|p| glob_match(p, m, false)));
    Ok(Frame::Array(vec![Frame::bulk("0"), Frame::Array(bulks(matching))]))
}
