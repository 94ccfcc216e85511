//! Generic key commands: existence, deletion, renaming, copying, expiry, and iteration.
//!
//! `SCAN`'s cursor is a shard index: each step returns whole shards until `COUNT` keys are
//! collected (COUNT is a hint, as in Redis). A shard is read under its lock in one go, so every
//! key that exists for the whole iteration is returned, whatever is written meanwhile.

use bytes::Bytes;
use rand::Rng;

use super::args::{cursor, eq_ignore_case, int, scan_options};
use super::flags::*;
use super::{CommandSpec, Exec, Keys};
use crate::db::{Kind, SHARDS_PER_DB};
use crate::error::{CmdError, Reply};
use crate::frame::{Frame, OK};
use crate::glob::glob_match;
use crate::notify::class;

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: $keys, run: $run, group: "generic", summary: $summary }
    };
}

pub const COMMANDS: &[CommandSpec] = &[
    spec!("del", -2, WRITE, Keys::Range(1, -1, 1), del, "Deletes one or more keys."),
    spec!("unlink", -2, WRITE | FAST, Keys::Range(1, -1, 1), del, "Asynchronously deletes one or more keys."),
    spec!("exists", -2, READONLY | FAST, Keys::Range(1, -1, 1), exists, "Determines whether one or more keys exist."),
    spec!(
        "touch",
        -2,
        READONLY | FAST,
        Keys::Range(1, -1, 1),
        touch,
        "Returns the number of existing keys out of those specified after updating the time they were last accessed."
    ),
    spec!("type", 2, READONLY | FAST, Keys::Range(1, 1, 1), type_of, "Determines the type of value stored at a key."),
    spec!("rename", 3, WRITE, Keys::Range(1, 2, 1), rename, "Renames a key and overwrites the destination."),
    spec!("renamenx", 3, WRITE | FAST, Keys::Range(1, 2, 1), renamenx, "Renames a key only when the target key name doesn't exist."),
    spec!("copy", -3, WRITE | DENYOOM | CROSS_DB, Keys::CrossDb(copy_keys), copy, "Copies the value of a key to a new key."),
    spec!("move", 3, WRITE | FAST | CROSS_DB, Keys::CrossDb(move_keys), move_key, "Moves a key to another database."),
    spec!("keys", 2, READONLY, Keys::Whole, keys, "Returns all key names that match a pattern."),
    spec!("scan", -2, READONLY, Keys::Whole, scan, "Iterates over the key names in the database."),
    spec!("randomkey", 1, READONLY, Keys::Whole, randomkey, "Returns a random key name from the database."),
    spec!("expire", -3, WRITE | FAST, Keys::Range(1, 1, 1), expire, "Sets the expiration time of a key in seconds."),
    spec!("pexpire", -3, WRITE | FAST, Keys::Range(1, 1, 1), pexpire, "Sets the expiration time of a key in milliseconds."),
    spec!("expireat", -3, WRITE | FAST, Keys::Range(1, 1, 1), expireat, "Sets the expiration time of a key to a Unix timestamp."),
    spec!("pexpireat", -3, WRITE | FAST, Keys::Range(1, 1, 1), pexpireat, "Sets the expiration time of a key to a Unix milliseconds timestamp."),
    spec!("ttl", 2, READONLY | FAST, Keys::Range(1, 1, 1), ttl, "Returns the expiration time in seconds of a key."),
    spec!("pttl", 2, READONLY | FAST, Keys::Range(1, 1, 1), pttl, "Returns the expiration time in milliseconds of a key."),
    spec!("expiretime", 2, READONLY | FAST, Keys::Range(1, 1, 1), expiretime, "Returns the expiration time of a key as a Unix timestamp."),
    spec!("pexpiretime", 2, READONLY | FAST, Keys::Range(1, 1, 1), pexpiretime, "Returns the expiration time of a key as a Unix milliseconds timestamp."),
    spec!("persist", 2, WRITE | FAST, Keys::Range(1, 1, 1), persist, "Removes the expiration time of a key."),
];

fn del(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let mut deleted = 0;
    for key in &argv[1..] {
        if exec.ctx.delete(key) {
            exec.ctx.notify(class::GENERIC, "del", key);
            deleted += 1;
        }
    }
    Ok(Frame::Integer(deleted as i64))
}

fn exists(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    // A read lookup that leaves the access time alone, as Redis's (a hit or miss, `keymiss`).
    let found = argv[1..].iter().filter(|k| exec.ctx.peek_read(k).is_some()).count();
    Ok(Frame::Integer(found as i64))
}

/// Like EXISTS, but using the keys: their access time is updated (EXISTS leaves it).
fn touch(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let found = argv[1..].iter().filter(|k| exec.ctx.lookup_read(k).is_some()).count();
    Ok(Frame::Integer(found as i64))
}

fn type_of(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    Ok(Frame::Simple(exec.ctx.peek_read(&argv[1]).map_or("none", |e| e.value.kind().name())))
}

/// Moves `src`'s value and deadline to `dst` in database `dst_db`; `keep_src` copies.
fn transfer(exec: &mut Exec, src: &[u8], dst_db: usize, dst: &[u8], keep_src: bool) -> bool {
    let db = exec.ctx.db;
    let Some(entry) = exec.ctx.get_ref_in(db, src) else {
        return false;
    };
    let (value, deadline) = (entry.value.clone(), entry.deadline());
    if !keep_src {
        exec.ctx.delete(src);
    }
    exec.ctx.put_in(dst_db, dst, value, false);
    if let Some(at) = deadline {
        exec.ctx.set_deadline_in(dst_db, dst, at);
    }
    let _ = db;
    true
}

fn rename(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (src, dst) = (&argv[1], &argv[2]);
    if !exec.ctx.exists(src) {
        return Err(CmdError::NoSuchKey);
    }
    if src != dst {
        transfer(exec, src, exec.ctx.db, dst, false);
    }
    exec.ctx.notify(class::GENERIC, "rename_from", src);
    exec.ctx.notify(class::GENERIC, "rename_to", dst);
    Ok(OK)
}

fn renamenx(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (src, dst) = (&argv[1], &argv[2]);
    if !exec.ctx.exists(src) {
        return Err(CmdError::NoSuchKey);
    }
    if exec.ctx.exists(dst) {
        return Ok(Frame::Integer(0));
    }
    transfer(exec, src, exec.ctx.db, dst, false);
    exec.ctx.notify(class::GENERIC, "rename_from", src);
    exec.ctx.notify(class::GENERIC, "rename_to", dst);
    Ok(Frame::Integer(1))
}

/// `COPY src dst [DB n] [REPLACE]`: the destination database from the options, if valid.
fn copy_target(argv: &[Bytes], db: usize) -> (usize, bool) {
    let (mut target, mut replace) = (db, false);
    let mut i = 3;
    while i < argv.len() {
        if eq_ignore_case(&argv[i], "db") && i + 1 < argv.len() {
            target = int(&argv[i + 1]).ok().filter(|&n| n >= 0).map_or(usize::MAX, |n| n as usize);
            i += 1;
        } else if eq_ignore_case(&argv[i], "replace") {
            replace = true;
        }
        i += 1;
    }
    (target, replace)
}

fn copy_keys(argv: &[Bytes], db: usize) -> Vec<(usize, usize)> {
    let (target, _) = copy_target(argv, db);
    vec![(db, 1), (target, 2)]
}

fn copy(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let mut i = 3;
    while i < argv.len() {
        if eq_ignore_case(&argv[i], "db") && i + 1 < argv.len() {
            i += 2;
        } else if eq_ignore_case(&argv[i], "replace") {
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let db = exec.ctx.db;
    if let Some(i) = argv[3..].iter().position(|a| eq_ignore_case(a, "db")) {
        int(&argv[3 + i + 1])?;
    }
    let (target, replace) = copy_target(argv, db);
    if target == usize::MAX || target >= exec.server.store.databases() {
        return Err(CmdError::err("DB index is out of range"));
    }
    let (src, dst) = (&argv[1], &argv[2]);
    if target == db && src == dst {
        return Err(CmdError::err("source and destination objects are the same"));
    }
    if !exec.ctx.exists(src) {
        return Ok(Frame::Integer(0));
    }
    if exec.ctx.get_in(target, dst).is_some() {
        if !replace {
            return Ok(Frame::Integer(0));
        }
        exec.ctx.delete_in(target, dst);
    }
    let copied = transfer(exec, src, target, dst, true);
    if copied {
        exec.ctx.notify_in(target, class::GENERIC, "copy_to", dst);
    }
    Ok(Frame::Integer(copied as i64))
}

fn move_keys(argv: &[Bytes], db: usize) -> Vec<(usize, usize)> {
    let target = int(&argv[2]).ok().filter(|&n| n >= 0).map_or(db, |n| n as usize);
    vec![(db, 1), (target, 1)]
}

fn move_key(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let db = exec.ctx.db;
    let target = int(&argv[2])?;
    if target < 0 || target as usize >= exec.server.store.databases() {
        return Err(CmdError::err("DB index is out of range"));
    }
    let target = target as usize;
    if target == db {
        return Err(CmdError::err("source and destination objects are the same"));
    }
    let key = &argv[1];
    if !exec.ctx.exists(key) || exec.ctx.get_in(target, key).is_some() {
        return Ok(Frame::Integer(0));
    }
    let moved = transfer(exec, key, target, key, false);
    if moved {
        exec.ctx.notify_in(db, class::GENERIC, "move_from", key);
        exec.ctx.notify_in(target, class::GENERIC, "move_to", key);
    }
    Ok(Frame::Integer(moved as i64))
}

/// Live keys of one shard that match `pattern` (and type `kind`).
fn shard_keys(exec: &mut Exec, shard: usize, pattern: Option<&[u8]>, kind: Option<&[u8]>) -> Vec<Frame> {
    let now = exec.ctx.now_ms;
    let db = exec.ctx.db;
    let kind = kind.map(Kind::from_name);
    if !exec.server.store.in_use(db) {
        return Vec::new();
    }
    exec.ctx.with_shard(db, shard, |_, s| {
        s.iter()
            .filter(|(k, e)| !e.is_expired(now) && pattern.is_none_or(|p| glob_match(p, k, false)) && kind.is_none_or(|t| Some(e.value.kind()) == t))
            .map(|(k, _)| Frame::bulk(k))
            .collect()
    })
}

fn keys(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let pattern = (&argv[1][..] != b"*").then(|| argv[1].clone());
    let mut out = Vec::new();
    for shard in 0..SHARDS_PER_DB {
        out.extend(shard_keys(exec, shard, pattern.as_deref(), None));
    }
    Ok(Frame::Array(out))
}

fn scan(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let start = cursor(&argv[1])?;
    let opts = scan_options(&argv[2..], true)?;
    let mut shard = start as usize;
    let mut out = Vec::new();
    while shard < SHARDS_PER_DB && out.len() < opts.count {
        out.extend(shard_keys(exec, shard, opts.pattern.as_deref(), opts.kind.as_deref()));
        shard += 1;
    }
    let next = if shard >= SHARDS_PER_DB { 0 } else { shard };
    Ok(Frame::Array(vec![Frame::bulk(next.to_string()), Frame::Array(out)]))
}

/// How many keys `RANDOMKEY` draws from a shard before it walks it (each draw that finds an
/// expired key counts one).
const RANDOM_KEY_TRIES: usize = 16;

fn randomkey(exec: &mut Exec, _argv: &[Bytes]) -> Reply {
    let now = exec.ctx.now_ms;
    let db = exec.ctx.db;
    if !exec.server.store.in_use(db) {
        return Ok(Frame::Null);
    }
    let first = rand::rng().random_range(0..SHARDS_PER_DB);
    for step in 0..SHARDS_PER_DB {
        let shard = (first + step) % SHARDS_PER_DB;
        let found = exec.ctx.with_shard(db, shard, |_, s| {
            // Drawn, as Redis's RANDOMKEY does, in O(1): a few tries find a live key unless
            // most of the shard has expired or its table is far emptier than its size; then
            // a walk of its live keys (it took 1M keys to 45k answers a second, Redis 515k).
            let mut rng = rand::rng();
            for _ in 0..RANDOM_KEY_TRIES {
                match s.draw(&mut rng) {
                    Some((key, e)) if !e.is_expired(now) => return Some(Bytes::copy_from_slice(key)),
                    Some(_) => continue,
                    None => break,
                }
            }
            let live: Vec<&[u8]> = s.iter().filter(|(_, e)| !e.is_expired(now)).map(|(k, _)| k).collect();
            if live.is_empty() {
                None
            } else {
                Some(Bytes::copy_from_slice(live[rand::rng().random_range(0..live.len())]))
            }
        });
        if let Some(key) = found {
            return Ok(Frame::bulk(key));
        }
    }
    Ok(Frame::Null)
}

/// Shared by the four EXPIRE commands: `unit_ms` scales the argument, `absolute` says whether
/// it is a timestamp.
fn expire_generic(exec: &mut Exec, argv: &[Bytes], unit_ms: i64, absolute: bool) -> Reply {
    let name = String::from_utf8_lossy(&argv[0]).to_ascii_lowercase();
    let amount = int(&argv[2])?;
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in &argv[3..] {
        match opt.to_ascii_lowercase().as_slice() {
            b"nx" => nx = true,
            b"xx" => xx = true,
            b"gt" => gt = true,
            b"lt" => lt = true,
            _ => return Err(CmdError::err(format!("Unsupported option {}", String::from_utf8_lossy(opt)))),
        }
    }
    if nx && (xx || gt || lt) {
        return Err(CmdError::err("NX and XX, GT or LT options at the same time are not compatible"));
    }
    if gt && lt {
        return Err(CmdError::err("GT and LT options at the same time are not compatible"));
    }
    let invalid = || CmdError::err(format!("invalid expire time in '{name}' command"));
    let mut when = amount.checked_mul(unit_ms).ok_or_else(invalid)?;
    if !absolute {
        when = when.checked_add(exec.ctx.now_ms as i64).ok_or_else(invalid)?;
    }
    let key = &argv[1];
    if !exec.ctx.exists(key) {
        return Ok(Frame::Integer(0));
    }
    let current = exec.ctx.deadline(key);
    let allowed = match current {
        None => !(xx || gt),
        Some(cur) => !nx && (!gt || when > cur as i64) && (!lt || when < cur as i64),
    };
    if !allowed {
        return Ok(Frame::Integer(0));
    }
    if when <= exec.ctx.now_ms as i64 {
        exec.ctx.delete(key);
        exec.ctx.notify(class::GENERIC, "del", key);
    } else {
        exec.ctx.set_deadline(key, when as u64);
        exec.ctx.notify(class::GENERIC, "expire", key);
    }
    Ok(Frame::Integer(1))
}

fn expire(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    expire_generic(exec, argv, 1000, false)
}

fn pexpire(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    expire_generic(exec, argv, 1, false)
}

fn expireat(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    expire_generic(exec, argv, 1000, true)
}

fn pexpireat(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    expire_generic(exec, argv, 1, true)
}

/// -2 for a missing key, -1 for a persistent one, else `f(deadline, now)`.
fn time_query(exec: &mut Exec, key: &[u8], f: impl Fn(u64, u64) -> i64) -> Reply {
    let now = exec.ctx.now_ms;
    Ok(Frame::Integer(match exec.ctx.peek_read(key) {
        None => -2,
        Some(e) => e.deadline().map_or(-1, |d| f(d, now)),
    }))
}

fn ttl(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    time_query(exec, &argv[1], |d, now| ((d.saturating_sub(now) + 500) / 1000) as i64)
}

fn pttl(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    time_query(exec, &argv[1], |d, now| d.saturating_sub(now) as i64)
}

fn expiretime(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    time_query(exec, &argv[1], |d, _| (d / 1000) as i64)
}

fn pexpiretime(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    time_query(exec, &argv[1], |d, _| d as i64)
}

fn persist(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let had_ttl = exec.ctx.persist(&argv[1]);
    if had_ttl {
        exec.ctx.notify(class::GENERIC, "persist", &argv[1]);
    }
    Ok(Frame::Integer(had_ttl as i64))
}
