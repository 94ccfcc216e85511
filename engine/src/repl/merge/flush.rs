//! `FLUSHDB`/`FLUSHALL`: the database's flush point (`Merge for Version`), a key tombstone
//! for every key, and what it kills in each shard (values, ghosts, pending expiry registers).

use bytes::Bytes;

use super::{bury, clear_older, ApplyOutcome};
use crate::db::{Shard, Store, SHARDS_PER_DB};
use crate::hlc::Version;

/// `FLUSHDB`/`FLUSHALL` from a peer: everything older than `v` in the database dies.
pub(super) fn flush_db(store: &Store, db: usize, v: Version) -> ApplyOutcome {
    {
        // The database's flush point is a key tombstone for every key (`Merge for Version`).
        if !store.db(db).flushed.raise(v) {
            return ApplyOutcome::Superseded;
        }
    }
    // A database never used holds nothing older (`Store::in_use`).
    for s in (0..SHARDS_PER_DB).filter(|_| store.in_use(db)) {
        flush_shard(store, db, &mut store.lock_shard(db, s), v);
    }
    ApplyOutcome::Applied
}

/// Kills everything in one shard older than a flush at `v` (the database's `flushed`, set
/// by the caller, dominates it from now on), touching the watchers of what changed. Ghosts
/// and pending expiry registers the flush dominates are dropped: `flushed` stands for them.
pub fn flush_shard(store: &Store, db: usize, shard: &mut Shard, v: Version) {
    let dbref = store.db(db);
    if shard.iter().all(|(_, e)| e.newest() < v && e.expiry().is_none_or(|x| x.version < v)) {
        // The common case: nothing survives, so drop the whole table at once.
        shard.touch_existing();
        shard.clear(dbref);
    } else {
        let keys: Vec<Bytes> = shard.iter().map(|(k, _)| Bytes::copy_from_slice(k)).collect();
        for key in keys {
            let emptied = shard.raw_mut(&key).is_some_and(|mut e| clear_older(&mut e, v));
            if emptied {
                bury(store, db, shard, &key);
                shard.touch(&key);
            } else if shard.raw(&key).and_then(crate::db::EntryRef::expiry).is_some_and(|e| e.version < v) {
                shard.set_expiry(dbref, &key, None);
                shard.touch(&key);
            }
        }
    }
    // A ghost goes when the flush stands for all of it. Removed elements at `v` itself
    // survive a key tombstone at `v` (`merge_fields`: only strictly older elements die), so a
    // ghost left holding some stays: dropped, its elements came back on the next replay of
    // their removal (found by the mesh_message fuzz target).
    shard.tombstones.retain(|_, g| {
        g.clear(v);
        g.newest() > v || g.removed().next().is_some()
    });
    shard.orphan_expiry.retain(|_, e| e.version > v);
}
