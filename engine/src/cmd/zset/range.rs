//! Reads: the point reads (`ZCARD`, `ZSCORE`, `ZRANK`, `ZCOUNT`, ...) and `ZRANGE` in all
//! its forms (by rank, score or lex, reversed, limited, `ZRANGESTORE` and the legacy
//! `ZRANGEBYSCORE`-style commands).

use bytes::Bytes;

use super::{read, scored_reply, store_items, window};
use crate::cmd::args::{eq_ignore_case, int, lex_bound, score_bound};
use crate::cmd::Exec;
use crate::db::zset::{LexBound, ScoreBound, SortedSet};
use crate::error::{CmdError, Reply};
use crate::frame::Frame;

pub(super) fn zcard(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    Ok(Frame::Integer(read(exec, &argv[1])?.map_or(0, |z| z.len()) as i64))
}

pub(super) fn zscore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let score = read(exec, &argv[1])?.and_then(|z| z.score(&argv[2]));
    Ok(score.map_or(Frame::Null, Frame::Double))
}

pub(super) fn zmscore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let z = read(exec, &argv[1])?;
    let scores = argv[2..].iter().map(|m| z.as_ref().and_then(|z| z.score(m)).map_or(Frame::Null, Frame::Double)).collect();
    Ok(Frame::Array(scores))
}

pub(super) fn zrank(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let rank = read(exec, &argv[1])?.and_then(|z| z.rank(&argv[2]));
    Ok(rank.map_or(Frame::Null, |r| Frame::Integer(r as i64)))
}

pub(super) fn zrevrank(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let rank = read(exec, &argv[1])?.and_then(|z| z.rev_rank(&argv[2]));
    Ok(rank.map_or(Frame::Null, |r| Frame::Integer(r as i64)))
}

pub(super) fn zcount(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (min, max) = (score_bound(&argv[2])?, score_bound(&argv[3])?);
    Ok(Frame::Integer(read(exec, &argv[1])?.map_or(0, |z| z.count_by_score(min, max)) as i64))
}

pub(super) fn zlexcount(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (min, max) = (lex_bound(&argv[2])?, lex_bound(&argv[3])?);
    Ok(Frame::Integer(read(exec, &argv[1])?.map_or(0, |z| z.count_by_lex(&min, &max)) as i64))
}

#[derive(Clone, Copy, PartialEq)]
enum By {
    Auto,
    Rank,
    Score,
    Lex,
}

enum Range {
    Rank(i64, i64),
    Score(ScoreBound, ScoreBound),
    Lex(LexBound, LexBound),
}

/// Members of ranks `start..=stop` (Redis's index rules, negative from the end).
pub(super) fn rank_range(z: &SortedSet, start: i64, stop: i64, rev: bool) -> Vec<(Bytes, f64)> {
    let len = z.len() as i64;
    let mut start = if start < 0 { len + start } else { start };
    let stop = if stop < 0 { len + stop } else { stop };
    if start < 0 {
        start = 0;
    }
    if start > stop || start >= len {
        return Vec::new();
    }
    z.range_by_rank(start as usize, stop.min(len - 1) as usize, rev)
}

/// Redis's `zrangeGenericCommand`: `<src> <min> <max> [BYSCORE|BYLEX] [REV] [WITHSCORES]
/// [LIMIT offset count]` starting at `argv[src_idx]`; `dst` makes it ZRANGESTORE. `by` and
/// `rev` are fixed by the legacy commands and `Auto`/`None` for ZRANGE.
fn zrange_generic(exec: &mut Exec, argv: &[Bytes], src_idx: usize, dst: Option<&Bytes>, mut by: By, mut rev: Option<bool>) -> Reply {
    let mut withscores = false;
    let (mut offset, mut limit) = (0i64, -1i64);
    let mut j = src_idx + 3;
    while j < argv.len() {
        let left = argv.len() - j - 1;
        let a = &argv[j];
        if dst.is_none() && eq_ignore_case(a, "withscores") {
            withscores = true;
        } else if eq_ignore_case(a, "limit") && left >= 2 {
            offset = int(&argv[j + 1])?;
            limit = int(&argv[j + 2])?;
            j += 2;
        } else if rev.is_none() && eq_ignore_case(a, "rev") {
            rev = Some(true);
        } else if by == By::Auto && eq_ignore_case(a, "bylex") {
            by = By::Lex;
        } else if by == By::Auto && eq_ignore_case(a, "byscore") {
            by = By::Score;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let rev = rev.unwrap_or(false);
    if by == By::Auto {
        by = By::Rank;
    }
    if limit != -1 && by == By::Rank {
        return Err(CmdError::err("syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"));
    }
    if withscores && by == By::Lex {
        return Err(CmdError::err("syntax error, WITHSCORES not supported in combination with BYLEX"));
    }
    // Reversed score and lex ranges are given as `max min`.
    let (lo, hi) = if rev && by != By::Rank { (&argv[src_idx + 2], &argv[src_idx + 1]) } else { (&argv[src_idx + 1], &argv[src_idx + 2]) };
    let range = match by {
        By::Score => Range::Score(score_bound(lo)?, score_bound(hi)?),
        By::Lex => Range::Lex(lex_bound(lo)?, lex_bound(hi)?),
        By::Rank | By::Auto => Range::Rank(int(lo)?, int(hi)?),
    };

    let resp = exec.client.resp;
    let items = match read(exec, &argv[src_idx])? {
        None => Vec::new(),
        Some(z) => match &range {
            Range::Rank(start, stop) => rank_range(z, *start, *stop, rev),
            Range::Score(min, max) if rev => window(z.range_by_score(*min, *max).rev(), offset, limit),
            Range::Score(min, max) => window(z.range_by_score(*min, *max), offset, limit),
            Range::Lex(min, max) if rev => window(z.range_by_lex(min, max).rev(), offset, limit),
            Range::Lex(min, max) => window(z.range_by_lex(min, max), offset, limit),
        },
    };
    match dst {
        Some(dst) => Ok(Frame::Integer(store_items(exec, dst, items, "zrangestore") as i64)),
        None => Ok(scored_reply(items, withscores, resp)),
    }
}

pub(super) fn zrange(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zrange_generic(exec, argv, 1, None, By::Auto, None)
}

pub(super) fn zrevrange(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zrange_generic(exec, argv, 1, None, By::Rank, Some(true))
}

pub(super) fn zrangebyscore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zrange_generic(exec, argv, 1, None, By::Score, Some(false))
}

pub(super) fn zrevrangebyscore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zrange_generic(exec, argv, 1, None, By::Score, Some(true))
}

pub(super) fn zrangebylex(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zrange_generic(exec, argv, 1, None, By::Lex, Some(false))
}

pub(super) fn zrevrangebylex(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zrange_generic(exec, argv, 1, None, By::Lex, Some(true))
}

pub(super) fn zrangestore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    zrange_generic(exec, argv, 2, Some(&argv[1]), By::Auto, None)
}
