//! `SORT` and `SORT_RO`, following Redis 7.0's `sort.c`: `BY` patterns (a constant pattern
//! means "don't sort"), `->field` hash lookups, `LIMIT`, repeatable `GET` (`#` is the element
//! itself), `ASC`/`DESC`, `ALPHA` and `STORE`.
//!
//! `BY` and `GET` patterns name arbitrary keys, so both commands lock every shard of the
//! client's database (`Keys::Database`).

use std::cmp::Ordering;
use std::collections::VecDeque;

use bytes::Bytes;

use super::args::{eq_ignore_case, int, own};
use super::flags::*;
use super::{CommandSpec, Exec, Keys};
use crate::db::ctx::Ctx;
use crate::db::entry::Name;
use crate::db::Value;
use crate::error::{CmdError, Reply};
use crate::frame::Frame;
use crate::notify::class;

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: $keys, run: $run, group: "generic", summary: $summary }
    };
}

pub const COMMANDS: &[CommandSpec] = &[
    spec!("sort", -2, WRITE | DENYOOM, Keys::Database, sort, "Sorts the elements in a list, a set, or a sorted set, optionally storing the result."),
    spec!("sort_ro", -2, READONLY, Keys::Database, sort_ro, "Returns the sorted elements of a list, a set, or a sorted set."),
];

/// Key positions for `COMMAND GETKEYS`, as Redis's `sortGetKeys`: the source key, plus the
/// destination of the last `STORE` (only for `SORT`, the writing variant).
pub fn key_positions(argv: &[Bytes], writes: bool) -> Vec<usize> {
    let mut keys = vec![1];
    if !writes {
        return keys;
    }
    let mut store = None;
    let mut i = 2;
    while i < argv.len() {
        let a = &argv[i];
        if eq_ignore_case(a, "limit") {
            i += 2;
        } else if eq_ignore_case(a, "get") || eq_ignore_case(a, "by") {
            i += 1;
        } else if eq_ignore_case(a, "store") && i + 1 < argv.len() {
            // Not skipped: the last STORE wins, and its argument is scanned too (as Redis).
            store = Some(i + 1);
        }
        i += 1;
    }
    keys.extend(store);
    keys
}

fn sort(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    sort_generic(exec, argv, false)
}

fn sort_ro(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    sort_generic(exec, argv, true)
}

/// The source's elements, copied out before any pattern lookups.
enum Source {
    List(Vec<Bytes>),
    Set(Vec<Bytes>),
    ZSet,
}

fn sort_generic(exec: &mut Exec, argv: &[Bytes], readonly: bool) -> Reply {
    let (mut desc, mut alpha, mut dontsort) = (false, false, false);
    let (mut limit_start, mut limit_count) = (0i64, -1i64);
    let mut sortby: Option<&Bytes> = None;
    let mut storekey: Option<&Bytes> = None;
    let mut gets: Vec<&Bytes> = Vec::new();

    let mut j = 2;
    while j < argv.len() {
        let left = argv.len() - j - 1;
        let a = &argv[j];
        if eq_ignore_case(a, "asc") {
            desc = false;
        } else if eq_ignore_case(a, "desc") {
            desc = true;
        } else if eq_ignore_case(a, "alpha") {
            alpha = true;
        } else if eq_ignore_case(a, "limit") && left >= 2 {
            limit_start = int(&argv[j + 1])?;
            limit_count = int(&argv[j + 2])?;
            j += 2;
        } else if !readonly && eq_ignore_case(a, "store") && left >= 1 {
            storekey = Some(&argv[j + 1]);
            j += 1;
        } else if eq_ignore_case(a, "by") && left >= 1 {
            sortby = Some(&argv[j + 1]);
            // A constant BY pattern (no '*') means: don't sort, don't look weights up.
            dontsort = !argv[j + 1].contains(&b'*');
            j += 1;
        } else if eq_ignore_case(a, "get") && left >= 1 {
            gets.push(&argv[j + 1]);
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }

    let in_script = exec.client.in_script;
    let ctx = &mut exec.ctx;
    // A missing key sorts like an empty list.
    let source = match ctx.lookup_read(&argv[1]).map(|e| &e.value) {
        None => Source::List(Vec::new()),
        Some(Value::List(l)) => Source::List(if dontsort { Vec::new() } else { l.iter().map(|e| own(e)).collect() }),
        Some(Value::Set(s)) => Source::Set(s.keys().map(|e| own(e)).collect()),
        Some(Value::ZSet(_)) => Source::ZSet,
        Some(_) => return Err(CmdError::WrongType),
    };
    let vectorlen = match &source {
        Source::List(v) if !dontsort => v.len(),
        Source::Set(v) => v.len(),
        Source::List(_) => ctx.list(&argv[1])?.map_or(0, |l| l.len()),
        Source::ZSet => ctx.zset(&argv[1])?.map_or(0, |z| z.len()),
    } as i64;

    // A set has no native order: when storing or in a script, sort it so the result is
    // deterministic.
    if dontsort && matches!(source, Source::Set(_)) && (storekey.is_some() || in_script) {
        dontsort = false;
        alpha = true;
        sortby = None;
    }

    // LIMIT, clamped exactly as Redis does.
    let mut start = limit_start.max(0).min(vectorlen);
    let limit_count = limit_count.max(-1).min(vectorlen);
    let mut end = if limit_count < 0 { vectorlen - 1 } else { start + limit_count - 1 };
    if start >= vectorlen {
        start = vectorlen - 1;
        end = vectorlen - 2;
    }
    if end >= vectorlen {
        end = vectorlen - 1;
    }

    let mut vector: Vec<Bytes> = match source {
        // Lists and sorted sets keep their native order (reversed by DESC) and load only the
        // LIMIT range.
        Source::List(_) if dontsort => {
            let v = if end >= start {
                let list = ctx.list(&argv[1])?;
                let (skip, take) = (start as usize, (end - start + 1) as usize);
                match list {
                    Some(l) if desc => l.iter().rev().skip(skip).take(take).map(|e| own(e)).collect(),
                    Some(l) => l.iter().skip(skip).take(take).map(|e| own(e)).collect(),
                    None => Vec::new(),
                }
            } else {
                Vec::new()
            };
            end -= start;
            start = 0;
            v
        }
        Source::ZSet if dontsort => {
            let v = if end >= start {
                let z = ctx.zset(&argv[1])?;
                z.map_or_else(Vec::new, |z| z.range_by_rank(start as usize, end as usize, desc).into_iter().map(|(m, _)| m).collect())
            } else {
                Vec::new()
            };
            end -= start;
            start = 0;
            v
        }
        Source::ZSet => ctx.zset(&argv[1])?.map_or_else(Vec::new, |z| z.iter().map(|(m, _)| m.to_bytes()).collect()),
        Source::List(v) | Source::Set(v) => v,
    };

    if !dontsort {
        sort_vector(ctx, &mut vector, sortby.map(|b| &b[..]), alpha, desc)?;
    }

    // The elements are this command's own copies (`own`), moved into the reply or the stored
    // list: a clone would share them, and a shared element keeps a header for life.
    let range = if end >= start { start as usize..end as usize + 1 } else { 0..0 };
    let outputlen = if gets.is_empty() { range.len() } else { gets.len() * range.len() };

    let Some(dest) = storekey else {
        let mut out = Vec::with_capacity(outputlen);
        for ele in vector.drain(range) {
            for pattern in &gets {
                out.push(Frame::bulk_opt(lookup_by_pattern(ctx, pattern, &ele)));
            }
            if gets.is_empty() {
                out.push(Frame::Bulk(ele));
            }
        }
        return Ok(Frame::Array(out));
    };

    let mut list = VecDeque::with_capacity(outputlen);
    for ele in vector.drain(range) {
        for pattern in &gets {
            list.push_back(Name::from(lookup_by_pattern(ctx, pattern, &ele).unwrap_or_default()));
        }
        if gets.is_empty() {
            list.push_back(Name::from(ele));
        }
    }
    if outputlen > 0 {
        ctx.put(dest, Value::List(Box::new(crate::db::entry::ListValue::new(list))), false);
        ctx.notify(class::LIST, "sortstore", dest);
    } else if ctx.delete(dest) {
        ctx.notify(class::GENERIC, "del", dest);
    }
    Ok(Frame::Integer(outputlen as i64))
}

/// What an element is compared by: a number, or (ALPHA) bytes that may be missing.
enum Weight {
    Score(f64),
    Alpha(Option<Bytes>),
    Element,
}

fn sort_vector(ctx: &mut Ctx, vector: &mut Vec<Bytes>, sortby: Option<&[u8]>, alpha: bool, desc: bool) -> Result<(), CmdError> {
    let mut conversion_error = false;
    let mut items: Vec<(Weight, Bytes)> = Vec::with_capacity(vector.len());
    for ele in vector.drain(..) {
        // The weight read through BY, if there is a BY (`None` inside: its key is missing);
        // without one, the element weighs itself.
        let looked_up = sortby.map(|pattern| lookup_by_pattern(ctx, pattern, &ele));
        let weight = match looked_up {
            Some(byval) if alpha => Weight::Alpha(byval),
            None if alpha => Weight::Element,
            looked_up => {
                let byval = match &looked_up {
                    Some(byval) => byval.as_deref(),
                    None => Some(&ele[..]),
                };
                // A missing weight key counts as 0.
                match byval {
                    None => Weight::Score(0.0),
                    Some(v) => match strtod_score(v) {
                        Some(score) => Weight::Score(score),
                        None => {
                            conversion_error = true;
                            Weight::Score(0.0)
                        }
                    },
                }
            }
        };
        items.push((weight, ele));
    }
    if conversion_error {
        return Err(CmdError::err("One or more scores can't be converted into double"));
    }
    // ALPHA compares bytes: Redis's strcoll() in the C locale.
    items.sort_by(|(wa, a), (wb, b)| {
        let cmp = match (wa, wb) {
            (Weight::Score(x), Weight::Score(y)) => match x.partial_cmp(y) {
                Some(Ordering::Equal) | None => a.cmp(b),
                Some(o) => o,
            },
            (Weight::Alpha(x), Weight::Alpha(y)) => x.cmp(y),
            _ => a.cmp(b),
        };
        if desc {
            cmp.reverse()
        } else {
            cmp
        }
    });
    vector.extend(items.into_iter().map(|(_, e)| e));
    Ok(())
}

/// Redis's `lookupKeyByPattern`: `#` is the element itself; otherwise the first `*` is
/// replaced by the element, and a `->field` suffix (with a non-empty field) after it reads a
/// hash field. A pattern without `*`, a missing key, or a key of the wrong type gives `None`.
fn lookup_by_pattern(ctx: &mut Ctx, pattern: &[u8], subst: &Bytes) -> Option<Bytes> {
    if pattern == b"#" {
        return Some(own(subst));
    }
    let star = pattern.iter().position(|&c| c == b'*')?;
    let after = &pattern[star + 1..];
    let (postfix, field) = match after.windows(2).position(|w| w == b"->") {
        Some(i) if i + 2 < after.len() => (&after[..i], Some(&after[i + 2..])),
        _ => (after, None),
    };
    let mut key = Vec::with_capacity(star + subst.len() + postfix.len());
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(subst);
    key.extend_from_slice(postfix);
    match (&ctx.lookup_read(&key)?.value, field) {
        (Value::Hash(h), Some(f)) => h.get(f).map(|f| own(&f.value)),
        (Value::Str(s), None) => Some(Bytes::copy_from_slice(s)),
        (Value::Int(n), None) => Some(Bytes::copy_from_slice(itoa::Buffer::new().format(*n).as_bytes())),
        _ => None,
    }
}

/// A weight as Redis reads it with `strtod`: leading whitespace, decimal or hex forms,
/// `inf`/`infinity`; the whole string must be consumed (up to a NUL), and NaN or an
/// out-of-range value fails. An empty string converts nothing and weighs 0.
fn strtod_score(value: &[u8]) -> Option<f64> {
    let value = value.iter().position(|&c| c == 0).map_or(value, |n| &value[..n]);
    if value.is_empty() {
        return Some(0.0);
    }
    let skip = value.iter().take_while(|c| matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')).count();
    let s = &value[skip..];
    let (negative, body) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let magnitude = if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
        f64::INFINITY
    } else if body.len() > 2 && body[0] == b'0' && (body[1] | 0x20) == b'x' {
        hex_float(&body[2..])?
    } else {
        if body.is_empty() || matches!(body[0], b'+' | b'-') || !body.iter().all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-')) {
            return None;
        }
        let text = std::str::from_utf8(body).ok()?;
        let v: f64 = text.parse().ok()?;
        // ERANGE: overflow to infinity, or underflow (glibc reports an inexact result below
        // the normal range; a short decimal never lands exactly on a subnormal).
        let mantissa = text.split(['e', 'E']).next().unwrap_or("");
        let nonzero = mantissa.bytes().any(|c| matches!(c, b'1'..=b'9'));
        if v.is_infinite() || (nonzero && v.abs() < f64::MIN_POSITIVE) {
            return None;
        }
        v
    };
    Some(if negative { -magnitude } else { magnitude })
}

/// The part of a C99 hex float after `0x`: hex digits, an optional fraction, an optional
/// binary exponent `p[+-]n`.
fn hex_float(s: &[u8]) -> Option<f64> {
    let (mut mantissa, mut exp, mut digits, mut i) = (0f64, 0i64, 0usize, 0usize);
    let mut seen_dot = false;
    while i < s.len() {
        let c = s[i];
        if c == b'.' && !seen_dot {
            seen_dot = true;
        } else if let Some(d) = (c as char).to_digit(16) {
            mantissa = mantissa * 16.0 + d as f64;
            if seen_dot {
                exp -= 4;
            }
            digits += 1;
        } else {
            break;
        }
        i += 1;
    }
    if digits == 0 {
        return None;
    }
    if i < s.len() {
        if s[i] | 0x20 != b'p' {
            return None;
        }
        let e = std::str::from_utf8(&s[i + 1..]).ok()?;
        if e.is_empty() || !e.bytes().enumerate().all(|(k, c)| c.is_ascii_digit() || (k == 0 && matches!(c, b'+' | b'-'))) {
            return None;
        }
        exp += e.parse::<i64>().unwrap_or(if e.starts_with('-') { i64::MIN / 2 } else { i64::MAX / 2 });
    }
    let v = scale2(mantissa, exp.clamp(-4000, 4000) as i32);
    // ERANGE on overflow, or on an underflow that lost bits (an exact subnormal is fine).
    if v.is_infinite() || (mantissa != 0.0 && v.abs() < f64::MIN_POSITIVE && scale2(v, -exp.clamp(-4000, 4000) as i32) != mantissa) {
        return None;
    }
    Some(v)
}

/// `x * 2^exp` in steps that keep each factor representable (`ldexp`).
fn scale2(mut x: f64, mut exp: i32) -> f64 {
    while exp > 1000 {
        x *= 2f64.powi(1000);
        exp -= 1000;
    }
    while exp < -1000 {
        x *= 2f64.powi(-1000);
        exp += 1000;
    }
    x * 2f64.powi(exp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_parse_like_strtod() {
        assert_eq!(strtod_score(b"1.5"), Some(1.5));
        assert_eq!(strtod_score(b""), Some(0.0));
        assert_eq!(strtod_score(b"  -2"), Some(-2.0));
        assert_eq!(strtod_score(b"0x10"), Some(16.0));
        assert_eq!(strtod_score(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(strtod_score(b"1e400"), None);
        assert_eq!(strtod_score(b"nan"), None);
        assert_eq!(strtod_score(b"1 "), None);
        assert_eq!(strtod_score(b" "), None);
        assert_eq!(strtod_score(b"not-a-double"), None);
        assert_eq!(strtod_score(b"3\0junk"), Some(3.0));
        assert_eq!(strtod_score(b"+-1"), None);
        assert_eq!(strtod_score(b"1e-320"), None);
        assert_eq!(strtod_score(b"0x1p-1074"), Some(f64::from_bits(1)));
        assert_eq!(strtod_score(b"0x3p-1075"), None);
        assert_eq!(strtod_score(b"0x1.8p1"), Some(3.0));
        assert_eq!(strtod_score(b"\x0b7"), Some(7.0));
    }

    #[test]
    fn getkeys_takes_the_last_store() {
        let argv: Vec<Bytes> = ["sort", "abc", "store", "invalid", "store", "stillbad", "store", "def"].iter().map(|s| Bytes::from(*s)).collect();
        assert_eq!(key_positions(&argv, true), vec![1, 7]);
        assert_eq!(key_positions(&argv, false), vec![1]);
        let argv: Vec<Bytes> = ["sort", "abc", "by", "store", "limit", "0", "1"].iter().map(|s| Bytes::from(*s)).collect();
        assert_eq!(key_positions(&argv, true), vec![1]);
    }
}
