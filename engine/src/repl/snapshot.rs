//! A full sync: every key's whole state — values, field and member versions, tombstones,
//! expiry registers, database flushes — and the function libraries' registers, as ordinary
//! effects. The scan takes one shard lock at
//! a time (no fork, no global pause), so it is fuzzy; since applying effects is a merge,
//! a fuzzy snapshot followed by the live stream from the sequence noted before the scan
//! still converges.

use bytes::Bytes;

use crate::db::effect::{Effect, EffectKind, FieldState, MemberState, ZSetMemberState};
use crate::db::fieldmap::Name;
use crate::db::{EntryRef, Store, Value, SHARDS_PER_DB};
use crate::hlc::Version;

/// Streams the snapshot to `sink`, one batch per non-empty shard. Returns (keys, ops).
pub fn snapshot(store: &Store, sink: &mut dyn FnMut(Vec<Effect>)) -> (u64, u64) {
    let (mut keys, mut ops) = (0u64, 0u64);
    // The function libraries first (`db::functions`): a node that loads or syncs this has
    // them before any key.
    let libraries = store.function_registers().effects();
    if !libraries.is_empty() {
        ops += libraries.len() as u64;
        sink(libraries);
    }
    for db in 0..store.databases() {
        let flushed = store.db(db).flushed.get();
        if flushed > Version::ZERO {
            sink(vec![Effect::flush_db(db, flushed)]);
            ops += 1;
        }
        for s in (0..SHARDS_PER_DB).filter(|_| store.in_use(db)) {
            let batch = {
                let shard = store.lock_shard(db, s);
                let mut batch = Vec::new();
                for (key, entry) in shard.iter() {
                    keys += 1;
                    key_state(db, key, entry, &mut batch);
                }
                for (key, ghost) in shard.tombstones.iter() {
                    ghost_state(db, key, ghost, &mut batch);
                }
                for (key, e) in shard.orphan_expiry.iter() {
                    batch.push(Effect::expire(db, key, e.deadline_ms, e.version));
                }
                batch
            };
            if !batch.is_empty() {
                ops += batch.len() as u64;
                sink(batch);
            }
        }
    }
    (keys, ops)
}

/// The most elements of a collection one snapshot effect names (a few KB to a few tens of
/// KB). Two under test, so that the property tests that restore a node from a snapshot
/// (`repl::laws`) merge collections from parts.
const ELEMENTS_PER_EFFECT: usize = if cfg!(test) { 2 } else { 256 };

/// The effects that recreate `entry` exactly on a peer.
pub fn key_state(db: usize, key: &[u8], entry: EntryRef<'_>, out: &mut Vec<Effect>) {
    let v = entry.version();
    // Element names are stored as `Name`s (`db::name`): an effect carries copies.
    let names = |value: &Value| -> Vec<Name> {
        match value {
            Value::Hash(h) => h.keys().chain(h.removed.keys()).cloned().collect(),
            Value::Set(s) => s.keys().chain(s.removed.keys()).cloned().collect(),
            Value::ZSet(z) => z.members().map(|(n, _)| n).chain(z.removed.keys()).cloned().collect(),
            _ => Vec::new(),
        }
    };
    let cleared = match &entry.value {
        Value::Hash(h) => h.cleared,
        Value::Set(s) => s.cleared,
        Value::ZSet(z) => z.cleared,
        _ => Version::ZERO,
    };
    if cleared > Version::ZERO {
        out.push(Effect::delete(db, key, cleared));
    }
    match &entry.value {
        Value::Counter(c) => {
            out.push(Effect::counter(db, key, c.base_delta()));
            for t in &c.totals {
                out.push(Effect::counter(db, key, c.delta_of_slot(t)));
            }
        }
        value => {
            let names = names(value);
            if names.is_empty() {
                out.push(Effect::of_value(db, key, value, v, &[]));
            }
            // A big collection as several effects, each naming some of its elements: they
            // merge element by element, so the parts merge to what the whole would. As one
            // effect, a 200,000-field hash was one 6 MB message, and the origin's stream kept
            // a buffer that size for as long as the peer stayed (tonic's encoder keeps its
            // largest message's capacity).
            for part in names.chunks(ELEMENTS_PER_EFFECT) {
                out.push(Effect::of_value(db, key, value, v, part));
            }
        }
    }
    if let Some(e) = entry.expiry() {
        out.push(Effect::expire(db, key, e.deadline_ms, e.version));
    }
}

/// The effects that recreate a ghost (a deleted key, or an emptied collection's tombstones).
fn ghost_state(db: usize, key: &[u8], ghost: &crate::db::Ghost, out: &mut Vec<Effect>) {
    if ghost.cleared > Version::ZERO {
        out.push(Effect::delete(db, key, ghost.cleared));
    }
    if !ghost.has_removed() {
        return;
    }
    let removed = ghost.removed().map(|(n, v)| (Bytes::copy_from_slice(n), *v));
    let kind = match ghost.kind {
        Some(crate::db::Kind::Hash) => EffectKind::Hash(removed.map(|(name, version)| FieldState { name, value: None, version }).collect()),
        Some(crate::db::Kind::Set) => EffectKind::Set(removed.map(|(name, version)| MemberState { name, present: false, version }).collect()),
        Some(crate::db::Kind::ZSet) => EffectKind::ZSet(removed.map(|(name, version)| ZSetMemberState { name, score: None, version }).collect()),
        _ => return,
    };
    out.push(Effect::new(db, key, kind));
}
