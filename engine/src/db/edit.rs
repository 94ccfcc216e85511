//! The edit API: every write a command makes to a key's value goes through one of these
//! `Ctx` methods, which stamp the write's version and record its replicated effect
//! themselves, so no command can forget either.
//!
//! The rule they enforce (DESIGN.md, Merge semantics): every write command is a versioned
//! write, whether or not it changed anything locally. A `DEL` of a key this node does not
//! hold, an `HDEL`/`SREM`/`ZREM` of elements it does not hold, a `PERSIST` of a key without a
//! TTL and a `FLUSHDB` of an empty database still stamp a version and replicate a tombstone or
//! register, so they dominate every older write they conflict with, wherever it was made
//! (otherwise a delete that raced a not-yet-arrived older write would lose to it: the
//! cache-invalidation race). Such a write has no local state to edit, so it is applied
//! locally through the same merge a peer runs (`repl::merge::merge_locked`): this node ends
//! up exactly where its peers will. Standalone (no mesh), a no-op stays a no-op.
//!
//! Writes that are conditional on what the node holds (`SET NX`, `EXPIRE` of a missing key,
//! the `NX/XX/GT/LT` flags, `LREM`/`LINSERT` that find nothing) write nothing when the
//! condition fails, and pops of a missing key name no element to remove.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::ctx::{settle, Ctx};
use super::effect::Effect;
use super::entry::{Collection, Field, ListValue};
use super::hashed::KeyLike;
use super::zset::SortedSet;
use super::{Ghost, HashedKey, Kind, Tombstoned, Value, SHARDS_PER_DB};
use crate::error::CmdError;
use crate::hlc::Version;
use crate::repl::merge;

/// A value a command edits in place: a collection or a list.
pub trait Editable: Tombstoned + Default {
    const KIND: Kind;
    fn of(value: &mut Value) -> Option<&mut Self>;
    fn into_value(self) -> Value;
    /// Whether an edit changed it (and so must be recorded).
    fn changed(&self) -> bool;
    /// Whether the edit about to run names what it changes (`entry::Changes`): only while
    /// replicating, when the effect names them. Values that replicate whole name nothing.
    fn name_changes(&mut self, _on: bool) {}
}

/// A collection whose elements are removed by name (`HDEL`, `SREM`, `ZREM`).
pub trait Elements: Editable {
    /// Removes `name`; false if it was not there.
    fn remove_element(&mut self, name: &[u8]) -> bool;
}

macro_rules! editable {
    ($ty:ty, $variant:ident, $kind:expr $(, $name_changes:ident)?) => {
        impl Editable for $ty {
            const KIND: Kind = $kind;
            fn of(value: &mut Value) -> Option<&mut Self> {
                match value {
                    Value::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn into_value(self) -> Value {
                Value::$variant(Box::new(self))
            }
            fn changed(&self) -> bool {
                <$ty>::changed(self)
            }
            $(
                fn name_changes(&mut self, on: bool) {
                    <$ty>::$name_changes(self, on)
                }
            )?
        }
    };
}

editable!(Collection<Field>, Hash, Kind::Hash, name_changes);
editable!(Collection<Version>, Set, Kind::Set, name_changes);
editable!(SortedSet, ZSet, Kind::ZSet, name_changes);
editable!(ListValue, List, Kind::List);

impl<V> Elements for Collection<V>
where
    Collection<V>: Editable,
{
    fn remove_element(&mut self, name: &[u8]) -> bool {
        self.remove(name).is_some()
    }
}

impl Elements for SortedSet {
    fn remove_element(&mut self, name: &[u8]) -> bool {
        self.remove(name).is_some()
    }
}

impl<'a> Ctx<'a> {
    /// Edits the `T` at `key` if the key exists (`Ok(None)` if not; WRONGTYPE for another
    /// type). `f` gets the value and the write's version; whatever it changed is recorded.
    pub fn edit<T: Editable, R>(&mut self, key: &(impl KeyLike + ?Sized), f: impl FnOnce(&mut T, Version) -> R) -> Result<Option<R>, CmdError> {
        Ok(self.edit_hashed(self.hashed(key), f)?.ok())
    }

    /// `edit`, handing `f` back when the key is missing. The key is looked up once: found, it
    /// is edited and settled on the entry the lookup gave (`ctx::settle`), and the entry let go
    /// before the rest of `finish` (`Ctx::apply_settled`). A type check first, then the edit's
    /// lookup, then `finish`'s, was three probes of the table: ~330 instructions of an `HSET`'s
    /// ~4,800 (docs/benchmarks.md).
    fn edit_hashed<T: Editable, R, F: FnOnce(&mut T, Version) -> R>(&mut self, hashed: HashedKey<'_>, f: F) -> Result<Result<R, F>, CmdError> {
        let (db, store, now) = (self.db, self.store, self.now_ms);
        let (Some(mut entry), effects) = self.entry_to_edit(db, hashed) else {
            return Ok(Err(f));
        };
        let last_write = entry.last_write();
        let value = T::of(&mut entry.value).ok_or(CmdError::WrongType)?;
        let version = store.stamp_at(now, Some(last_write));
        value.name_changes(effects.is_some());
        let result = f(value, version);
        if let Some(settled) = settle(&mut entry, db, hashed.key(), version, &[], effects) {
            self.apply_settled(db, hashed, settled);
        }
        Ok(Ok(result))
    }

    /// Like `edit`, creating the key when it is missing. A new key is built as a replica
    /// merging this write would build it (from the key's ghost: older writes stay dead,
    /// removed elements keep their tombstones) and stored only if `f` put something in it.
    pub fn edit_or_create<T: Editable, R>(&mut self, key: &[u8], f: impl FnOnce(&mut T, Version) -> R) -> Result<R, CmdError> {
        // Hashed once for the lookup, or a new key's stamp, insertion and `finish`.
        let hashed = self.hashed(key);
        let f = match self.edit_hashed(hashed, f)? {
            Ok(edited) => return Ok(edited),
            Err(f) => f,
        };
        let db = self.db;
        let version = self.stamp_unseen(db, &hashed);
        let mut fresh = T::default();
        let flushed = self.store.db(db).flushed.get();
        // Everything older than the ghost, and than the database's last flush, is dead to it.
        let cleared = Ghost::revive(self.parts(db, &hashed).1.tombstones.get(key), T::KIND, &mut fresh).max(flushed);
        fresh.set_cleared(cleared);
        fresh.name_changes(self.store.replicating());
        let result = f(&mut fresh, version);
        if fresh.changed() {
            let (dbref, shard) = self.parts(db, &hashed);
            shard.tombstones.remove(key);
            shard.insert(dbref, &hashed, super::Entry::new(fresh.into_value(), version));
            shard.adopt_orphan_expiry(dbref, key, cleared);
            self.notify_in(db, crate::notify::class::NEW, "new", key);
            self.finish(db, &hashed, version, &[]);
        }
        Ok(result)
    }

    /// Removes `names` from the `T` at `key`; returns how many it held. While replicating,
    /// every named element gets a tombstone, held or not, and so does a missing key: the
    /// removal dominates older adds of those elements made anywhere (module docs).
    pub fn remove_elements<T: Elements>(&mut self, key: &[u8], names: &[Bytes]) -> Result<usize, CmdError> {
        let now = self.now_ms;
        let (db, store) = (self.db, self.store);
        let replicating = store.replicating();
        let hashed = self.hashed(key);
        let (Some(mut entry), effects) = self.entry_to_edit(db, hashed) else {
            if replicating {
                let version = self.stamp_unseen(db, &hashed);
                let op = Effect::tombstones(db, key, T::KIND, names, version);
                self.apply_unseen(db, &hashed, op);
            }
            return Ok(0);
        };
        let last_write = entry.last_write();
        let value = T::of(&mut entry.value).ok_or(CmdError::WrongType)?;
        let version = store.stamp_at(now, Some(last_write));
        value.name_changes(replicating);
        let mut removed = 0;
        let mut unseen = Vec::new();
        for name in names {
            if value.remove_element(name) {
                removed += 1;
            } else if replicating {
                // A private copy: argv may be a slice of the connection's read buffer.
                unseen.push(Bytes::copy_from_slice(name));
            }
        }
        if let Some(settled) = settle(&mut entry, db, key, version, &unseen, effects) {
            self.apply_settled(db, hashed, settled);
        }
        Ok(removed)
    }

    /// Deletes `key`; returns whether it existed. A missing key is still deleted while
    /// replicating: a tombstone, so older writes of it made elsewhere stay dead.
    pub fn delete(&mut self, key: &[u8]) -> bool {
        self.delete_in(self.db, key)
    }

    pub fn delete_in(&mut self, db: usize, key: &[u8]) -> bool {
        let now = self.now_ms;
        let store = self.store;
        let hashed = self.hashed(key);
        let Some(stored) = self.get_ref_in(db, &hashed).map(super::EntryRef::last_write) else {
            if store.replicating() {
                self.delete_unseen(db, hashed);
            }
            return false;
        };
        let (dbref, shard) = self.parts(db, &hashed);
        shard.remove(dbref, &hashed);
        shard.touch(key);
        self.modified.note(store, key);
        store.stats.dirty.incr();
        if store.replicating() {
            let version = store.stamp_at(now, Some(stored));
            let (_, shard) = self.parts(db, &hashed);
            shard.tombstones.insert(&hashed, Ghost::deleted(version));
            self.effects.push_delete(db, key, version);
        }
        true
    }

    /// `PERSIST`: drops the key's TTL; returns whether it had one. While replicating, a key
    /// without a TTL, or a missing one, still gets a newer "no TTL" register, so an older
    /// `EXPIRE` of it made elsewhere loses.
    pub fn persist(&mut self, key: &[u8]) -> bool {
        let db = self.db;
        let Some(entry) = self.get_ref_in(db, key) else {
            if self.store.replicating() {
                let version = self.stamp_unseen(db, key);
                self.apply_unseen(db, key, Effect::expire(db, key, 0, version));
            }
            return false;
        };
        let (had_ttl, stored) = (entry.deadline().is_some(), entry.last_write());
        if had_ttl {
            self.set_deadline(key, 0);
        } else if self.store.replicating() {
            let version = self.store.stamp_at(self.now_ms, Some(stored));
            self.apply_unseen(db, key, Effect::expire(db, key, 0, version));
        }
        had_ttl
    }

    /// `FLUSHDB`: empties database `db`. While replicating it is a database-wide tombstone at
    /// a fresh version (replicated even when the database is empty here): everything older
    /// dies, locally exactly as on peers (`merge::flush_shard`), so a write stamped later by
    /// a concurrent command survives on every node alike.
    pub fn flush_db(&mut self, db: usize) {
        let now = self.now_ms;
        let store = self.store;
        // A database never used holds nothing to clear (`Store::in_use`).
        let shards = if store.in_use(db) { SHARDS_PER_DB } else { 0 };
        if !store.replicating() {
            for shard in 0..shards {
                self.with_shard(db, shard, |dbref, s| {
                    s.touch_existing();
                    s.clear(dbref);
                });
            }
        } else {
            let version = store.db(db).flushed.update(|flushed| store.stamp_at(now, Some(flushed)));
            for shard in 0..shards {
                self.with_shard(db, shard, |_, s| merge::flush_shard(store, db, s, version));
            }
            self.push_effect(Effect::flush_db(db, version));
        }
        // Client-side caching drops every cached key on a flush, as Redis does.
        self.modified.flushed |= store.tracking.load(Ordering::Relaxed);
        store.stats.dirty.incr();
    }

    /// A version for a write to a key this node holds no live value for: newer than what the
    /// key's ghost and pending expiry register remember and than the database's last flush.
    pub(super) fn stamp_unseen(&mut self, db: usize, key: &(impl KeyLike + ?Sized)) -> Version {
        let now = self.now_ms;
        let store = self.store;
        let flushed = store.db(db).flushed.get();
        let remembered = self.parts(db, key).1.remembered(key);
        store.stamp_at(now, Some(flushed.max(remembered)))
    }

    /// Deletes a key this node holds no live value for (a `DEL` of a missing key while
    /// replicating): stamped, its tombstone recorded through the merge a peer runs, and its op
    /// written for the peers, as `apply_unseen` does for any write, but with no `Effect` made
    /// for it, whose copy of the key was allocated and freed again (~290 instructions of every
    /// such `DEL`, callgrind, docs/benchmarks.md).
    fn delete_unseen(&mut self, db: usize, hashed: HashedKey<'_>) {
        let version = self.stamp_unseen(db, &hashed);
        let store = self.store;
        let flushed = store.db(db).flushed.get();
        let (_, shard) = self.parts(db, &hashed);
        merge::delete_locked(store, db, shard, hashed.table_key(), version, flushed);
        self.effects.push_delete(db, hashed.key(), version);
    }

    /// Applies a write that changes no live value here through the merge a peer runs, and
    /// records it for the peers.
    fn apply_unseen(&mut self, db: usize, key: &(impl KeyLike + ?Sized), op: Effect) {
        let store = self.store;
        let flushed = store.db(db).flushed.get();
        let (_, shard) = self.parts(db, key);
        merge::merge_locked(store, db, shard, &op, key, flushed);
        self.push_effect(op);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;
    use crate::db::Store;
    use crate::hlc::{Hlc, SystemClock};

    fn names(n: usize) -> Vec<Bytes> {
        (0..n).map(|i| Bytes::from(format!("element:{i}"))).collect()
    }

    /// Adds 1,000 elements to a hash, a set and a sorted set through the edit API, removes all
    /// but two, and returns what each then holds: (live, tombstones, live map buckets).
    fn add_then_remove(store: &Store) -> Vec<(usize, usize, usize)> {
        let all = names(1000);
        let keys: [&[u8]; 3] = [b"h", b"s", b"z"];
        let locks = store.lock_many(keys.iter().map(|k| (0, store.shard_of(k))).collect());
        let mut ctx = Ctx::new(store, 0, store.hlc.wall_ms(), locks);
        for name in &all {
            ctx.edit_or_create(b"h", |h: &mut Collection<Field>, v| h.insert(name.clone(), Field::new(b"x", v))).unwrap();
            ctx.edit_or_create(b"s", |s: &mut Collection<Version>, v| s.insert(name.clone(), v)).unwrap();
            ctx.edit_or_create(b"z", |z: &mut SortedSet, v| z.insert(name.clone(), 1.0, v)).unwrap();
        }
        // One command per element, as HDEL/SREM/ZREM one at a time would.
        for name in &all[2..] {
            assert_eq!(ctx.remove_elements::<Collection<Field>>(b"h", std::slice::from_ref(name)).unwrap(), 1);
            assert_eq!(ctx.remove_elements::<Collection<Version>>(b"s", std::slice::from_ref(name)).unwrap(), 1);
            assert_eq!(ctx.remove_elements::<SortedSet>(b"z", std::slice::from_ref(name)).unwrap(), 1);
        }
        let h = ctx.hash(b"h".as_slice()).unwrap().unwrap();
        let hash = (h.len(), h.removed.len(), h.buckets());
        let s = ctx.set(b"s".as_slice()).unwrap().unwrap();
        let set = (s.len(), s.removed.len(), s.buckets());
        let z = ctx.zset(b"z".as_slice()).unwrap().unwrap();
        vec![hash, set, (z.members().count(), z.removed.len(), z.member_buckets())]
    }

    /// Standalone, a removed element leaves nothing behind (no peer needs its tombstone, and
    /// the collector that would drop one runs only in a mesh: HDELs grew a hash's memory), and
    /// a collection emptied down to a few elements gives its map's memory back, as Redis
    /// shrinks its dicts. While replicating, every removal keeps its tombstone.
    #[test]
    fn removed_elements_leave_tombstones_only_while_replicating() {
        let standalone = Store::new(1, Hlc::new(Arc::new(SystemClock), 500), 3);
        for (i, (live, tombstones, buckets)) in add_then_remove(&standalone).into_iter().enumerate() {
            assert_eq!((live, tombstones), (2, 0), "collection {i}");
            assert!(buckets <= 8, "collection {i} kept a map of {buckets} slots for 2 elements");
        }
        let replicating = Store::new(1, Hlc::new(Arc::new(SystemClock), 500), 3);
        replicating.enable_replication();
        for (i, (live, tombstones, _)) in add_then_remove(&replicating).into_iter().enumerate() {
            assert_eq!((live, tombstones), (2, 998), "collection {i}");
        }
    }

    /// A hash, a set and a sorted set whose maps began to grow and are then only read finish
    /// growing on the reads (a step per read command's lookup, as per write), each answering
    /// with every element meanwhile; lookups that are not a read command's (`peek`) move nothing.
    #[test]
    fn a_collection_read_but_no_longer_written_finishes_growing() {
        let store = Store::new(1, Hlc::new(Arc::new(SystemClock), 500), 3);
        let keys: [&[u8]; 3] = [b"h", b"s", b"z"];
        let locks = store.lock_many(keys.iter().map(|k| (0, store.shard_of(k))).collect());
        let mut ctx = Ctx::new(&store, 0, store.hlc.wall_ms(), locks);
        let growing = |ctx: &mut Ctx<'_>| {
            let h = ctx.hash(b"h".as_slice()).unwrap().unwrap().is_growing();
            let s = ctx.set(b"s".as_slice()).unwrap().unwrap().is_growing();
            let z = ctx.zset(b"z".as_slice()).unwrap().unwrap().members_growing();
            [h, s, z]
        };
        let all = names(5000);
        let mut added = 0;
        // Past 1,000 elements, up to the write that starts a growth in all three.
        while added < 1000 || growing(&mut ctx) != [true; 3] {
            let name = &all[added];
            ctx.edit_or_create(b"h", |h: &mut Collection<Field>, v| h.insert(name.clone(), Field::new(b"x", v))).unwrap();
            ctx.edit_or_create(b"s", |s: &mut Collection<Version>, v| s.insert(name.clone(), v)).unwrap();
            ctx.edit_or_create(b"z", |z: &mut SortedSet, v| z.insert(name.clone(), 1.0, v)).unwrap();
            added += 1;
            // The three take the same elements, so their maps grow at the same writes.
            assert!(added < all.len(), "no growth under way in all three at once");
        }
        for key in keys {
            assert!(ctx.peek(key).is_some());
        }
        assert_eq!(growing(&mut ctx), [true; 3], "peeks moved a growth");
        let mut reads = 0;
        while growing(&mut ctx) != [false; 3] {
            for key in keys {
                let entry = ctx.lookup_read(key).expect("the key is there");
                let len = match &entry.value {
                    Value::Hash(h) => h.len(),
                    Value::Set(s) => s.len(),
                    Value::ZSet(z) => z.len(),
                    _ => unreachable!(),
                };
                assert_eq!(len, added);
            }
            reads += 1;
            assert!(reads <= 2048, "still growing after {reads} reads");
        }
        let h = ctx.hash(b"h".as_slice()).unwrap().unwrap();
        assert!(all[..added].iter().all(|name| h.get(&name[..]).is_some()));
        assert!(h.buckets().is_power_of_two(), "the old table is freed: {} buckets", h.buckets());
    }

    /// A peer's merged removals shrink a collection as the node's own edits do.
    #[test]
    fn a_collection_emptied_by_merged_removals_gives_its_memory_back() {
        use crate::db::effect::{EffectKind, FieldState};
        let peer = Store::new(1, Hlc::new(Arc::new(SystemClock), 500), 3);
        peer.enable_replication();
        let all = names(1000);
        let state = |name: &Bytes, value: Option<&'static [u8]>, physical: u64| {
            let version = Version { hlc: crate::hlc::timestamp(physical, 0), node: 1 };
            Effect::new(0, b"h", EffectKind::Hash(vec![FieldState { name: name.clone(), value: value.map(Bytes::from_static), version }]))
        };
        for name in &all {
            merge::apply_op(&peer, &state(name, Some(b"x"), 1_000));
        }
        for name in &all[2..] {
            merge::apply_op(&peer, &state(name, None, 2_000));
        }
        let locks = peer.lock_many(vec![(0, peer.shard_of(b"h"))]);
        let mut ctx = Ctx::new(&peer, 0, peer.hlc.wall_ms(), locks);
        let h = ctx.hash(b"h".as_slice()).unwrap().unwrap();
        assert_eq!((h.len(), h.removed.len()), (2, 998));
        assert!(h.buckets() <= 8, "kept a map of {} slots for 2 fields", h.buckets());
    }
}
