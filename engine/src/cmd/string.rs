//! Strings: `GET`, `SET` and its options, the counter family, ranges and `LCS`.

use bytes::Bytes;

use super::args::{eq_ignore_case, float, int};
use super::flags::*;
use super::{wrong_arity, CommandSpec, Exec, Keys};
use crate::db::ctx::Ttl;
use crate::db::Value;
use crate::error::{CmdError, Reply};
use crate::frame::{format_double_human, Frame, OK};
use crate::notify::class;

/// Strings longer than this are refused (Redis's default `proto-max-bulk-len`).
pub const MAX_STRING: usize = 512 * 1024 * 1024;

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: $keys, run: $run, group: "string", summary: $summary }
    };
}

pub const COMMANDS: &[CommandSpec] = &[
    spec!("get", 2, READONLY | FAST, Keys::Range(1, 1, 1), get, "Returns the string value of a key."),
    spec!("set", -3, WRITE | DENYOOM, Keys::Range(1, 1, 1), set, "Sets the string value of a key."),
    spec!("setnx", 3, WRITE | DENYOOM | FAST, Keys::Range(1, 1, 1), setnx, "Set the string value of a key only when the key doesn't exist."),
    spec!("setex", 4, WRITE | DENYOOM, Keys::Range(1, 1, 1), setex, "Sets the string value and expiration time of a key."),
    spec!("psetex", 4, WRITE | DENYOOM, Keys::Range(1, 1, 1), psetex, "Sets the string value and expiration time in milliseconds of a key."),
    spec!("getset", 3, WRITE | DENYOOM | FAST, Keys::Range(1, 1, 1), getset, "Returns the previous string value of a key after setting it to a new value."),
    spec!("getdel", 2, WRITE | FAST, Keys::Range(1, 1, 1), getdel, "Returns the string value of a key after deleting the key."),
    spec!("getex", -2, WRITE | FAST, Keys::Range(1, 1, 1), getex, "Returns the string value of a key after setting its expiration time."),
    spec!("mget", -2, READONLY | FAST, Keys::Range(1, -1, 1), mget, "Atomically returns the string values of one or more keys."),
    spec!("mset", -3, WRITE | DENYOOM, Keys::Range(1, -1, 2), mset, "Atomically creates or modifies the string values of one or more keys."),
    spec!(
        "msetnx",
        -3,
        WRITE | DENYOOM,
        Keys::Range(1, -1, 2),
        msetnx,
        "Atomically modifies the string values of one or more keys only when all keys don't exist."
    ),
    spec!("incr", 2, WRITE | DENYOOM | FAST, Keys::Range(1, 1, 1), incr, "Increments the integer value of a key by one."),
    spec!("decr", 2, WRITE | DENYOOM | FAST, Keys::Range(1, 1, 1), decr, "Decrements the integer value of a key by one."),
    spec!("incrby", 3, WRITE | DENYOOM | FAST, Keys::Range(1, 1, 1), incrby, "Increments the integer value of a key by a number."),
    spec!("decrby", 3, WRITE | DENYOOM | FAST, Keys::Range(1, 1, 1), decrby, "Decrements a number from the integer value of a key."),
    spec!("incrbyfloat", 3, WRITE | DENYOOM | FAST, Keys::Range(1, 1, 1), incrbyfloat, "Increment the floating point value of a key by a number."),
    spec!("append", 3, WRITE | DENYOOM, Keys::Range(1, 1, 1), append, "Appends a string to the value of a key."),
    spec!("strlen", 2, READONLY | FAST, Keys::Range(1, 1, 1), strlen, "Returns the length of a string value."),
    spec!("getrange", 4, READONLY, Keys::Range(1, 1, 1), getrange, "Returns a substring of the string stored at a key."),
    spec!("substr", 4, READONLY, Keys::Range(1, 1, 1), getrange, "Returns a substring from a string value."),
    spec!("setrange", 4, WRITE | DENYOOM, Keys::Range(1, 1, 1), setrange, "Overwrites a part of a string value with another by an offset."),
    spec!("lcs", -3, READONLY, Keys::Range(1, 2, 1), lcs, "Finds the longest common substring."),
];

fn get(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    Ok(Frame::bulk_opt(exec.ctx.string(&argv[1])?))
}

/// Converts an `EX/PX/EXAT/PXAT` argument into an absolute deadline, refusing values that
/// are not positive or would overflow, with Redis's message naming the command.
fn deadline(arg: &[u8], unit_ms: i64, absolute: bool, now_ms: u64, command: &str) -> Result<u64, CmdError> {
    let invalid = || CmdError::err(format!("invalid expire time in '{command}' command"));
    let n = int(arg)?;
    if n <= 0 {
        return Err(invalid());
    }
    let ms = n.checked_mul(unit_ms).ok_or_else(invalid)?;
    let at = if absolute { ms } else { ms.checked_add(now_ms as i64).ok_or_else(invalid)? };
    Ok(at as u64)
}

/// A `SET`-family write: the value and its TTL in one write (`Ctx::put_with_ttl`).
fn store(exec: &mut Exec, key: &[u8], value: &[u8], ttl: Ttl) {
    exec.ctx.put_with_ttl(key, Value::string(value), ttl);
    exec.ctx.notify(class::STRING, "set", key);
    if let Ttl::At(_) = ttl {
        exec.ctx.notify(class::GENERIC, "expire", key);
    }
}

fn set(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (mut nx, mut xx, mut get_old, mut ttl) = (false, false, false, Ttl::Clear);
    let mut expire_given = false;
    let mut i = 3;
    while i < argv.len() {
        let a = &argv[i];
        let next = argv.get(i + 1);
        if eq_ignore_case(a, "nx") && !xx {
            nx = true;
        } else if eq_ignore_case(a, "xx") && !nx {
            xx = true;
        } else if eq_ignore_case(a, "get") {
            get_old = true;
        } else if eq_ignore_case(a, "keepttl") && !expire_given {
            ttl = Ttl::Keep;
            expire_given = true;
        } else if let (Some(v), false) = (next, expire_given) {
            let (unit, absolute) = match a.to_ascii_lowercase().as_slice() {
                b"ex" => (1000, false),
                b"px" => (1, false),
                b"exat" => (1000, true),
                b"pxat" => (1, true),
                _ => return Err(CmdError::Syntax),
            };
            ttl = Ttl::At(deadline(v, unit, absolute, exec.ctx.now_ms, "set")?);
            expire_given = true;
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    let key = &argv[1];
    let old = if get_old { exec.ctx.string(key)? } else { None };
    // Only NX and XX ask; a plain SET's write deals with an expired key itself (`put`).
    let exists = (nx || xx) && exec.ctx.exists(key);
    if (nx && exists) || (xx && !exists) {
        return Ok(if get_old { Frame::bulk_opt(old) } else { Frame::Null });
    }
    store(exec, key, &argv[2], ttl);
    Ok(if get_old { Frame::bulk_opt(old) } else { OK })
}

fn setnx(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    if exec.ctx.exists(&argv[1]) {
        return Ok(Frame::Integer(0));
    }
    store(exec, &argv[1], &argv[2], Ttl::Clear);
    Ok(Frame::Integer(1))
}

fn setex(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let at = deadline(&argv[2], 1000, false, exec.ctx.now_ms, "setex")?;
    store(exec, &argv[1], &argv[3], Ttl::At(at));
    Ok(OK)
}

fn psetex(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let at = deadline(&argv[2], 1, false, exec.ctx.now_ms, "psetex")?;
    store(exec, &argv[1], &argv[3], Ttl::At(at));
    Ok(OK)
}

fn getset(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let old = exec.ctx.string(&argv[1])?;
    store(exec, &argv[1], &argv[2], Ttl::Clear);
    Ok(Frame::bulk_opt(old))
}

fn getdel(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let old = exec.ctx.string(&argv[1])?;
    // Deleting a key this node does not hold is still a delete (`db::edit`).
    if exec.ctx.delete(&argv[1]) {
        exec.ctx.notify(class::GENERIC, "del", &argv[1]);
    }
    Ok(Frame::bulk_opt(old))
}

fn getex(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let now = exec.ctx.now_ms;
    let mut change: Option<u64> = None;
    let mut i = 2;
    while i < argv.len() {
        let a = argv[i].to_ascii_lowercase();
        let unit = match a.as_slice() {
            b"ex" | b"exat" => 1000,
            b"px" | b"pxat" => 1,
            b"persist" if change.is_none() && i + 1 == argv.len() => {
                change = Some(0);
                i += 1;
                continue;
            }
            _ => return Err(CmdError::Syntax),
        };
        let (Some(v), None) = (argv.get(i + 1), change) else {
            return Err(CmdError::Syntax);
        };
        change = Some(deadline(v, unit, a.ends_with(b"at"), now, "getex")?);
        i += 2;
    }
    let value = exec.ctx.string(&argv[1])?;
    if let (Some(_), Some(at)) = (&value, change) {
        if at == 0 {
            if exec.ctx.persist(&argv[1]) {
                exec.ctx.notify(class::GENERIC, "persist", &argv[1]);
            }
        } else {
            exec.ctx.set_deadline(&argv[1], at);
            exec.ctx.notify(class::GENERIC, "expire", &argv[1]);
        }
    }
    Ok(Frame::bulk_opt(value))
}

fn mget(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let values = argv[1..].iter().map(|k| Frame::bulk_opt(exec.ctx.string(k).ok().flatten())).collect();
    Ok(Frame::Array(values))
}

fn mset(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    if argv.len().is_multiple_of(2) {
        return Err(wrong_arity(exec_name(argv)));
    }
    for pair in argv[1..].chunks(2) {
        store(exec, &pair[0], &pair[1], Ttl::Clear);
    }
    Ok(OK)
}

fn exec_name(argv: &[Bytes]) -> &str {
    std::str::from_utf8(&argv[0]).unwrap_or("?")
}

fn msetnx(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    if argv.len().is_multiple_of(2) {
        return Err(wrong_arity(exec_name(argv)));
    }
    if argv[1..].chunks(2).any(|pair| exec.ctx.exists(&pair[0])) {
        return Ok(Frame::Integer(0));
    }
    for pair in argv[1..].chunks(2) {
        store(exec, &pair[0], &pair[1], Ttl::Clear);
    }
    Ok(Frame::Integer(1))
}

/// The INCR family keeps the key as a PN-counter (concurrent increments on different nodes
/// all count; see `db::counter`). `Ctx::incr` checks the type, the integer and overflow
/// before it changes anything, with one lookup of the key.
fn add(exec: &mut Exec, key: &[u8], delta: i64) -> Reply {
    let next = exec.ctx.incr(key, delta)?;
    exec.ctx.notify(class::STRING, "incrby", key);
    Ok(Frame::Integer(next))
}

fn incr(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    add(exec, &argv[1], 1)
}

fn decr(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    add(exec, &argv[1], -1)
}

fn incrby(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let delta = int(&argv[2])?;
    add(exec, &argv[1], delta)
}

fn decrby(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let delta = int(&argv[2])?;
    if delta == i64::MIN {
        return Err(CmdError::err("decrement would overflow"));
    }
    add(exec, &argv[1], -delta)
}

fn incrbyfloat(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let delta = float(&argv[2])?;
    let key = &argv[1];
    let current = match exec.ctx.get(key).map(|e| &e.value) {
        None => 0.0,
        Some(Value::Int(n)) => *n as f64,
        Some(Value::Str(s)) => super::args::parse_float(s).ok_or(CmdError::NotFloat)?,
        Some(Value::Counter(c)) => c.value().unwrap_or(0) as f64,
        Some(_) => return Err(CmdError::WrongType),
    };
    let next = current + delta;
    if !next.is_finite() {
        return Err(CmdError::err("increment would produce NaN or Infinity"));
    }
    let text = format_double_human(next);
    exec.ctx.put(key, Value::string(text.as_bytes()), true);
    exec.ctx.notify(class::STRING, "incrbyfloat", key);
    Ok(Frame::bulk(text))
}

/// The raw bytes of a string key, for in-place edits.
fn current_bytes(exec: &mut Exec, key: &[u8]) -> Result<Option<Vec<u8>>, CmdError> {
    Ok(exec.ctx.string_for_write(key)?.map(|b| b.to_vec()))
}

fn append(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let mut value = current_bytes(exec, &argv[1])?.unwrap_or_default();
    if value.len() + argv[2].len() > MAX_STRING {
        return Err(CmdError::err("string exceeds maximum allowed size (proto-max-bulk-len)"));
    }
    value.extend_from_slice(&argv[2]);
    let len = value.len();
    exec.ctx.put(&argv[1], Value::string(&value), true);
    exec.ctx.notify(class::STRING, "append", &argv[1]);
    Ok(Frame::Integer(len as i64))
}

fn strlen(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    match exec.ctx.lookup_read(&argv[1]).map(|e| &e.value) {
        None => Ok(Frame::Integer(0)),
        Some(Value::Str(s)) => Ok(Frame::Integer(s.len() as i64)),
        Some(Value::Int(n)) => Ok(Frame::Integer(itoa::Buffer::new().format(*n).len() as i64)),
        Some(Value::Counter(c)) => Ok(Frame::Integer(c.value().unwrap_or(0).to_string().len() as i64)),
        Some(_) => Err(CmdError::WrongType),
    }
}

fn getrange(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (start, end) = (int(&argv[2])?, int(&argv[3])?);
    let Some(value) = exec.ctx.string(&argv[1])? else {
        return Ok(Frame::bulk(""));
    };
    let len = value.len() as i64;
    if start < 0 && end < 0 && start > end {
        return Ok(Frame::bulk(""));
    }
    let start = if start < 0 { (len + start).max(0) } else { start };
    let end = if end < 0 { (len + end).max(0) } else { end.min(len - 1) };
    if start > end || len == 0 {
        return Ok(Frame::bulk(""));
    }
    Ok(Frame::Bulk(value.slice(start as usize..=end as usize)))
}

fn setrange(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let offset = int(&argv[2])?;
    if offset < 0 {
        return Err(CmdError::err("offset is out of range"));
    }
    let offset = offset as usize;
    let patch = &argv[3];
    let existing = current_bytes(exec, &argv[1])?;
    if patch.is_empty() {
        return Ok(Frame::Integer(existing.map_or(0, |v| v.len()) as i64));
    }
    if offset + patch.len() > MAX_STRING {
        return Err(CmdError::err("string exceeds maximum allowed size (proto-max-bulk-len)"));
    }
    let mut value = existing.unwrap_or_default();
    if value.len() < offset + patch.len() {
        value.resize(offset + patch.len(), 0);
    }
    value[offset..offset + patch.len()].copy_from_slice(patch);
    let len = value.len();
    exec.ctx.put(&argv[1], Value::string(&value), true);
    exec.ctx.notify(class::STRING, "setrange", &argv[1]);
    Ok(Frame::Integer(len as i64))
}

/// A common run: its `[start, end]` in the first string and in the second.
type MatchRange = ((usize, usize), (usize, usize));

/// `LCS k1 k2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]`, by dynamic programming as Redis.
fn lcs(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (mut want_len, mut want_idx, mut with_len, mut min_len) = (false, false, false, 0usize);
    let mut i = 3;
    while i < argv.len() {
        let a = &argv[i];
        if eq_ignore_case(a, "len") {
            want_len = true;
        } else if eq_ignore_case(a, "idx") {
            want_idx = true;
        } else if eq_ignore_case(a, "withmatchlen") {
            with_len = true;
        } else if eq_ignore_case(a, "minmatchlen") && i + 1 < argv.len() {
            min_len = int(&argv[i + 1])?.max(0) as usize;
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if want_len && want_idx {
        return Err(CmdError::err("If you want both the length and indexes, please just use IDX."));
    }
    let a = exec.ctx.string(&argv[1])?.unwrap_or_default();
    let b = exec.ctx.string(&argv[2])?.unwrap_or_default();
    let (n, m) = (a.len(), b.len());
    let mut dp = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in 1..=n {
        for j in 1..=m {
            dp[at(i, j)] = if a[i - 1] == b[j - 1] { dp[at(i - 1, j - 1)] + 1 } else { dp[at(i - 1, j)].max(dp[at(i, j - 1)]) };
        }
    }
    let total = dp[at(n, m)] as usize;
    if want_len {
        return Ok(Frame::Integer(total as i64));
    }
    // Walk back from the end, collecting the common string and, for IDX, the match ranges.
    let mut result = vec![0u8; total];
    let mut matches = Vec::new();
    let (mut i, mut j, mut k) = (n, m, total);
    let mut range: Option<MatchRange> = None;
    let flush = |range: &mut Option<MatchRange>, matches: &mut Vec<Frame>| {
        if let Some(((a0, a1), (b0, b1))) = range.take() {
            let len = a1 - a0 + 1;
            if len >= min_len {
                let mut item = vec![
                    Frame::Array(vec![Frame::Integer(a0 as i64), Frame::Integer(a1 as i64)]),
                    Frame::Array(vec![Frame::Integer(b0 as i64), Frame::Integer(b1 as i64)]),
                ];
                if with_len {
                    item.push(Frame::Integer(len as i64));
                }
                matches.push(Frame::Array(item));
            }
        }
    };
    while i > 0 && j > 0 {
        if a[i - 1] == b[j - 1] {
            k -= 1;
            result[k] = a[i - 1];
            let (ai, bj) = (i - 1, j - 1);
            range = match range {
                Some(((a0, a1), (b0, b1))) if a0 == ai + 1 && b0 == bj + 1 => Some(((ai, a1), (bj, b1))),
                other => {
                    let mut pending = other;
                    flush(&mut pending, &mut matches);
                    Some(((ai, ai), (bj, bj)))
                }
            };
            i -= 1;
            j -= 1;
        } else if dp[at(i - 1, j)] > dp[at(i, j - 1)] {
            i -= 1;
        } else {
            j -= 1;
        }
    }
    flush(&mut range, &mut matches);
    if want_idx {
        return Ok(Frame::Map(vec![(Frame::bulk("matches"), Frame::Array(matches)), (Frame::bulk("len"), Frame::Integer(total as i64))]));
    }
    Ok(Frame::bulk(result))
}
