//! Argument parsing shared by the command families, with Redis's error messages.

use std::ops::Range;

use bytes::Bytes;

use crate::db::zset::{LexBound, ScoreBound};
use crate::error::CmdError;
use crate::parse::parse_i64;

/// A private copy of bytes that must not be shared, in either direction:
/// - an argument, for anything a command stores (a list element, a hash field, a set or
///   sorted-set member). Arguments are slices of the connection's read buffer: stored as they
///   are, one 1-byte list element pinned the whole 16 KiB or more of the read that carried
///   it, for as long as it lived (10,000 LPUSHes pipelined between 8 KB requests held 120 MB);
/// - a stored list element, hash field or value, or set member, taken out of its collection
///   (set algebra, `SORT`; replies use `Frame::bulk`, which copies too). A stored element is a
///   `Bytes` that owns its buffer, and its first clone gives it a 32-byte shared header it
///   keeps for life: one `HGETALL` of a 100,000-field hash grew it by 30 bytes per field.
///   Sorted-set members are already shared (the member map and the score order hold one
///   each), so they are cloned, not copied.
pub fn own(arg: &[u8]) -> Bytes {
    Bytes::copy_from_slice(arg)
}

pub fn int(arg: &[u8]) -> Result<i64, CmdError> {
    parse_i64(arg).ok_or(CmdError::NotInteger)
}

/// A non-negative integer that fits `usize`, with the message Redis uses for counts.
pub fn count(arg: &[u8]) -> Result<usize, CmdError> {
    match parse_i64(arg) {
        Some(n) if n >= 0 => Ok(n as usize),
        Some(_) => Err(CmdError::err("value is out of range, must be positive")),
        None => Err(CmdError::NotInteger),
    }
}

/// A float as Redis's `getDoubleFromObject` accepts it: decimal or exponent forms, `inf`,
/// `-inf`; no NaN, no surrounding spaces.
pub fn float(arg: &[u8]) -> Result<f64, CmdError> {
    parse_float(arg).ok_or(CmdError::NotFloat)
}

pub fn parse_float(arg: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(arg).ok()?;
    if s.is_empty() || s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace) {
        return None;
    }
    let v = match s.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ => {
            // Rust accepts "nan", "inf" spellings Redis does not; only digits, sign, dot, exponent.
            if !s.bytes().all(|c| c.is_ascii_digit() || matches!(c, b'+' | b'-' | b'.' | b'e' | b'E')) {
                return None;
            }
            s.parse::<f64>().ok()?
        }
    };
    if v.is_nan() {
        None
    } else {
        Some(v)
    }
}

/// `ZRANGEBYSCORE`-style bound: `1.5`, `(1.5`, `-inf`, `+inf`.
pub fn score_bound(arg: &[u8]) -> Result<ScoreBound, CmdError> {
    let err = || CmdError::err("min or max is not a float");
    match arg.first() {
        Some(b'(') => Ok(ScoreBound { value: parse_float(&arg[1..]).ok_or_else(err)?, exclusive: true }),
        _ => Ok(ScoreBound { value: parse_float(arg).ok_or_else(err)?, exclusive: false }),
    }
}

/// `ZRANGEBYLEX`-style bound: `-`, `+`, `[a`, `(a`.
pub fn lex_bound(arg: &[u8]) -> Result<LexBound, CmdError> {
    match arg {
        b"-" => Ok(LexBound::NegInf),
        b"+" => Ok(LexBound::PosInf),
        [b'[', rest @ ..] => Ok(LexBound::Inclusive(Bytes::copy_from_slice(rest))),
        [b'(', rest @ ..] => Ok(LexBound::Exclusive(Bytes::copy_from_slice(rest))),
        _ => Err(CmdError::err("min or max not valid string range item")),
    }
}

pub fn eq_ignore_case(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// Resolves Redis's `start`/`stop` (negative = from the end) against `len`, returning the
/// inclusive index range, or `None` when it is empty.
pub fn resolve_range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 { (len + start).max(0) } else { start };
    let stop = if stop < 0 { len + stop } else { stop.min(len - 1) };
    if start > stop || start >= len || stop < 0 {
        None
    } else {
        Some((start as usize, stop as usize))
    }
}

/// Parses `[MATCH pattern] [COUNT n]` (and `TYPE t` when `allow_type`) after a SCAN cursor.
pub struct ScanOptions {
    pub pattern: Option<Bytes>,
    pub count: usize,
    pub kind: Option<Bytes>,
    pub novalues: bool,
}

pub fn scan_options(args: &[Bytes], allow_type: bool) -> Result<ScanOptions, CmdError> {
    let mut opts = ScanOptions { pattern: None, count: 10, kind: None, novalues: false };
    let mut i = 0;
    while i < args.len() {
        let more = i + 1 < args.len();
        if eq_ignore_case(&args[i], "match") && more {
            opts.pattern = Some(args[i + 1].clone());
            i += 2;
        } else if eq_ignore_case(&args[i], "count") && more {
            let n = int(&args[i + 1])?;
            if n < 1 {
                return Err(CmdError::Syntax);
            }
            opts.count = n as usize;
            i += 2;
        } else if allow_type && eq_ignore_case(&args[i], "type") && more {
            opts.kind = Some(args[i + 1].clone());
            i += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    Ok(opts)
}

/// A SCAN cursor: a non-negative integer.
pub fn cursor(arg: &[u8]) -> Result<u64, CmdError> {
    std::str::from_utf8(arg).ok().and_then(|s| s.parse::<u64>().ok()).ok_or_else(|| CmdError::err("invalid cursor"))
}

// ---------------------------------------------------------------------------------------
// `numkeys`-counted keys and the `*MPOP` commands.

/// Positions of the `numkeys`-counted keys that follow `argv[numkeys_idx]`, clamped to the
/// arguments present (the handler reports a bad count; this only decides what to lock).
pub fn numkeys_positions(argv: &[Bytes], numkeys_idx: usize) -> Vec<usize> {
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

/// The key positions of `CMD numkeys key...` (`ZUNION`, `LMPOP`, ...).
pub fn numkeys_at_1(argv: &[Bytes]) -> Vec<usize> {
    numkeys_positions(argv, 1)
}

/// Redis's `getRangeLongFromObjectOrReply(min, LONG_MAX, msg)`: a non-integer or a value
/// below `min` both answer `ERR <msg>`.
pub fn int_at_least(arg: &[u8], min: i64, msg: &str) -> Result<i64, CmdError> {
    match parse_i64(arg) {
        Some(n) if n >= min => Ok(n),
        _ => Err(CmdError::err(msg)),
    }
}

/// Redis's `getPositiveLongFromObjectOrReply` without a custom message.
pub fn positive(arg: &[u8]) -> Result<usize, CmdError> {
    int_at_least(arg, 0, "value is out of range, must be positive").map(|n| n as usize)
}

/// What an `*MPOP` command (`LMPOP`, `ZMPOP` and their blocking forms) asked for.
#[derive(Debug, PartialEq)]
pub struct Mpop<E> {
    /// Indexes into `argv` of the keys, in order.
    pub keys: Range<usize>,
    /// The end to pop from (`LEFT`/`RIGHT`, `MIN`/`MAX`), as the command's parser read it.
    pub end: E,
    pub count: usize,
}

/// Parses `numkeys key... <end> [COUNT count]` with `numkeys` at `argv[numkeys_idx]` (1 for
/// `LMPOP`/`ZMPOP`, 2 for `BLMPOP`/`BZMPOP`, after the timeout), with Redis's errors; `end`
/// parses the end word (a syntax error when it is not one).
pub fn mpop_args<E>(argv: &[Bytes], numkeys_idx: usize, end: impl Fn(&[u8]) -> Result<E, CmdError>) -> Result<Mpop<E>, CmdError> {
    let numkeys = int_at_least(&argv[numkeys_idx], 1, "numkeys should be greater than 0")?;
    let first = numkeys_idx + 1;
    let end_idx = usize::try_from(numkeys).unwrap_or(usize::MAX).saturating_add(first);
    if end_idx >= argv.len() {
        return Err(CmdError::Syntax);
    }
    let end = end(&argv[end_idx])?;
    let mut count = None;
    let mut j = end_idx + 1;
    while j < argv.len() {
        if count.is_none() && eq_ignore_case(&argv[j], "count") && j + 1 < argv.len() {
            count = Some(int_at_least(&argv[j + 1], 1, "count should be greater than 0")? as usize);
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    Ok(Mpop { keys: first..end_idx, end, count: count.unwrap_or(1) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_like_redis() {
        assert_eq!(resolve_range(0, -1, 3), Some((0, 2)));
        assert_eq!(resolve_range(-100, 100, 3), Some((0, 2)));
        assert_eq!(resolve_range(2, 1, 3), None);
        assert_eq!(resolve_range(5, 10, 3), None);
        assert_eq!(resolve_range(0, 0, 0), None);
    }

    #[test]
    fn floats_reject_nan_and_spaces() {
        assert_eq!(parse_float(b"1.5"), Some(1.5));
        assert_eq!(parse_float(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_float(b"5e3"), Some(5000.0));
        assert_eq!(parse_float(b"nan"), None);
        assert_eq!(parse_float(b" 1"), None);
        assert_eq!(parse_float(b"1x"), None);
    }

    #[test]
    fn mpop_arguments_parse_with_redis_errors() {
        let argv = |s: &str| s.split(' ').map(|w| Bytes::copy_from_slice(w.as_bytes())).collect::<Vec<_>>();
        let left = |a: &[u8]| if eq_ignore_case(a, "left") { Ok(true) } else { Err(CmdError::Syntax) };
        assert_eq!(mpop_args(&argv("lmpop 2 a b left count 3"), 1, left), Ok(Mpop { keys: 2..4, end: true, count: 3 }));
        assert_eq!(mpop_args(&argv("blmpop 0 1 a left"), 2, left), Ok(Mpop { keys: 3..4, end: true, count: 1 }));
        assert_eq!(mpop_args(&argv("lmpop 0 a left"), 1, left), Err(CmdError::err("numkeys should be greater than 0")));
        assert_eq!(mpop_args(&argv("lmpop 1 a left count 0"), 1, left), Err(CmdError::err("count should be greater than 0")));
        assert_eq!(mpop_args(&argv("lmpop 3 a left"), 1, left), Err(CmdError::Syntax));
        assert_eq!(mpop_args(&argv("lmpop 1 a up"), 1, left), Err(CmdError::Syntax));
        assert_eq!(mpop_args(&argv("lmpop 1 a left count 1 count 2"), 1, left), Err(CmdError::Syntax));
        assert_eq!(numkeys_positions(&argv("zunion 5 a b"), 1), vec![2, 3]);
        assert_eq!(numkeys_positions(&argv("zunion x a b"), 1), Vec::<usize>::new());
    }
}
