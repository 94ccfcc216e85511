//! `ExpiryIndex`: a shard's volatile keys in deadline order, so active expiry
//! (`db::expire`) finds due keys without sampling.
//!
//! Each key is indexed by its deadline and its table hash (`hashed::hash_key`), not by a copy
//! of its bytes: the shard's table finds the key again by that hash when it falls due
//! (`KeyTable::expiring_at`). A `BTreeSet<(deadline, Key)>` copied every volatile key onto the
//! heap, so a `SET … EX` paid an allocation and, among keys of one deadline (hundreds per
//! millisecond under load), a `memcmp` per comparison: ~450 instructions on every node that
//! took or merged it, and each volatile key's bytes twice in memory (docs/benchmarks.md,
//! "Deadlines indexed by hash").
//!
//! Two keys of one shard may share a 64-bit hash, and then a deadline too: each pair counts
//! its keys, so neither key's removal takes the other's place in the index.

use std::collections::btree_map::{BTreeMap, Entry};

#[derive(Debug, Default)]
pub struct ExpiryIndex {
    /// `(deadline_ms, table hash)` → how many keys of the shard have both.
    by_deadline: BTreeMap<(u64, u64), u32>,
    /// Keys indexed (the counts' sum).
    keys: usize,
}

impl ExpiryIndex {
    /// How many keys are indexed.
    pub fn len(&self) -> usize {
        self.keys
    }

    pub fn is_empty(&self) -> bool {
        self.keys == 0
    }

    /// Indexes a key of table hash `hash` at `deadline_ms`.
    pub fn insert(&mut self, deadline_ms: u64, hash: u64) {
        *self.by_deadline.entry((deadline_ms, hash)).or_insert(0) += 1;
        self.keys += 1;
    }

    /// Forgets a key of table hash `hash` indexed at `deadline_ms`: whoever changes a key's
    /// deadline knows the old one (`Shard::set_expiry`). Nothing happens if none is indexed
    /// there.
    pub fn remove(&mut self, deadline_ms: u64, hash: u64) {
        if let Entry::Occupied(mut pair) = self.by_deadline.entry((deadline_ms, hash)) {
            match pair.get_mut() {
                1 => {
                    pair.remove();
                }
                n => *n -= 1,
            }
            self.keys -= 1;
        }
    }

    /// The `(deadline_ms, hash)` pairs due at `now_ms`, earliest first: each stands for one
    /// key or more of that hash and deadline.
    pub fn due(&self, now_ms: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.by_deadline.range(..=(now_ms, u64::MAX)).map(|(&pair, _)| pair)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_share_a_hash_and_a_deadline_are_each_counted() {
        let mut index = ExpiryIndex::default();
        index.insert(100, 7);
        index.insert(100, 7);
        index.insert(50, 9);
        index.insert(200, 1);
        assert_eq!(index.len(), 4);
        assert_eq!(index.due(100).collect::<Vec<_>>(), [(50, 9), (100, 7)]);
        // One of the two keys at (100, 7) goes: the other is still due there.
        index.remove(100, 7);
        assert_eq!((index.len(), index.due(100).collect::<Vec<_>>()), (3, vec![(50, 9), (100, 7)]));
        index.remove(100, 7);
        assert_eq!((index.len(), index.due(100).collect::<Vec<_>>()), (2, vec![(50, 9)]));
        // A pair that is not indexed changes nothing.
        index.remove(100, 7);
        index.remove(49, 9);
        assert_eq!(index.len(), 2);
        assert_eq!(index.due(49).count(), 0);
        assert_eq!(index.due(u64::MAX).collect::<Vec<_>>(), [(50, 9), (200, 1)]);
    }
}
