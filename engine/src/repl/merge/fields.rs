//! Field effects: a hash's fields, a set's or sorted set's members. Each element merges by
//! its type's rule (`ElementMap::merge_element`); this file owns what the key decides first —
//! whether the effect's type meets another type live or buried (the register's rule, at the
//! effect's newest element), and the incarnation a collection created by the effect starts.

use super::{bury, clear_older, held, tombstone, write};
use crate::db::effect::{FieldState, MemberState, ZSetMemberState};
use crate::db::entry::{Collection, Field};
use crate::db::lattice::ElementMap;
use crate::db::zset::SortedSet;
use crate::db::{Entry, EntryMut, KeyLike, Kind, Shard, Store, Value};
use crate::hlc::Version;

pub(super) enum FieldsOp<'a> {
    Hash(&'a [FieldState]),
    Set(&'a [MemberState]),
    ZSet(&'a [ZSetMemberState]),
}

impl FieldsOp<'_> {
    fn is_empty(&self) -> bool {
        match self {
            FieldsOp::Hash(h) => h.is_empty(),
            FieldsOp::Set(s) => s.is_empty(),
            FieldsOp::ZSet(z) => z.is_empty(),
        }
    }

    fn newest(&self) -> Version {
        let newest = match self {
            FieldsOp::Hash(h) => h.iter().map(|f| f.version).max(),
            FieldsOp::Set(s) => s.iter().map(|f| f.version).max(),
            FieldsOp::ZSet(z) => z.iter().map(|f| f.version).max(),
        };
        newest.unwrap_or(Version::ZERO)
    }

    fn empty_value(&self, cleared: Version) -> Value {
        match self {
            FieldsOp::Hash(_) => {
                let mut h = Collection::<Field>::default();
                h.cleared = cleared;
                Value::Hash(Box::new(h))
            }
            FieldsOp::Set(_) => {
                let mut s = Collection::<Version>::default();
                s.cleared = cleared;
                Value::Set(Box::new(s))
            }
            FieldsOp::ZSet(_) => {
                let mut z = SortedSet::default();
                z.cleared = cleared;
                Value::ZSet(Box::new(z))
            }
        }
    }

    fn kind(&self) -> Kind {
        match self {
            FieldsOp::Hash(_) => Kind::Hash,
            FieldsOp::Set(_) => Kind::Set,
            FieldsOp::ZSet(_) => Kind::ZSet,
        }
    }

    fn same_kind(&self, value: &Value) -> bool {
        self.kind() == value.kind()
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
pub(super) fn merge_fields<K: KeyLike + ?Sized>(store: &Store, db: usize, shard: &mut Shard, hashed: &K, flushed: Version, op: FieldsOp) -> bool {
    let key = hashed.key_bytes();
    // No element, no version: no write a node makes (an edit that changes nothing still
    // names its elements). Merged, it would stand for a write of its type at version zero and
    // could replace a ghost of another type without changing an element, reported as no
    // change and undone by the next replay of that type's write (found by the mesh_message
    // fuzz target).
    if op.is_empty() {
        return false;
    }
    let dbref = store.db(db);
    let floor = flushed.max(tombstone(shard, key));
    let op_newest = op.newest();
    // Strictly older: a whole-collection write replicates as a delete and fields at the same
    // version, and those fields survive it.
    if op_newest < floor {
        return false;
    }
    let created = match shard.raw_mut(hashed) {
        Some(mut entry) if op.same_kind(&entry.value) => {
            let changed = merge_elements(&op, &mut entry, floor, op_newest);
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
            if !write(op.kind(), op_newest).beats(&held(&entry)) {
                if clear_older(&mut entry, write(op.kind(), op_newest).kills_below(&held_kind)) {
                    bury(store, db, shard, key);
                }
                shard.drop_expiry_older(store.db(db), key, op_newest);
                return false;
            }
            let replaced = entry.newest();
            entry.value = op.empty_value(write(held_kind, replaced).kills_below(&op.kind()));
            entry.set_version(op_newest);
            // A new incarnation: expiry registers older than it died with the old one.
            shard.drop_expiry_older(store.db(db), key, replaced);
            false
        }
        None => {
            let mut value = op.empty_value(floor);
            match shard.tombstones.remove(key) {
                // The key died as another type: that type's newest write competes whole.
                Some(ghost) if ghost.kind.is_some_and(|k| k != value.kind()) => {
                    if ghost.beats(op.kind(), op_newest) {
                        let mut ghost = ghost;
                        ghost.outlived(op.kind(), op_newest);
                        shard.tombstones.insert(key.into(), ghost);
                        return false;
                    }
                    value = op.empty_value(floor.max(ghost.kills_below(op.kind())));
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
    let changed = merge_elements(&op, &mut entry, floor, op_newest);
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
fn merge_elements(op: &FieldsOp, entry: &mut EntryMut<'_>, floor: Version, op_newest: Version) -> bool {
    let mut changed = false;
    match (op, &mut entry.value) {
        // Each element by its type's rule (`ElementMap::merge_element`), in the effect's order.
        (FieldsOp::Hash(h), Value::Hash(map)) => {
            for f in h.iter() {
                changed |= map.merge_element(&f.name, f.value.clone(), f.version, floor);
            }
            map.shrink_if_sparse();
        }
        (FieldsOp::Set(s), Value::Set(set)) => {
            for m in s.iter() {
                changed |= set.merge_element(&m.name, m.present.then_some(()), m.version, floor);
            }
            set.shrink_if_sparse();
        }
        (FieldsOp::ZSet(z), Value::ZSet(zset)) => {
            for m in z.iter() {
                changed |= zset.merge_element(&m.name, m.score, m.version, floor);
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
