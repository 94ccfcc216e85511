//! `ExpiryIndex`: a shard's volatile keys in deadline order, so active expiry
//! (`db::expire`) finds due keys without sampling.
//!
//! Each key is indexed by its deadline and its table hash (`hashed::hash_key`), not by a copy
//! of its bytes: the shard's table finds the key again by that hash when it falls due
//! (`KeyTable::expiring_at`). A `BTreeSet<(deadline, Key)>` copied every volatile key onto the
//! heap, so a `SET … EX` paid an allocation and, among keys of one deadline, a `memcmp` per
//! comparison: ~450 instructions on every node that took or merged it, and each volatile
//! key's bytes twice in memory (docs/benchmarks.md,
//! "Deadlines indexed by hash, in runs").
//!
//! Two keys of one shard may share a 64-bit hash, and then a deadline too: each is a pair of
//! its own, so neither key's removal takes the other's place in the index.

/// How many pairs a run holds at most: a lookup's binary searches stay short, and moving a
/// run's pairs to insert one in its middle moves at most 2 KiB.
const RUN: usize = 128;

#[derive(Debug, Default)]
pub struct ExpiryIndex {
    /// `(deadline_ms, table hash)` for every volatile key, in order, in runs of at most `RUN`
    /// pairs: each run sorted and never empty, every pair of a run at or below every pair of
    /// the runs after it. Two keys of one hash and one deadline are two equal pairs.
    ///
    /// Runs, not a `BTreeMap`: most deadlines are later than every other (a fixed TTL added to
    /// the time), so most inserts go at the end of the last run, where a full one starts a new
    /// run and stays full. A `BTreeMap` of pairs cost ~320 instructions an insert and, as its
    /// right-hand leaves split in halves, ~40 bytes a key (docs/benchmarks.md).
    runs: Vec<Vec<(u64, u64)>>,
    /// Pairs held (every run's length).
    keys: usize,
    /// Every pair's deadline added up: with `keys`, the mean deadline, from which `INFO
    /// keyspace` reports `avg_ttl` (`Store::avg_ttl_ms`), exact where Redis estimates it
    /// from samples. 128 bits, as ten million deadlines in milliseconds since 1970 overflow 64.
    deadline_sum: u128,
}

impl ExpiryIndex {
    /// How many keys are indexed.
    pub fn len(&self) -> usize {
        self.keys
    }

    pub fn is_empty(&self) -> bool {
        self.keys == 0
    }

    /// The indexed keys' deadlines added up, and how many there are (`Store::avg_ttl_ms`
    /// adds the shards' up).
    pub fn deadlines(&self) -> (u128, usize) {
        (self.deadline_sum, self.keys)
    }

    /// The run a pair goes into or is found in: the first whose last pair is at or above it
    /// (an equal pair, if any, is there), else the last.
    fn run_of(&self, pair: (u64, u64)) -> usize {
        let later = self.runs.partition_point(|run| run.last().is_some_and(|&last| last < pair));
        later.min(self.runs.len().saturating_sub(1))
    }

    /// Indexes a key of table hash `hash` at `deadline_ms`.
    pub fn insert(&mut self, deadline_ms: u64, hash: u64) {
        let pair = (deadline_ms, hash);
        self.keys += 1;
        self.deadline_sum += u128::from(deadline_ms);
        if self.runs.is_empty() {
            self.runs.push(vec![pair]);
            return;
        }
        let i = self.run_of(pair);
        let last_run = i + 1 == self.runs.len();
        let run = &mut self.runs[i];
        let at = run.partition_point(|&p| p <= pair);
        if run.len() < RUN {
            run.insert(at, pair);
        } else if at == RUN && last_run {
            // After every pair held (most inserts): a new last run, the full one left whole.
            self.runs.push(vec![pair]);
        } else {
            // Into a full run's middle: split in halves.
            let mut tail = run.split_off(RUN / 2);
            if at <= RUN / 2 {
                run.insert(at, pair);
            } else {
                tail.insert(at - RUN / 2, pair);
            }
            self.runs.insert(i + 1, tail);
        }
    }

    /// Forgets a key of table hash `hash` indexed at `deadline_ms`: whoever changes a key's
    /// deadline knows the old one (`Shard::set_expiry`). Nothing happens if none is indexed
    /// there.
    pub fn remove(&mut self, deadline_ms: u64, hash: u64) {
        let pair = (deadline_ms, hash);
        let i = self.run_of(pair);
        let Some(run) = self.runs.get_mut(i) else { return };
        let Ok(at) = run.binary_search(&pair) else { return };
        run.remove(at);
        self.keys -= 1;
        self.deadline_sum -= u128::from(deadline_ms);
        let len = run.len();
        if len == 0 {
            self.runs.remove(i);
        } else if len < RUN / 4 && self.runs.get(i + 1).is_some_and(|next| len + next.len() <= RUN) {
            // A run emptied by removals takes in the next, so runs do not dwindle to a pair
            // or two each.
            let next = self.runs.remove(i + 1);
            self.runs[i].extend_from_slice(&next);
        }
    }

    /// The `(deadline_ms, hash)` pairs due at `now_ms`, earliest first, each once: a pair
    /// stands for every key of that hash and deadline (`KeyTable::expiring_at` finds them all).
    pub fn due(&self, now_ms: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut last = None;
        self.runs.iter().flatten().copied().take_while(move |&(deadline, _)| deadline <= now_ms).filter(move |&pair| last.replace(pair) != Some(pair))
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
        assert_eq!(index.deadlines(), (250, 2));
        assert_eq!(index.due(49).count(), 0);
        assert_eq!(index.due(u64::MAX).collect::<Vec<_>>(), [(50, 9), (200, 1)]);
    }

    proptest::proptest! {
        /// The runs hold what a multiset of pairs holds, in order, through inserts at the end
        /// (later deadlines, most of them), in the middle and at the front, and removals
        /// anywhere: enough pairs to fill, split, empty and join runs. Few hashes, so pairs
        /// repeat.
        #[test]
        fn the_runs_hold_what_a_multiset_holds(ops in proptest::collection::vec((0u8..10, 0u64..4, 0u64..300), 1..1500)) {
            let mut index = ExpiryIndex::default();
            let mut model = std::collections::BTreeMap::<(u64, u64), usize>::new();
            let mut later = 1000;
            for (i, (kind, hash, deadline)) in ops.into_iter().enumerate() {
                match kind {
                    // After everything held.
                    0..=4 => {
                        later += deadline % 3;
                        index.insert(later, hash);
                        *model.entry((later, hash)).or_default() += 1;
                    }
                    5 | 6 => {
                        index.insert(deadline, hash);
                        *model.entry((deadline, hash)).or_default() += 1;
                    }
                    // A pair held (or, with nothing held, one that is not).
                    _ => {
                        let pair = model.keys().nth(deadline as usize % model.len().max(1)).copied().unwrap_or((deadline, hash));
                        index.remove(pair.0, pair.1);
                        if let Some(n) = model.get_mut(&pair) {
                            *n -= 1;
                            if *n == 0 {
                                model.remove(&pair);
                            }
                        }
                    }
                }
                proptest::prop_assert_eq!(index.len(), model.values().sum::<usize>());
                let deadline_sum: u128 = model.iter().map(|(&(d, _), &n)| u128::from(d) * n as u128).sum();
                proptest::prop_assert_eq!(index.deadlines(), (deadline_sum, index.len()));
                proptest::prop_assert!(index.runs.iter().all(|run| !run.is_empty() && run.len() <= RUN));
                let held: Vec<(u64, u64)> = index.runs.iter().flatten().copied().collect();
                let expected: Vec<(u64, u64)> = model.iter().flat_map(|(&pair, &n)| std::iter::repeat_n(pair, n)).collect();
                proptest::prop_assert_eq!(&held, &expected);
                if i % 50 == 0 {
                    for now in [0, 150, 299, 1000, later, u64::MAX] {
                        let due: Vec<(u64, u64)> = index.due(now).collect();
                        let expected: Vec<(u64, u64)> = model.keys().copied().filter(|&(d, _)| d <= now).collect();
                        proptest::prop_assert_eq!(due, expected);
                    }
                }
            }
        }
    }
}
