//! Builds the replicated effect (`keymesh_proto::Op`) of a local write from the state it left.
//! Effects carry resulting state and versions, never commands, so a peer merges them in any
//! order (see `merge`).

use bytes::Bytes;
use keymesh_proto as pb;

use crate::db::entry::{Collection, Field};
use crate::db::zset::SortedSet;
use crate::db::{Kind, Value};
use crate::hlc::Version;

pub fn version(v: Version) -> Option<pb::Version> {
    Some(pb::Version { hlc: v.hlc, node: v.node })
}

pub fn from_pb(v: Option<&pb::Version>) -> Version {
    v.map_or(Version::ZERO, |v| Version { hlc: v.hlc, node: v.node })
}

fn op(db: usize, key: &[u8], effect: pb::op::Effect) -> pb::Op {
    pb::Op { db: db as u32, key: key.to_vec(), effect: Some(effect) }
}

pub fn delete(db: usize, key: &[u8], v: Version) -> pb::Op {
    op(db, key, pb::op::Effect::Delete(pb::Delete { version: version(v) }))
}

pub fn expire(db: usize, key: &[u8], deadline_ms: u64, v: Version) -> pb::Op {
    op(db, key, pb::op::Effect::Expire(pb::Expire { deadline_ms, version: version(v) }))
}

pub fn flush_db(db: usize, v: Version) -> pb::Op {
    op(db, b"", pb::op::Effect::FlushDb(pb::FlushDb { version: version(v) }))
}

pub fn counter(db: usize, key: &[u8], delta: pb::CounterDelta) -> pb::Op {
    op(db, key, pb::op::Effect::Counter(delta))
}

/// Tombstones at `v` for named elements of a `kind` collection (a removal of elements this
/// node may not hold: see `db::edit`).
pub fn tombstones(db: usize, key: &[u8], kind: Kind, names: &[Bytes], v: Version) -> pb::Op {
    let state = |n: &Bytes| pb::FieldState { name: n.to_vec(), value: None, version: version(v) };
    let effect = match kind {
        Kind::Hash => pb::op::Effect::Hash(pb::HashFields { fields: names.iter().map(state).collect() }),
        Kind::Set => pb::op::Effect::Set(pb::SetMembers { members: names.iter().map(state).collect() }),
        Kind::ZSet => pb::op::Effect::Zset(pb::ZSetMembers {
            members: names.iter().map(|n| pb::ZSetMember { name: n.to_vec(), score: None, version: version(v) }).collect(),
        }),
        // Strings and lists have no elements: removing "elements" of them is a delete.
        Kind::String | Kind::List => pb::op::Effect::Delete(pb::Delete { version: version(v) }),
    };
    op(db, key, effect)
}

/// HyperLogLog registers raised (`index << 8 | value`) in the HLL of incarnation `v`
/// (`db::hll`).
pub fn hll_registers(db: usize, key: &[u8], v: Version, raised: &[u32]) -> pb::Op {
    op(db, key, pb::op::Effect::Hll(pb::HllRegisters { version: version(v), registers: raised.to_vec() }))
}

pub fn publish(channel: &[u8], message: &[u8]) -> pb::Op {
    op(0, b"", pb::op::Effect::Publish(pb::Publish { channel: channel.to_vec(), message: message.to_vec() }))
}

/// The state of the named hash fields (a tombstone for each removed one).
pub fn hash_fields(h: &Collection<Field>, names: &[Bytes]) -> pb::HashFields {
    let fields = names
        .iter()
        .map(|n| match (h.get(n), h.removed.get(n)) {
            (Some(f), _) => pb::FieldState { name: n.to_vec(), value: Some(f.value.to_vec()), version: version(f.version) },
            (None, v) => pb::FieldState { name: n.to_vec(), value: None, version: version(v.copied().unwrap_or(h.cleared)) },
        })
        .collect();
    pb::HashFields { fields }
}

pub fn set_members(s: &Collection<Version>, names: &[Bytes]) -> pb::SetMembers {
    let members = names
        .iter()
        .map(|n| match (s.get(n), s.removed.get(n)) {
            (Some(v), _) => pb::FieldState { name: n.to_vec(), value: Some(Vec::new()), version: version(*v) },
            (None, v) => pb::FieldState { name: n.to_vec(), value: None, version: version(v.copied().unwrap_or(s.cleared)) },
        })
        .collect();
    pb::SetMembers { members }
}

pub fn zset_members(z: &SortedSet, names: &[Bytes]) -> pb::ZSetMembers {
    let members = names
        .iter()
        .map(|n| match (z.member(n), z.removed.get(n)) {
            (Some(m), _) => pb::ZSetMember { name: n.to_vec(), score: Some(m.score), version: version(m.version) },
            (None, v) => pb::ZSetMember { name: n.to_vec(), score: None, version: version(v.copied().unwrap_or(z.cleared)) },
        })
        .collect();
    pb::ZSetMembers { members }
}

/// The effect of a whole-value write or an in-place edit that touched `names` (all names
/// for a whole write; lists and strings always replicate whole).
pub fn value_effect(db: usize, key: &[u8], value: &Value, v: Version, names: &[Bytes]) -> pb::Op {
    let effect = match value {
        Value::Str(s) => pb::op::Effect::StringSet(pb::StringSet { value: s.to_vec(), version: version(v) }),
        Value::Int(n) => pb::op::Effect::StringSet(pb::StringSet { value: n.to_string().into_bytes(), version: version(v) }),
        Value::Counter(c) => pb::op::Effect::Counter(c.delta_of(c.origin_of_last_change(), v)),
        Value::Hash(h) => pb::op::Effect::Hash(hash_fields(h, names)),
        Value::Set(s) => pb::op::Effect::Set(set_members(s, names)),
        Value::ZSet(z) => pb::op::Effect::Zset(zset_members(z, names)),
        Value::List(l) => pb::op::Effect::List(pb::ListValue { items: l.iter().map(|b| b.to_vec()).collect(), version: version(v) }),
    };
    op(db, key, effect)
}
