//! Whole-value writes — a string's or list's value, an HLL's registers — and deletes: the
//! key-level part of the LWW register (`db::entry::Register`), which decides which whole value
//! wins, and of HLL incarnations (`Merge for Hll` merges the registers of one incarnation).

use std::sync::atomic::Ordering;

use super::{bury, clear_older, held, tombstone, write};
use crate::db::hll::Hll;
use crate::db::lattice::Merge;
use crate::db::pending::whole_version;
use crate::db::{Entry, Expiry, KeyEntry, Shard, Store, TableKey, Value};
use crate::hlc::Version;
use crate::hll;

/// A string or list write at `v`: replaces an older key of any type, and kills older fields
/// of a newer collection. `key` carries its table hash (a link's merge hashed the key already
/// for its prefetch); the table is probed once, whether the write finds the key or creates it
/// (`Shard::entry`).
pub(super) fn whole_write(store: &Store, db: usize, shard: &mut Shard, key: TableKey<'_>, value: Value, v: Version, flushed: Version) -> bool {
    whole_write_expiring(store, db, shard, key, value, v, flushed, None).changed
}

/// What `whole_write_expiring` did.
pub(super) struct Written {
    /// The write changed the key.
    pub changed: bool,
    /// The key was created with the register given: merged, it would change nothing more.
    pub register_placed: bool,
}

/// `whole_write`, given the expiry register its origin wrote with it at `v` (`SET … EX`,
/// `apply_string_with_register`): a key the write creates is made with the register at once
/// (one allocation, as an origin makes it), unless a register is pending for it (which the
/// register's own merge decides against). Whether the register was placed is in `Written`;
/// where it was not, the caller merges it as its own op, as if it had come alone. Inlined into
/// `whole_write`, whose `None` folds away (as a call taking it, ~20 instructions more of a
/// merged `SET`, callgrind), and into `apply_string_with_register`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn whole_write_expiring(
    store: &Store,
    db: usize,
    shard: &mut Shard,
    key: TableKey<'_>,
    value: Value,
    v: Version,
    flushed: Version,
    register: Option<Expiry>,
) -> Written {
    // What a write that placed no register did.
    let unplaced = |changed| Written { changed, register_placed: false };
    if v <= flushed || v <= tombstone(shard, &key) {
        return unplaced(false);
    }
    let dbref = store.db(db);
    if let Some(ghost) = shard.tombstones.get_mut(&key) {
        if ghost.beats(value.kind(), v) {
            // A removed field is newer: the write loses, but still clears what is older.
            ghost.outlived(value.kind(), v);
            shard.drop_expiry_older(store.db(db), &key, v);
            return unplaced(false);
        }
    }
    let sparse_max = store.hll_sparse_max_bytes.load(Ordering::Relaxed);
    match shard.entry(&key) {
        // The same incarnation of an HLL: the registers merge.
        KeyEntry::Found(mut entry) if entry.version() == v && is_hll(&entry.value) && is_hll(&value) => {
            let (Value::Str(stored), Value::Str(incoming)) = (&mut entry.value, &value) else {
                return unplaced(false);
            };
            let incoming = Hll { bytes: incoming.to_vec(), sparse_max };
            unplaced(with_hll(stored, sparse_max, |h| h.merge(&incoming)))
        }
        KeyEntry::Found(mut entry) if !write(value.kind(), v).beats(&held(&entry)) => {
            // The key holds newer data; the write still clears what is older than it (and an
            // integer SET becomes the base of a counter with newer increments).
            let int = match &value {
                Value::Int(n) => Some(*n),
                _ => None,
            };
            if let (Value::Counter(c), Some(n)) = (&mut entry.value, int) {
                c.rebase(n, v);
            }
            let below = write(value.kind(), v).kills_below(&entry.value.kind());
            let emptied = clear_older(&mut entry, below);
            if emptied {
                bury(store, db, shard, key.key());
            }
            shard.drop_expiry_older(store.db(db), &key, v);
            unplaced(false)
        }
        KeyEntry::Found(mut entry) => {
            entry.value = value;
            entry.set_version(v);
            shard.drop_expiry_older(store.db(db), &key, v);
            unplaced(true)
        }
        KeyEntry::Missing(missing) => {
            missing.tombstones.remove(key.key());
            match register {
                // Nothing pending to adopt: the key's register is the one given, as merging it
                // next would leave it (`Shard::merge_expiry` on a key without one).
                Some(register) if missing.orphan_expiry.get(key.key()).is_none() => {
                    missing.insert_expiring(dbref, Entry::new(value, v), register);
                    Written { changed: true, register_placed: true }
                }
                _ => {
                    missing.insert(Entry::new(value, v));
                    shard.adopt_pending_expiry(dbref, &key);
                    unplaced(true)
                }
            }
        }
    }
}

fn is_hll(value: &Value) -> bool {
    matches!(value, Value::Str(s) if hll::check(s).is_ok())
}

/// Runs `f` on the stored HLL bytes as an `Hll` (its registers' `Merge`).
fn with_hll(stored: &mut crate::db::strbuf::StrBuf, sparse_max: usize, f: impl FnOnce(&mut Hll) -> bool) -> bool {
    let mut h = Hll { bytes: std::mem::take(stored).into_vec(), sparse_max };
    let grew = f(&mut h);
    *stored = h.bytes.into();
    grew
}

/// HLL registers raised in the incarnation at `v`: merged by maximum into that incarnation
/// if the key holds it; otherwise an HLL of these registers competes as a string write at
/// `v` (it creates the key, or replaces an older incarnation, or loses to a newer write).
pub(super) fn merge_hll(store: &Store, db: usize, shard: &mut Shard, key: &[u8], v: Version, registers: &[u32], flushed: Version) -> bool {
    let sparse_max = store.hll_sparse_max_bytes.load(Ordering::Relaxed);
    if let Some(mut entry) = shard.raw_mut(key).filter(|e| e.version() == v) {
        return match &mut entry.value {
            Value::Str(stored) if hll::check(stored).is_ok() => with_hll(stored, sparse_max, |h| h.raise(registers)),
            _ => false,
        };
    }
    let mut fresh = Hll { bytes: hll::new_empty(), sparse_max };
    fresh.raise(registers);
    whole_write(store, db, shard, TableKey::new(key), Value::Str(fresh.bytes.into()), v, flushed)
}

pub(super) fn delete(store: &Store, db: usize, shard: &mut Shard, key: TableKey<'_>, v: Version, flushed: Version) -> bool {
    // Found in the table and the tombstones by the hash the link worked out.
    let key = &key;
    if v <= flushed || v <= tombstone(shard, key) {
        return false;
    }
    if let Some(mut entry) = shard.raw_mut(key) {
        // The key's last whole write (or delete) is at least as new: it killed all this delete
        // would, so the delete changes nothing. A replayed delete meets this once the key was
        // written again after it (found by the mesh_message fuzz target: the replay recorded a
        // second tombstone for the live key and reported a change).
        if v <= whole_version(&entry) {
            return false;
        }
        if clear_older(&mut entry, v) {
            bury(store, db, shard, key);
        }
    }
    shard.tombstones.get_or_default(key).clear(v);
    shard.drop_expiry_older(store.db(db), key, v);
    true
}
