//! Field effects: a hash's fields, a set's or sorted set's members. Each element merges by
//! its type's rule (`ElementMap::merge_element`); this file owns what the key decides first —
//! whether the effect's type meets another type live or buried (the register's rule, at the
//! effect's newest element), and the incarnation a collection created by the effect starts.

use super::{bury, clear_older, held, tombstone, write};
use crate::db::effect::{ElementKind, Elements, Held};
use crate::db::entry::{Collection, Field, Name};
use crate::db::lattice::ElementMap;
use crate::db::zset::SortedSet;
use crate::db::{Entry, EntryMut, KeyLike, Shard, Store, Value};
use crate::hlc::Version;

/// An empty collection of `kind` (a hash, set or sorted set), everything older than
/// `cleared` dead in it.
fn empty_value(kind: ElementKind, cleared: Version) -> Value {
    match kind {
        ElementKind::Hash => {
            let mut h = Collection::<Field>::default();
            h.cleared = cleared;
            Value::Hash(Box::new(h))
        }
        ElementKind::Set => {
            let mut s = Collection::<Version>::default();
            s.cleared = cleared;
            Value::Set(Box::new(s))
        }
        ElementKind::ZSet => {
            let mut z = SortedSet::default();
            z.cleared = cleared;
            Value::ZSet(Box::new(z))
        }
    }
}

fn restore_removed(value: &mut Value, removed: crate::db::entry::FieldMap<Version>) {
    match value {
        Value::Hash(h) => h.removed = removed.into(),
        Value::Set(s) => s.removed = removed.into(),
        Value::ZSet(z) => z.removed = removed.into(),
        _ => {}
    }
}

/// Per-field (or per-member) LWW with tombstones.
/// `hashed` is the op's key, hashed or not (`merge_locked`): an element merged into a
/// collection the shard holds (the common case) finds it with one probe and no hashing.
pub(super) fn merge_fields<K: KeyLike + ?Sized>(store: &Store, db: usize, shard: &mut Shard, hashed: &K, flushed: Version, op: &Elements<'_>) -> bool {
    let key = hashed.key_bytes();
    // No element, no version: no write a node makes (an edit that changes nothing still
    // names its elements). Merged, it would stand for a write of its type at version zero and
    // could replace a ghost of another type without changing an element, reported as no
    // change and undone by the next replay of that type's write (found by the mesh_message
    // fuzz target).
    if op.states.is_empty() {
        return false;
    }
    let kind = op.kind.kind();
    let dbref = store.db(db);
    let floor = flushed.max(tombstone(shard, key));
    let op_newest = op.newest();
    // Strictly older: a whole-collection write replicates as a delete and fields at the same
    // version, and those fields survive it.
    if op_newest < floor {
        return false;
    }
    let created = match shard.raw_mut(hashed) {
        Some(mut entry) if entry.value.kind() == kind => {
            let changed = merge_elements(op, &mut entry, floor, op_newest);
            if entry.value.is_empty_collection() {
                bury(store, db, shard, key);
            }
            return changed;
        }
        Some(mut entry) => {
            // Another type: the newer key write wins whole (at one version, by type:
            // `Register::beats`); the older one still ends the incarnation before it (what the
            // winner held from before it dies).
            let held_kind = entry.value.kind();
            if !write(kind, op_newest).beats(&held(&entry)) {
                if clear_older(&mut entry, write(kind, op_newest).kills_below(&held_kind)) {
                    bury(store, db, shard, key);
                }
                shard.drop_expiry_older(store.db(db), key, op_newest);
                return false;
            }
            let replaced = entry.newest();
            entry.value = empty_value(op.kind, write(held_kind, replaced).kills_below(&kind));
            entry.set_version(op_newest);
            // A new incarnation: expiry registers older than it died with the old one.
            shard.drop_expiry_older(store.db(db), key, replaced);
            false
        }
        None => {
            let mut value = empty_value(op.kind, floor);
            match shard.tombstones.remove(key) {
                // The key died as another type: that type's newest write competes whole.
                Some(ghost) if ghost.kind.is_some_and(|k| k != value.kind()) => {
                    if ghost.beats(kind, op_newest) {
                        let mut ghost = ghost;
                        ghost.outlived(kind, op_newest);
                        shard.tombstones.insert(key, ghost);
                        return false;
                    }
                    value = empty_value(op.kind, floor.max(ghost.kills_below(kind)));
                }
                // Re-created as the same type: its removed fields keep their tombstones.
                Some(ghost) => restore_removed(&mut value, ghost.into_removed()),
                None => {}
            }
            shard.insert(dbref, hashed, Entry::new(value, op_newest));
            true
        }
    };
    let Some(mut entry) = shard.raw_mut(hashed) else {
        return false;
    };
    let changed = merge_elements(op, &mut entry, floor, op_newest);
    if entry.value.is_empty_collection() {
        bury(store, db, shard, key);
    } else if created {
        shard.adopt_pending_expiry(dbref, key);
    }
    changed
}

/// Merges `op`'s elements into the collection of the same type at `entry`, each by its type's
/// rule (`ElementMap::merge_element`) in the effect's order; elements older than `floor` are
/// dead. Returns whether any changed (the entry then takes the op's version if newer).
fn merge_elements(op: &Elements<'_>, entry: &mut EntryMut<'_>, floor: Version, op_newest: Version) -> bool {
    debug_assert_eq!(entry.value.kind(), op.kind.kind(), "elements merge into a collection of their kind");
    let mut changed = false;
    match &mut entry.value {
        // Each element by its type's rule (`ElementMap::merge_element`), in the effect's order.
        Value::Hash(map) => {
            for e in &op.states {
                let value = if let Held::Bytes(v) = e.held { Some(Name::from(v)) } else { None };
                changed |= map.merge_element(e.name, value, e.version, floor);
            }
            map.shrink_if_sparse();
        }
        Value::Set(set) => {
            for e in &op.states {
                changed |= set.merge_element(e.name, (e.held != Held::Removed).then_some(()), e.version, floor);
            }
            set.shrink_if_sparse();
        }
        Value::ZSet(zset) => {
            for e in &op.states {
                let score = if let Held::Score(s) = e.held { Some(s) } else { None };
                changed |= zset.merge_element(e.name, score, e.version, floor);
            }
            zset.shrink_if_sparse();
        }
        _ => {}
    }
    if changed && op_newest > entry.version() {
        entry.set_version(op_newest);
    }
    changed
}
