//! `SlotsEnd`: where a hashbrown table keeps its control bytes and its slots, so that a
//! prefetch can load the lines a probe of a hash will read (and an insert will write) before
//! the probe runs, without reading the table.
//!
//! Why: a probe reads a group of control bytes and then, for an element it finds, its slot;
//! an insert of a new element stores into a slot no probe had loaded. Run one command after
//! another, each probe waits for its misses in turn; worse, the insert's store does not wait
//! but the next locked instruction (a shard's unlock, an atomic count) waits until it
//! completes. Loaded for a whole batch first, the misses overlap (docs/benchmarks.md, "A new
//! key's slot, and the lines after a fresh allocation").
//!
//! hashbrown does not say where a bucket lies, but lays a table out as one allocation: the
//! slots in descending order, bucket `i`'s at `end - (i + 1) * size_of::<T>()`, then the
//! control bytes, bucket `i`'s at `end + i`. `SlotsEnd` learns `end` from an element whose
//! bucket it knows (`note`, after an insert); `tests::addresses_follow_hashbrowns_layout`
//! checks the layout. A table that moved since (grown, shrunk, cloned) only points the hint at
//! the wrong lines until the next `note`: a prefetch never faults, whatever the address.

use hashbrown::hash_table::{HashTable, OccupiedEntry};

use super::node::prefetch;

/// Where one table's slot array ends (and its control bytes start); unknown (0) until an
/// insert is noted.
#[derive(Debug, Default)]
pub struct SlotsEnd(usize);

/// A copy's table is another allocation: its end is unknown until its own first insert.
impl Clone for SlotsEnd {
    fn clone(&self) -> SlotsEnd {
        SlotsEnd::default()
    }
}

impl SlotsEnd {
    /// Learns the table's layout from the element an insert just placed.
    #[inline]
    pub fn note<T>(&mut self, placed: &OccupiedEntry<'_, T>) {
        self.0 = std::ptr::from_ref(placed.get()) as usize + (placed.bucket_index() + 1) * std::mem::size_of::<T>();
    }

    /// Forgets it (the table was replaced or reallocated).
    pub fn forget(&mut self) {
        self.0 = 0;
    }

    /// Starts loading what a probe of `hash` in `table` reads first: the group of control
    /// bytes it starts at (16, which may cross into a second line) and the slots of that
    /// group's first `slots` buckets, where an insert most likely lands (the first free bucket
    /// of the group: the table is at most 7/8 full). Those slots may span at most 128 bytes
    /// (three lines). Nothing is read but the table's size.
    #[inline]
    pub fn prefetch<T>(&self, table: &HashTable<T>, hash: u64, slots: usize) {
        if self.0 == 0 {
            return;
        }
        let size = std::mem::size_of::<T>();
        debug_assert!(slots * size <= 128, "{slots} slots of {size} bytes");
        let first = hash as usize & (table.num_buckets() - 1);
        let control = self.0.wrapping_add(first);
        // Bucket `first`'s slot ends where bucket `first - 1`'s begins; the slots after it
        // lie below it.
        let highest = self.0.wrapping_sub(first * size + 1);
        let lowest = self.0.wrapping_sub((first + slots) * size);
        for at in [control, control.wrapping_add(15), lowest, highest] {
            prefetch(at as *const u8);
        }
        // A third line only where the slots span more than 64 bytes (known at compile time
        // for each table: a key table's 8 slots are 64 bytes).
        if slots * size > 64 {
            prefetch(lowest.wrapping_add(64) as *const u8);
        }
    }

    /// The address `end` gives bucket `bucket`'s slot (tests).
    #[cfg(test)]
    fn slot(&self, bucket: usize, size: usize) -> usize {
        self.0 - (bucket + 1) * size
    }

    /// Whether the element `eq` finds in `table` lies where this end says (tests of the
    /// tables that keep one: that they note it where they should).
    #[cfg(test)]
    pub fn locates<T>(&self, table: &HashTable<T>, hash: u64, eq: impl FnMut(&T) -> bool) -> bool {
        table.find_bucket_index(hash, eq).is_some_and(|bucket| {
            let at = std::ptr::from_ref(table.get_bucket(bucket).expect("an occupied bucket")) as usize;
            self.0 != 0 && at == self.slot(bucket, std::mem::size_of::<T>())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hashbrown::hash_table::Entry;

    /// Every occupied bucket's element lies where `SlotsEnd` says, for elements of two sizes,
    /// through growths and removals. A hashbrown that laid its tables out otherwise would leave
    /// the prefetches pointing at the wrong lines; this test says so.
    #[test]
    fn addresses_follow_hashbrowns_layout() {
        fn check<T: Copy + Eq + std::fmt::Debug>(make: impl Fn(u64) -> T, key: impl Fn(&T) -> u64) {
            let hash = |k: u64| k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut table: HashTable<T> = HashTable::new();
            let mut end = SlotsEnd::default();
            for k in 0..1000u64 {
                if let Entry::Vacant(free) = table.entry(hash(k), |t| key(t) == k, |t| hash(key(t))) {
                    end.note(&free.insert(make(k)));
                }
                if k % 3 == 0 {
                    if let Ok(found) = table.find_entry(hash(k / 2), |t| key(t) == k / 2) {
                        found.remove();
                    }
                }
            }
            let mut checked = 0;
            for k in 0..1000u64 {
                let Some(bucket) = table.find_bucket_index(hash(k), |t| key(t) == k) else { continue };
                let at = std::ptr::from_ref(table.get_bucket(bucket).expect("an occupied bucket")) as usize;
                assert_eq!(at, end.slot(bucket, std::mem::size_of::<T>()), "{k}");
                checked += 1;
            }
            assert_eq!(checked, table.len());
        }
        check(|k| k, |&k| k);
        check(|k| (k, [0u8; 32]), |&(k, _)| k);
    }

    #[test]
    fn a_clone_and_a_forgotten_end_prefetch_nothing() {
        let mut end = SlotsEnd(4096);
        assert_eq!(end.clone().0, 0);
        end.forget();
        assert_eq!(end.0, 0);
    }
}
