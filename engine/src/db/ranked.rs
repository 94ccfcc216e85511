//! `RankedSet`: an ordered set that also answers "how many elements sort before this one" and
//! "which element has rank r" in O(log n). A sorted set's `ZRANK`, `ZRANGE` by rank and
//! `ZCOUNT` need exactly that, and `std::collections::BTreeSet` cannot give it: its nodes keep
//! no counts, so a rank walks the set (200,000 members: 2,714 `ZRANK`s a second against
//! Redis's 1.67 million).
//!
//! Layout: the elements in order, cut into leaves of at most `LEAF_MAX` (each a plain `Vec`),
//! plus a Fenwick tree over the leaves' lengths, so the number of elements before a leaf is
//! O(log leaves). A search is a binary search over the leaves' last elements, then one within
//! a leaf. This is the two-level design of Python's `sortedcontainers` and of the `indexset`
//! crate; it is written here because no crate fits a cache that holds many small sorted sets
//! (every GEO key is one): `indexset` 0.18 allocates a 1,024-element node and `wabi_tree` 0.1 a
//! node of 128 inline keys for the first element, and `kevy-ranktree` needs Rust 1.97. A leaf
//! here grows as elements arrive, so a set of 3 holds 4 slots.
//!
//! Costs: insert and remove O(log n + LEAF_MAX) (moving a leaf's tail), plus O(leaves) when a
//! leaf splits or merges (rebuilding the counts), once per `LEAF_MAX / 4` changes at most;
//! rank and select O(log n); iterating a range O(log n + k).

use std::ops::Range;

/// The most elements a leaf holds. 128 elements of a sorted set's `(score, member)` are 5 KB,
/// so an insert moves 2.5 KB on average, and 200,000 members make ~2,000 leaves.
#[cfg(not(test))]
const LEAF_MAX: usize = 128;
/// Tests cross leaf boundaries (splits, merges, the counts) with a handful of elements.
#[cfg(test)]
const LEAF_MAX: usize = 8;
/// A leaf shorter than this merges with a neighbour when the two fit in one.
const LEAF_MIN: usize = LEAF_MAX / 4;

#[derive(Debug, Clone)]
pub struct RankedSet<K> {
    /// The elements in ascending order; no leaf is empty.
    leaves: Vec<Vec<K>>,
    /// Each leaf's last element, side by side: the search for a leaf reads one array instead
    /// of one leaf buffer per probe (ZADD -P 16 with random scores into a 330,000-member set:
    /// 454-476k → 494-496k a second, one core). Empty while there is one leaf.
    maxes: Vec<K>,
    /// A Fenwick tree over `leaves[i].len()`: `counts[i]` sums leaves `(i & (i + 1))..=i`.
    /// Empty while there is one leaf: most sorted sets are small (every GEO key is one), and
    /// these two vectors cost a set of one member 190 bytes.
    counts: Vec<usize>,
    len: usize,
}

impl<K> Default for RankedSet<K> {
    fn default() -> Self {
        RankedSet { leaves: Vec::new(), maxes: Vec::new(), counts: Vec::new(), len: 0 }
    }
}

impl<K: Ord + Clone> RankedSet<K> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn first(&self) -> Option<&K> {
        self.leaves.first().and_then(|leaf| leaf.first())
    }

    pub fn last(&self) -> Option<&K> {
        self.leaves.last().and_then(|leaf| leaf.last())
    }

    /// Adds `element`; false if the set already holds it.
    pub fn insert(&mut self, element: K) -> bool {
        let Some(last_leaf) = self.leaves.len().checked_sub(1) else {
            self.leaves = vec![vec![element]];
            self.len = 1;
            return true;
        };
        // The first leaf that ends at or after `element`; past every leaf, the last one.
        let mut leaf = self.maxes.partition_point(|max| *max < element).min(last_leaf);
        let Err(mut at) = self.leaves[leaf].binary_search(&element) else { return false };
        self.len += 1;
        if self.leaves[leaf].len() < LEAF_MAX {
            if at == self.leaves[leaf].len() {
                self.set_max(leaf, element.clone());
            }
            self.leaves[leaf].insert(at, element);
            self.add_count(leaf, 1);
            return true;
        }
        // A full leaf splits before it grows (so no leaf's buffer passes LEAF_MAX). Appending
        // past the last element, or prepending before the first, starts a new leaf instead:
        // a set loaded in order (timestamps as scores) keeps full leaves.
        if self.maxes.is_empty() {
            // The one leaf is about to get a neighbour.
            self.maxes.push(self.leaves[0][LEAF_MAX - 1].clone());
        }
        if leaf == last_leaf && at == LEAF_MAX {
            self.maxes.push(element.clone());
            self.leaves.push(vec![element]);
        } else if leaf == 0 && at == 0 {
            self.maxes.insert(0, element.clone());
            self.leaves.insert(0, vec![element]);
        } else {
            let right = self.leaves[leaf].split_off(LEAF_MAX / 2);
            self.leaves.insert(leaf + 1, right);
            // The old last element stays the right half's; the left half ends earlier.
            self.maxes.insert(leaf, self.leaves[leaf][LEAF_MAX / 2 - 1].clone());
            if at > LEAF_MAX / 2 {
                leaf += 1;
                at -= LEAF_MAX / 2;
            }
            if at == self.leaves[leaf].len() {
                self.maxes[leaf] = element.clone();
            }
            self.leaves[leaf].insert(at, element);
        }
        self.leaves_changed();
        true
    }

    /// Removes `element`; false if the set does not hold it.
    pub fn remove(&mut self, element: &K) -> bool {
        let leaf = self.maxes.partition_point(|max| max < element);
        let Some(Ok(at)) = self.leaves.get(leaf).map(|l| l.binary_search(element)) else { return false };
        self.leaves[leaf].remove(at);
        self.len -= 1;
        let left = self.leaves[leaf].len();
        if left == 0 {
            self.leaves.remove(leaf);
            if !self.maxes.is_empty() {
                self.maxes.remove(leaf);
            }
            self.leaves_changed();
            return true;
        }
        if at == left {
            self.set_max(leaf, self.leaves[leaf][left - 1].clone());
        }
        if left < LEAF_MIN && self.merge_with_a_neighbour(leaf) {
            self.leaves_changed();
        } else {
            self.add_count(leaf, -1);
            // A leaf emptied by removals gives back its buffer (to a power of two, so that
            // growing again doubles up to LEAF_MAX exactly).
            let shrunk = &mut self.leaves[leaf];
            if shrunk.capacity() >= 4 * left.max(LEAF_MIN) {
                shrunk.shrink_to((2 * left).next_power_of_two());
            }
        }
        true
    }

    /// Merges the short leaf `leaf` into its shorter neighbour if the two fit in one leaf.
    fn merge_with_a_neighbour(&mut self, leaf: usize) -> bool {
        let before = leaf.checked_sub(1).map(|i| (i, self.leaves[i].len()));
        let after = self.leaves.get(leaf + 1).map(|l| (leaf + 1, l.len()));
        let neighbour = match (before, after) {
            (Some(b), Some(a)) => {
                if a.1 < b.1 {
                    a
                } else {
                    b
                }
            }
            (Some(only), None) | (None, Some(only)) => only,
            (None, None) => return false,
        };
        if neighbour.1 + self.leaves[leaf].len() > LEAF_MAX {
            return false;
        }
        let (into, from) = (leaf.min(neighbour.0), leaf.max(neighbour.0));
        let moved = self.leaves.remove(from);
        self.leaves[into].extend(moved);
        self.maxes[into] = self.maxes.remove(from);
        true
    }

    /// How many elements satisfy `before`. The set must be partitioned by it (every element
    /// that satisfies it sorts ahead of every one that does not), as "sorts below x" is.
    pub fn count_before(&self, before: impl Fn(&K) -> bool) -> usize {
        let leaf = self.maxes.partition_point(&before);
        match self.leaves.get(leaf) {
            Some(l) => self.count_leaves_before(leaf) + l.partition_point(&before),
            None => self.len,
        }
    }

    /// The elements at ranks `ranks` (clamped to the set), in order.
    pub fn ranks(&self, ranks: Range<usize>) -> Ranks<'_, K> {
        let end = ranks.end.min(self.len);
        let start = ranks.start.min(end);
        Ranks { leaves: &self.leaves, front: self.locate(start), back: self.locate(end), remaining: end - start }
    }

    pub fn iter(&self) -> Ranks<'_, K> {
        self.ranks(0..self.len)
    }

    /// The leaf holding `rank` and the position in it; `(leaves, 0)` for `rank == len`.
    fn locate(&self, rank: usize) -> (usize, usize) {
        if rank >= self.len {
            return (self.leaves.len(), 0);
        }
        if self.counts.is_empty() {
            return (0, rank);
        }
        // Binary lifting over the Fenwick tree: the most leaves whose total is <= rank.
        let n = self.counts.len();
        let (mut leaf, mut left) = (0, rank);
        let mut step = 1 << n.ilog2();
        while step > 0 {
            if leaf + step <= n && self.counts[leaf + step - 1] <= left {
                leaf += step;
                left -= self.counts[leaf - 1];
            }
            step >>= 1;
        }
        (leaf, left)
    }

    /// Elements in leaves `0..leaf`.
    fn count_leaves_before(&self, mut leaf: usize) -> usize {
        let mut sum = 0;
        while leaf > 0 {
            sum += self.counts[leaf - 1];
            leaf &= leaf - 1;
        }
        sum
    }

    fn add_count(&mut self, mut leaf: usize, delta: isize) {
        while leaf < self.counts.len() {
            self.counts[leaf] = self.counts[leaf].wrapping_add_signed(delta);
            leaf |= leaf + 1;
        }
    }

    /// A new last element for `leaf` (no-op while there is one leaf).
    fn set_max(&mut self, leaf: usize, max: K) {
        if let Some(slot) = self.maxes.get_mut(leaf) {
            *slot = max;
        }
    }

    /// After leaves were added or removed: rebuilds the counts, O(leaves), and drops both
    /// indexes when one leaf is left.
    fn leaves_changed(&mut self) {
        if self.leaves.len() < 2 {
            self.maxes = Vec::new();
            self.counts = Vec::new();
            return;
        }
        self.counts.clear();
        self.counts.extend(self.leaves.iter().map(Vec::len));
        let n = self.counts.len();
        for i in 0..n {
            let parent = i | (i + 1);
            if parent < n {
                self.counts[parent] += self.counts[i];
            }
        }
    }
}

/// Elements of a rank range, in order from either end.
pub struct Ranks<'a, K> {
    leaves: &'a [Vec<K>],
    /// The next element from the front, as (leaf, position).
    front: (usize, usize),
    /// One past the next element from the back.
    back: (usize, usize),
    remaining: usize,
}

impl<'a, K> Iterator for Ranks<'a, K> {
    type Item = &'a K;

    fn next(&mut self) -> Option<&'a K> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let (leaf, at) = self.front;
        let leaf_elements = &self.leaves[leaf];
        self.front = if at + 1 == leaf_elements.len() { (leaf + 1, 0) } else { (leaf, at + 1) };
        Some(&leaf_elements[at])
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<K> DoubleEndedIterator for Ranks<'_, K> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let (mut leaf, mut at) = self.back;
        if at == 0 {
            leaf -= 1;
            at = self.leaves[leaf].len();
        }
        self.back = (leaf, at - 1);
        Some(&self.leaves[leaf][at - 1])
    }
}

impl<K> ExactSizeIterator for Ranks<'_, K> {}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::ops::Bound;

    use proptest::prelude::*;

    use super::*;

    /// Every answer checked against `BTreeSet` (which walks for ranks).
    fn check(set: &RankedSet<u16>, model: &BTreeSet<u16>) {
        let sorted: Vec<u16> = model.iter().copied().collect();
        assert_eq!(set.len(), sorted.len());
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), sorted);
        assert_eq!(set.iter().rev().copied().collect::<Vec<_>>(), sorted.iter().rev().copied().collect::<Vec<_>>());
        assert_eq!(set.first(), model.first());
        assert_eq!(set.last(), model.last());
        assert!(set.leaves.iter().all(|l| !l.is_empty() && l.len() <= LEAF_MAX && l.capacity() <= LEAF_MAX));
        if set.leaves.len() < 2 {
            assert!(set.maxes.capacity() == 0 && set.counts.capacity() == 0, "one leaf needs no index");
        } else {
            assert_eq!(set.maxes.iter().collect::<Vec<_>>(), set.leaves.iter().map(|l| l.last().unwrap()).collect::<Vec<_>>());
        }
        for (rank, x) in sorted.iter().enumerate() {
            assert_eq!(set.ranks(rank..rank + 1).next(), Some(x));
            assert_eq!(set.count_before(|e| e < x), rank);
        }
        assert_eq!(set.ranks(sorted.len()..sorted.len() + 1).next(), None);
        for probe in [0u16, 1, 7, 50, 99, 100, 200] {
            assert_eq!(set.count_before(|e| *e < probe), model.range(..probe).count());
            assert_eq!(set.count_before(|e| *e <= probe), model.range(..=probe).count());
        }
    }

    proptest! {
        #[test]
        fn a_ranked_set_answers_as_an_ordered_set_with_ranks(
            ops in prop::collection::vec((any::<bool>(), 0u16..120), 0..400),
            lo in 0u16..130, hi in 0u16..130, start in 0usize..130, len in 0usize..40,
        ) {
            let mut set = RankedSet::default();
            let mut model = BTreeSet::new();
            for (add, x) in ops {
                if add {
                    prop_assert_eq!(set.insert(x), model.insert(x));
                } else {
                    prop_assert_eq!(set.remove(&x), model.remove(&x));
                }
            }
            check(&set, &model);
            let bounds = [Bound::Included(&lo), Bound::Excluded(&lo), Bound::Unbounded];
            let uppers = [Bound::Included(&hi), Bound::Excluded(&hi), Bound::Unbounded];
            for lower in bounds {
                for upper in uppers {
                    let expected: Vec<u16> = model.iter().copied().filter(|x| lower_ok(lower, x) && upper_ok(upper, x)).collect();
                    // As SortedSet finds a score range: the ranks between two counts.
                    let start = set.count_before(|x| !lower_ok(lower, x));
                    let end = set.count_before(|x| upper_ok(upper, x)).max(start);
                    let got: Vec<u16> = set.ranks(start..end).copied().collect();
                    prop_assert_eq!(&got, &expected);
                    let mut back: Vec<u16> = set.ranks(start..end).rev().copied().collect();
                    back.reverse();
                    prop_assert_eq!(&back, &expected);
                    prop_assert_eq!(set.ranks(start..end).len(), expected.len());
                }
            }
            let expected: Vec<u16> = model.iter().copied().skip(start).take(len).collect();
            prop_assert_eq!(set.ranks(start..start + len).copied().collect::<Vec<_>>(), expected.clone());
            // Both ends at once meet in the middle without repeating an element.
            let mut both = set.ranks(start..start + len);
            let mut seen = Vec::new();
            while let Some(x) = both.next() {
                seen.push(*x);
                if let Some(y) = both.next_back() {
                    seen.push(*y);
                }
            }
            seen.sort_unstable();
            prop_assert_eq!(seen, expected);
        }
    }

    fn lower_ok(bound: Bound<&u16>, x: &u16) -> bool {
        match bound {
            Bound::Included(b) => x >= b,
            Bound::Excluded(b) => x > b,
            Bound::Unbounded => true,
        }
    }

    fn upper_ok(bound: Bound<&u16>, x: &u16) -> bool {
        match bound {
            Bound::Included(b) => x <= b,
            Bound::Excluded(b) => x < b,
            Bound::Unbounded => true,
        }
    }

    #[test]
    fn sets_loaded_in_order_keep_full_leaves() {
        let n = 12 * LEAF_MAX as u16;
        let mut up = RankedSet::default();
        let mut down = RankedSet::default();
        for x in 0..n {
            up.insert(x);
            down.insert(1000 - x);
        }
        assert!(up.leaves.iter().all(|l| l.len() == LEAF_MAX));
        assert!(down.leaves.iter().all(|l| l.len() == LEAF_MAX));
        check(&up, &(0..n).collect());
    }

    #[test]
    fn removals_merge_leaves_and_give_back_buffers() {
        let mut set = RankedSet::default();
        let mut model: BTreeSet<u16> = (0..400).collect();
        // Scattered inserts leave half-full leaves.
        for x in (0..400u16).map(|x| (x * 7) % 400) {
            set.insert(x);
        }
        for x in 0..400u16 {
            if x % 10 != 0 {
                set.remove(&x);
                model.remove(&x);
            }
        }
        check(&set, &model);
        // Without merging, 40 leaves of one element each would stay.
        assert!(set.leaves.len() <= 20, "{} leaves for 40 elements", set.leaves.len());
    }
}
