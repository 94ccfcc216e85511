//! Expiry registers as replication merges them: a key's own (`EntryRef::expiry`, whose rule is
//! `Merge for Expiry`) and pending ones (`Shard::orphan_expiry`: a register that arrived
//! before the write that creates its key, or outlived the incarnation it was set on). This
//! file owns when a register is taken, kept pending, adopted by a new incarnation, or dies
//! with an older one; the key layer (`repl::merge`) and the edit API (`db::edit`, `db::ctx`)
//! call it.

use super::lattice::Merge;
use super::{Db, Entry, EntryRef, Expiry, KeyLike, Shard, Value};
use crate::hlc::Version;

/// The version of the key's last whole-key write or delete: expiry registers older than it
/// are dead (a `SET` without `KEEPTTL` clears a TTL; keeping one re-stamps it), and so is a
/// delete not newer than it.
pub fn whole_version(entry: &Entry) -> Version {
    match &entry.value {
        Value::Hash(h) => h.cleared,
        Value::Set(s) => s.cleared,
        Value::ZSet(z) => z.cleared,
        Value::Counter(c) => c.base_version,
        _ => entry.version(),
    }
}

impl Shard {
    /// A peer's expiry register at `register.version` (`flushed`: the database's flush).
    /// On a live key it merges by the register's rule unless the key's last whole write is
    /// newer; on a key not created yet it waits (pending) if newer than the key's delete and
    /// the flush, and whether the next incarnation adopts it is decided when it is created
    /// (`adopt_pending_expiry`). Returns whether anything changed.
    pub fn merge_expiry<K: KeyLike + ?Sized>(&mut self, db: &Db, key: &K, register: Expiry, flushed: Version) -> bool {
        let v = register.version;
        match self.raw(key) {
            Some(entry) => {
                // Not newer than the database's flush: dead with it, as for a key not created yet
                // (found by the mesh_message fuzz target: a counter whose base is at the flush
                // took a register at the flush's version, which the key-less path had dropped).
                if v <= flushed || v < whole_version(&entry) {
                    return false;
                }
                // The register's own rule (`Merge for Expiry`; a key without one holds `None`).
                let mut held = entry.expiry().copied();
                if !held.merge(&Some(register)) {
                    return false;
                }
                self.set_expiry(db, key, held);
                true
            }
            None => {
                // The write that created the key is still on its way from another origin.
                // A register older than the key's delete, or the database's flush, died with it.
                let bytes = key.key_bytes();
                let tombstone = self.tombstones.get(bytes).map_or(Version::ZERO, |g| g.cleared);
                let newer = v >= tombstone && v > flushed && self.orphan_expiry.get(bytes).is_none_or(|e| e.version < v);
                if newer {
                    self.orphan_expiry.insert(bytes, register);
                }
                newer
            }
        }
    }

    /// Drops expiry registers (the key's, or a pending one) older than a whole write or
    /// delete at `v`.
    pub fn drop_expiry_older<K: KeyLike + ?Sized>(&mut self, db: &Db, key: &K, v: Version) {
        if self.raw(key).and_then(EntryRef::expiry).is_some_and(|e| e.version < v) {
            self.set_expiry(db, key, None);
        }
        let key = key.key_bytes();
        if self.orphan_expiry.get(key).is_some_and(|e| e.version < v) {
            self.orphan_expiry.remove(key);
        }
    }

    /// A key a merge just created takes the pending register, unless the key's creating
    /// (whole) write is newer and so cleared it. Inline up to the check that there is none
    /// (nearly always): left to the compiler, which stopped inlining it once `set_expiry` grew,
    /// the call cost a peer's merged `SET` ~13 instructions (callgrind).
    #[inline(always)]
    pub fn adopt_pending_expiry<K: KeyLike + ?Sized>(&mut self, db: &Db, key: &K) {
        if !self.orphan_expiry.is_empty() {
            self.adopt_held_pending_expiry(db, key);
        }
    }

    #[inline(never)]
    fn adopt_held_pending_expiry<K: KeyLike + ?Sized>(&mut self, db: &Db, key: &K) {
        if let Some(e) = self.orphan_expiry.remove(key.key_bytes()) {
            if self.raw(key).is_some_and(|entry| e.version >= whole_version(&entry)) {
                self.set_expiry(db, key, Some(e));
            }
        }
    }

    /// A key re-created by a field, member or counter write takes a pending expiry register
    /// that is not older than its key tombstone (`cleared`), as a replica merging the same
    /// write would.
    pub fn adopt_orphan_expiry(&mut self, db: &Db, key: &[u8], cleared: Version) {
        if let Some(e) = self.orphan_expiry.remove(key) {
            if e.version >= cleared {
                self.set_expiry(db, key, Some(e));
            }
        }
    }
}
