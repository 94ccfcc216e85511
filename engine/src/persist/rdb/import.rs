//! Merging an RDB file's keys into the keyspace as writes of this node.
//!
//! Each key becomes one versioned write stamped by this node's clock when it is merged: a
//! string or list is a whole-value write, a hash, set or sorted set is a key-level delete and
//! its elements at the same version (the key becomes exactly the file's value, as after a
//! `DEL` and a write), and an expiry is the key's expiry register at that version. So the
//! imported keys merge with the peers by the same laws as live writes: a peer's newer write to
//! an imported key wins, an older one loses. Keys whose expiry has passed are skipped, as
//! Redis skips them when it loads a file; empty collections are skipped, as Redis does.
//!
//! Keys and sections KeyMesh has no type for refuse the file or are left out and listed, as
//! `OnUnsupported` says. KeyDB's member expiries (`EXPIREMEMBER`) are applied where KeyMesh
//! can: a member whose expiry has passed is left out, as KeyDB would expire it; a key with a
//! member expiry still to come is a key KeyMesh has no type for (members cannot expire alone).

use bytes::Bytes;

use super::read::{parse, Entry, RdbValue, Record, Section, Unsupported};
use super::{OnUnsupported, RdbError};
use crate::db::effect::{Effect, EffectKind, FieldState, MemberState, ZSetMemberState};
use crate::db::Store;
use crate::hlc::Version;
use crate::repl::merge;

/// What an import merged.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RdbImport {
    pub keys: u64,
    /// Keys skipped because their expiry had passed.
    pub expired: u64,
    /// Empty collections skipped.
    pub empty: u64,
    /// KeyDB members left out because their member expiry had passed.
    pub members_expired: u64,
    /// Keys left out (`OnUnsupported::Skip`), in file order.
    pub skipped: Vec<Unsupported>,
    /// Sections left out (`OnUnsupported::Skip`), in file order.
    pub sections_skipped: Vec<Section>,
    pub version: u32,
    /// The `redis-ver` the file names, if any.
    pub redis_version: Option<String>,
}

/// Checks and imports `bytes`, a whole RDB file, into `store`, refusing it if it holds
/// anything KeyMesh has no type for.
pub fn import(store: &Store, bytes: &[u8]) -> Result<RdbImport, RdbError> {
    import_with(store, bytes, OnUnsupported::Refuse)
}

/// Checks and imports `bytes`, a whole RDB file, into `store`. On an error some keys may have
/// been merged (the checksum is checked first, so only a file that is well-formed up to its
/// checksum but malformed inside gets that far); the caller wipes them.
pub fn import_with(store: &Store, bytes: &[u8], unsupported: OnUnsupported) -> Result<RdbImport, RdbError> {
    let mut result = RdbImport::default();
    let now_ms = store.hlc.wall_ms();
    let databases = store.databases();
    let summary = parse(bytes, &mut |entry| {
        let mut record = match entry {
            Entry::Key(record) => record,
            Entry::Unsupported(u) => {
                check_db(u.db, databases)?;
                if u.expire_ms.is_some_and(|at| at <= now_ms) {
                    // Gone anyway: Redis would not load it either.
                    result.expired += 1;
                    return Ok(());
                }
                if unsupported == OnUnsupported::Refuse {
                    return Err(refusal(u));
                }
                result.skipped.push(u);
                return Ok(());
            }
            Entry::Section(section) if unsupported == OnUnsupported::Skip => {
                result.sections_skipped.push(section);
                return Ok(());
            }
            Entry::Section(Section { what, hint }) => return Err(RdbError::UnsupportedSection { what, hint }),
        };
        check_db(record.db, databases)?;
        if record.expire_ms.is_some_and(|at| at <= now_ms) {
            result.expired += 1;
            return Ok(());
        }
        if !record.member_expiries.is_empty() {
            match drop_expired_members(&mut record, now_ms) {
                Ok(dropped) => result.members_expired += dropped,
                Err(u) if unsupported == OnUnsupported::Skip => {
                    result.skipped.push(u);
                    return Ok(());
                }
                Err(u) => return Err(refusal(u)),
            }
        }
        if record.value.is_empty() {
            result.empty += 1;
        } else {
            let v = Version { hlc: store.hlc.now(), node: store.node_id };
            for op in ops(&record, v) {
                merge::apply_op(store, &op);
            }
            result.keys += 1;
        }
        Ok(())
    })?;
    result.version = summary.version;
    result.redis_version = summary.redis_version;
    Ok(result)
}

fn check_db(db: usize, databases: usize) -> Result<(), RdbError> {
    if db >= databases {
        return Err(RdbError::Database { db: db as u64, databases });
    }
    Ok(())
}

fn refusal(u: Unsupported) -> RdbError {
    RdbError::Unsupported { kind: u.kind, db: u.db, key: String::from_utf8_lossy(&u.key).into_owned() }
}

/// Removes the members whose KeyDB member expiry has passed and counts them; a member expiry
/// still to come makes the key one KeyMesh has no type for (its members cannot expire alone).
fn drop_expired_members(record: &mut Record, now_ms: u64) -> Result<u64, Unsupported> {
    if let Some((member, at)) = record.member_expiries.iter().find(|(_, at)| *at > now_ms as i64) {
        let kind = match record.value {
            RdbValue::Set(_) => "set",
            RdbValue::ZSet(_) => "sorted set",
            RdbValue::Hash(_) => "hash",
            RdbValue::List(_) => "list",
            RdbValue::Str(_) => "string",
        };
        let kind = format!(
            "{kind} with member expiries (KeyDB EXPIREMEMBER: {:?} expires at {at} ms, {} in all)",
            String::from_utf8_lossy(member),
            record.member_expiries.len()
        );
        return Err(Unsupported { db: record.db, key: record.key.clone(), expire_ms: record.expire_ms, kind });
    }
    let gone: std::collections::HashSet<&[u8]> = record.member_expiries.iter().map(|(m, _)| m.as_slice()).collect();
    let before = record.value.len();
    match &mut record.value {
        RdbValue::Set(members) => members.retain(|m| !gone.contains(m.as_slice())),
        RdbValue::ZSet(members) => members.retain(|(m, _)| !gone.contains(m.as_slice())),
        RdbValue::Hash(fields) => fields.retain(|(f, _)| !gone.contains(f.as_slice())),
        // KeyDB expires members of sets, sorted sets and hashes only.
        RdbValue::List(_) | RdbValue::Str(_) => {}
    }
    Ok((before - record.value.len()) as u64)
}

/// The effects of writing `record` at version `v`.
pub fn ops(record: &Record, v: Version) -> Vec<Effect> {
    let (db, key) = (record.db, &record.key);
    let version = v;
    let op = |kind| Effect::new(db, key, kind);
    let bytes = |b: &Vec<u8>| Bytes::copy_from_slice(b);
    let mut out = Vec::with_capacity(3);
    match &record.value {
        RdbValue::Str(value) => out.push(op(EffectKind::StringSet { value: bytes(value), version })),
        RdbValue::List(items) => out.push(op(EffectKind::List { items: items.iter().map(bytes).collect(), version })),
        RdbValue::Hash(fields) => {
            out.push(Effect::delete(db, key, v));
            out.push(op(EffectKind::Hash(fields.iter().map(|(f, value)| FieldState { name: bytes(f), value: Some(bytes(value)), version }).collect())));
        }
        RdbValue::Set(members) => {
            out.push(Effect::delete(db, key, v));
            out.push(op(EffectKind::Set(members.iter().map(|m| MemberState { name: bytes(m), present: true, version }).collect())));
        }
        RdbValue::ZSet(members) => {
            out.push(Effect::delete(db, key, v));
            let members = members.iter().map(|(name, score)| ZSetMemberState { name: bytes(name), score: Some(*score), version }).collect();
            out.push(op(EffectKind::ZSet(members)));
        }
    }
    if let Some(at) = record.expire_ms {
        out.push(Effect::expire(db, key, at, v));
    }
    out
}
