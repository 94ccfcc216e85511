//! What replication keeps of a key that is gone (`Ghost`): its key tombstone, the type it
//! died as and the tombstones of an emptied collection's fields or members. This file owns
//! the ghost's own merge (`Merge for Ghost`, with its laws and property test) and the rules
//! by which a ghost meets a write of some type at some version (`register`, `beats`,
//! `kills_below`, `outlived`), which the key layer (`repl::merge`) asks; the tie rule is the
//! register's (`entry::Register::beats`), defined once there.

use super::entry::{FieldMap, Name};
use super::entry::{Kind, Register, TieRank};
use super::lattice::Merge;
use crate::hlc::Version;

/// What replication keeps of a key that is gone: its key-level tombstone (`cleared`: every
/// older write of any type is dead) and, for a collection emptied by removals, the
/// tombstones of its fields or members (a concurrent older field on another node must still
/// lose to them, whether it arrives before or after the collection emptied).
///
/// Kept small (32 bytes): most ghosts are plain deletes, and a node holds one per deleted key
/// until every peer is past it (docs/benchmarks.md, "Tombstones").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ghost {
    pub cleared: Version,
    pub kind: Option<Kind>,
    /// The emptied collection's field or member tombstones; `None` when there are none.
    removed: Option<Box<FieldMap<Version>>>,
}

// Every deleted key costs one of these while replicating: keep it from growing by accident.
const _: () = assert!(std::mem::size_of::<Ghost>() <= 32);

/// Two ghosts of one key join into the ghost of both histories. Of one type (or both of
/// none) the key tombstones take the maximum and the removed elements join per name by
/// maximum; of two types, the incarnation whose newest write wins (`register`, the register's
/// rule; a ghost's own type breaks a tie no write decides) stays whole, and the other's newest
/// write still kills what is older than it (`kills_below`), as any losing write does.
/// Everything older than the resulting key tombstone dies. A plain delete at `v` is the ghost
/// `Ghost::deleted(v)`: merging it is `clear(v)`.
///
/// Laws: commutative, associative and idempotent where a version names one write (a removed
/// element's version names its type), ties between types included
/// (`tests::the_ghost_is_a_lattice`); `merge` answers whether the ghost changed.
impl Merge for Ghost {
    fn merge(&mut self, other: &Ghost) -> bool {
        let before = (self.cleared, self.kind, self.removed.clone());
        if self.kind == other.kind {
            self.cleared = self.cleared.max(other.cleared);
            if other.removed.is_some() {
                let removed = self.removed.get_or_insert_with(Box::default);
                for (name, v) in other.removed() {
                    let held = removed.get_or_insert(name.clone(), *v);
                    *held = (*held).max(*v);
                }
            }
        } else if other.incarnation() > self.incarnation() {
            let cleared = self.cleared.max(self.register().kills_below(&other.kind));
            *self = other.clone();
            self.cleared = self.cleared.max(cleared);
        } else {
            self.cleared = self.cleared.max(other.cleared).max(other.register().kills_below(&self.kind));
        }
        let cleared = self.cleared;
        if let Some(removed) = &mut self.removed {
            removed.retain(|_, r| *r >= cleared);
            if removed.is_empty() {
                self.removed = None;
            }
        }
        (self.cleared, self.kind, &self.removed) != (before.0, before.1, &before.2)
    }
}

impl Ghost {
    pub fn deleted(at: Version) -> Ghost {
        Ghost { cleared: at, kind: None, removed: None }
    }

    /// The newest write the ghost remembers.
    pub fn newest(&self) -> Version {
        self.removed().map(|(_, v)| *v).fold(self.cleared, Version::max)
    }

    /// The ghost's newest write as a register: typed (the type it died as) when a removed
    /// element is at that version; a key tombstone alone has no type (it is a delete's, or a
    /// losing write's; a whole-collection write is a delete and fields at one version).
    pub fn register(&self) -> Register<Option<Kind>> {
        let newest = self.newest();
        let typed = self.kind.filter(|_| self.removed().any(|(_, removed)| *removed == newest));
        Register { value: typed, version: newest }
    }

    /// Which of two ghosts' incarnations stays when their types differ: the newer register
    /// (`Register::beats`), and at one register the higher-ranked type.
    fn incarnation(&self) -> (Version, u8, u8) {
        let register = self.register();
        (register.version, register.value.tie_rank(), self.kind.tie_rank())
    }

    /// Whether the buried key's writes beat a key write of `kind` at `v` (the register's rule
    /// applied to `register`): anything newer than it, or a removed element at its version of
    /// a type that ranks higher.
    pub fn beats(&self, kind: Kind, v: Version) -> bool {
        self.register().beats(&Register { value: Some(kind), version: v })
    }

    /// What the buried key's writes kill of a new incarnation of `kind`: everything older than
    /// its newest write, and what is at that version too when a removed element of a
    /// higher-ranked type is there.
    pub fn kills_below(&self, kind: Kind) -> Version {
        self.register().kills_below(&kind)
    }

    /// A write of `kind` at `v` that lost to this ghost (`beats`) still kills what is older
    /// than it, and what is at its version of a lower-ranked type the ghost died as.
    pub fn outlived(&mut self, kind: Kind, v: Version) {
        let point = match self.kind {
            Some(held) => Register { value: kind, version: v }.kills_below(&held),
            None => v,
        };
        self.clear(point);
    }

    /// The field or member tombstones of the emptied collection.
    pub fn removed(&self) -> impl Iterator<Item = (&Name, &Version)> {
        self.removed.iter().flat_map(|m| m.iter())
    }

    pub fn has_removed(&self) -> bool {
        self.removed.is_some()
    }

    pub fn into_removed(self) -> FieldMap<Version> {
        self.removed.map(|m| *m).unwrap_or_default()
    }

    pub(super) fn add_removed<'r>(&mut self, removed: impl Iterator<Item = (&'r Name, &'r Version)>) {
        let mut removed = removed.peekable();
        if removed.peek().is_some() {
            self.removed.get_or_insert_with(Box::default).extend(removed.map(|(k, v)| (k.clone(), *v)));
        }
    }

    /// Prepares a collection re-created at a ghost's key: of the same type it inherits the
    /// ghost's tombstones; of another type it starts after everything the ghost remembers.
    /// Returns the new incarnation's key tombstone.
    pub fn revive(ghost: Option<&Ghost>, kind: Kind, fresh: &mut impl Tombstoned) -> Version {
        let cleared = match ghost {
            None => Version::ZERO,
            Some(g) if g.kind.is_none() || g.kind == Some(kind) => {
                fresh.set_removed(g.removed.as_deref().cloned().unwrap_or_default());
                g.cleared
            }
            Some(g) => g.newest(),
        };
        fresh.set_cleared(cleared);
        cleared
    }

    /// Absorbs a key-level delete at `v`: the merge of `Ghost::deleted(v)`. Everything older
    /// dies; once only the key tombstone is left, it dominates every type alike (no kind).
    pub fn clear(&mut self, v: Version) {
        self.merge(&Ghost::deleted(v));
    }
}

/// A value with replication tombstones (collections and lists).
pub trait Tombstoned {
    fn set_cleared(&mut self, cleared: Version);
    fn set_removed(&mut self, removed: FieldMap<Version>);
}

impl<V> Tombstoned for super::entry::Collection<V> {
    fn set_cleared(&mut self, cleared: Version) {
        self.cleared = cleared;
    }
    fn set_removed(&mut self, removed: FieldMap<Version>) {
        self.removed = removed.into();
    }
}

impl Tombstoned for super::zset::SortedSet {
    fn set_cleared(&mut self, cleared: Version) {
        self.cleared = cleared;
    }
    fn set_removed(&mut self, removed: FieldMap<Version>) {
        self.removed = removed.into();
    }
}

impl Tombstoned for super::entry::ListValue {
    fn set_cleared(&mut self, cleared: Version) {
        self.cleared = cleared;
    }
    fn set_removed(&mut self, _removed: FieldMap<Version>) {}
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::db::lattice::check_laws;
    use crate::db::lattice::strategies::{name, version, written};

    /// The type a write at `v` had: a version names one write, and a write has one type.
    fn collection_kind(v: Version) -> Kind {
        [Kind::Hash, Kind::Set, Kind::ZSet][(written(b"kind", v) % 3) as usize]
    }

    /// A ghost as a correct mesh makes them: a plain delete; a string or list buried under a
    /// key tombstone; or an emptied collection, of the type its newest removal had, with the
    /// removals of that type not older than its key tombstone.
    fn ghost() -> impl Strategy<Value = Ghost> {
        let plain = version().prop_map(Ghost::deleted);
        let whole =
            (version(), prop::sample::select(vec![Kind::String, Kind::List])).prop_map(|(cleared, kind)| Ghost { cleared, kind: Some(kind), removed: None });
        let emptied = (version(), prop::collection::vec((name(), version()), 1..5)).prop_map(|(cleared, removals)| {
            let newest = removals.iter().map(|(_, v)| *v).max().unwrap_or(Version::ZERO);
            let kind = collection_kind(newest);
            let mut ghost = Ghost { cleared, kind: Some(kind), removed: None };
            let mut removed: Vec<_> = removals.into_iter().filter(|(_, v)| collection_kind(*v) == kind && *v >= cleared).collect();
            // One state per name: the newest removal of it.
            removed.sort();
            removed.reverse();
            removed.dedup_by(|a, b| a.0 == b.0);
            let removed: Vec<(Name, Version)> = removed.into_iter().map(|(n, v)| (Name::from(n), v)).collect();
            ghost.add_removed(removed.iter().map(|(n, v)| (n, v)));
            ghost
        });
        prop_oneof![plain, whole, emptied]
    }

    proptest! {
        #[test]
        fn the_ghost_is_a_lattice(a in ghost(), b in ghost(), c in ghost()) {
            check_laws(&a, &b, &c, |x, y| x == y);
        }

        #[test]
        fn clearing_is_merging_a_delete(g in ghost(), v in version()) {
            // `clear` is the merge of a plain delete, and a ghost the delete outlives has no type.
            let mut cleared = g.clone();
            cleared.clear(v);
            prop_assert!(cleared.removed().all(|(_, r)| *r >= v) && cleared.cleared == g.cleared.max(v));
            if g.newest() < v {
                prop_assert_eq!(cleared, Ghost::deleted(v));
            }
        }
    }
}
