//! `Merge`: the one trait every replicated state implements, next to its type — the LWW
//! register of a string or list (`entry::Register`), the field map of a hash or set
//! (`entry::Collection`), the sorted set's members (`zset::SortedSet`), the PN-counter
//! (`counter::Counter`), the expiry register (`entry::Expiry`), the key tombstone (a
//! `Version`, as `Ghost::cleared` and a database's flush point hold it), a deleted key's
//! ghost (`ghost::Ghost`: its key tombstone, type and element tombstones) and the
//! HyperLogLog registers (`hll::Hll`). `repl::merge` is the key-level layer above them: it finds the
//! entry, settles which type and incarnation a key holds, and delegates to these.
//!
//! Every impl states its laws in its doc comment and checks them in its own property test
//! with `check_laws`: merging is commutative, associative and idempotent, so replicas that
//! receive the same states in any order, with duplicates and in any grouping, end equal.
//! The laws hold on the states a correct mesh produces, where a version names one write:
//! two states never hold different contents at one version. Where a faulty peer breaks
//! that, each type defines a tie rule (docs/merge.md) so the merge is still idempotent.
//!
//! `merge` takes `other` by reference: the key layer merges states borrowed from an effect
//! it does not own (`apply_op` takes `&Effect`), and a replica keeps what it merged from.

use crate::hlc::Version;

/// A join-semilattice state (module docs).
pub trait Merge {
    /// Joins `other` into `self`; returns whether `self` changed.
    fn merge(&mut self, other: &Self) -> bool;
}

/// The key tombstone, and a database's flush point: a max register. Everything older than
/// it is dead.
///
/// Laws: the maximum of totally ordered versions, so commutative, associative and
/// idempotent; no ties (equal versions are equal states).
impl Merge for Version {
    fn merge(&mut self, other: &Version) -> bool {
        let changed = *other > *self;
        if changed {
            *self = *other;
        }
        changed
    }
}

/// An optional register (an expiry register a key may lack): `None` is the bottom, below
/// every state; two present states merge by `T`'s rule, so the laws are `T`'s.
impl<T: Merge + Clone> Merge for Option<T> {
    fn merge(&mut self, other: &Option<T>) -> bool {
        match (self.as_mut(), other) {
            (_, None) => false,
            (None, Some(o)) => {
                *self = Some(o.clone());
                true
            }
            (Some(s), Some(o)) => s.merge(o),
        }
    }
}

/// A replicated collection of named elements — a hash's fields, a set's members, a sorted
/// set's members — each live with its content or removed (a tombstone), at the version that
/// wrote it, plus the key tombstone `cleared`: everything older is dead. The per-element rule
/// (`merge_element`) is what a peer's field effect applies, one element at a time, and
/// `merge_elements` joins two whole collections by it; both live here, once for the three
/// types.
pub trait ElementMap {
    /// What a live element holds besides its version (a field's value, a member's score).
    type Content: Clone;

    fn cleared(&self) -> Version;

    /// The version of what the collection holds of `name`, live or tombstone.
    fn held(&self, name: &[u8]) -> Option<Version>;

    /// Sets `name`'s state (`None`: a tombstone) at `version`, as a merge (not a local change).
    fn put(&mut self, name: &[u8], content: Option<Self::Content>, version: Version);

    /// Every element's state, live and removed.
    fn states(&self) -> Vec<(bytes::Bytes, Option<Self::Content>, Version)>;

    /// A key-level delete at `v`: `cleared` becomes at least `v`, and every element and
    /// tombstone older than it dies.
    fn clear_older(&mut self, v: Version);

    /// One element's state at `version` from a peer: taken if it is not older than the key
    /// tombstone or `floor` (the database's flush, the key's ghost), and newer than what is
    /// held of `name`; at one version the held state stays (a version names one write).
    /// Returns whether it was taken. A map may do it with fewer lookups than `merge_by_held`,
    /// by the same rule.
    fn merge_element(&mut self, name: &[u8], content: Option<Self::Content>, version: Version, floor: Version) -> bool {
        merge_by_held(self, name, content, version, floor)
    }
}

/// `ElementMap::merge_element`'s rule, by `held` and then `put`.
pub fn merge_by_held<M: ElementMap + ?Sized>(map: &mut M, name: &[u8], content: Option<M::Content>, version: Version, floor: Version) -> bool {
    if version < map.cleared().max(floor) || map.held(name).is_some_and(|held| held >= version) {
        return false;
    }
    map.put(name, content, version);
    true
}

/// Joins two collections (the `Merge` of every `ElementMap`): the newer key tombstone, then
/// every element of `other` by `merge_element`.
pub fn merge_elements<M: ElementMap>(this: &mut M, other: &M) -> bool {
    let mut changed = false;
    if other.cleared() > this.cleared() {
        this.clear_older(other.cleared());
        changed = true;
    }
    for (name, content, version) in other.states() {
        changed |= this.merge_element(&name, content, version, Version::ZERO);
    }
    changed
}

/// Checks the lattice laws on three states of one type, comparing states with `eq`:
/// idempotent (`a ⊔ a = a`, reported as no change), commutative (`a ⊔ b = b ⊔ a`),
/// associative (`(a ⊔ b) ⊔ c = a ⊔ (b ⊔ c)`), and `merge`'s answer is whether the state
/// changed. Panics (failing the property test) with the states that broke a law.
#[cfg(test)]
pub fn check_laws<T: Merge + Clone + std::fmt::Debug>(a: &T, b: &T, c: &T, eq: impl Fn(&T, &T) -> bool) {
    let join = |x: &T, y: &T| {
        let mut z = x.clone();
        let changed = z.merge(y);
        assert_eq!(changed, !eq(&z, x), "merge's answer is whether it changed: {x:?} ⊔ {y:?} = {z:?}");
        z
    };
    for x in [a, b, c] {
        let mut again = x.clone();
        assert!(!again.merge(x), "idempotent: merging {x:?} into itself changed it");
        assert!(eq(&again, x), "idempotent: {x:?} ⊔ itself = {again:?}");
    }
    let (ab, ba) = (join(a, b), join(b, a));
    assert!(eq(&ab, &ba), "commutative: {a:?} ⊔ {b:?} = {ab:?}, but the other way {ba:?}");
    let left = join(&ab, c);
    let right = join(a, &join(b, c));
    assert!(eq(&left, &right), "associative: (a ⊔ b) ⊔ c = {left:?}, a ⊔ (b ⊔ c) = {right:?} for {a:?}, {b:?}, {c:?}");
    let twice = join(&left, &ab);
    assert!(eq(&twice, &left), "absorbing: merging a part again changed {left:?} to {twice:?}");
}

#[cfg(test)]
pub mod strategies {
    //! Generators shared by the per-type property tests.
    use proptest::prelude::*;

    use crate::hlc::Version;

    /// A version among a few, so that states meet at equal versions often.
    pub fn version() -> impl Strategy<Value = Version> {
        (0u64..6, 1u32..4).prop_map(|(hlc, node)| Version { hlc: hlc * 10, node })
    }

    /// A name among a few, so that states share elements often.
    pub fn name() -> impl Strategy<Value = bytes::Bytes> {
        (0u8..4).prop_map(|n| bytes::Bytes::from(vec![b'f', b'0' + n]))
    }

    /// The content a write at `v` wrote to `name`: a version names one write, so every
    /// state that holds `name` at `v` holds this.
    pub fn written(name: &[u8], v: Version) -> u64 {
        name.iter().fold(v.hlc.wrapping_mul(31).wrapping_add(u64::from(v.node)), |h, &b| h.wrapping_mul(131).wrapping_add(u64::from(b)))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::strategies::version;
    use super::*;

    proptest! {
        #[test]
        fn the_key_tombstone_is_a_lattice(a in version(), b in version(), c in version()) {
            check_laws(&a, &b, &c, |x, y| x == y);
        }

        #[test]
        fn an_optional_register_is_a_lattice(a in prop::option::of(version()), b in prop::option::of(version()), c in prop::option::of(version())) {
            check_laws(&a, &b, &c, |x, y| x == y);
        }
    }
}
