//! Whole-set reads: `ZRANDMEMBER` and `ZSCAN`.

use bytes::Bytes;

use super::{owned, read, scored_reply};
use crate::cmd::args::{cursor, eq_ignore_case, scan_options};
use crate::cmd::Exec;
use crate::error::{CmdError, Reply};
use crate::frame::Frame;
use crate::glob::glob_match;
use crate::parse::parse_i64;

/// Replies longer than this are refused rather than built (a negative ZRANDMEMBER count
/// repeats members, so its reply is not bounded by the set's size).
const MAX_RANDOM_REPLY: u64 = 1 << 24;

pub(super) fn zrandmember(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    if argv.len() < 3 {
        let member = read(exec, &argv[1])?.and_then(|z| z.random_member(&mut rand::rng()));
        return Ok(member.map_or(Frame::Null, |m| Frame::Bulk(m.to_bytes())));
    }
    let l = match parse_i64(&argv[2]) {
        Some(i64::MIN) => return Err(CmdError::err(format!("value is out of range, value must between {} and {}", -i64::MAX, i64::MAX))),
        Some(n) => n,
        None => return Err(CmdError::NotInteger),
    };
    if argv.len() > 4 || (argv.len() == 4 && !eq_ignore_case(&argv[3], "withscores")) {
        return Err(CmdError::Syntax);
    }
    let withscores = argv.len() == 4;
    if withscores && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&l) {
        return Err(CmdError::err("value is out of range"));
    }
    let resp = exec.client.resp;
    let Some(z) = read(exec, &argv[1])? else {
        return Ok(Frame::Array(Vec::new()));
    };
    let size = z.len();
    if l == 0 || size == 0 {
        return Ok(Frame::Array(Vec::new()));
    }
    if l < 0 && l.unsigned_abs() > MAX_RANDOM_REPLY {
        return Err(CmdError::err("value is out of range"));
    }
    let items: Vec<(Bytes, f64)> = if l > 0 && l as u64 >= size as u64 {
        owned(z.iter())
    } else {
        // Distinct members in no particular order, or (a negative count) repeating ones.
        owned(z.sample_members(l, &mut rand::rng()).into_iter())
    };
    Ok(scored_reply(items, withscores, resp))
}

/// ZSCAN returns the whole set in one reply with cursor 0 (as Redis does for small sets).
pub(super) fn zscan(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    cursor(&argv[2])?;
    let opts = scan_options(&argv[3..], false);
    let empty = || Frame::Array(vec![Frame::bulk("0"), Frame::Array(Vec::new())]);
    let Some(z) = read(exec, &argv[1])? else {
        return Ok(empty());
    };
    let opts = opts?;
    let mut out = Vec::new();
    for (m, s) in z.iter() {
        if opts.pattern.as_ref().is_some_and(|p| !glob_match(p, m, false)) {
            continue;
        }
        out.push(Frame::Bulk(m.to_bytes()));
        out.push(Frame::bulk_f64(s));
    }
    Ok(Frame::Array(vec![Frame::bulk("0"), Frame::Array(out)]))
}
