//! Counter effects: a PN-counter's contribution (`Merge for Counter` merges those of one
//! counter); this file owns what the key decides first — a counter is a string, so it meets
//! other values, ghosts and integer strings as a string write does (the register's rule).

use super::{bury, clear_older, held, tombstone, write};
use crate::db::counter::{Counter, CounterDelta, BASE_ONLY};
use crate::db::{Entry, Kind, Shard, Store, TableKey, Value};
use crate::hlc::Version;

pub(super) fn merge_counter(store: &Store, db: usize, shard: &mut Shard, key: TableKey<'_>, d: &CounterDelta, flushed: Version) -> bool {
    let dbref = store.db(db);
    // Found in the table by the hash the link worked out (`key`); the tombstones by the bytes.
    let (key, bytes) = (&key, key.key());
    // A base-only delta (full sync) writes the base register alone: its version is the
    // base's, whatever else it carries (found by the mesh_message fuzz target: a base-only
    // delta stamped later than its base created a counter a flush between it and its replay
    // removed, so replaying it created the key again).
    let v = if d.origin == BASE_ONLY { d.base } else { d.version };
    let floor = flushed.max(tombstone(shard, bytes));
    let ghost_newest = shard.tombstones.get(bytes).map_or(Version::ZERO, |g| g.newest());
    // A counter is a string, which loses every tie to another type: what a ghost of another
    // type holds at its newest version kills the counter's contributions there too.
    let ghost_floor = shard.tombstones.get(bytes).map_or(Version::ZERO, |g| g.kills_below(Kind::String));
    if v <= floor.max(ghost_newest) {
        // A losing counter write still ends the incarnation before it.
        if let Some(ghost) = shard.tombstones.get_mut(bytes) {
            if ghost.kind != Some(Kind::String) {
                ghost.clear(v);
            }
        }
        return false;
    }
    let fresh = |base: i64, base_version: Version| {
        let mut c = Counter::new(base, base_version);
        c.merge_delta(d);
        c.clear_older(floor);
        Value::Counter(Box::new(c))
    };
    match shard.raw_mut(key) {
        None => {
            // A counter after a ghost starts a new incarnation after everything the ghost holds.
            shard.tombstones.remove(bytes);
            shard.insert(dbref, key, Entry::new(fresh(0, floor.max(ghost_floor)), v));
            shard.adopt_pending_expiry(dbref, key);
            true
        }
        Some(mut entry) => {
            if let Value::Counter(c) = &mut entry.value {
                let base_before = c.base_version;
                let changed = c.merge_delta(d);
                if c.base_version > base_before {
                    // A newer base (a SET, or a restart after a delete) ends older registers.
                    let base = c.base_version;
                    shard.drop_expiry_older(store.db(db), key, base);
                    return true;
                }
                if changed && v > entry.version() {
                    entry.set_version(v);
                }
                return changed;
            }
            // Another value: what it holds is worked out here only (a counter's merge, the
            // common case, needs none of it: ~100 instructions of a peer's merged `INCR`).
            let (entry_newest, entry_version, held_register) = (entry.newest(), entry.version(), held(&entry));
            // The counter's write beats what the key holds (a counter is a string, so the
            // register's rule lets it win only when newer): an integer string is continued (it
            // is the base register); any other value is replaced by a counter that starts
            // after it.
            if write(Kind::String, v).beats(&held_register) {
                let counter = match &entry.value {
                    Value::Int(n) => fresh(*n, entry_version),
                    Value::Str(s) => fresh(crate::parse::parse_i64(s).unwrap_or(0), entry_version),
                    // Another type's parts at its newest version outrank the counter's.
                    _ => fresh(0, held_register.kills_below(&Kind::String)),
                };
                let base = match &counter {
                    Value::Counter(c) => c.base_version,
                    _ => entry_newest,
                };
                entry.value = counter;
                // A new incarnation: registers older than its base died with the old one.
                shard.drop_expiry_older(store.db(db), key, base);
                return true;
            }
            // Another type, newer or at one version (a counter is a string, which loses every
            // tie to another type): the counter loses whole but still ends what is older.
            if clear_older(&mut entry, v) {
                bury(store, db, shard, key);
            }
            shard.drop_expiry_older(store.db(db), key, v);
            false
        }
    }
}
