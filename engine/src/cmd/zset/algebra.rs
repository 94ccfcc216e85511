//! The set algebra: `ZUNION`, `ZINTER`, `ZDIFF`, their `STORE` forms and `ZINTERCARD`.

use bytes::Bytes;

use super::{owned, scored_reply, store_set};
use crate::cmd::args::{eq_ignore_case, int, int_at_least, parse_float};
use crate::cmd::Exec;
use crate::db::entry::FieldMap;
use crate::db::zset::SortedSet;
use crate::db::Value;
use crate::error::{CmdError, Reply};
use crate::frame::Frame;
use crate::hlc::Version;

#[derive(Clone, Copy, PartialEq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

/// One input: its members and scores (a plain set's members score 1) and its weight.
struct Source {
    items: Vec<(Bytes, f64)>,
    weight: f64,
}

/// Redis's `zunionInterAggregate`, NaN conventions included.
fn aggregate(target: &mut f64, value: f64, how: Aggregate) {
    match how {
        Aggregate::Sum => {
            *target += value;
            if target.is_nan() {
                *target = 0.0;
            }
        }
        Aggregate::Min => {
            if value < *target {
                *target = value;
            }
        }
        Aggregate::Max => {
            if value > *target {
                *target = value;
            }
        }
    }
}

/// A weighted score, with Redis's `0 * inf = 0` convention.
fn weighted(score: f64, weight: f64) -> f64 {
    let s = score * weight;
    if s.is_nan() {
        0.0
    } else {
        s
    }
}

/// The members of a sorted set or set input (WRONGTYPE for anything else).
fn read_source(exec: &mut Exec, key: &[u8]) -> Result<Vec<(Bytes, f64)>, CmdError> {
    match exec.ctx.lookup_read(key).map(|e| &e.value) {
        None => Ok(Vec::new()),
        Some(Value::ZSet(z)) => Ok(owned(z.iter())),
        Some(Value::Set(s)) => Ok(s.keys().map(|m| (m.to_bytes(), 1.0)).collect()),
        Some(_) => Err(CmdError::WrongType),
    }
}

fn lookup_map(items: &[(Bytes, f64)]) -> FieldMap<f64> {
    let mut map = FieldMap::with_capacity(items.len());
    for (m, s) in items {
        map.insert(m.clone(), *s);
    }
    map
}

/// Redis's `zunionInterDiffGenericCommand`: `numkeys key... [WEIGHTS w...] [AGGREGATE
/// SUM|MIN|MAX] [WITHSCORES]` from `argv[numkeys_idx]`, `[LIMIT n]` for ZINTERCARD.
fn setop_generic(exec: &mut Exec, argv: &[Bytes], dst: Option<&Bytes>, numkeys_idx: usize, op: SetOp, card_only: bool) -> Reply {
    let setnum = int(&argv[numkeys_idx])?;
    if setnum < 1 {
        let name = String::from_utf8_lossy(&argv[0]).to_ascii_lowercase();
        return Err(CmdError::err(format!("at least 1 input key is needed for '{name}' command")));
    }
    let first = numkeys_idx + 1;
    if setnum > (argv.len() - first) as i64 {
        return Err(CmdError::Syntax);
    }
    let setnum = setnum as usize;
    let mut sources = Vec::with_capacity(setnum);
    for key in &argv[first..first + setnum] {
        sources.push(Source { items: read_source(exec, key)?, weight: 1.0 });
    }

    let (mut how, mut withscores, mut limit) = (Aggregate::Sum, false, 0usize);
    let mut j = first + setnum;
    while j < argv.len() {
        let remaining = argv.len() - j;
        let a = &argv[j];
        if op != SetOp::Diff && !card_only && remaining > setnum && eq_ignore_case(a, "weights") {
            j += 1;
            for source in sources.iter_mut() {
                source.weight = parse_float(&argv[j]).ok_or_else(|| CmdError::err("weight value is not a float"))?;
                j += 1;
            }
        } else if op != SetOp::Diff && !card_only && remaining >= 2 && eq_ignore_case(a, "aggregate") {
            let b = &argv[j + 1];
            how = if eq_ignore_case(b, "sum") {
                Aggregate::Sum
            } else if eq_ignore_case(b, "min") {
                Aggregate::Min
            } else if eq_ignore_case(b, "max") {
                Aggregate::Max
            } else {
                return Err(CmdError::Syntax);
            };
            j += 2;
        } else if dst.is_none() && !card_only && eq_ignore_case(a, "withscores") {
            withscores = true;
            j += 1;
        } else if card_only && remaining >= 2 && eq_ignore_case(a, "limit") {
            limit = int_at_least(&argv[j + 1], 0, "LIMIT can't be negative")? as usize;
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }

    if op != SetOp::Diff {
        // Smallest first, as Redis: intersections probe the others with the smallest's members.
        sources.sort_by_key(|s| s.items.len());
    }
    // Stored results are whole-value writes: `put` stamps every member.
    let v = Version::ZERO;
    let mut result = SortedSet::default();
    match op {
        SetOp::Inter => {
            let others: Vec<(FieldMap<f64>, f64)> = sources[1..].iter().map(|s| (lookup_map(&s.items), s.weight)).collect();
            let mut cardinality = 0usize;
            'members: for (m, s) in &sources[0].items {
                let mut score = weighted(*s, sources[0].weight);
                for (map, weight) in &others {
                    match map.get(m) {
                        Some(&x) => aggregate(&mut score, x * weight, how),
                        None => continue 'members,
                    }
                }
                if card_only {
                    cardinality += 1;
                    if limit > 0 && cardinality >= limit {
                        break;
                    }
                } else {
                    result.insert(m.clone(), score, v);
                }
            }
            if card_only {
                return Ok(Frame::Integer(cardinality as i64));
            }
        }
        SetOp::Union => {
            let mut acc: FieldMap<f64> = FieldMap::default();
            for source in &sources {
                for (m, s) in &source.items {
                    let score = weighted(*s, source.weight);
                    match acc.get_mut(m) {
                        Some(existing) => aggregate(existing, score, how),
                        None => {
                            acc.insert(m.clone(), score);
                        }
                    }
                }
            }
            for (m, s) in acc {
                result.insert(m, s, v);
            }
        }
        SetOp::Diff => {
            let mut others: FieldMap<()> = FieldMap::default();
            for source in &sources[1..] {
                for (m, _) in &source.items {
                    others.insert(m.clone(), ());
                }
            }
            for (m, s) in &sources[0].items {
                if !others.contains_key(m) {
                    result.insert(m.clone(), *s, v);
                }
            }
        }
    }
    match dst {
        Some(dst) => {
            let event = match op {
                SetOp::Union => "zunionstore",
                SetOp::Inter => "zinterstore",
                SetOp::Diff => "zdiffstore",
            };
            Ok(Frame::Integer(store_set(exec, dst, result, event) as i64))
        }
        None => Ok(scored_reply(owned(result.iter()), withscores, exec.client.resp)),
    }
}

pub(super) fn zunionstore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    setop_generic(exec, argv, Some(&argv[1]), 2, SetOp::Union, false)
}

pub(super) fn zinterstore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    setop_generic(exec, argv, Some(&argv[1]), 2, SetOp::Inter, false)
}

pub(super) fn zdiffstore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    setop_generic(exec, argv, Some(&argv[1]), 2, SetOp::Diff, false)
}

pub(super) fn zunion(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    setop_generic(exec, argv, None, 1, SetOp::Union, false)
}

pub(super) fn zinter(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    setop_generic(exec, argv, None, 1, SetOp::Inter, false)
}

pub(super) fn zdiff(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    setop_generic(exec, argv, None, 1, SetOp::Diff, false)
}

pub(super) fn zintercard(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    setop_generic(exec, argv, None, 1, SetOp::Inter, true)
}
