//! The sorted set: a member map (score and version per member) plus an ordered index of
//! `(score, member)` that counts ranks (`RankedSet`), so lookups are O(1), ranks and counts
//! O(log n), and range queries O(log n + k), as Redis's skip list.

use std::ops::Range;

use bytes::Bytes;

use either::Either;

use super::effect::{ElementKind, Elements, Held};
use super::entry::{element_states, shrink_if_sparse, Changes, ElementValue, FieldMap, SlotHint};
use super::field_tombstones::FieldTombstones;
use super::fieldmap::{Name, NameArg, SMALL_MAX};
use super::lattice::{merge_by_held, merge_elements, ElementMap, Merge};
use super::ranked::RankedSet;
use crate::hlc::Version;

/// A score with a total order (scores are never NaN: commands reject NaN results).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score(pub f64);

impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Score {
    /// IEEE order (so `-0` and `0` compare equal, as in Redis), falling back to the total
    /// order only for NaN, which is never stored.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.partial_cmp(&other.0).unwrap_or_else(|| self.0.total_cmp(&other.0))
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Member {
    pub score: f64,
    pub version: Version,
}

/// A sorted set's member: its score.
impl ElementValue for Member {
    const KIND: ElementKind = ElementKind::ZSet;
    fn held(&self) -> Held<'_> {
        Held::Score(self.score)
    }
    fn version(&self) -> Version {
        self.version
    }
}

#[derive(Debug, Clone, Default)]
pub struct SortedSet {
    members: FieldMap<Member>,
    /// The members in score order, counted; `None` while the set has at most
    /// `fieldmap::SMALL_MAX` members (queries sort those on the spot, `ordered`), and never
    /// empty (`unindex` drops an emptied one). Each name held here is a second copy of it: a
    /// 32-byte pair with its score, and a second allocation for a name longer than
    /// `name::INLINE` bytes. Once built it stays until the member map shrinks back to a vector
    /// (`shrink_if_sparse`). Boxed: in place its 80 bytes, unused by most sets, kept every
    /// set's own part in the allocator's 160-byte class.
    order: Option<Box<RankedSet<(Score, Name)>>>,
    /// Replication: removed members and the version that removed them.
    pub removed: FieldTombstones,
    /// Replication: the key-level tombstone; older members are dead.
    pub cleared: Version,
    /// Members changed since the last effect was emitted.
    touched: Changes,
}

// Most sorted sets (every GEO key) are small: keep the set's own part in the allocator's
// 96-byte class (208 bytes before small maps were vectors and the change list boxed, 160
// before the score index was boxed).
const _: () = assert!(std::mem::size_of::<SortedSet>() <= 96);

/// A sorted set's members: per-member LWW of score and membership, with tombstones, under
/// the key tombstone `cleared` (`ElementMap`). The content is the score.
impl ElementMap for SortedSet {
    type Content = f64;

    fn cleared(&self) -> Version {
        self.cleared
    }

    fn held(&self, name: &[u8]) -> Option<Version> {
        self.members.get(name).map(|m| m.version).or_else(|| self.removed.get(name).copied())
    }

    fn put(&mut self, name: &[u8], content: Option<f64>, version: Version) {
        match content {
            Some(score) => self.merge_insert(name, score, version),
            None => self.merge_remove(name, version),
        }
    }

    fn merge_element(&mut self, name: &[u8], content: Option<f64>, version: Version, floor: Version) -> bool {
        match content {
            Some(score) => self.merge_score(name, score, version, floor),
            None => merge_by_held(self, name, None, version, floor),
        }
    }

    fn states(&self) -> Vec<(Bytes, Option<f64>, Version)> {
        let live = self.members.iter().map(|(n, m)| (n.to_bytes(), Some(m.score), m.version));
        live.chain(self.removed.iter().map(|(n, v)| (n.to_bytes(), None, *v))).collect()
    }

    fn clear_older(&mut self, v: Version) {
        let dead: Vec<Name> = self.members.iter().filter(|(_, m)| m.version < v).map(|(n, _)| n.clone()).collect();
        for n in dead {
            if let Some((key, old)) = self.members.remove_entry(&n[..]) {
                self.unindex(old.score, key);
            }
        }
        self.cleared = self.cleared.max(v);
        self.removed.retain(|_, removed| *removed >= v);
    }
}

/// Per-member LWW with tombstones (`ElementMap::merge_element`); the newer `cleared` kills
/// older members.
///
/// Laws: commutative, associative and idempotent where a version names one write (one
/// member state per name and version); checked by `tests::a_sorted_set_is_a_lattice`,
/// which also checks that the score index stays in step with the members.
impl Merge for SortedSet {
    fn merge(&mut self, other: &SortedSet) -> bool {
        merge_elements(self, other)
    }
}

/// One end of a score range (`(1.5`, `-inf`, ...).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreBound {
    pub value: f64,
    pub exclusive: bool,
}

/// One end of a lex range (`[a`, `(b`, `-`, `+`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LexBound {
    NegInf,
    PosInf,
    Inclusive(Bytes),
    Exclusive(Bytes),
}

/// `FieldMap::insert` of a member: the score it replaced, and where the member is.
#[inline]
fn put_member(members: &mut FieldMap<Member>, member: Name, new: Member) -> (Option<f64>, SlotHint) {
    let (held, unused, hint) = members.slot_hinted(member, new);
    (unused.map(|new| std::mem::replace(held, new).score), hint)
}

/// Moves `member` in the score index from its `old` score (`None`: new to the set) to `score`.
#[inline]
fn reindex(order: &mut RankedSet<(Score, Name)>, member: Name, old: Option<f64>, score: f64) {
    if let Some(old) = old {
        if old.to_bits() == score.to_bits() {
            return;
        }
        order.remove(&(Score(old), member.clone()));
    }
    order.insert((Score(score), member));
}

impl SortedSet {
    /// `FieldMap::prefetch_items` of the member map.
    pub fn prefetch_items(&self) {
        self.members.prefetch_items();
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.members.get(member).map(|m| m.score)
    }

    pub fn member(&self, member: &[u8]) -> Option<Member> {
        self.members.get(member).copied()
    }

    /// A member picked at random, each with the same chance, in O(1) (`FieldMap::random`).
    pub fn random_member(&self, rng: &mut impl rand::Rng) -> Option<&Name> {
        self.members.random(rng).map(|(m, _)| m)
    }

    /// `count` members at random with their scores (`FieldMap::sample`: distinct for a
    /// positive count, repeating for a negative one).
    pub fn sample_members(&self, count: i64, rng: &mut impl rand::Rng) -> Vec<(&Name, f64)> {
        self.members.sample(count, rng).into_iter().map(|(m, member)| (m, member.score)).collect()
    }

    /// Inserts or re-scores a member. Returns the previous score.
    pub fn insert(&mut self, member: impl NameArg, score: f64, version: Version) -> Option<f64> {
        self.removed.remove(member.as_ref());
        self.touched.note(member.as_ref());
        let (previous, hint) = self.insert_quietly(member.into(), score, version);
        self.touched.wrote_at(hint);
        previous
    }

    /// Inserts or re-scores a member, noting nothing; the previous score, and where the
    /// member is in the member map.
    fn insert_quietly(&mut self, member: Name, score: f64, version: Version) -> (Option<f64>, SlotHint) {
        let new = Member { score, version };
        let order = match &mut self.order {
            Some(order) => order,
            None => {
                if self.members.len() < SMALL_MAX || self.members.contains_key(&member[..]) {
                    // Small it stays: the name is held once, by the member map.
                    return put_member(&mut self.members, member, new);
                }
                // The member that makes the set too big for sorting on the spot.
                let order = self.order.get_or_insert_default();
                for (name, m) in self.members.iter() {
                    order.insert((Score(m.score), name.clone()));
                }
                order
            }
        };
        let (previous, hint) = put_member(&mut self.members, member.clone(), new);
        reindex(order, member, previous, score);
        (previous, hint)
    }

    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        let (key, old) = self.members.remove_entry(member)?;
        self.touched.note(&key);
        self.unindex(old.score, key);
        Some(old.score)
    }

    /// Takes a removed member out of the score index, if the set keeps one.
    fn unindex(&mut self, score: f64, member: Name) {
        if let Some(order) = &mut self.order {
            order.remove(&(Score(score), member));
            if order.is_empty() {
                self.order = None;
            }
        }
    }

    /// The score index, while the set keeps one (more than `SMALL_MAX` members).
    fn index(&self) -> Option<&RankedSet<(Score, Name)>> {
        self.order.as_deref()
    }

    /// Whether a member changed since the last `take_touched`.
    pub fn changed(&self) -> bool {
        self.touched.any()
    }

    /// `Collection::states_of` of a sorted set.
    pub fn states_of<'a>(&'a self, names: &'a [Name]) -> Elements<'a> {
        element_states(&self.members, names, SlotHint::NONE, |name| self.removed.get(name).copied().unwrap_or(self.cleared))
    }

    /// `Collection::settled` of a sorted set.
    pub fn settled<'a>(&'a mut self, names: &'a [Name], version: Version) -> Elements<'a> {
        let hint = self.touched.take_last_written();
        let removed = &mut self.removed;
        element_states(&self.members, names, hint, |name| {
            removed.insert(name, version);
            version
        })
    }

    /// Members changed since the last call (`Changes::take`); the member map shrinks if the
    /// changes left it sparse (`entry::shrink_if_sparse`).
    pub fn take_touched(&mut self) -> super::entry::Names {
        self.shrink_if_sparse();
        self.touched.take()
    }

    /// `entry::shrink_if_sparse` of the member map (the order tree frees its own nodes); a
    /// member map small enough to be a vector again takes the set back to sorting on the spot.
    pub fn shrink_if_sparse(&mut self) {
        shrink_if_sparse(&mut self.members);
        if self.members.is_small() {
            self.order = None;
        }
    }

    /// Whether this edit's changes are named (`Changes`).
    pub fn name_changes(&mut self, on: bool) {
        self.touched.set_naming(on);
    }

    /// `FieldMap::step_growth` of its member map and of its tombstones.
    pub fn step_growth(&mut self) {
        self.members.step_growth();
        self.removed.step_growth();
    }

    /// A whole-value write: every member is as new as the key.
    pub fn restamp(&mut self, version: Version) {
        self.members.values_mut().for_each(|m| m.version = version);
        self.cleared = version;
        self.touched.take();
    }

    /// `ElementMap::merge_element` of a member's score: one probe of the member map for the
    /// version check and the insert, where `held` and then `put` probed it twice (~200
    /// instructions of a peer's merged `ZADD`). The set that becomes too big for sorting on
    /// the spot, and a tombstone, take the general path (`merge_by_held`).
    fn merge_score(&mut self, name: &[u8], score: f64, version: Version, floor: Version) -> bool {
        if self.order.is_none() && self.members.len() >= SMALL_MAX {
            return merge_by_held(self, name, Some(score), version, floor);
        }
        if version < self.cleared.max(floor) || self.removed.get(name).is_some_and(|&removed| removed >= version) {
            return false;
        }
        let (held, unused) = self.members.slot(name, Member { score, version });
        let old = match unused {
            Some(_) if held.version >= version => return false,
            Some(new) => Some(std::mem::replace(held, new).score),
            None => None,
        };
        if let Some(order) = &mut self.order {
            reindex(order, Name::from(name), old, score);
        }
        // Most sets hold no tombstones: not even a call to find none.
        if !self.removed.is_empty() {
            self.removed.remove(name);
        }
        true
    }

    /// Replication: sets a member without noting a local change.
    pub fn merge_insert(&mut self, member: impl NameArg, score: f64, version: Version) {
        self.removed.remove(member.as_ref());
        self.insert_quietly(member.into(), score, version);
    }

    /// Replication: removes a member, recording its tombstone, without noting a local change.
    pub fn merge_remove(&mut self, member: &[u8], version: Version) {
        if let Some((key, old)) = self.members.remove_entry(member) {
            self.unindex(old.score, key);
        }
        self.removed.insert(member, version);
    }

    /// Slots in the member map (tests of `entry::shrink_if_sparse`).
    #[cfg(test)]
    pub fn member_buckets(&self) -> usize {
        self.members.buckets()
    }

    /// Whether the member map is growing (tests of `step_growth`).
    #[cfg(test)]
    pub fn members_growing(&self) -> bool {
        self.members.is_growing()
    }

    /// Members as `(name, member)` pairs, unordered.
    pub fn members(&self) -> impl Iterator<Item = (&Name, &Member)> {
        self.members.iter()
    }

    /// The members in score order, as the queries below read them.
    fn ordered(&self) -> Ordered<'_> {
        if let Some(order) = self.index() {
            return Ordered::Indexed(order);
        }
        let mut sorted: Vec<(Score, &Name)> = self.members.iter().map(|(name, m)| (Score(m.score), name)).collect();
        sorted.sort_unstable();
        Ordered::Sorted(sorted)
    }

    /// Members in ascending order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&Name, f64)> + '_ {
        self.ordered().ranks(0..self.len())
    }

    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        let score = Score(self.score(member)?);
        Some(self.ordered().count_before(|s, m| (s, m) < (score, member)))
    }

    /// Members whose score lies within `[min, max]` (honouring exclusive ends), ascending.
    pub fn range_by_score(&self, min: ScoreBound, max: ScoreBound) -> impl DoubleEndedIterator<Item = (&Name, f64)> + '_ {
        let ordered = self.ordered();
        let ranks = score_ranks(&ordered, min, max);
        ordered.ranks(ranks)
    }
}

/// The ranks of the members whose score lies within `[min, max]`.
fn score_ranks(ordered: &Ordered<'_>, min: ScoreBound, max: ScoreBound) -> Range<usize> {
    let empty = min.value.is_nan()
        || max.value.is_nan()
        || min.value > max.value
        || (min.value == max.value && (min.exclusive || max.exclusive))
        || (min.exclusive && min.value == f64::INFINITY)
        || (max.exclusive && max.value == f64::NEG_INFINITY);
    if empty {
        return 0..0;
    }
    let (min_score, max_score) = (Score(min.value), Score(max.value));
    let start = if min.exclusive { ordered.count_before(|s, _| s <= min_score) } else { ordered.count_before(|s, _| s < min_score) };
    let end = if max.exclusive { ordered.count_before(|s, _| s < max_score) } else { ordered.count_before(|s, _| s <= max_score) };
    start..end.max(start)
}

impl SortedSet {
    /// Members within a lex range, ascending (meaningful when all scores are equal). When
    /// they are, the range is found in the index directly; otherwise every member is tested.
    pub fn range_by_lex<'a>(&'a self, min: &'a LexBound, max: &'a LexBound) -> impl DoubleEndedIterator<Item = (&'a Name, f64)> + 'a {
        let ordered = self.ordered();
        let iter: Box<dyn DoubleEndedIterator<Item = (&'a Name, f64)> + 'a> = match lex_ranks(&ordered, min, max) {
            Some(ranks) => Box::new(ordered.ranks(ranks)),
            None => Box::new(ordered.ranks(0..self.len()).filter(move |(m, _)| lex_above_min(m, min) && lex_below_max(m, max))),
        };
        iter
    }

    pub fn count_by_lex(&self, min: &LexBound, max: &LexBound) -> usize {
        match lex_ranks(&self.ordered(), min, max) {
            Some(ranks) => ranks.len(),
            None => self.range_by_lex(min, max).count(),
        }
    }

    pub fn count_by_score(&self, min: ScoreBound, max: ScoreBound) -> usize {
        score_ranks(&self.ordered(), min, max).len()
    }

    /// The lowest-ranked member (`max == false`) or the highest.
    pub fn first(&self, max: bool) -> Option<(Bytes, f64)> {
        let ordered = self.ordered();
        let rank = if max { self.len().checked_sub(1)? } else { 0 };
        ordered.ranks(rank..rank + 1).next().map(|(m, s)| (m.to_bytes(), s))
    }

    /// The rank counted from the highest score (`ZREVRANK`).
    pub fn rev_rank(&self, member: &[u8]) -> Option<usize> {
        self.rank(member).map(|r| self.len() - 1 - r)
    }

    /// Members at ranks `start..=end` (inclusive, already clamped to the set), in ascending
    /// order, or descending ranks counted from the highest score when `rev`.
    pub fn range_by_rank(&self, start: usize, end: usize, rev: bool) -> Vec<(Bytes, f64)> {
        let len = self.len();
        if start > end || start >= len {
            return Vec::new();
        }
        let end = end.min(len - 1);
        // Ascending ranks lo..=hi hold the result.
        let (lo, hi) = if rev { (len - 1 - end, len - 1 - start) } else { (start, end) };
        let ranks = self.ordered().ranks(lo..hi + 1).map(|(m, s)| (m.to_bytes(), s));
        if rev {
            ranks.rev().collect()
        } else {
            ranks.collect()
        }
    }
}

/// The ranks of the members within a lex range when every score is equal (then members sort
/// by name alone); `None` when scores differ.
fn lex_ranks(ordered: &Ordered<'_>, min: &LexBound, max: &LexBound) -> Option<Range<usize>> {
    if lex_range_is_empty(min, max) {
        return Some(0..0);
    }
    if ordered.first_score() != ordered.last_score() {
        return None;
    }
    let start = match min {
        LexBound::Inclusive(b) => ordered.count_before(|_, m| m < &b[..]),
        LexBound::Exclusive(b) => ordered.count_before(|_, m| m <= &b[..]),
        _ => 0,
    };
    let end = match max {
        LexBound::Inclusive(b) => ordered.count_before(|_, m| m <= &b[..]),
        LexBound::Exclusive(b) => ordered.count_before(|_, m| m < &b[..]),
        _ => ordered.len(),
    };
    Some(start..end.max(start))
}

/// A sorted set's members in score order: its counted index (`RankedSet`), or, for a set of
/// at most `fieldmap::SMALL_MAX` members, which keeps none, its members sorted on the spot.
enum Ordered<'z> {
    Indexed(&'z RankedSet<(Score, Name)>),
    Sorted(Vec<(Score, &'z Name)>),
}

impl<'z> Ordered<'z> {
    fn len(&self) -> usize {
        match self {
            Ordered::Indexed(order) => order.len(),
            Ordered::Sorted(sorted) => sorted.len(),
        }
    }

    /// How many members satisfy `before` (which must hold for a prefix of the order, as
    /// "sorts below x" does).
    fn count_before(&self, before: impl Fn(Score, &[u8]) -> bool) -> usize {
        match self {
            Ordered::Indexed(order) => order.count_before(|(s, m)| before(*s, m)),
            Ordered::Sorted(sorted) => sorted.partition_point(|(s, m)| before(*s, m)),
        }
    }

    fn first_score(&self) -> Option<Score> {
        match self {
            Ordered::Indexed(order) => order.first().map(|(s, _)| *s),
            Ordered::Sorted(sorted) => sorted.first().map(|(s, _)| *s),
        }
    }

    fn last_score(&self) -> Option<Score> {
        match self {
            Ordered::Indexed(order) => order.last().map(|(s, _)| *s),
            Ordered::Sorted(sorted) => sorted.last().map(|(s, _)| *s),
        }
    }

    /// The members at ranks `ranks` (clamped to the set), in order.
    fn ranks(self, ranks: Range<usize>) -> impl DoubleEndedIterator<Item = (&'z Name, f64)> + 'z {
        match self {
            Ordered::Indexed(order) => Either::Left(order.ranks(ranks).map(|(s, m)| (m, s.0))),
            Ordered::Sorted(mut sorted) => {
                let end = ranks.end.min(sorted.len());
                sorted.truncate(end);
                sorted.drain(..ranks.start.min(end));
                Either::Right(sorted.into_iter().map(|(s, m)| (m, s.0)))
            }
        }
    }
}

/// True when no member can lie between `min` and `max`.
pub fn lex_range_is_empty(min: &LexBound, max: &LexBound) -> bool {
    match (min, max) {
        (LexBound::PosInf, _) | (_, LexBound::NegInf) => true,
        (LexBound::NegInf, _) | (_, LexBound::PosInf) => false,
        (LexBound::Inclusive(a), LexBound::Inclusive(b)) => a > b,
        (LexBound::Inclusive(a) | LexBound::Exclusive(a), LexBound::Inclusive(b) | LexBound::Exclusive(b)) => a >= b,
    }
}

pub fn lex_above_min(member: &[u8], min: &LexBound) -> bool {
    match min {
        LexBound::NegInf => true,
        LexBound::PosInf => false,
        LexBound::Inclusive(b) => member >= &b[..],
        LexBound::Exclusive(b) => member > &b[..],
    }
}

pub fn lex_below_max(member: &[u8], max: &LexBound) -> bool {
    match max {
        LexBound::NegInf => false,
        LexBound::PosInf => true,
        LexBound::Inclusive(b) => member <= &b[..],
        LexBound::Exclusive(b) => member < &b[..],
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::db::lattice::check_laws;
    use crate::db::lattice::strategies::{name, version, written};

    /// A sorted set as a correct mesh makes them: every member's state is the one its version
    /// wrote (a score, or removed), under a key tombstone.
    fn sorted_set() -> impl Strategy<Value = SortedSet> {
        (version(), prop::collection::vec((name(), version()), 0..6)).prop_map(|(cleared, members)| {
            let mut z = SortedSet::default();
            z.clear_older(cleared);
            for (n, v) in members {
                let w = written(&n, v);
                z.merge_element(&n, (!w.is_multiple_of(3)).then_some((w % 5) as f64), v, Version::ZERO);
            }
            z
        })
    }

    /// Equal states: members, tombstones and key tombstone; and the score index holds
    /// exactly the members.
    fn same(a: &SortedSet, b: &SortedSet) -> bool {
        let state = |z: &SortedSet| {
            let index: Vec<(u64, Bytes)> = z.iter().map(|(n, s)| (s.to_bits(), n.to_bytes())).collect();
            match z.index() {
                None => assert!(z.len() <= SMALL_MAX, "a set of {} members keeps no index", z.len()),
                Some(order) => {
                    let indexed: Vec<(u64, Bytes)> = order.iter().map(|(s, n)| (s.0.to_bits(), n.to_bytes())).collect();
                    assert_eq!(indexed, index);
                }
            }
            let mut members: Vec<(u64, Bytes)> = z.members.iter().map(|(n, m)| (m.score.to_bits(), n.to_bytes())).collect();
            members.sort_by(|x, y| (f64::from_bits(x.0), &x.1).partial_cmp(&(f64::from_bits(y.0), &y.1)).expect("no NaN"));
            assert_eq!(index, members, "the score index is out of step with the members");
            let mut states: Vec<_> = z.states().into_iter().map(|(n, s, v)| (n, s.map(f64::to_bits), v)).collect();
            states.sort();
            (z.cleared, states)
        };
        state(a) == state(b)
    }

    /// `sorted_set` with `SMALL_MAX + 1` more members that every state holds alike, newer than
    /// any key tombstone: a set that keeps its score index, whose other members the merges
    /// add, re-score and remove.
    fn big_sorted_set() -> impl Strategy<Value = SortedSet> {
        sorted_set().prop_map(|mut z| {
            for i in 0..=SMALL_MAX {
                let n = Bytes::from(format!("base{i}"));
                z.merge_element(&n, Some(i as f64), Version { hlc: 1000, node: 9 }, Version::ZERO);
            }
            z
        })
    }

    proptest! {
        #[test]
        fn a_sorted_set_is_a_lattice(a in sorted_set(), b in sorted_set(), c in sorted_set()) {
            check_laws(&a, &b, &c, same);
        }

        #[test]
        fn a_sorted_set_with_a_score_index_is_a_lattice(a in big_sorted_set(), b in big_sorted_set(), c in big_sorted_set()) {
            check_laws(&a, &b, &c, same);
        }
    }

    fn set(items: &[(&str, f64)]) -> SortedSet {
        let mut z = SortedSet::default();
        for (m, s) in items {
            z.insert(Bytes::copy_from_slice(m.as_bytes()), *s, Version::ZERO);
        }
        z
    }

    #[test]
    fn rescoring_moves_a_member_in_the_index() {
        let mut z = set(&[("a", 1.0), ("b", 2.0)]);
        z.insert(Bytes::from_static(b"a"), 3.0, Version::ZERO);
        let order: Vec<_> = z.iter().map(|(m, _)| m.clone()).collect();
        assert_eq!(order, vec![Bytes::from_static(b"b"), Bytes::from_static(b"a")]);
        assert_eq!(z.rank(b"a"), Some(1));
        assert_eq!(z.len(), 2);
    }

    #[test]
    fn score_ranges_honour_exclusive_ends() {
        let z = set(&[("a", 1.0), ("b", 2.0), ("c", 3.0)]);
        let inc = |v| ScoreBound { value: v, exclusive: false };
        let exc = |v| ScoreBound { value: v, exclusive: true };
        assert_eq!(z.count_by_score(inc(1.0), inc(3.0)), 3);
        assert_eq!(z.count_by_score(exc(1.0), exc(3.0)), 1);
        assert_eq!(z.count_by_score(inc(2.0), exc(2.0)), 0);
        assert_eq!(z.count_by_score(inc(f64::NEG_INFINITY), inc(f64::INFINITY)), 3);
        assert_eq!(z.count_by_score(exc(f64::NEG_INFINITY), exc(f64::INFINITY)), 3);
        assert_eq!(z.count_by_score(inc(3.0), inc(1.0)), 0);
        let down: Vec<_> = z.range_by_score(inc(1.0), exc(3.0)).rev().map(|(m, _)| m.clone()).collect();
        assert_eq!(down, vec![Bytes::from_static(b"b"), Bytes::from_static(b"a")]);
    }

    #[test]
    fn negative_zero_equals_zero() {
        let z = set(&[("a", -0.0), ("b", 0.0)]);
        let inc = |v| ScoreBound { value: v, exclusive: false };
        assert_eq!(z.count_by_score(inc(0.0), inc(0.0)), 2);
        assert_eq!(z.rank(b"b"), Some(1));
    }

    #[test]
    fn lex_ranges_with_equal_and_mixed_scores() {
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        let names = |z: &SortedSet, min: &LexBound, max: &LexBound| -> Vec<Bytes> { z.range_by_lex(min, max).map(|(m, _)| m.to_bytes()).collect() };
        for z in [set(&[("a", 0.0), ("b", 0.0), ("c", 0.0), ("d", 0.0)]), set(&[("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0)])] {
            assert_eq!(names(&z, &LexBound::Inclusive(b("b")), &LexBound::Exclusive(b("d"))), vec![b("b"), b("c")]);
            assert_eq!(names(&z, &LexBound::Exclusive(b("a")), &LexBound::PosInf), vec![b("b"), b("c"), b("d")]);
            assert_eq!(names(&z, &LexBound::NegInf, &LexBound::Inclusive(b("a"))), vec![b("a")]);
            assert!(names(&z, &LexBound::Exclusive(b("b")), &LexBound::Exclusive(b("b"))).is_empty());
            assert!(names(&z, &LexBound::Inclusive(b("c")), &LexBound::Inclusive(b("b"))).is_empty());
            assert!(names(&z, &LexBound::PosInf, &LexBound::PosInf).is_empty());
        }
    }

    #[test]
    fn rank_ranges_walk_from_either_end() {
        let z = set(&[("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0), ("e", 5.0)]);
        let names = |v: Vec<(Bytes, f64)>| v.into_iter().map(|(m, _)| m).collect::<Vec<_>>();
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        assert_eq!(names(z.range_by_rank(0, 1, false)), vec![b("a"), b("b")]);
        assert_eq!(names(z.range_by_rank(3, 10, false)), vec![b("d"), b("e")]);
        assert_eq!(names(z.range_by_rank(0, 1, true)), vec![b("e"), b("d")]);
        assert_eq!(names(z.range_by_rank(3, 4, true)), vec![b("b"), b("a")]);
        assert!(z.range_by_rank(5, 6, false).is_empty());
        assert_eq!(z.rev_rank(b"e"), Some(0));
        assert_eq!(z.first(true).map(|(m, _)| m), Some(b("e")));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, i8),
        Remove(u8),
        Shrink,
        /// Removes every member but the first `n` names, then shrinks.
        Thin(u8),
    }

    proptest! {
        /// Every query against a sorted list of `(score, name)`, while sets grow past
        /// `SMALL_MAX` (building the index), shrink under it and back (dropping it); scores
        /// from a few values, so ties sort by name.
        #[test]
        fn queries_answer_the_same_with_and_without_the_index(
            grown in 0u8..100,
            ops in prop::collection::vec(prop_oneof![
                2 => (0u8..100, -3i8..4).prop_map(|(n, s)| Op::Insert(n, s)),
                12 => (0u8..100).prop_map(Op::Remove),
                1 => Just(Op::Shrink),
                1 => (0u8..10).prop_map(Op::Thin),
            ], 1..300),
            window in (0usize..12, 0usize..12),
            bounds in (-4i8..5, -4i8..5, any::<bool>(), any::<bool>()),
        ) {
            let name = |n: u8| Bytes::from(format!("m{n}"));
            let mut z = SortedSet::default();
            let mut model: std::collections::BTreeMap<Bytes, f64> = std::collections::BTreeMap::new();
            // Grown first (up to 100 members: a member map of 128 slots), so that removals can
            // take it back under `SMALL_MAX` with the map sparse enough to shrink.
            let grow = (0..grown).map(|n| Op::Insert(n, (n % 7) as i8 - 3));
            for op in grow.chain(ops) {
                match op {
                    Op::Insert(n, s) => {
                        prop_assert_eq!(z.insert(name(n), s as f64, Version::ZERO), model.insert(name(n), s as f64));
                    }
                    Op::Remove(n) => prop_assert_eq!(z.remove(&name(n)), model.remove(&name(n))),
                    Op::Shrink => z.shrink_if_sparse(),
                    Op::Thin(keep) => {
                        for n in keep..100 {
                            prop_assert_eq!(z.remove(&name(n)), model.remove(&name(n)));
                        }
                        z.shrink_if_sparse();
                    }
                }
                let mut want: Vec<(Score, Bytes)> = model.iter().map(|(n, s)| (Score(*s), n.clone())).collect();
                want.sort();
                let got: Vec<(Score, Bytes)> = z.iter().map(|(n, s)| (Score(s), n.to_bytes())).collect();
                prop_assert_eq!(&got, &want);
                prop_assert!(z.index().is_none_or(|o| o.len() == z.len()));
                prop_assert!(z.index().is_some() || z.len() <= SMALL_MAX);
                for (rank, (_, n)) in want.iter().enumerate() {
                    prop_assert_eq!(z.rank(n), Some(rank));
                    prop_assert_eq!(z.rev_rank(n), Some(want.len() - 1 - rank));
                }
                let (a, b) = window;
                let ranked: Vec<Bytes> = z.range_by_rank(a, b, false).into_iter().map(|(n, _)| n).collect();
                let wanted: Vec<Bytes> = want.iter().skip(a).take((b + 1).saturating_sub(a)).map(|(_, n)| n.clone()).collect();
                prop_assert_eq!(ranked, wanted);
                let (lo, hi, lo_ex, hi_ex) = bounds;
                let (min, max) = (ScoreBound { value: lo as f64, exclusive: lo_ex }, ScoreBound { value: hi as f64, exclusive: hi_ex });
                let inside = |s: f64| (if lo_ex { s > lo as f64 } else { s >= lo as f64 }) && (if hi_ex { s < hi as f64 } else { s <= hi as f64 });
                let by_score: Vec<Bytes> = z.range_by_score(min, max).map(|(n, _)| n.to_bytes()).collect();
                let wanted: Vec<Bytes> = want.iter().filter(|(s, _)| inside(s.0)).map(|(_, n)| n.clone()).collect();
                prop_assert_eq!(z.count_by_score(min, max), wanted.len());
                prop_assert_eq!(by_score, wanted);
                let lex = (LexBound::Inclusive(name(a as u8 * 7)), LexBound::Exclusive(name(b as u8 * 7)));
                let by_lex: Vec<Bytes> = z.range_by_lex(&lex.0, &lex.1).map(|(n, _)| n.to_bytes()).collect();
                let wanted: Vec<Bytes> = want.iter().filter(|(_, n)| lex_above_min(n, &lex.0) && lex_below_max(n, &lex.1)).map(|(_, n)| n.clone()).collect();
                prop_assert_eq!(z.count_by_lex(&lex.0, &lex.1), wanted.len());
                prop_assert_eq!(by_lex, wanted);
                prop_assert_eq!(z.first(false).map(|(n, _)| n), want.first().map(|(_, n)| n.clone()));
                prop_assert_eq!(z.first(true).map(|(n, _)| n), want.last().map(|(_, n)| n.clone()));
            }
        }
    }

    #[test]
    fn a_set_keeps_an_index_only_while_it_is_large() {
        let mut z = SortedSet::default();
        for i in 0..SMALL_MAX {
            z.insert(Bytes::from(format!("m{i}")), -(i as f64), Version::ZERO);
        }
        assert!(z.index().is_none(), "{} members are sorted on the spot", SMALL_MAX);
        for i in SMALL_MAX..100 {
            z.insert(Bytes::from(format!("m{i}")), -(i as f64), Version::ZERO);
        }
        assert_eq!(z.index().map_or(0, |o| o.len()), 100);
        for i in 5..100 {
            z.remove(format!("m{i}").as_bytes());
        }
        assert_eq!(z.index().map_or(0, |o| o.len()), 5, "the index stays until the member map shrinks");
        z.shrink_if_sparse();
        assert!(z.index().is_none() && z.members.is_small(), "{} buckets", z.member_buckets());
        let names: Vec<_> = z.iter().map(|(n, _)| n.clone()).collect();
        assert_eq!(names, ["m4", "m3", "m2", "m1", "m0"].map(|n| Bytes::from_static(n.as_bytes())));
    }
}
