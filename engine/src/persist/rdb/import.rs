//! Merging an RDB file's keys into the keyspace as writes of this node.
//!
//! Each key becomes one versioned write stamped by this node's clock when it is merged: a
//! string or list is a whole-value write, a hash, set or sorted set is a key-level delete and
//! its elements at the same version (the key becomes exactly the file's value, as after a
//! `DEL` and a write), and an expiry is the key's expiry register at that version. So the
//! imported keys merge with the peers by the same laws as live writes: a peer's newer write to
//! an imported key wins, an older one loses. Keys whose expiry has passed are skipped, as
//! Redis skips them when it loads a file; empty collections are skipped, as Redis does.

use bytes::Bytes;

use super::read::{parse, RdbValue, Record};
use super::RdbError;
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
    pub version: u32,
    /// The `redis-ver` the file names, if any.
    pub redis_version: Option<String>,
}

/// Checks and imports `bytes`, a whole RDB file, into `store`. On an error some keys may have
/// been merged (the checksum is checked first, so only a file that is well-formed up to its
/// checksum but malformed inside gets that far); the caller wipes them.
pub fn import(store: &Store, bytes: &[u8]) -> Result<RdbImport, RdbError> {
    let mut result = RdbImport::default();
    let now_ms = store.hlc.wall_ms();
    let databases = store.databases();
    let summary = parse(bytes, &mut |record: Record| {
        if record.db >= databases {
            return Err(RdbError::Database { db: record.db as u64, databases });
        }
        if record.expire_ms.is_some_and(|at| at <= now_ms) {
            result.expired += 1;
        } else if record.value.is_empty() {
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
