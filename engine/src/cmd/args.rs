//! Argument parsing shared by the command families, with Redis's error messages.

use bytes::Bytes;

use crate::db::zset::{LexBound, ScoreBound};
use crate::error::CmdError;
use crate::parse::parse_i64;

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
}
