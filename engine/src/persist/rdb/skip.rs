//! Parsing past what KeyMesh has no type for, exactly as Redis's `rdbLoadObject` and
//! `rdbLoadRio` read it, so that an import can report it and go on with the next key:
//! streams, module values in the annotated format, hashes with field expiries (Redis 7.4),
//! KeyDB's cron jobs, function libraries and module auxiliary data. Each returns a description
//! for the log and the refusal. Every loop consumes bytes on each turn, so a corrupt count
//! ends in a truncation error, never a long spin.
//!
//! Layouts: Redis 7.0.15 `src/rdb.c` (`rdbLoadObject`, stream types 15 and 19,
//! `rdbLoadCheckModuleValue`, `rdbFunctionLoad`), Redis 7.4 `src/rdb.c` (stream type 21's
//! consumer `active_time`, the hash-field-expiry types 22 to 25, `RDB_OPCODE_SLOT_INFO`), and
//! KeyDB 6.3 `src/rdb.cpp` (`RDB_TYPE_CRON`).

use super::read::{Reader, Section};
use super::RdbError;

// Module value opcodes (rdb.h, `RDB_MODULE_OPCODE_*`).
const MODULE_EOF: u64 = 0;
const MODULE_SINT: u64 = 1;
const MODULE_UINT: u64 = 2;
const MODULE_FLOAT: u64 = 3;
const MODULE_DOUBLE: u64 = 4;
const MODULE_STRING: u64 = 5;

/// A stream of layout `revision` (0: type 15, Redis 5 to 6.2 and KeyDB; 1: type 19, Redis 7.0,
/// which adds the first and max-deleted ids, the entries-added count and each group's offset;
/// 2: type 21, Redis 7.2, which adds each consumer's active time).
pub(super) fn stream(r: &mut Reader, revision: u8) -> Result<String, RdbError> {
    // The radix tree's nodes: a 16-byte master id, then a listpack of entries.
    let nodes = r.len()?;
    for _ in 0..nodes {
        let id = r.string()?;
        if id.len() != 16 {
            return Err(r.corrupt(format!("a stream node key of {} bytes, not a 16-byte stream id", id.len())));
        }
        r.skip_string("a stream listpack")?;
    }
    let entries = r.len()?;
    // The last id (ms, seq); from revision 1 the first id, the max deleted id, entries added.
    let ids = if revision >= 1 { 7 } else { 2 };
    for _ in 0..ids {
        r.len()?;
    }
    let groups = r.len()?;
    let mut pending = 0u64;
    for _ in 0..groups {
        r.skip_string("a consumer group name")?;
        r.len()?;
        r.len()?;
        if revision >= 1 {
            r.len()?; // the group's entries-read offset
        }
        // The group's pending entries: a raw 16-byte id, the delivery time (8 bytes, ms), the
        // delivery count.
        let pel = r.len()?;
        pending = pending.saturating_add(pel);
        for _ in 0..pel {
            r.take(16 + 8, "a pending entry")?;
            r.len()?;
        }
        let consumers = r.len()?;
        for _ in 0..consumers {
            r.skip_string("a consumer name")?;
            // Seen time; from revision 2 the active time too (8 bytes each).
            r.take(if revision >= 2 { 16 } else { 8 }, "a consumer's times")?;
            // The consumer's own pending ids, 16 raw bytes each, resolved against the group's.
            let own = r.len()?;
            for _ in 0..own {
                r.take(16, "a consumer's pending id")?;
            }
        }
    }
    Ok(format!("stream ({entries} entries, {groups} consumer groups, {pending} pending)"))
}

/// A module value of RDB type 7: the module type's id, then opcode-annotated data up to the
/// module EOF opcode (`rdbLoadCheckModuleValue`).
pub(super) fn module_value(r: &mut Reader) -> Result<String, RdbError> {
    let id = r.len()?;
    annotated(r)?;
    Ok(format!("module value (module type {:?})", module_name(id)))
}

/// Module auxiliary data (`RDB_OPCODE_MODULE_AUX`): the module type's id, the `when` field
/// (itself annotated as an unsigned integer), then annotated data up to the module EOF.
pub(super) fn module_aux(r: &mut Reader) -> Result<Section, RdbError> {
    let id = r.len()?;
    let when_opcode = r.len()?;
    if when_opcode != MODULE_UINT {
        return Err(r.corrupt(format!("module aux data whose 'when' has opcode {when_opcode}, not {MODULE_UINT}")));
    }
    r.len()?;
    annotated(r)?;
    Ok(Section { what: format!("auxiliary data of module type {:?}", module_name(id)), hint: "KeyMesh loads no Redis modules" })
}

/// Opcode-annotated module data, up to and including `RDB_MODULE_OPCODE_EOF`.
fn annotated(r: &mut Reader) -> Result<(), RdbError> {
    loop {
        match r.len()? {
            MODULE_EOF => return Ok(()),
            MODULE_SINT | MODULE_UINT => drop(r.len()?),
            MODULE_FLOAT => drop(r.take(4, "a module float")?),
            MODULE_DOUBLE => drop(r.take(8, "a module double")?),
            MODULE_STRING => r.skip_string("a module string")?,
            other => return Err(r.corrupt(format!("module value opcode {other}"))),
        }
    }
}

/// A module type's 9-character name from the top 54 bits of its id (`moduleTypeNameByID`).
fn module_name(id: u64) -> String {
    const CHARSET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut name = [0u8; 9];
    let mut bits = id >> 10;
    for c in name.iter_mut().rev() {
        *c = CHARSET[(bits & 63) as usize];
        bits >>= 6;
    }
    String::from_utf8_lossy(&name).into_owned()
}

/// A hash with field expiries: type 24 (`with_min`: the hash's next expiry, 8 bytes, then
/// each field's TTL relative to it) or the 7.4 release candidates' type 22 (absolute TTLs);
/// then a count and, per field, its TTL, name and value.
pub(super) fn hash_metadata(r: &mut Reader, with_min: bool) -> Result<String, RdbError> {
    if with_min {
        r.take(8, "a hash's next field expiry")?;
    }
    let fields = r.len()?;
    for _ in 0..fields {
        r.len()?;
        r.skip_string("a hash field")?;
        r.skip_string("a hash value")?;
    }
    Ok(format!("hash with field expiries ({fields} fields; Redis 7.4 HEXPIRE)"))
}

/// A small hash with field expiries: type 25 (`with_min`: the next expiry, 8 bytes, first) or
/// the release candidates' type 23; then a listpack of field, value, TTL triplets.
pub(super) fn hash_listpack_ex(r: &mut Reader, with_min: bool) -> Result<String, RdbError> {
    if with_min {
        r.take(8, "a hash's next field expiry")?;
    }
    r.skip_string("a hash listpack")?;
    Ok("hash with field expiries (Redis 7.4 HEXPIRE)".into())
}

/// KeyDB's cron job (`RDB_TYPE_CRON`, KeyDB 6.3 `rdbLoadObject`): the script, start time and
/// interval (8 bytes each, ms), its keys, its arguments.
pub(super) fn keydb_cron(r: &mut Reader) -> Result<String, RdbError> {
    r.skip_string("a cron script")?;
    r.take(16, "a cron job's start and interval")?;
    for what in ["a cron job's key", "a cron job's argument"] {
        for _ in 0..r.len()? {
            r.skip_string(what)?;
        }
    }
    Ok("KeyDB cron job (KEYDB.CRON)".into())
}

const FUNCTION_HINT: &str = "load it with FUNCTION LOAD on each KeyMesh node";

/// A function library (`RDB_OPCODE_FUNCTION2`): its code, which names it in its first line
/// (`#!lua name=mylib`).
pub(super) fn function(r: &mut Reader) -> Result<Section, RdbError> {
    let code = r.string()?;
    let first = code.split(|&b| b == b'\n').next().unwrap_or_default();
    let name = String::from_utf8_lossy(first).split_whitespace().find_map(|w| w.strip_prefix("name=").map(str::to_string));
    let what = match name {
        Some(name) => format!("function library {name:?}"),
        None => "a function library".into(),
    };
    Ok(Section { what, hint: FUNCTION_HINT })
}

/// A function library as Redis 7.0's release candidates wrote it (`RDB_OPCODE_FUNCTION_PRE_GA`):
/// name, engine, a description flag and the description, the code.
pub(super) fn function_pre_ga(r: &mut Reader) -> Result<Section, RdbError> {
    let name = String::from_utf8_lossy(&r.string()?).into_owned();
    r.skip_string("a function engine")?;
    if r.len()? != 0 {
        r.skip_string("a function description")?;
    }
    r.skip_string("a function library's code")?;
    Ok(Section { what: format!("function library {name:?} (Redis 7.0 release-candidate format)"), hint: FUNCTION_HINT })
}
