//! HyperLogLog writes (`PFADD`, `PFMERGE`) and their versions.
//!
//! An HLL is a string value in Redis's format (`crate::hll`). Its entry's version is its
//! *incarnation*: the version of the string write that created it (a `SET` of HLL bytes), or,
//! for an HLL that `PFADD`/`PFMERGE` created, a version derived only from what the key held
//! before — one past the newest write the node remembers of it (its ghost, a pending expiry
//! register, the last flush, an expired value), on the reserved node id `HLL_NODE`. Nodes that
//! create the same key concurrently from the same past therefore create the *same*
//! incarnation, and their registers merge by maximum (`repl::merge`): concurrent PFADDs on
//! different nodes all count, in any order, with duplicates. Adding registers does not change
//! the version; what replicates is the raised registers at the incarnation's version
//! (`HllRegisters`). A later string write or delete stamps a newer version and so wins whole,
//! as for any string.

use super::ctx::Ctx;
use super::effect::Effect;
use super::lattice::Merge;
use super::{Entry, Value};
use crate::error::CmdError;
use crate::hlc::{NodeId, Version};
use crate::hll::{self, HllError};

/// An HLL's registers as they merge: the value (Redis's HYLL bytes, sparse or dense) and
/// the `hll-sparse-max-bytes` it is kept under.
#[derive(Debug, Clone)]
pub struct Hll {
    pub bytes: Vec<u8>,
    pub sparse_max: usize,
}

impl Hll {
    /// Raises registers given as `index << 8 | value`, each to the maximum of what it holds
    /// and the value; returns whether any grew. Entries no HLL holds (an index or a value out
    /// of range, from a faulty peer) are skipped.
    pub fn raise(&mut self, raised: &[u32]) -> bool {
        let mut grew = false;
        for &r in raised {
            let (index, value) = ((r >> 8) as usize, (r & 0xff) as u8);
            if index < hll::REGISTERS && value <= hll::MAX_REGISTER {
                grew |= hll::set_register(&mut self.bytes, index, value, self.sparse_max).unwrap_or(false);
            }
        }
        grew
    }

    /// Every register above zero, as `index << 8 | value`; none for bytes that are no HLL.
    pub fn raised(&self) -> Vec<u32> {
        let Ok(registers) = hll::registers(&self.bytes) else {
            return Vec::new();
        };
        registers.iter().enumerate().filter(|(_, &r)| r > 0).map(|(i, &r)| (i as u32) << 8 | r as u32).collect()
    }
}

/// HyperLogLog registers merge by maximum, register by register (within one incarnation:
/// which incarnation a key holds is the key layer's, `repl::merge`). The encoding (sparse or
/// dense) is each node's own and may differ; the registers are what replicas agree on.
///
/// Laws: the per-register maximum, so commutative, associative and idempotent on the
/// registers (`tests::the_registers_are_a_lattice`), whatever the encoding limit.
impl Merge for Hll {
    fn merge(&mut self, other: &Hll) -> bool {
        self.raise(&other.raised())
    }
}

/// The node id of incarnations that `PFADD`/`PFMERGE` create: no node stamps with it, so
/// such a version never equals a real write's (node ids are hashes of pod names; the one
/// name in 2^32 that hashes here would only see its writes merged as HLLs where both are).
pub const HLL_NODE: NodeId = NodeId::MAX;

/// The incarnation an HLL created on top of `floor` (the newest write remembered) takes.
pub fn incarnation_after(floor: Version) -> Version {
    Version { hlc: floor.hlc + 1, node: HLL_NODE }
}

/// What an HLL write did.
pub struct HllWrite {
    pub created: bool,
    /// Registers raised.
    pub raised: usize,
}

impl From<HllError> for CmdError {
    fn from(e: HllError) -> CmdError {
        CmdError::Raw(e.to_string())
    }
}

impl Ctx<'_> {
    /// Reads the HLL at `key`: `None` if missing, an error if it is not an HLL.
    pub fn hll(&mut self, key: &[u8]) -> Result<Option<&[u8]>, CmdError> {
        match self.lookup_read(key).map(|e| &e.value) {
            None => Ok(None),
            Some(Value::Str(s)) => {
                hll::check(s)?;
                Ok(Some(&s[..]))
            }
            Some(Value::Int(_) | Value::Counter(_)) => Err(HllError::NotHll.into()),
            Some(_) => Err(CmdError::WrongType),
        }
    }

    /// Stores a `PFCOUNT` result in the HLL's header cache, as Redis does. Not a replicated
    /// write: the cache is derived from the registers (peers fill their own).
    pub fn hll_store_count(&mut self, key: &[u8], count: u64) {
        if let Some(Value::Str(s)) = self.entry_mut_in(self.db, key).map(|e| &mut e.into_entry().value) {
            if hll::check(s).is_ok() {
                hll::store_count(s, count);
            }
        }
    }

    /// Converts the HLL at `key` to the dense encoding (`PFDEBUG TODENSE/GETREG`); returns
    /// whether it was sparse. Not replicated: the registers do not change, and the encoding
    /// is each node's own (a peer promotes its copy when it outgrows the sparse limit).
    pub fn hll_to_dense(&mut self, key: &[u8]) -> Result<bool, CmdError> {
        match self.entry_mut_in(self.db, key).map(|e| &mut e.into_entry().value) {
            Some(Value::Str(stored)) => {
                let mut bytes = std::mem::take(stored).into_vec();
                let result = hll::to_dense(&mut bytes);
                *stored = bytes.into();
                Ok(result?)
            }
            Some(_) => Err(HllError::NotHll.into()),
            None => Ok(false),
        }
    }

    /// Runs `edit` on the HLL at `key`, creating an empty one if the key is missing. `edit`
    /// raises registers through `hll::set_register` and pushes each one it raised
    /// (`index << 8 | value`) to its second argument; those replicate. An error from `edit`
    /// still keeps (and replicates) what it raised before it.
    pub fn hll_edit(&mut self, key: &[u8], edit: impl FnOnce(&mut Vec<u8>, &mut Vec<u32>) -> Result<(), HllError>) -> Result<HllWrite, CmdError> {
        let db = self.db;
        let (store, now) = (self.store, self.now_ms);
        // An expired value is part of the past a new incarnation must supersede.
        let expired = {
            let (_, shard) = self.parts(db, key);
            shard.raw(key).filter(|e| e.is_expired(now)).map(super::EntryRef::last_write)
        };
        let created = match self.entry_mut_in(db, key).map(|e| &e.into_entry().value) {
            Some(Value::Str(s)) => {
                hll::check(s)?;
                false
            }
            Some(Value::Int(_) | Value::Counter(_)) => return Err(HllError::NotHll.into()),
            Some(_) => return Err(CmdError::WrongType),
            None => {
                let flushed = store.db(db).flushed.get();
                let (dbref, shard) = self.parts(db, key);
                let ghost = shard.tombstones.remove(key).map_or(Version::ZERO, |g| g.newest());
                let orphan = shard.orphan_expiry.remove(key).map_or(Version::ZERO, |e| e.version);
                let floor = ghost.max(orphan).max(flushed).max(expired.unwrap_or(Version::ZERO));
                let value = Value::Str(hll::new_empty().into());
                shard.insert(dbref, key, Entry::new(value, incarnation_after(floor)));
                true
            }
        };
        if created {
            self.notify_in(db, crate::notify::class::NEW, "new", key);
        }
        let (_, shard) = self.parts(db, key);
        let Some(mut entry) = shard.raw_mut(key) else {
            return Err(CmdError::WrongType);
        };
        let incarnation = entry.version();
        let Value::Str(stored) = &mut entry.value else {
            return Err(CmdError::WrongType);
        };
        let mut bytes = std::mem::take(stored).into_vec();
        let mut raised = Vec::new();
        let result = edit(&mut bytes, &mut raised);
        *stored = bytes.into();
        if created || !raised.is_empty() {
            shard.touch(key);
            self.modified.note(store, key);
            store.stats.dirty.incr();
            self.emit(|| Effect::hll_registers(db, key, incarnation, &raised));
        }
        result?;
        Ok(HllWrite { created, raised: raised.len() })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::db::lattice::check_laws;

    /// An HLL of a few registers among shared indexes; a value above 32 or a small
    /// encoding limit makes it dense.
    fn hll(sparse_max: usize) -> impl Strategy<Value = Hll> {
        prop::collection::vec((0u32..12, 1u32..=51), 0..8).prop_map(move |registers| {
            let mut h = Hll { bytes: hll::new_empty(), sparse_max };
            h.raise(&registers.into_iter().map(|(i, v)| (i * 1361) << 8 | v).collect::<Vec<_>>());
            h
        })
    }

    fn same(a: &Hll, b: &Hll) -> bool {
        hll::registers(&a.bytes).expect("an HLL") == hll::registers(&b.bytes).expect("an HLL")
    }

    proptest! {
        #[test]
        fn the_registers_are_a_lattice(a in hll(3000), b in hll(3000), c in hll(20)) {
            check_laws(&a, &b, &c, same);
        }
    }
}
