//! Bit operations on strings: `SETBIT GETBIT BITCOUNT BITPOS BITOP`.

use bytes::Bytes;

use super::args::{eq_ignore_case, int};
use super::flags::*;
use super::{CommandSpec, Exec, Keys};
use crate::db::Value;
use crate::error::{CmdError, Reply};
use crate::frame::Frame;
use crate::notify::class;

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: $keys, run: $run, group: "bitmap", summary: $summary }
    };
}

pub const COMMANDS: &[CommandSpec] = &[
    spec!("setbit", 4, WRITE | DENYOOM, Keys::Range(1, 1, 1), setbit, "Sets or clears the bit at offset of the string value."),
    spec!("getbit", 3, READONLY | FAST, Keys::Range(1, 1, 1), getbit, "Returns a bit value by offset."),
    spec!("bitcount", -2, READONLY, Keys::Range(1, 1, 1), bitcount, "Counts the number of set bits (population counting) in a string."),
    spec!("bitpos", -3, READONLY, Keys::Range(1, 1, 1), bitpos, "Finds the first set (1) or clear (0) bit in a string."),
    spec!("bitop", -4, WRITE | DENYOOM, Keys::Range(2, -1, 1), bitop, "Performs bitwise operations on multiple strings, and stores the result."),
];

/// Largest bit offset: strings are capped at 512 MB.
const MAX_BIT_OFFSET: i64 = 512 * 1024 * 1024 * 8 - 1;

fn bit_offset(arg: &[u8]) -> Result<usize, CmdError> {
    match int(arg) {
        Ok(n) if (0..=MAX_BIT_OFFSET).contains(&n) => Ok(n as usize),
        _ => Err(CmdError::err("bit offset is not an integer or out of range")),
    }
}

fn bytes_of(exec: &mut Exec, key: &[u8]) -> Result<Option<Bytes>, CmdError> {
    exec.ctx.string(key)
}

fn setbit(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let offset = bit_offset(&argv[2])?;
    let on = match &argv[3][..] {
        b"1" => true,
        b"0" => false,
        _ => return Err(CmdError::err("bit is not an integer or out of range")),
    };
    let mut value = exec.ctx.string_for_write(&argv[1])?.map(|b| b.to_vec()).unwrap_or_default();
    let byte = offset / 8;
    if value.len() <= byte {
        value.resize(byte + 1, 0);
    }
    let mask = 0x80u8 >> (offset % 8);
    let old = value[byte] & mask != 0;
    if on {
        value[byte] |= mask;
    } else {
        value[byte] &= !mask;
    }
    exec.ctx.put(&argv[1], Value::string(&value), true);
    exec.ctx.notify(class::STRING, "setbit", &argv[1]);
    Ok(Frame::Integer(old as i64))
}

fn getbit(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let offset = bit_offset(&argv[2])?;
    let value = bytes_of(exec, &argv[1])?.unwrap_or_default();
    let bit = value.get(offset / 8).is_some_and(|b| b & (0x80 >> (offset % 8)) != 0);
    Ok(Frame::Integer(bit as i64))
}

/// Resolves `start end [BYTE|BIT]` to an inclusive bit range, or `None` if empty.
fn bit_range(start: i64, end: i64, len_bytes: usize, bits: bool) -> Option<(usize, usize)> {
    let total = if bits { len_bytes as i64 * 8 } else { len_bytes as i64 };
    let norm = |v: i64| if v < 0 { (total + v).max(0) } else { v };
    let (s, e) = (norm(start), norm(end).min(total - 1));
    if s > e || total == 0 {
        return None;
    }
    Some(if bits { (s as usize, e as usize) } else { (s as usize * 8, e as usize * 8 + 7) })
}

fn unit_is_bit(arg: Option<&Bytes>) -> Result<bool, CmdError> {
    match arg {
        None => Ok(false),
        Some(a) if eq_ignore_case(a, "byte") => Ok(false),
        Some(a) if eq_ignore_case(a, "bit") => Ok(true),
        Some(_) => Err(CmdError::Syntax),
    }
}

fn bit_at(value: &[u8], i: usize) -> bool {
    value[i / 8] & (0x80 >> (i % 8)) != 0
}

fn bitcount(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let range = match argv.len() {
        2 => None,
        4 | 5 => Some((int(&argv[2])?, int(&argv[3])?, unit_is_bit(argv.get(4))?)),
        _ => return Err(CmdError::Syntax),
    };
    let value = bytes_of(exec, &argv[1])?.unwrap_or_default();
    let count = match range {
        None => value.iter().map(|b| b.count_ones() as usize).sum(),
        Some((s, e, bits)) => match bit_range(s, e, value.len(), bits) {
            None => 0,
            Some((from, to)) => (from..=to).filter(|&i| bit_at(&value, i)).count(),
        },
    };
    Ok(Frame::Integer(count as i64))
}

fn bitpos(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let want = match &argv[2][..] {
        b"1" => true,
        b"0" => false,
        _ => return Err(CmdError::err("The bit argument must be 1 or 0.")),
    };
    if argv.len() > 6 {
        return Err(CmdError::Syntax);
    }
    let start = argv.get(3).map(|a| int(a)).transpose()?.unwrap_or(0);
    let end_given = argv.len() >= 5;
    let end = argv.get(4).map(|a| int(a)).transpose()?.unwrap_or(-1);
    let bits = unit_is_bit(argv.get(5))?;
    let Some(value) = bytes_of(exec, &argv[1])? else {
        return Ok(Frame::Integer(if want { -1 } else { 0 }));
    };
    let Some((from, to)) = bit_range(start, end, value.len(), bits) else {
        return Ok(Frame::Integer(-1));
    };
    if let Some(pos) = (from..=to).find(|&i| bit_at(&value, i) == want) {
        return Ok(Frame::Integer(pos as i64));
    }
    // Looking for a clear bit with no explicit end: the string is conceptually padded with zeros.
    if !want && !end_given {
        return Ok(Frame::Integer((to + 1) as i64));
    }
    Ok(Frame::Integer(-1))
}

fn bitop(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let op = argv[1].to_ascii_lowercase();
    let sources = &argv[3..];
    if op == b"not" && sources.len() != 1 {
        return Err(CmdError::err("BITOP NOT must be called with a single source key."));
    }
    if !matches!(op.as_slice(), b"and" | b"or" | b"xor" | b"not") {
        return Err(CmdError::Syntax);
    }
    let mut values = Vec::with_capacity(sources.len());
    for key in sources {
        values.push(bytes_of(exec, key)?.unwrap_or_default());
    }
    let len = values.iter().map(Bytes::len).max().unwrap_or(0);
    let byte_at = |v: &Bytes, i: usize| v.get(i).copied().unwrap_or(0);
    let result: Vec<u8> = (0..len)
        .map(|i| match op.as_slice() {
            b"not" => !byte_at(&values[0], i),
            b"and" => values.iter().fold(0xff, |acc, v| acc & byte_at(v, i)),
            b"or" => values.iter().fold(0, |acc, v| acc | byte_at(v, i)),
            _ => values.iter().fold(0, |acc, v| acc ^ byte_at(v, i)),
        })
        .collect();
    if result.is_empty() {
        if exec.ctx.delete(&argv[2]) {
            exec.ctx.notify(class::GENERIC, "del", &argv[2]);
        }
    } else {
        exec.ctx.put(&argv[2], Value::string(&result), false);
        exec.ctx.notify(class::STRING, "set", &argv[2]);
    }
    Ok(Frame::Integer(result.len() as i64))
}
