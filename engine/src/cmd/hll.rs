//! HyperLogLog commands: `PFADD PFCOUNT PFMERGE`, and Redis's `PFDEBUG`/`PFSELFTEST`.
//! The values are Redis's HLL strings (`crate::hll`); how they version and replicate is in
//! `db::hll`.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::args::eq_ignore_case;
use super::flags::*;
use super::{CommandSpec, Exec, Keys};
use crate::error::{CmdError, Reply};
use crate::frame::{Frame, OK};
use crate::hll::{self, estimate, HllError, REGISTERS};
use crate::notify::class;

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: $keys, run: $run, group: "hyperloglog", summary: $summary }
    };
}

pub const COMMANDS: &[CommandSpec] = &[
    spec!("pfadd", -2, WRITE | DENYOOM | FAST, Keys::Range(1, 1, 1), pfadd, "Adds elements to a HyperLogLog key. Creates the key if it doesn't exist."),
    spec!("pfcount", -2, READONLY, Keys::Range(1, -1, 1), pfcount, "Returns the approximated cardinality of the set(s) observed by the HyperLogLog key(s)."),
    spec!("pfmerge", -2, WRITE | DENYOOM, Keys::Range(1, -1, 1), pfmerge, "Merges one or more HyperLogLog values into a single key."),
    spec!("pfdebug", 3, WRITE | DENYOOM | ADMIN, Keys::Range(2, 2, 1), pfdebug, "Internal commands for debugging HyperLogLog values."),
    spec!("pfselftest", 1, ADMIN, Keys::None, pfselftest, "An internal command for testing HyperLogLog values."),
];

fn sparse_max(exec: &Exec) -> usize {
    exec.ctx.store.hll_sparse_max_bytes.load(Ordering::Relaxed)
}

fn packed(index: usize, value: u8) -> u32 {
    (index as u32) << 8 | value as u32
}

fn pfadd(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let max = sparse_max(exec);
    let write = exec.ctx.hll_edit(&argv[1], |hll, raised| {
        for element in &argv[2..] {
            let (index, count) = hll::pattern(element);
            if hll::set_register(hll, index, count, max)? {
                raised.push(packed(index, count));
            }
        }
        Ok(())
    })?;
    let updated = write.created || write.raised > 0;
    if updated {
        exec.ctx.notify(class::STRING, "pfadd", &argv[1]);
    }
    Ok(Frame::Integer(updated as i64))
}

fn pfcount(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    if argv.len() > 2 {
        // The cardinality of the union.
        let mut union = Box::new([0u8; REGISTERS]);
        for key in &argv[1..] {
            if let Some(h) = exec.ctx.hll(key)? {
                hll::max_into(h, &mut union)?;
            }
        }
        return Ok(Frame::Integer(estimate::cardinality_of(&union) as i64));
    }
    let (count, fresh) = match exec.ctx.hll(&argv[1])? {
        None => return Ok(Frame::Integer(0)),
        Some(h) => match hll::cached_count(h) {
            Some(c) => (c, false),
            None => (hll::count(h)?, true),
        },
    };
    if fresh {
        exec.ctx.hll_store_count(&argv[1], count);
    }
    Ok(Frame::Integer(count as i64))
}

fn pfmerge(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let mut union = Box::new([0u8; REGISTERS]);
    let mut dense = false;
    // The destination counts as a source too, as in Redis.
    for key in &argv[1..] {
        if let Some(h) = exec.ctx.hll(key)? {
            dense |= hll::check(h)? == hll::Encoding::Dense;
            hll::max_into(h, &mut union)?;
        }
    }
    let max = sparse_max(exec);
    exec.ctx.hll_edit(&argv[1], |hll, raised| {
        if dense {
            hll::to_dense(hll)?;
        }
        for (index, &value) in union.iter().enumerate() {
            if value > 0 && hll::set_register(hll, index, value, max)? {
                raised.push(packed(index, value));
            }
        }
        Ok(())
    })?;
    exec.ctx.notify(class::STRING, "pfadd", &argv[1]);
    Ok(OK)
}

fn pfdebug(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let sub = &argv[1];
    let key = &argv[2];
    let Some(h) = exec.ctx.hll(key)? else {
        return Err(CmdError::err("The specified key does not exist"));
    };
    if eq_ignore_case(sub, "encoding") {
        return Ok(Frame::Simple(hll::check(h)?.name()));
    }
    if eq_ignore_case(sub, "decode") {
        return match hll::decode_sparse(h) {
            Ok(text) => Ok(Frame::Bulk(Bytes::from(text))),
            Err(HllError::NotHll) => Err(CmdError::err("HLL encoding is not sparse")),
            Err(e) => Err(e.into()),
        };
    }
    if eq_ignore_case(sub, "getreg") {
        let registers = hll::registers(h)?;
        // Redis converts a sparse HLL to dense here; the encoding is local to a node.
        exec.ctx.hll_to_dense(key)?;
        return Ok(Frame::Array(registers.iter().map(|&r| Frame::Integer(r as i64)).collect()));
    }
    if eq_ignore_case(sub, "todense") {
        return Ok(Frame::Integer(exec.ctx.hll_to_dense(key)? as i64));
    }
    Err(CmdError::err(format!("Unknown PFDEBUG subcommand '{}'", String::from_utf8_lossy(sub))))
}

/// Redis's self test: registers keep their values, and sparse and dense HLLs fed the same
/// 10 million elements agree and stay within six standard errors at every power of ten.
fn pfselftest(_exec: &mut Exec, _argv: &[Bytes]) -> Reply {
    hll::self_test().map_err(|m| CmdError::Raw(format!("TESTFAILED {m}")))?;
    Ok(OK)
}
