//! `DUMP` and `RESTORE`: a key's value in and out as Redis's payload (`persist::rdb::dump`), so
//! tools that copy keys between servers with them work against KeyMesh in both directions.

use bytes::Bytes;

use super::args::{eq_ignore_case, int};
use super::flags::*;
use super::{CommandSpec, Exec, Keys};
use crate::db::ctx::Ttl;
use crate::db::evict::AccessHint;
use crate::error::{CmdError, Reply};
use crate::frame::{Frame, OK};
use crate::notify::class;
use crate::persist::rdb::{dump_value, restore_value};

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: $keys, run: $run, group: "generic", summary: $summary }
    };
}

pub const COMMANDS: &[CommandSpec] = &[
    spec!("dump", 2, READONLY, Keys::Range(1, 1, 1), dump, "Returns a serialized representation of the value stored at a key."),
    spec!("restore", -4, WRITE | DENYOOM, Keys::Range(1, 1, 1), restore, "Creates a key from the serialized representation of a value."),
];

/// `DUMP key`: the value as a `RESTORE` payload in Redis's format (`persist::rdb::dump_value`);
/// the TTL is not in it, as in Redis.
fn dump(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    Ok(exec.ctx.lookup_read(&argv[1]).map_or(Frame::Null, |entry| Frame::bulk(dump_value(&entry.value))))
}

/// `RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]`: a
/// whole-value write of the payload's value, as `SET` or `SUNIONSTORE` write one (every
/// element at the write's version), then its expiry. Checked in Redis's order: the options,
/// the key (`BUSYKEY` without `REPLACE`), the TTL, the payload; a payload of a type KeyMesh
/// has no value for (a stream) is refused by name. A TTL already past deletes the key (with
/// `REPLACE`) and creates nothing, as in Redis.
fn restore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (mut replace, mut absttl, mut hint) = (false, false, None);
    let mut i = 4;
    while i < argv.len() {
        let value = argv.get(i + 1);
        match value {
            _ if eq_ignore_case(&argv[i], "replace") => replace = true,
            _ if eq_ignore_case(&argv[i], "absttl") => absttl = true,
            Some(v) if eq_ignore_case(&argv[i], "idletime") && !matches!(hint, Some(AccessHint::Frequency(_))) => {
                let idle = u64::try_from(int(v)?).map_err(|_| CmdError::err("Invalid IDLETIME value, must be >= 0"))?;
                hint = Some(AccessHint::IdleSeconds(idle));
                i += 1;
            }
            Some(v) if eq_ignore_case(&argv[i], "freq") && !matches!(hint, Some(AccessHint::IdleSeconds(_))) => {
                let freq = u8::try_from(int(v)?).map_err(|_| CmdError::err("Invalid FREQ value, must be >= 0 and <= 255"))?;
                hint = Some(AccessHint::Frequency(freq));
                i += 1;
            }
            _ => return Err(CmdError::Syntax),
        }
        i += 1;
    }
    let key = &argv[1];
    if !replace && exec.ctx.exists(key) {
        return Err(CmdError::Raw("BUSYKEY Target key name already exists.".into()));
    }
    let ttl = u64::try_from(int(&argv[2])?).map_err(|_| CmdError::err("Invalid TTL value, must be >= 0"))?;
    let value = restore_value(&argv[3]).map_err(|e| CmdError::err(e.to_string()))?;
    let deleted = replace && exec.ctx.delete(key);
    let now = exec.ctx.now_ms;
    let deadline = match ttl {
        0 => None,
        at if absttl => Some(at),
        ttl => Some(now.saturating_add(ttl)),
    };
    if deadline.is_some_and(|at| at <= now) {
        if deleted {
            exec.ctx.notify(class::GENERIC, "del", key);
        }
        return Ok(OK);
    }
    // The value and its TTL in one write, at one version (`Ctx::put_with_ttl`), as `SET … EX`.
    exec.ctx.put_with_ttl(key, value, deadline.map_or(Ttl::Clear, Ttl::At));
    if let Some(hint) = hint {
        let lfu = exec.server.settings().maxmemory_policy.lfu();
        exec.ctx.set_access(key, hint, lfu);
    }
    exec.ctx.notify(class::GENERIC, "restore", key);
    Ok(OK)
}
