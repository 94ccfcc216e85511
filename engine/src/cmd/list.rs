//! Lists: pushes and pops at both ends (with counts), indexing, ranges, `LTRIM`, `LREM`,
//! `LINSERT`, `LPOS`, the moves (`LMOVE`, `RPOPLPUSH`) and `LMPOP`, with Redis 7.0's replies
//! and errors.
//!
//! A list replicates as a whole value (LWW on the key, DESIGN.md, Merge semantics), so edits
//! only stamp the key's version. The blocking forms (`BLPOP`, `BLMOVE`, `BLMPOP`, ...) live in
//! `blocking.rs` and reuse `pop_from`, `move_element` and `lmpop_reply` (the `*MPOP` arguments
//! are parsed by `args::mpop_args`).

use std::collections::VecDeque;

use bytes::Bytes;

use super::args::{eq_ignore_case, int, int_at_least, mpop_args, numkeys_at_1, own, positive, resolve_range};
use super::flags::*;
use super::{wrong_arity, CommandSpec, Exec, Keys};
use crate::db::entry::{ListValue, Name};
use crate::db::{Kind, Value};
use crate::error::{CmdError, Reply};
use crate::frame::{Frame, OK};
use crate::notify::class;

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: $keys, run: $run, group: "list", summary: $summary }
    };
}

const KEY: Keys = Keys::Range(1, 1, 1);

pub const COMMANDS: &[CommandSpec] = &[
    spec!("lpush", -3, WRITE | DENYOOM | FAST, KEY, lpush, "Prepends one or more elements to a list. Creates the key if it doesn't exist."),
    spec!("rpush", -3, WRITE | DENYOOM | FAST, KEY, rpush, "Appends one or more elements to a list. Creates the key if it doesn't exist."),
    spec!("lpushx", -3, WRITE | DENYOOM | FAST, KEY, lpushx, "Prepends one or more elements to a list only when the list exists."),
    spec!("rpushx", -3, WRITE | DENYOOM | FAST, KEY, rpushx, "Appends an element to a list only when the list exists."),
    spec!("lpop", -2, WRITE | FAST, KEY, lpop, "Returns the first elements in a list after removing it. Deletes the list if the last element was popped."),
    spec!("rpop", -2, WRITE | FAST, KEY, rpop, "Returns and removes the last elements of a list. Deletes the list if the last element was popped."),
    spec!("llen", 2, READONLY | FAST, KEY, llen, "Returns the length of a list."),
    spec!("lindex", 3, READONLY, KEY, lindex, "Returns an element from a list by its index."),
    spec!("lset", 4, WRITE | DENYOOM, KEY, lset, "Sets the value of an element in a list by its index."),
    spec!("lrange", 4, READONLY, KEY, lrange, "Returns a range of elements from a list."),
    spec!("ltrim", 4, WRITE, KEY, ltrim, "Removes elements from both ends a list. Deletes the list if all elements were trimmed."),
    spec!("lrem", 4, WRITE, KEY, lrem, "Removes elements from a list. Deletes the list if the last element was removed."),
    spec!("linsert", 5, WRITE | DENYOOM, KEY, linsert, "Inserts an element before or after another element in a list."),
    spec!("lpos", -3, READONLY, KEY, lpos, "Returns the index of matching elements in a list."),
    spec!(
        "lmove",
        5,
        WRITE | DENYOOM,
        Keys::Range(1, 2, 1),
        lmove,
        "Returns an element after popping it from one list and pushing it to another. Deletes the list if the last element was moved."
    ),
    spec!(
        "rpoplpush",
        3,
        WRITE | DENYOOM,
        Keys::Range(1, 2, 1),
        rpoplpush,
        "Returns the last element of a list after removing and pushing it to another list. Deletes the list if the last element was popped."
    ),
    spec!(
        "lmpop",
        -4,
        WRITE,
        Keys::Custom(numkeys_at_1),
        lmpop,
        "Returns multiple elements from a list after removing them. Deletes the list if the last element was popped."
    ),
];

/// The list at `key` for a read command (counts a keyspace hit or miss).
fn read<'e>(exec: &'e mut Exec<'_, '_>, key: &[u8]) -> Result<Option<&'e VecDeque<Name>>, CmdError> {
    match exec.ctx.lookup_read(key).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::List(l)) => Ok(Some(l)),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// Whether `key` holds a list (`false` when missing; WRONGTYPE for another type).
fn is_list(exec: &mut Exec, key: &[u8]) -> Result<bool, CmdError> {
    match exec.ctx.kind(key) {
        None => Ok(false),
        Some(Kind::List) => Ok(true),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// An index from the head (negative counts from the tail), if it lies inside `len`.
fn index_in(index: i64, len: usize) -> Option<usize> {
    let i = if index < 0 { len as i64 + index } else { index };
    (0..len as i64).contains(&i).then_some(i as usize)
}

/// `LEFT` (true) or `RIGHT`.
pub(crate) fn side(arg: &[u8]) -> Result<bool, CmdError> {
    if eq_ignore_case(arg, "left") {
        Ok(true)
    } else if eq_ignore_case(arg, "right") {
        Ok(false)
    } else {
        Err(CmdError::Syntax)
    }
}

// ---------------------------------------------------------------------------------------
// Pushes and pops

fn push(exec: &mut Exec, argv: &[Bytes], left: bool, only_existing: bool) -> Reply {
    let key = &argv[1];
    if !is_list(exec, key)? && only_existing {
        return Ok(Frame::Integer(0));
    }
    let len = exec.ctx.edit_or_create(key, |list: &mut ListValue, _| {
        for element in &argv[2..] {
            if left {
                list.push_front(Name::from(&element[..]));
            } else {
                list.push_back(Name::from(&element[..]));
            }
        }
        list.len()
    })?;
    exec.ctx.notify(class::LIST, if left { "lpush" } else { "rpush" }, key);
    Ok(Frame::Integer(len as i64))
}

fn lpush(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    push(exec, argv, true, false)
}

fn rpush(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    push(exec, argv, false, false)
}

fn lpushx(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    push(exec, argv, true, true)
}

fn rpushx(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    push(exec, argv, false, true)
}

/// Pops up to `count` elements from the head (`left`) or tail of the list at `key`, in pop
/// order. A missing key (or `count == 0`) pops nothing; a key of another type is WRONGTYPE.
/// Deletes the key when it empties, touches watchers, bumps dirty.
pub(crate) fn pop_from(exec: &mut Exec, key: &[u8], left: bool, count: usize) -> Result<Vec<Bytes>, CmdError> {
    if !is_list(exec, key)? || count == 0 {
        return Ok(Vec::new());
    }
    let popped = exec.ctx.edit(key, |list: &mut ListValue, _| {
        let n = count.min(list.len());
        if left {
            list.drain(..n).map(Bytes::from).collect()
        } else {
            let len = list.len();
            list.drain(len - n..).rev().map(Bytes::from).collect()
        }
    })?;
    let popped: Vec<Bytes> = popped.unwrap_or_default();
    if !popped.is_empty() {
        exec.ctx.notify(class::LIST, if left { "lpop" } else { "rpop" }, key);
    }
    Ok(popped)
}

/// LPOP/RPOP `key [count]`: a bulk without a count, an array with one (null bulk vs null
/// array for a missing key, as Redis).
fn pop_command(exec: &mut Exec, argv: &[Bytes], left: bool) -> Reply {
    if argv.len() > 3 {
        return Err(wrong_arity(if left { "lpop" } else { "rpop" }));
    }
    let count = match argv.get(2) {
        Some(arg) => Some(positive(arg)?),
        None => None,
    };
    let key = &argv[1];
    if !is_list(exec, key)? {
        return Ok(if count.is_some() { Frame::NullArray } else { Frame::Null });
    }
    match count {
        None => Ok(pop_from(exec, key, left, 1)?.pop().map_or(Frame::Null, Frame::Bulk)),
        Some(n) => Ok(Frame::Array(pop_from(exec, key, left, n)?.into_iter().map(Frame::Bulk).collect())),
    }
}

fn lpop(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    pop_command(exec, argv, true)
}

fn rpop(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    pop_command(exec, argv, false)
}

// ---------------------------------------------------------------------------------------
// Reads

fn llen(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    Ok(Frame::Integer(read(exec, &argv[1])?.map_or(0, |l| l.len()) as i64))
}

fn lindex(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let Some(list) = read(exec, &argv[1])? else {
        return Ok(Frame::Null);
    };
    let index = int(&argv[2])?;
    Ok(index_in(index, list.len()).map_or(Frame::Null, |i| Frame::bulk(&list[i])))
}

fn lrange(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (start, stop) = (int(&argv[2])?, int(&argv[3])?);
    let Some(list) = read(exec, &argv[1])? else {
        return Ok(Frame::Array(Vec::new()));
    };
    let items = match resolve_range(start, stop, list.len()) {
        Some((s, e)) => list.range(s..=e).map(Frame::bulk).collect(),
        None => Vec::new(),
    };
    Ok(Frame::Array(items))
}

/// `LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]`.
fn lpos(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (mut rank, mut count, mut maxlen) = (1i64, None::<u64>, 0u64);
    let mut j = 3;
    while j < argv.len() {
        let more = j + 1 < argv.len();
        let a = &argv[j];
        if eq_ignore_case(a, "rank") && more {
            rank = int(&argv[j + 1])?;
            if rank == 0 {
                return Err(CmdError::err(
                    "RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list",
                ));
            }
        } else if eq_ignore_case(a, "count") && more {
            count = Some(int_at_least(&argv[j + 1], 0, "COUNT can't be negative")? as u64);
        } else if eq_ignore_case(a, "maxlen") && more {
            maxlen = int_at_least(&argv[j + 1], 0, "MAXLEN can't be negative")? as u64;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 2;
    }
    let Some(list) = read(exec, &argv[1])? else {
        return Ok(if count.is_some() { Frame::Array(Vec::new()) } else { Frame::Null });
    };
    let element = &argv[2];
    let from_tail = rank < 0;
    let rank = rank.unsigned_abs();
    let positions: Box<dyn Iterator<Item = (usize, &Name)> + '_> =
        if from_tail { Box::new(list.iter().enumerate().rev()) } else { Box::new(list.iter().enumerate()) };
    let (mut matches, mut found) = (0u64, Vec::new());
    for (scanned, (index, e)) in positions.enumerate() {
        if maxlen != 0 && scanned as u64 >= maxlen {
            break;
        }
        if e[..] != element[..] {
            continue;
        }
        matches += 1;
        if matches < rank {
            continue;
        }
        match count {
            None => return Ok(Frame::Integer(index as i64)),
            Some(c) => {
                found.push(Frame::Integer(index as i64));
                if c != 0 && matches - rank + 1 >= c {
                    break;
                }
            }
        }
    }
    Ok(if count.is_some() { Frame::Array(found) } else { Frame::Null })
}

// ---------------------------------------------------------------------------------------
// In-place edits

fn lset(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let key = &argv[1];
    if !is_list(exec, key)? {
        return Err(CmdError::NoSuchKey);
    }
    let index = int(&argv[2])?;
    let len = exec.ctx.list(key)?.map_or(0, |l| l.len());
    let i = index_in(index, len).ok_or(CmdError::IndexOutOfRange)?;
    exec.ctx.edit(key, |list: &mut ListValue, _| list[i] = Name::from(&argv[3][..]))?.ok_or(CmdError::NoSuchKey)?;
    exec.ctx.notify(class::LIST, "lset", key);
    Ok(OK)
}

fn ltrim(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (start, stop) = (int(&argv[2])?, int(&argv[3])?);
    let key = &argv[1];
    let Some(len) = exec.ctx.list(key)?.map(|l| l.len()) else {
        return Ok(OK);
    };
    let (head, tail) = match resolve_range(start, stop, len) {
        Some((s, e)) => (s, len - e - 1),
        None => (len, 0),
    };
    if head + tail > 0 {
        exec.ctx.edit(key, |list: &mut ListValue, _| {
            list.drain(..head);
            let keep = list.len() - tail;
            list.truncate(keep);
        })?;
    }
    // Redis announces a trim of an existing list even when it removed nothing.
    exec.ctx.notify(class::LIST, "ltrim", key);
    Ok(OK)
}

fn lrem(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let to_remove = int(&argv[2])?;
    let (key, element) = (&argv[1], &argv[3]);
    let found = match exec.ctx.list(key)? {
        None => return Ok(Frame::Integer(0)),
        Some(list) => list.iter().any(|item| item[..] == element[..]),
    };
    if !found {
        return Ok(Frame::Integer(0));
    }
    let limit = to_remove.unsigned_abs();
    let from_tail = to_remove < 0;
    let mut removed = 0u64;
    exec.ctx.edit(key, |list: &mut ListValue, _| {
        if from_tail {
            list.make_contiguous().reverse();
        }
        list.retain(|e| {
            if (limit == 0 || removed < limit) && e == element {
                removed += 1;
                false
            } else {
                true
            }
        });
        if from_tail {
            list.make_contiguous().reverse();
        }
    })?;
    if removed > 0 {
        exec.ctx.notify(class::LIST, "lrem", key);
    }
    Ok(Frame::Integer(removed as i64))
}

fn linsert(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let after = if eq_ignore_case(&argv[2], "after") {
        true
    } else if eq_ignore_case(&argv[2], "before") {
        false
    } else {
        return Err(CmdError::Syntax);
    };
    let key = &argv[1];
    let pivot = match exec.ctx.list(key)? {
        None => return Ok(Frame::Integer(0)),
        Some(list) => list.iter().position(|e| e == &argv[3]),
    };
    let Some(pivot) = pivot else {
        return Ok(Frame::Integer(-1));
    };
    let len = exec.ctx.edit(key, |list: &mut ListValue, _| {
        list.insert(if after { pivot + 1 } else { pivot }, Name::from(&argv[4][..]));
        list.len()
    })?;
    exec.ctx.notify(class::LIST, "linsert", key);
    Ok(Frame::Integer(len.unwrap_or(0) as i64))
}

// ---------------------------------------------------------------------------------------
// Moves and LMPOP

/// Pops one element from `src` (head when `from_left`) and pushes it onto `dst` (head when
/// `to_left`), creating `dst` if needed; `src == dst` rotates. Replies with the element, a
/// null bulk when `src` is missing, or WRONGTYPE (checked on both keys before anything
/// moves).
pub(crate) fn move_element(exec: &mut Exec, src: &[u8], dst: &[u8], from_left: bool, to_left: bool) -> Reply {
    match exec.ctx.list(src)? {
        Some(list) if !list.is_empty() => {}
        _ => return Ok(Frame::Null),
    }
    is_list(exec, dst)?;
    let push = |list: &mut ListValue, value: Name| {
        if to_left {
            list.push_front(value);
        } else {
            list.push_back(value);
        }
    };
    // The element itself moves; the reply is a copy (a stored element shared with a reply
    // keeps a header for life: `args::own`).
    let popped = exec.ctx.edit(src, |list: &mut ListValue, _| {
        let value = if from_left { list.pop_front() } else { list.pop_back() }?;
        let reply = own(&value);
        // Rotating one list is one edit.
        if src == dst {
            push(list, value);
            return Some((reply, None));
        }
        Some((reply, Some(value)))
    })?;
    let Some((reply, moving)) = popped.flatten() else {
        return Ok(Frame::Null);
    };
    exec.ctx.notify(class::LIST, if from_left { "lpop" } else { "rpop" }, src);
    if let Some(value) = moving {
        exec.ctx.edit_or_create(dst, |list: &mut ListValue, _| push(list, value))?;
    }
    exec.ctx.notify(class::LIST, if to_left { "lpush" } else { "rpush" }, dst);
    Ok(Frame::Bulk(reply))
}

fn lmove(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (from_left, to_left) = (side(&argv[3])?, side(&argv[4])?);
    move_element(exec, &argv[1], &argv[2], from_left, to_left)
}

fn rpoplpush(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    move_element(exec, &argv[1], &argv[2], false, true)
}

/// `[key, [element, ...]]`, the LMPOP/BLMPOP reply.
pub(crate) fn lmpop_reply(key: &[u8], popped: Vec<Bytes>) -> Frame {
    Frame::Array(vec![Frame::bulk(key), Frame::Array(popped.into_iter().map(Frame::Bulk).collect())])
}

fn lmpop(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let args = mpop_args(argv, 1, side)?;
    for i in args.keys {
        let popped = pop_from(exec, &argv[i], args.end, args.count)?;
        if !popped.is_empty() {
            return Ok(lmpop_reply(&argv[i], popped));
        }
    }
    Ok(Frame::NullArray)
}
