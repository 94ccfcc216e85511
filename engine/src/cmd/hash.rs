//! Hashes: `HSET` and friends, counters on fields, whole-hash reads, `HSCAN`, `HRANDFIELD`.
//!
//! Every field carries the version that last wrote it, so replication can merge hashes field
//! by field (DESIGN.md, Merge semantics): each write stamps one fresh version on the fields
//! it touches, through `Ctx::edit_or_create` and `Ctx::remove_elements` (`db::edit`).

use bytes::Bytes;

use super::args::{cursor, eq_ignore_case, float, int, own, parse_float, scan_options};
use super::flags::*;
use super::set::random_count;
use super::{wrong_arity, CommandSpec, Exec, Keys};
use crate::db::entry::{Collection, Field, FieldMap};
use crate::db::Value;
use crate::error::{CmdError, Reply};
use crate::frame::{format_double_human, Frame, OK};
use crate::glob::glob_match;
use crate::notify::class;
use crate::parse::parse_i64;

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: $keys, run: $run, group: "hash", summary: $summary }
    };
}

const KEY: Keys = Keys::Range(1, 1, 1);

pub const COMMANDS: &[CommandSpec] = &[
    spec!("hset", -4, WRITE | DENYOOM | FAST, KEY, hset, "Creates or modifies the value of a field in a hash."),
    spec!("hsetnx", 4, WRITE | DENYOOM | FAST, KEY, hsetnx, "Sets the value of a field in a hash only when the field doesn't exist."),
    spec!("hmset", -4, WRITE | DENYOOM | FAST, KEY, hmset, "Sets the values of multiple fields."),
    spec!("hget", 3, READONLY | FAST, KEY, hget, "Returns the value of a field in a hash."),
    spec!("hmget", -3, READONLY | FAST, KEY, hmget, "Returns the values of all fields in a hash."),
    spec!("hdel", -3, WRITE | FAST, KEY, hdel, "Deletes one or more fields and their values from a hash. Deletes the hash if no fields remain."),
    spec!("hlen", 2, READONLY | FAST, KEY, hlen, "Returns the number of fields in a hash."),
    spec!("hstrlen", 3, READONLY | FAST, KEY, hstrlen, "Returns the length of the value of a field."),
    spec!("hexists", 3, READONLY | FAST, KEY, hexists, "Determines whether a field exists in a hash."),
    spec!(
        "hincrby",
        4,
        WRITE | DENYOOM | FAST,
        KEY,
        hincrby,
        "Increments the integer value of a field in a hash by a number. Uses 0 as initial value if the field doesn't exist."
    ),
    spec!(
        "hincrbyfloat",
        4,
        WRITE | DENYOOM | FAST,
        KEY,
        hincrbyfloat,
        "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't exist."
    ),
    spec!("hkeys", 2, READONLY, KEY, hkeys, "Returns all fields in a hash."),
    spec!("hvals", 2, READONLY, KEY, hvals, "Returns all values in a hash."),
    spec!("hgetall", 2, READONLY, KEY, hgetall, "Returns all fields and values in a hash."),
    spec!("hscan", -3, READONLY, KEY, hscan, "Iterates over fields and values of a hash."),
    spec!("hrandfield", -2, READONLY, KEY, hrandfield, "Returns one or more random fields from a hash."),
];

/// The hash at `key` for a read command. Unlike `Ctx::hash` it counts a keyspace hit or
/// miss, as Redis's `lookupKeyRead` does.
fn read<'e>(exec: &'e mut Exec<'_, '_>, key: &[u8]) -> Result<Option<&'e FieldMap<Field>>, CmdError> {
    match exec.ctx.lookup_read(key).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Hash(h)) => Ok(Some(h)),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// Writes `HSET`/`HMSET`'s field/value pairs, returning how many fields are new.
fn set_pairs(exec: &mut Exec, argv: &[Bytes], name: &str) -> Result<i64, CmdError> {
    if argv.len() % 2 == 1 {
        return Err(wrong_arity(name));
    }
    exec.ctx.edit_or_create(&argv[1], |hash: &mut Collection<Field>, v| {
        let mut created = 0;
        for pair in argv[2..].chunks(2) {
            let field = Field::new(&pair[1], v);
            created += hash.insert_copied(&pair[0], field).is_none() as i64;
        }
        created
    })
}

fn hset(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let created = set_pairs(exec, argv, "hset")?;
    exec.ctx.notify(class::HASH, "hset", &argv[1]);
    Ok(Frame::Integer(created))
}

fn hmset(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    set_pairs(exec, argv, "hmset")?;
    exec.ctx.notify(class::HASH, "hset", &argv[1]);
    Ok(OK)
}

/// Sets one field (the counters' write path).
fn put_field(exec: &mut Exec, key: &[u8], field: &[u8], value: &[u8]) -> Result<(), CmdError> {
    exec.ctx.edit_or_create(key, |hash: &mut Collection<Field>, v| {
        hash.insert_copied(field, Field::new(value, v));
    })
}

fn hsetnx(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    // Checked without creating, so an existing field leaves the key untouched.
    if exec.ctx.hash(&argv[1])?.is_some_and(|h| h.contains_key(&argv[2])) {
        return Ok(Frame::Integer(0));
    }
    put_field(exec, &argv[1], &argv[2], &argv[3])?;
    exec.ctx.notify(class::HASH, "hset", &argv[1]);
    Ok(Frame::Integer(1))
}

fn hget(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let value = read(exec, &argv[1])?.and_then(|h| h.get(&argv[2]));
    Ok(value.map_or(Frame::Null, |f| Frame::bulk(&f.value)))
}

fn hmget(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    // A missing key is an empty hash: one null per field.
    let hash = read(exec, &argv[1])?;
    let values = argv[2..].iter().map(|f| hash.and_then(|h| h.get(f)).map_or(Frame::Null, |f| Frame::bulk(&f.value))).collect();
    Ok(Frame::Array(values))
}

fn hdel(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let deleted = exec.ctx.remove_elements::<Collection<Field>>(&argv[1], &argv[2..])?;
    if deleted > 0 {
        exec.ctx.notify(class::HASH, "hdel", &argv[1]);
    }
    Ok(Frame::Integer(deleted as i64))
}

fn hlen(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    Ok(Frame::Integer(read(exec, &argv[1])?.map_or(0, |h| h.len()) as i64))
}

fn hstrlen(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let len = read(exec, &argv[1])?.and_then(|h| h.get(&argv[2])).map_or(0, |f| f.value.len());
    Ok(Frame::Integer(len as i64))
}

fn hexists(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let found = read(exec, &argv[1])?.is_some_and(|h| h.contains_key(&argv[2]));
    Ok(Frame::Integer(found as i64))
}

/// The current value of a field for the counters, read without creating the key so that a
/// failed increment leaves nothing behind.
fn field_value(exec: &mut Exec, key: &[u8], field: &[u8]) -> Result<Option<Bytes>, CmdError> {
    Ok(exec.ctx.hash(key)?.and_then(|h| h.get(field)).map(|f| own(&f.value)))
}

fn hincrby(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let delta = int(&argv[3])?;
    let current = match field_value(exec, &argv[1], &argv[2])? {
        None => 0,
        Some(text) => parse_i64(&text).ok_or_else(|| CmdError::err("hash value is not an integer"))?,
    };
    let next = current.checked_add(delta).ok_or(CmdError::Overflow)?;
    put_field(exec, &argv[1], &argv[2], itoa::Buffer::new().format(next).as_bytes())?;
    exec.ctx.notify(class::HASH, "hincrby", &argv[1]);
    Ok(Frame::Integer(next))
}

fn hincrbyfloat(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let delta = float(&argv[3])?;
    if !delta.is_finite() {
        return Err(CmdError::err("value is NaN or Infinity"));
    }
    let current = match field_value(exec, &argv[1], &argv[2])? {
        None => 0.0,
        Some(text) => parse_float(&text).ok_or_else(|| CmdError::err("hash value is not a float"))?,
    };
    let next = current + delta;
    if !next.is_finite() {
        return Err(CmdError::err("increment would produce NaN or Infinity"));
    }
    let text = Bytes::from(format_double_human(next));
    put_field(exec, &argv[1], &argv[2], &text)?;
    exec.ctx.notify(class::HASH, "hincrbyfloat", &argv[1]);
    Ok(Frame::Bulk(text))
}

fn hkeys(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let keys = read(exec, &argv[1])?.map(|h| h.keys().map(Frame::bulk).collect());
    Ok(Frame::Array(keys.unwrap_or_default()))
}

fn hvals(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let values = read(exec, &argv[1])?.map(|h| h.values().map(|f| Frame::bulk(&f.value)).collect());
    Ok(Frame::Array(values.unwrap_or_default()))
}

fn hgetall(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let pairs = read(exec, &argv[1])?.map(|h| h.iter().map(|(k, f)| (Frame::bulk(k), Frame::bulk(&f.value))).collect());
    Ok(Frame::Map(pairs.unwrap_or_default()))
}

/// `HSCAN key cursor [MATCH p] [COUNT n]`. Returns the whole hash in one reply with cursor
/// 0: SCAN's contract allows it (COUNT is only a hint), and hashes live in one shard, so
/// there is no other work to interleave with.
fn hscan(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    cursor(&argv[2])?;
    let empty = || Frame::Array(vec![Frame::bulk("0"), Frame::Array(Vec::new())]);
    // Redis looks the key up before parsing the options: a missing key never errors.
    let Some(hash) = read(exec, &argv[1])? else {
        return Ok(empty());
    };
    let opts = scan_options(&argv[3..], false)?;
    let mut items = Vec::new();
    for (k, f) in hash.iter() {
        if opts.pattern.as_ref().is_none_or(|p| glob_match(p, k, false)) {
            items.push(Frame::bulk(k));
            items.push(Frame::bulk(&f.value));
        }
    }
    Ok(Frame::Array(vec![Frame::bulk("0"), Frame::Array(items)]))
}

/// `HRANDFIELD key [count [WITHVALUES]]`.
fn hrandfield(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    if argv.len() == 2 {
        let field = read(exec, &argv[1])?.and_then(|h| h.random(&mut rand::rng())).map(|(f, _)| f);
        return Ok(Frame::bulk_opt(field));
    }
    let count = random_count(&argv[2])?;
    let with_values = match argv.len() {
        3 => false,
        4 if eq_ignore_case(&argv[3], "withvalues") => true,
        _ => return Err(CmdError::Syntax),
    };
    // Redis's guard against `count * 2` overflowing when it sizes the flat reply.
    if with_values && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
        return Err(CmdError::err("value is out of range"));
    }
    let resp3 = exec.client.resp >= 3;
    let Some(hash) = read(exec, &argv[1])? else {
        return Ok(Frame::Array(Vec::new()));
    };
    let picks = hash.sample(count, &mut rand::rng());
    if !with_values {
        return Ok(Frame::Array(picks.into_iter().map(|(k, _)| Frame::bulk(k)).collect()));
    }
    // RESP3 gets [field, value] pairs (as Redis 7.0 does); RESP2 a flat array.
    let mut out = Vec::with_capacity(picks.len() * if resp3 { 1 } else { 2 });
    for (k, f) in picks {
        let (k, v) = (Frame::bulk(k), Frame::bulk(&f.value));
        if resp3 {
            out.push(Frame::Array(vec![k, v]));
        } else {
            out.extend([k, v]);
        }
    }
    Ok(Frame::Array(out))
}
