//! The PN-counter behind `INCR`/`DECR`/`INCRBY`/`DECRBY`: a base register (the value of the
//! last `SET`, LWW by version) plus, per origin, running totals of its increments and
//! decrements with the version of its latest one. Totals only grow, so merging takes the
//! per-origin maximum and concurrent increments on both sides of a partition all count. A
//! `SET` or `DEL` at version v dominates the contributions older than v; later ones survive.
//!
//! Documented limitation: totals are cumulative per origin, so an origin that incremented both
//! before and after a concurrent `DEL`/`SET` it had not seen yet keeps its earlier increments
//! too (its contribution's version is that of its latest increment).

use smallvec::SmallVec;

use super::lattice::Merge;
use crate::hlc::{NodeId, Version};

/// A PN-counter contribution as it replicates: the origin's running totals of increments and
/// decrements on top of the base it counted from (the version of the last `SET` or `DEL` it
/// saw, and that `SET`'s value, so a peer that has not seen the `SET` yet can still merge).
/// Origin `BASE_ONLY` carries the base register alone (full sync).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterDelta {
    pub origin: NodeId,
    pub incr_total: i64,
    pub decr_total: i64,
    pub base: Version,
    pub version: Version,
    pub base_value: i64,
}

/// One origin's running totals within one epoch: the base version it counted from. A node
/// that sees a DEL or SET starts a new epoch, so its fresh totals never mix (by maximum) with
/// its totals from before, which peers may still hold until the DEL reaches them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contribution {
    pub origin: NodeId,
    pub epoch: Version,
    pub incr: i64,
    pub decr: i64,
    pub version: Version,
}

/// The origin id of a delta that carries only the base register.
pub const BASE_ONLY: NodeId = 0;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    pub base: i64,
    pub base_version: Version,
    /// Inline for one origin (a counter written on one node): a `Vec` was a second
    /// allocation per counter, and its first growth reserved four (224 bytes).
    pub totals: SmallVec<[Contribution; 1]>,
    last_origin: NodeId,
}

impl Counter {
    pub fn new(base: i64, base_version: Version) -> Counter {
        Counter { base, base_version, totals: SmallVec::new(), last_origin: 0 }
    }

    /// The counter's value, or `None` if it overflows an i64.
    pub fn value(&self) -> Option<i64> {
        self.totals.iter().try_fold(self.base, |acc, c| acc.checked_add(c.incr)?.checked_sub(c.decr))
    }

    fn slot(&mut self, origin: NodeId, epoch: Version) -> &mut Contribution {
        let i = match self.totals.iter().position(|c| c.origin == origin && c.epoch == epoch) {
            Some(i) => i,
            None => {
                self.totals.push(Contribution { origin, epoch, incr: 0, decr: 0, version: Version::ZERO });
                self.totals.len() - 1
            }
        };
        &mut self.totals[i]
    }

    /// A local increment by `delta` at version `v`. Returns the new value, or `None` (and
    /// changes nothing) if it would overflow.
    pub fn add(&mut self, origin: NodeId, delta: i64, v: Version) -> Option<i64> {
        let next = self.value()?.checked_add(delta)?;
        let epoch = self.base_version;
        let slot = self.slot(origin, epoch);
        if delta >= 0 {
            slot.incr = slot.incr.checked_add(delta)?;
        } else {
            slot.decr = slot.decr.checked_add(delta.checked_neg()?)?;
        }
        slot.version = v;
        self.last_origin = origin;
        Some(next)
    }

    pub fn origin_of_last_change(&self) -> NodeId {
        self.last_origin
    }

    /// The effect of `origin`'s contribution in the current epoch (after a local increment).
    pub fn delta_of(&self, origin: NodeId, v: Version) -> CounterDelta {
        let c = self.totals.iter().find(|c| c.origin == origin && c.epoch == self.base_version).copied();
        self.delta_of_slot(&c.unwrap_or(Contribution { origin, epoch: self.base_version, incr: 0, decr: 0, version: v }))
    }

    /// The effect that recreates the base register (full sync).
    pub fn base_delta(&self) -> CounterDelta {
        CounterDelta { origin: BASE_ONLY, incr_total: 0, decr_total: 0, base: self.base_version, version: self.base_version, base_value: self.base }
    }

    /// The effect that recreates one contribution (full sync).
    pub fn delta_of_slot(&self, c: &Contribution) -> CounterDelta {
        // The epoch travels as the delta's base; its value is the base register's when the
        // epoch is the current one (older epochs' base values are dominated anyway).
        let base_value = if c.epoch == self.base_version { self.base } else { 0 };
        CounterDelta { origin: c.origin, incr_total: c.incr, decr_total: c.decr, base: c.epoch, version: c.version, base_value }
    }

    /// The state a delta describes: the base it saw and, unless it is `BASE_ONLY`, one
    /// contribution in the epoch of that base.
    pub fn of_delta(d: &CounterDelta) -> Counter {
        let mut c = Counter::new(d.base_value, d.base);
        // Origin 0 carries only the base register (full sync), no contribution.
        if d.origin != BASE_ONLY {
            c.totals.push(Contribution { origin: d.origin, epoch: d.base, incr: d.incr_total, decr: d.decr_total, version: d.version });
        }
        c
    }

    /// Merges a peer's contribution (and the base it saw, LWW); returns whether the counter
    /// changed. What `merge` does with `of_delta(d)`, without making that counter first (~20
    /// instructions of a peer's merged `INCR`, callgrind).
    pub fn merge_delta(&mut self, d: &CounterDelta) -> bool {
        let mut changed = self.merge_base(d.base_value, d.base);
        if d.origin != BASE_ONLY {
            changed |= self.merge_contribution(&Contribution { origin: d.origin, epoch: d.base, incr: d.incr_total, decr: d.decr_total, version: d.version });
        }
        self.pruned(changed)
    }

    /// Takes a newer base register; returns whether it was newer.
    fn merge_base(&mut self, base: i64, base_version: Version) -> bool {
        let newer = base_version > self.base_version;
        if newer {
            self.base = base;
            self.base_version = base_version;
        }
        newer
    }

    /// Raises the totals of `c`'s origin in `c`'s epoch to `c`'s (a contribution older than
    /// the base is dead: left out); returns whether the counter changed.
    fn merge_contribution(&mut self, c: &Contribution) -> bool {
        if c.version < self.base_version {
            return false;
        }
        let held = self.totals.len();
        let slot = self.slot(c.origin, c.epoch);
        let merged = (slot.incr.max(c.incr), slot.decr.max(c.decr), slot.version.max(c.version));
        let raised = merged != (slot.incr, slot.decr, slot.version);
        (slot.incr, slot.decr, slot.version) = merged;
        // A new contribution changes the counter even at zero.
        raised || self.totals.len() > held
    }

    /// Drops the contributions older than the base after a merge that `changed` it or not;
    /// returns whether the counter changed in all.
    fn pruned(&mut self, changed: bool) -> bool {
        let held = self.totals.len();
        self.prune();
        changed || self.totals.len() < held
    }

    /// A `SET` of an integer at `v`: the new base; older contributions die.
    pub fn rebase(&mut self, value: i64, v: Version) {
        if v > self.base_version {
            self.base = value;
            self.base_version = v;
            self.prune();
        }
    }

    /// A `DEL` at `v`: older contributions die. Returns true if nothing is left.
    pub fn clear_older(&mut self, v: Version) -> bool {
        self.totals.retain(|t| t.version >= v);
        if self.base_version < v {
            if self.totals.is_empty() {
                return true;
            }
            self.base = 0;
            self.base_version = v;
        }
        false
    }

    fn prune(&mut self) {
        let floor = self.base_version;
        self.totals.retain(|t| t.version >= floor);
    }

    /// The newest write this counter holds.
    pub fn newest(&self) -> Version {
        self.totals.iter().map(|c| c.version).fold(self.base_version, Version::max)
    }
}

/// The PN-counter: the base register is LWW by version (at one version the held base
/// stays: a version names one write, so it is the same value); contributions merge per
/// `(origin, epoch)` by taking the maximum of each total and of the version; contributions
/// older than the base (after the merge) are dead.
///
/// Laws: commutative, associative and idempotent on counters whose origins' totals only grow
/// with their versions, as a real origin's do (`add`): the per-slot maximum is then the
/// newest contribution, and pruning by the newest base commutes with it. Checked by
/// `tests::the_counter_is_a_lattice`, which also checks the answer (whether it changed).
impl Merge for Counter {
    /// Whether it changed is worked out as it merges: a newer base, a new contribution, a
    /// total or version raised, a contribution pruned. A copy of the counter compared with it
    /// afterwards (its contributions' vector cloned and dropped) cost a peer's merged `INCR`
    /// ~100 instructions. (Held contributions are never older than the base, so only a newer
    /// base prunes any, and a new one has a version: the last two checks are for counters
    /// made otherwise.)
    fn merge(&mut self, other: &Counter) -> bool {
        let mut changed = self.merge_base(other.base, other.base_version);
        for c in &other.totals {
            changed |= self.merge_contribution(c);
        }
        self.pruned(changed)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::db::lattice::check_laws;
    use crate::db::lattice::strategies::{version, written};

    /// A counter as a correct mesh makes them: the base value is the one its version wrote,
    /// and each origin's totals grow with its versions.
    fn counter() -> impl Strategy<Value = Counter> {
        let contribution = (1u32..4, version(), version()).prop_map(|(origin, epoch, at)| {
            let version = Version { hlc: at.hlc + 1, node: origin };
            Contribution { origin, epoch, incr: version.hlc as i64 / 3, decr: version.hlc as i64 / 5, version }
        });
        (version(), prop::collection::vec(contribution, 0..5)).prop_map(|(base_version, totals)| {
            let mut c = Counter::new(written(b"base", base_version) as i64 % 100, base_version);
            // An epoch is a base the origin saw, never newer than the counter's.
            for t in totals.into_iter().map(|t| Contribution { epoch: t.epoch.min(base_version), ..t }) {
                c.merge(&Counter { base: c.base, base_version: Version::ZERO, totals: smallvec::smallvec![t], last_origin: 0 });
            }
            c
        })
    }

    fn same(a: &Counter, b: &Counter) -> bool {
        let sorted = |c: &Counter| {
            let mut t: Vec<_> = c.totals.iter().map(|t| (t.origin, t.epoch, t.incr, t.decr, t.version)).collect();
            t.sort_unstable();
            t
        };
        (a.base, a.base_version) == (b.base, b.base_version) && sorted(a) == sorted(b)
    }

    proptest! {
        #[test]
        fn the_counter_is_a_lattice(a in counter(), b in counter(), c in counter()) {
            check_laws(&a, &b, &c, same);
        }

        /// Merging a delta is merging the state it describes.
        #[test]
        fn a_delta_merges_as_its_state(a in counter(), b in counter()) {
            let mut by_deltas = a.clone();
            by_deltas.merge_delta(&b.base_delta());
            for t in &b.totals {
                by_deltas.merge_delta(&b.delta_of_slot(t));
            }
            let mut whole = a.clone();
            whole.merge(&b);
            prop_assert!(same(&by_deltas, &whole), "{by_deltas:?} != {whole:?}");
        }

        /// `merge_delta` changes a counter as merging the counter the delta describes
        /// (`of_delta`) does, and says whether it changed alike: for each of another
        /// counter's deltas, its base's first.
        #[test]
        fn a_delta_merges_as_the_counter_it_describes(a in counter(), b in counter()) {
            let mut by_delta = a.clone();
            let mut by_counter = a;
            for d in std::iter::once(b.base_delta()).chain(b.totals.iter().map(|t| b.delta_of_slot(t))) {
                let changed = by_delta.merge_delta(&d);
                prop_assert_eq!(changed, by_counter.merge(&Counter::of_delta(&d)), "{:?}", d);
                prop_assert!(same(&by_delta, &by_counter), "{by_delta:?} != {by_counter:?}");
            }
        }
    }

    #[test]
    fn concurrent_increments_all_count() {
        let base = Version { hlc: 1, node: 0 };
        let mut a = Counter::new(10, base);
        let mut b = Counter::new(10, base);
        a.add(1, 5, Version { hlc: 2, node: 1 });
        b.add(2, -3, Version { hlc: 3, node: 2 });
        let (da, db) = (a.delta_of(1, Version::ZERO), b.delta_of(2, Version::ZERO));
        a.merge_delta(&db);
        b.merge_delta(&da);
        a.merge_delta(&db);
        assert_eq!(a.value(), Some(12));
        assert_eq!(b.value(), Some(12));
    }
}
