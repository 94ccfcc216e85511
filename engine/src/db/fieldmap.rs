//! `FieldMap`: a collection's elements by name (a hash's fields, a set's or a sorted set's
//! members, the tombstones of removed ones). Up to `SMALL_MAX` elements it is a plain vector
//! in insertion order, searched by comparing names, as Redis keeps a small hash or set in one
//! listpack; beyond that, the same table `std::collections::HashMap` is (hashbrown's, `(name,
//! value)` pairs inline in its buckets), with its buckets reachable: `random` picks an element
//! in O(1), as Redis's `dictGetFairRandomKey` does, for `SRANDMEMBER`, `SPOP`, `HRANDFIELD`
//! and `ZRANDMEMBER` without a count. Through `HashMap`'s API the only way to an element at
//! random was to walk to it, O(n): on a 200,000-member set those commands answered 8–9k times
//! a second against Redis's 670–710k.
//!
//! The methods are `HashMap`'s, with the same names and meaning, for those the engine uses.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use bytes::Bytes;
use either::Either;
use foldhash::fast::RandomState;
use hashbrown::hash_table::{Entry, HashTable};
use rand::Rng;

#[derive(Clone)]
pub struct FieldMap<V> {
    repr: Repr<V>,
}

#[derive(Clone)]
enum Repr<V> {
    /// At most `SMALL_MAX` elements, in the order they came (a removal keeps the others'
    /// order, as a listpack's does), each buffer exactly as long as it needs: most hashes,
    /// sets and sorted sets hold a few elements, and hashbrown's smallest table (4 buckets,
    /// 3 elements) cost a one-field hash 384 bytes where the vector costs 80.
    Small(Vec<(Bytes, V)>),
    /// More: a table, behind a pointer so that the map is no bigger than the vector.
    Table(Box<Table<V>>),
}

/// hashbrown's table with its own seed (two tables built from each other's walk with one
/// seed would cluster).
#[derive(Clone)]
struct Table<V> {
    table: HashTable<(Bytes, V)>,
    hasher: RandomState,
}

// Every hash, set and sorted set holds two of these (its live elements and its tombstones),
// most of them small: a vector's size (the enum's tag lives in the vector's capacity).
const _: () = assert!(std::mem::size_of::<FieldMap<crate::hlc::Version>>() == 24);

/// The most elements a map keeps in a vector: a lookup compares up to this many names (a
/// name's length is in its handle, so only names of the lookup's length are read), and past
/// it a table of 16 buckets costs little more than the vector (8 buckets hold only 7).
pub(super) const SMALL_MAX: usize = 8;

/// One more slot: exactly one, as a vector's doubling would give back much of what not being
/// a table saves; by a new allocation and a move, not `realloc`. Each one-slot growth moves
/// the vector to the next allocation size class, and jemalloc's `realloc` between classes
/// took ~520 instructions (callgrind: 9% of an HSET adding a field to a small hash); an
/// allocation, a move and a free from its thread cache take about half (docs/benchmarks.md,
/// "Small collections, second look").
fn grow_by_one<T>(items: &mut Vec<T>) {
    let mut grown = Vec::with_capacity(items.len() + 1);
    grown.append(items);
    *items = grown;
}

/// How many buckets `draw_bucket` draws before its caller walks: at the load a map keeps (at
/// least one in eight buckets full, `entry::shrink_if_sparse`, for maps of more than 64
/// buckets) 64 draws all miss with a chance under 0.02%.
const RANDOM_DRAWS: usize = 64;

/// An entry of `table` at random, each with the same chance: up to `RANDOM_DRAWS` buckets drawn until
/// one is full, as Redis's `dictGetFairRandomKey` does; O(1) unless the table is far emptier
/// than its size (`None` then, or when it is empty: the caller walks instead). Shared by
/// `FieldMap::random` and the keyspace's `table::KeyTable::draw` (`RANDOMKEY`).
pub(super) fn draw_bucket<'t, T>(table: &'t HashTable<T>, rng: &mut impl Rng) -> Option<&'t T> {
    if table.is_empty() {
        return None;
    }
    let buckets = table.num_buckets();
    (0..RANDOM_DRAWS).find_map(|_| table.get_bucket(rng.random_range(0..buckets)))
}

/// A name to store: a `Bytes` the caller gives up, or a command's argument, copied only when
/// it is stored (`FieldMap::insert_copied`). A clone of a `Bytes` would not do: the first
/// clone of one built from a vector gives it a shared header (an allocation) for its life.
trait Name {
    fn bytes(&self) -> &[u8];
    fn stored(self) -> Bytes;
}

impl Name for Bytes {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn stored(self) -> Bytes {
        self
    }
}

impl Name for &[u8] {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn stored(self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}

/// Where `name` is in a small map's vector.
fn position<V, Q>(items: &[(Bytes, V)], name: &Q) -> Option<usize>
where
    Bytes: Borrow<Q>,
    Q: Eq + ?Sized,
{
    items.iter().position(|(n, _)| n.borrow() == name)
}

impl<V> Default for FieldMap<V> {
    fn default() -> Self {
        FieldMap { repr: Repr::Small(Vec::new()) }
    }
}

impl<V> FieldMap<V> {
    pub fn with_capacity(capacity: usize) -> FieldMap<V> {
        let repr = if capacity <= SMALL_MAX {
            Repr::Small(Vec::with_capacity(capacity))
        } else {
            Repr::Table(Box::new(Table { table: HashTable::with_capacity(capacity), hasher: RandomState::default() }))
        };
        FieldMap { repr }
    }

    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Small(items) => items.len(),
            Repr::Table(t) => t.table.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the map is a vector (at most `SMALL_MAX` elements).
    pub fn is_small(&self) -> bool {
        matches!(self.repr, Repr::Small(_))
    }

    pub fn capacity(&self) -> usize {
        match &self.repr {
            Repr::Small(items) => items.capacity(),
            Repr::Table(t) => t.table.capacity(),
        }
    }

    /// Slots the map holds, used or not: a table's buckets (its `capacity()` is fewer, and
    /// falls as removals leave tombstones), a vector's capacity.
    pub fn buckets(&self) -> usize {
        match &self.repr {
            Repr::Small(items) => items.capacity(),
            Repr::Table(t) => t.table.num_buckets(),
        }
    }

    /// Gives back what the map does not use; a table left with at most `SMALL_MAX` elements
    /// becomes a vector again.
    pub fn shrink_to_fit(&mut self) {
        match &mut self.repr {
            Repr::Small(items) => items.shrink_to_fit(),
            Repr::Table(t) if t.table.len() <= SMALL_MAX => self.repr = Repr::Small(t.table.drain().collect()),
            Repr::Table(t) => t.table.shrink_to_fit(|(name, _)| t.hasher.hash_one(name)),
        }
    }

    pub fn get<Q>(&self, name: &Q) -> Option<&V>
    where
        Bytes: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match &self.repr {
            Repr::Small(items) => position(items, name).map(|i| &items[i].1),
            // An empty table (most collections' `removed` once they had tombstones) answers
            // without hashing the name.
            Repr::Table(t) if t.table.is_empty() => None,
            Repr::Table(t) => t.table.find(t.hasher.hash_one(name), |(n, _)| n.borrow() == name).map(|(_, v)| v),
        }
    }

    pub fn get_mut<Q>(&mut self, name: &Q) -> Option<&mut V>
    where
        Bytes: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match &mut self.repr {
            Repr::Small(items) => position(items, name).map(|i| &mut items[i].1),
            Repr::Table(t) if t.table.is_empty() => None,
            Repr::Table(t) => t.table.find_mut(t.hasher.hash_one(name), |(n, _)| n.borrow() == name).map(|(_, v)| v),
        }
    }

    pub fn contains_key<Q>(&self, name: &Q) -> bool
    where
        Bytes: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(name).is_some()
    }

    /// Sets `name` to `value`; returns the value it replaced (the stored name stays).
    pub fn insert(&mut self, name: Bytes, value: V) -> Option<V> {
        let (held, unused) = self.slot(name, value);
        unused.map(|value| std::mem::replace(held, value))
    }

    /// `insert` of a name given as bytes, copied (`Bytes::copy_from_slice`) only when the map
    /// does not hold it yet: an existing name keeps its stored bytes, and the command's
    /// argument is never what the map keeps (`cmd::args::own` says why).
    pub fn insert_copied(&mut self, name: &[u8], value: V) -> Option<V> {
        let (held, unused) = self.slot(name, value);
        unused.map(|value| std::mem::replace(held, value))
    }

    /// The value at `name`, inserted as `value` first if it has none
    /// (`HashMap::entry(name).or_insert(value)`).
    pub fn get_or_insert(&mut self, name: Bytes, value: V) -> &mut V {
        self.slot(name, value).0
    }

    /// The value at `name`, stored first with `value` if the map does not hold it; `value`
    /// comes back when it was not stored.
    fn slot<N: Name>(&mut self, name: N, value: V) -> (&mut V, Option<V>) {
        match self.small_slot(name, value) {
            Ok((at, unused)) => match &mut self.repr {
                Repr::Small(items) => (&mut items[at].1, unused),
                Repr::Table(_) => unreachable!("small_slot found it in the vector"),
            },
            Err((name, value)) => {
                let Repr::Table(t) = &mut self.repr else { unreachable!("small_slot leaves a table") };
                let Table { table, hasher } = &mut **t;
                let hash = hasher.hash_one(name.bytes());
                match table.entry(hash, |(n, _)| n[..] == *name.bytes(), |(n, _)| hasher.hash_one(n)) {
                    Entry::Occupied(held) => (&mut held.into_mut().1, Some(value)),
                    Entry::Vacant(free) => (&mut free.insert((name.stored(), value)).into_mut().1, None),
                }
            }
        }
    }

    /// `slot` in a vector: the index of `name`, pushed with `value` if absent and the vector
    /// has room. Hands both back for a table, and for a full vector, which becomes one.
    fn small_slot<N: Name>(&mut self, name: N, value: V) -> Result<(usize, Option<V>), (N, V)> {
        let Repr::Small(items) = &mut self.repr else { return Err((name, value)) };
        if let Some(at) = position(items, name.bytes()) {
            return Ok((at, Some(value)));
        }
        if items.len() < SMALL_MAX {
            if items.len() == items.capacity() {
                grow_by_one(items);
            }
            items.push((name.stored(), value));
            return Ok((items.len() - 1, None));
        }
        let hasher = RandomState::default();
        let mut table = HashTable::with_capacity(2 * SMALL_MAX);
        for item in std::mem::take(items) {
            table.insert_unique(hasher.hash_one(&item.0), item, |(n, _)| hasher.hash_one(n));
        }
        self.repr = Repr::Table(Box::new(Table { table, hasher }));
        Err((name, value))
    }

    pub fn remove<Q>(&mut self, name: &Q) -> Option<V>
    where
        Bytes: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove_entry(name).map(|(_, v)| v)
    }

    pub fn remove_entry<Q>(&mut self, name: &Q) -> Option<(Bytes, V)>
    where
        Bytes: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match &mut self.repr {
            Repr::Small(items) => position(items, name).map(|i| items.remove(i)),
            Repr::Table(t) if t.table.is_empty() => None,
            Repr::Table(t) => match t.table.find_entry(t.hasher.hash_one(name), |(n, _)| n.borrow() == name) {
                Ok(slot) => Some(slot.remove().0),
                Err(_) => None,
            },
        }
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&Bytes, &V)> + Clone {
        match &self.repr {
            Repr::Small(items) => Either::Left(items.iter().map(|(n, v)| (n, v))),
            Repr::Table(t) => Either::Right(t.table.iter().map(|(n, v)| (n, v))),
        }
    }

    pub fn iter_mut(&mut self) -> impl ExactSizeIterator<Item = (&Bytes, &mut V)> {
        match &mut self.repr {
            Repr::Small(items) => Either::Left(items.iter_mut().map(|(n, v)| (&*n, v))),
            Repr::Table(t) => Either::Right(t.table.iter_mut().map(|(n, v)| (&*n, v))),
        }
    }

    pub fn keys(&self) -> impl ExactSizeIterator<Item = &Bytes> + Clone {
        self.iter().map(|(n, _)| n)
    }

    pub fn values(&self) -> impl ExactSizeIterator<Item = &V> + Clone {
        self.iter().map(|(_, v)| v)
    }

    pub fn values_mut(&mut self) -> impl ExactSizeIterator<Item = &mut V> {
        self.iter_mut().map(|(_, v)| v)
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&Bytes, &mut V) -> bool) {
        match &mut self.repr {
            Repr::Small(items) => items.retain_mut(|(n, v)| keep(n, v)),
            Repr::Table(t) => t.table.retain(|(n, v)| keep(n, v)),
        }
    }

    pub fn drain(&mut self) -> impl ExactSizeIterator<Item = (Bytes, V)> + '_ {
        match &mut self.repr {
            Repr::Small(items) => Either::Left(items.drain(..)),
            Repr::Table(t) => Either::Right(t.table.drain()),
        }
    }

    /// An element picked at random, each with the same chance (`None` when empty): in a
    /// vector, at a random position; in a table, buckets drawn at random until one is full,
    /// O(1) at the load the map keeps; if `RANDOM_DRAWS` draws all miss (a map far emptier
    /// than its table), the element at a random position of a walk, O(n) but as fair.
    pub fn random(&self, rng: &mut impl Rng) -> Option<(&Bytes, &V)> {
        if self.is_empty() {
            return None;
        }
        let drawn = match &self.repr {
            Repr::Small(items) => items.get(rng.random_range(0..items.len())),
            Repr::Table(t) => draw_bucket(&t.table, rng),
        };
        match drawn {
            Some((n, v)) => Some((n, v)),
            None => self.iter().nth(rng.random_range(0..self.len())),
        }
    }

    /// `count` elements at random, as Redis's `SRANDMEMBER`/`HRANDFIELD`/`ZRANDMEMBER` pick
    /// them: for a positive count distinct ones (all of them when `count >= len`), for a
    /// negative one `-count` independent picks that may repeat. The work is O(count) where
    /// Redis's is: a negative count, or a positive one under a third of the elements, draws
    /// (`random`); a bigger positive one takes a sample of a walk, O(n), no more than the
    /// reply itself.
    pub fn sample(&self, count: i64, rng: &mut impl Rng) -> Vec<(&Bytes, &V)> {
        let Ok(count) = usize::try_from(count) else {
            return (0..count.unsigned_abs()).filter_map(|_| self.random(rng)).collect();
        };
        if count >= self.len() {
            return self.iter().collect();
        }
        if count.saturating_mul(3) > self.len() {
            return rand::seq::IteratorRandom::choose_multiple(self.iter(), rng, count);
        }
        // Distinct elements are distinct places in the map.
        let mut seen = std::collections::HashSet::with_capacity(count);
        let mut picks = Vec::with_capacity(count);
        while picks.len() < count {
            let Some((name, value)) = self.random(rng) else { break };
            if seen.insert(name as *const Bytes) {
                picks.push((name, value));
            }
        }
        picks
    }
}

impl<V: std::fmt::Debug> std::fmt::Debug for FieldMap<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V: PartialEq> PartialEq for FieldMap<V> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(n, v)| other.get(n) == Some(v))
    }
}

impl<V: Eq> Eq for FieldMap<V> {}

impl<V> Extend<(Bytes, V)> for FieldMap<V> {
    fn extend<I: IntoIterator<Item = (Bytes, V)>>(&mut self, items: I) {
        for (name, value) in items {
            self.insert(name, value);
        }
    }
}

impl<V> FromIterator<(Bytes, V)> for FieldMap<V> {
    fn from_iter<I: IntoIterator<Item = (Bytes, V)>>(items: I) -> Self {
        let items = items.into_iter();
        let mut map = FieldMap::with_capacity(items.size_hint().0);
        map.extend(items);
        map
    }
}

impl<V> IntoIterator for FieldMap<V> {
    type Item = (Bytes, V);
    type IntoIter = Either<std::vec::IntoIter<(Bytes, V)>, hashbrown::hash_table::IntoIter<(Bytes, V)>>;
    fn into_iter(self) -> Self::IntoIter {
        match self.repr {
            Repr::Small(items) => Either::Left(items.into_iter()),
            Repr::Table(t) => Either::Right(t.table.into_iter()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_as_a_map_by_name_or_slice() {
        let mut m = FieldMap::default();
        assert_eq!(m.insert(Bytes::from_static(b"a"), 1), None);
        assert_eq!(m.insert(Bytes::from_static(b"b"), 2), None);
        assert_eq!(m.insert(Bytes::from_static(b"a"), 3), Some(1));
        assert_eq!((m.len(), m.get(&b"a"[..]), m.get(&Bytes::from_static(b"b"))), (2, Some(&3), Some(&2)));
        *m.get_mut(&b"b"[..]).unwrap() += 10;
        assert_eq!(m.remove_entry(&b"b"[..]), Some((Bytes::from_static(b"b"), 12)));
        assert!(!m.contains_key(&b"b"[..]) && m.contains_key(&b"a"[..]));
        m.retain(|_, v| *v > 5);
        assert!(m.is_empty());
        assert_eq!(m.get(&b"a"[..]), None);
        assert_eq!(m.remove(&b"a"[..]), None);
        assert_eq!(m.insert_copied(b"c", 1), None);
        assert_eq!(m.insert_copied(b"c", 2), Some(1));
        assert_eq!((m.len(), m.get(&b"c"[..])), (1, Some(&2)));
    }

    #[test]
    fn random_picks_every_element_about_equally_often() {
        // 100 elements left in a table grown for 1,000 (5% full: 4% of the picks end in the
        // walk): runs of empty buckets between them, which a walk from a random bucket would
        // favour the elements after.
        let mut m: FieldMap<usize> = (0..1000).map(|i| (Bytes::from(i.to_string()), i)).collect();
        m.retain(|_, v| *v % 10 == 0);
        assert!(m.capacity() >= 1000);
        let mut seen = std::collections::HashMap::new();
        let mut rng = rand::rng();
        for _ in 0..100_000 {
            *seen.entry(*m.random(&mut rng).unwrap().1).or_insert(0) += 1;
        }
        assert_eq!(seen.len(), 100);
        // 1,000 expected each, standard deviation 31.5: a uniform pick stays within ±20% (6
        // deviations; a walk from the last draw put one element at 1,220).
        assert!(seen.values().all(|&n| (800..=1200).contains(&n)), "{seen:?}");
        assert_eq!(FieldMap::<usize>::default().random(&mut rng), None);
    }

    #[test]
    fn a_sample_is_distinct_for_a_positive_count_and_may_repeat_for_a_negative_one() {
        let m: FieldMap<usize> = (0..100).map(|i| (Bytes::from(i.to_string()), i)).collect();
        let mut rng = rand::rng();
        // Every path: drawn (under a third), walked (over a third), everything.
        for count in [0, 1, 10, 33, 34, 60, 99, 100, 500] {
            let picks = m.sample(count, &mut rng);
            let distinct: std::collections::HashSet<_> = picks.iter().map(|(_, v)| **v).collect();
            assert_eq!((picks.len(), distinct.len()), (count.min(100) as usize, count.min(100) as usize), "count {count}");
            assert!(picks.iter().all(|(n, v)| m.get(*n) == Some(*v)));
        }
        let repeated = m.sample(-1000, &mut rng);
        assert_eq!(repeated.len(), 1000);
        let distinct: std::collections::HashSet<_> = repeated.iter().map(|(_, v)| **v).collect();
        assert!(distinct.len() < 1000 && distinct.len() > 90, "{}", distinct.len());
        assert!(FieldMap::<usize>::default().sample(-5, &mut rng).is_empty());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, u32),
        InsertCopied(u8, u32),
        GetOrInsert(u8, u32),
        Remove(u8),
        Retain(u32),
        Shrink,
        Drain,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        // 24 names, so maps cross `SMALL_MAX` both ways.
        prop_oneof![
            4 => (0u8..24, any::<u32>()).prop_map(|(n, v)| Op::Insert(n, v)),
            2 => (0u8..24, any::<u32>()).prop_map(|(n, v)| Op::InsertCopied(n, v)),
            1 => (0u8..24, any::<u32>()).prop_map(|(n, v)| Op::GetOrInsert(n, v)),
            4 => (0u8..24).prop_map(Op::Remove),
            1 => (1u32..4).prop_map(Op::Retain),
            1 => Just(Op::Shrink),
            1 => Just(Op::Drain),
        ]
    }

    fn name(n: u8) -> Bytes {
        // Names of two lengths, so a lookup meets names of its own length and of another.
        Bytes::from(if n.is_multiple_of(2) { format!("f{n}") } else { format!("field:{n}") })
    }

    proptest::proptest! {
        /// Every answer against `std::collections::HashMap`, through both representations and
        /// the moves between them; a vector keeps insertion order, removals included.
        #[test]
        fn a_field_map_answers_as_a_hash_map(ops in proptest::collection::vec(op(), 1..200)) {
            let mut map: FieldMap<u32> = FieldMap::default();
            let mut model: std::collections::HashMap<Bytes, u32> = std::collections::HashMap::new();
            let mut order: Vec<Bytes> = Vec::new();
            for op in ops {
                let fresh = match &op {
                    Op::Insert(n, _) | Op::InsertCopied(n, _) | Op::GetOrInsert(n, _) => (!model.contains_key(&name(*n))).then(|| name(*n)),
                    _ => None,
                };
                match op {
                    Op::Insert(n, v) => {
                        proptest::prop_assert_eq!(map.insert(name(n), v), model.insert(name(n), v));
                    }
                    Op::InsertCopied(n, v) => {
                        proptest::prop_assert_eq!(map.insert_copied(&name(n), v), model.insert(name(n), v));
                    }
                    Op::GetOrInsert(n, v) => {
                        let held = map.get_or_insert(name(n), v);
                        proptest::prop_assert_eq!(*held, *model.entry(name(n)).or_insert(v));
                        *held = held.wrapping_add(1);
                        let modelled = model.get_mut(&name(n)).unwrap();
                        *modelled = modelled.wrapping_add(1);
                    }
                    Op::Remove(n) => {
                        proptest::prop_assert_eq!(map.remove_entry(&name(n)[..]), model.remove_entry(&name(n)));
                    }
                    Op::Retain(k) => {
                        map.retain(|_, v| *v % (k + 1) != 0);
                        model.retain(|_, v| *v % (k + 1) != 0);
                    }
                    Op::Shrink => {
                        let was_table = matches!(map.repr, Repr::Table(_));
                        map.shrink_to_fit();
                        if was_table {
                            // A table that becomes a vector keeps the table's order.
                            order = map.keys().cloned().collect();
                        }
                    }
                    Op::Drain => {
                        let mut drained: Vec<_> = map.drain().collect();
                        let mut want: Vec<_> = model.drain().collect();
                        drained.sort();
                        want.sort();
                        proptest::prop_assert_eq!(drained, want);
                    }
                }
                order.extend(fresh);
                order.retain(|n| model.contains_key(n));
                proptest::prop_assert_eq!(map.len(), model.len());
                for n in 0..24 {
                    proptest::prop_assert_eq!(map.get(&name(n)[..]), model.get(&name(n)));
                }
                let mut held: Vec<_> = map.iter().map(|(n, v)| (n.clone(), *v)).collect();
                if matches!(map.repr, Repr::Small(_)) {
                    proptest::prop_assert!(map.len() <= SMALL_MAX);
                    let names: Vec<_> = held.iter().map(|(n, _)| n.clone()).collect();
                    proptest::prop_assert_eq!(&names, &order, "a vector keeps insertion order");
                }
                held.sort();
                let mut want: Vec<_> = model.iter().map(|(n, v)| (n.clone(), *v)).collect();
                want.sort();
                proptest::prop_assert_eq!(held, want);
            }
        }
    }

    #[test]
    fn a_small_map_holds_exactly_its_elements_and_a_large_one_a_table() {
        let mut m = FieldMap::default();
        for i in 0..SMALL_MAX {
            m.insert_copied(format!("f{i}").as_bytes(), i);
            assert_eq!((m.len(), m.capacity()), (i + 1, i + 1), "one slot per element");
        }
        m.insert_copied(b"one more", 0);
        assert!(matches!(m.repr, Repr::Table(_)));
        m.retain(|name, _| name.len() == 2);
        m.shrink_to_fit();
        assert!(matches!(m.repr, Repr::Small(_)) && m.len() == SMALL_MAX);
        let mut rng = rand::rng();
        let mut seen = std::collections::HashSet::new();
        while seen.len() < SMALL_MAX {
            seen.insert(*m.random(&mut rng).unwrap().1);
        }
    }
}
