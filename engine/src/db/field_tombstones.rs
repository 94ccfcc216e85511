//! The field and member tombstones inside a live hash, set or sorted set
//! (`Collection::removed`, `SortedSet::removed`): each removed name with the version that
//! removed it, kept until every peer has seen the removal (`expire::collect_tombstones`).
//!
//! They live inside the collections, so the collector can find them only by walking every
//! key, one eighth of the keyspace a second: with no collection anywhere it still read every
//! node. An idle 2-node mesh holding 1M string keys used 26–29 ticks of CPU per node per 20 s
//! with the walk, 13 without it; under a SET load it was ~1.5% of a peer's CPU
//! (docs/benchmarks.md, "Tombstones"). So this process counts the maps that hold any
//! tombstone (`HELD`), and the collector walks only while that count is above zero. The count
//! is kept by the map itself: it has no `DerefMut`, and every change goes through a method
//! here that counts the map when it gains its first tombstone and uncounts it when it loses
//! its last, is dropped while holding some, or is made (`From`, `Clone`) holding some. A count
//! that is too high only costs a walk; one that missed a map would leave that map's tombstones
//! uncollected, which these methods make impossible.

use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::fieldmap::{FieldMap, NameArg};
use super::name::Name;
use crate::hlc::Version;

/// How many `FieldTombstones` in this process hold at least one tombstone. Relaxed: the
/// collector only needs to see a new tombstone by one of its next passes.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Whether any collection in this process may hold a field or member tombstone: when not, the
/// collector has nothing to look for inside collections.
pub fn any_held() -> bool {
    HELD.load(Ordering::Relaxed) > 0
}

fn count(held: bool) {
    if held {
        HELD.fetch_add(1, Ordering::Relaxed);
        #[cfg(test)]
        tests::HELD_HERE.with(|n| n.set(n.get() + 1));
    }
}

fn uncount(held: bool) {
    if held {
        let was = HELD.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(was > 0, "a map uncounted that was never counted");
        #[cfg(test)]
        tests::HELD_HERE.with(|n| n.set(n.get() - 1));
    }
}

/// A collection's tombstones: read through `Deref` as a `FieldMap`, changed only here.
#[derive(Default, PartialEq, Eq)]
pub struct FieldTombstones(FieldMap<Version>);

impl FieldTombstones {
    /// Records `name` as removed at `version` (replacing an older record).
    pub fn insert(&mut self, name: impl NameArg, version: Version) -> Option<Version> {
        let first = self.0.is_empty();
        let previous = self.0.insert(name, version);
        count(first);
        previous
    }

    /// Forgets `name`'s tombstone (the name is live again, or its record is superseded).
    pub fn remove(&mut self, name: &[u8]) -> Option<Version> {
        let removed = self.0.remove(name);
        uncount(removed.is_some() && self.0.is_empty());
        removed
    }

    /// Keeps the tombstones `keep` accepts.
    pub fn retain(&mut self, keep: impl FnMut(&Name, &mut Version) -> bool) {
        if self.0.is_empty() {
            return;
        }
        self.0.retain(keep);
        uncount(self.0.is_empty());
    }

    /// `FieldMap::step_growth`: moves a step of a growing table's rehash along.
    pub fn step_growth(&mut self) {
        self.0.step_growth();
    }
}

impl Deref for FieldTombstones {
    type Target = FieldMap<Version>;

    fn deref(&self) -> &FieldMap<Version> {
        &self.0
    }
}

impl From<FieldMap<Version>> for FieldTombstones {
    fn from(map: FieldMap<Version>) -> FieldTombstones {
        count(!map.is_empty());
        FieldTombstones(map)
    }
}

impl Clone for FieldTombstones {
    fn clone(&self) -> FieldTombstones {
        FieldTombstones::from(self.0.clone())
    }
}

impl Drop for FieldTombstones {
    fn drop(&mut self) {
        uncount(!self.0.is_empty());
    }
}

impl std::fmt::Debug for FieldTombstones {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    thread_local! {
        /// `HELD`'s changes made on this thread: `HELD` is the process's, shared with the
        /// tests that `cargo test` runs beside these on other threads.
        pub(super) static HELD_HERE: Cell<isize> = const { Cell::new(0) };
    }

    fn held_here() -> isize {
        HELD_HERE.with(Cell::get)
    }

    fn v(hlc: u64) -> Version {
        Version { hlc, node: 1 }
    }

    /// A map is counted exactly while it holds a tombstone, through each way it can gain or
    /// lose one: inserted, removed, retained away, cloned, made from a map, dropped.
    #[test]
    fn a_map_is_counted_exactly_while_it_holds_a_tombstone() {
        let mut a = FieldTombstones::default();
        assert_eq!(held_here(), 0);
        a.insert(&b"x"[..], v(1));
        a.insert(&b"y"[..], v(2));
        assert_eq!(held_here(), 1, "counted once, at its first tombstone");
        assert!(any_held());
        let b = a.clone();
        assert_eq!(held_here(), 2, "a clone holding tombstones is counted");
        a.remove(b"x");
        a.remove(b"absent");
        assert_eq!(held_here(), 2);
        a.retain(|_, version| version.hlc > 5);
        assert_eq!(held_here(), 1, "uncounted when its last tombstone goes");
        a.retain(|_, _| false);
        a.remove(b"y");
        assert_eq!(held_here(), 1, "an empty map is not uncounted twice");
        a.insert(&b"z"[..], v(3));
        assert_eq!(held_here(), 2, "counted again at a new first tombstone");
        a.remove(b"z");
        drop(b);
        assert_eq!(held_here(), 0, "a map dropped with tombstones is uncounted");
        let made = FieldTombstones::from([(Name::from(&b"w"[..]), v(4))].into_iter().collect::<FieldMap<Version>>());
        let empty = FieldTombstones::from(FieldMap::default());
        assert_eq!(held_here(), 1, "made from a map: counted if it holds any");
        drop((made, empty));
        assert_eq!(held_here(), 0);
    }
}
