//! `FieldMap`: a collection's elements by name (a hash's fields, a set's or a sorted set's
//! members, the tombstones of removed ones). The same table `std::collections::HashMap` is
//! (hashbrown's, `(name, value)` pairs inline in its buckets, so the same memory), with its
//! buckets reachable: `random` picks an element in O(1), as Redis's `dictGetFairRandomKey`
//! does, for `SRANDMEMBER`, `SPOP`, `HRANDFIELD` and `ZRANDMEMBER` without a count. Through
//! `HashMap`'s API the only way to an element at random was to walk to it, O(n): on a
//! 200,000-member set those commands answered 8–9k times a second against Redis's 670–710k.
//!
//! The methods are `HashMap`'s, with the same names and meaning, for those the engine uses.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use bytes::Bytes;
use foldhash::fast::RandomState;
use hashbrown::hash_table::{Entry as Slot, HashTable};
use rand::Rng;

#[derive(Clone)]
pub struct FieldMap<V> {
    table: HashTable<(Bytes, V)>,
    hasher: RandomState,
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

impl<V> Default for FieldMap<V> {
    fn default() -> Self {
        FieldMap { table: HashTable::new(), hasher: RandomState::default() }
    }
}

impl<V> FieldMap<V> {
    pub fn with_capacity(capacity: usize) -> FieldMap<V> {
        FieldMap { table: HashTable::with_capacity(capacity), hasher: RandomState::default() }
    }

    fn hash<Q: Hash + ?Sized>(&self, name: &Q) -> u64 {
        self.hasher.hash_one(name)
    }

    /// `name`'s hash for a lookup, or `None` when the map is empty: an empty map (most
    /// collections' `removed`) answers without hashing the name.
    fn lookup_hash<Q: Hash + ?Sized>(&self, name: &Q) -> Option<u64> {
        (!self.is_empty()).then(|| self.hash(name))
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    pub fn shrink_to_fit(&mut self) {
        let hasher = &self.hasher;
        self.table.shrink_to_fit(|(name, _)| hasher.hash_one(name));
    }

    pub fn get<Q>(&self, name: &Q) -> Option<&V>
    where
        Bytes: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.table.find(self.lookup_hash(name)?, |(n, _)| n.borrow() == name).map(|(_, v)| v)
    }

    pub fn get_mut<Q>(&mut self, name: &Q) -> Option<&mut V>
    where
        Bytes: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.lookup_hash(name)?;
        self.table.find_mut(hash, |(n, _)| n.borrow() == name).map(|(_, v)| v)
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
        let hash = self.hash(&name);
        let hasher = &self.hasher;
        match self.table.entry(hash, |(n, _)| *n == name, |(n, _)| hasher.hash_one(n)) {
            Slot::Occupied(mut slot) => Some(std::mem::replace(&mut slot.get_mut().1, value)),
            Slot::Vacant(slot) => {
                slot.insert((name, value));
                None
            }
        }
    }

    /// `insert` of a name given as bytes, copied (`Bytes::copy_from_slice`) only when the map
    /// does not hold it yet: an existing name keeps its stored bytes, and the command's
    /// argument is never what the map keeps (`cmd::args::own` says why).
    pub fn insert_copied(&mut self, name: &[u8], value: V) -> Option<V> {
        let hash = self.hash(name);
        let hasher = &self.hasher;
        match self.table.entry(hash, |(n, _)| n[..] == *name, |(n, _)| hasher.hash_one(n)) {
            Slot::Occupied(mut slot) => Some(std::mem::replace(&mut slot.get_mut().1, value)),
            Slot::Vacant(slot) => {
                slot.insert((Bytes::copy_from_slice(name), value));
                None
            }
        }
    }

    /// The value at `name`, inserted as `value` first if it has none
    /// (`HashMap::entry(name).or_insert(value)`).
    pub fn get_or_insert(&mut self, name: Bytes, value: V) -> &mut V {
        let hash = self.hash(&name);
        let hasher = &self.hasher;
        let slot = self.table.entry(hash, |(n, _)| *n == name, |(n, _)| hasher.hash_one(n)).or_insert((name, value));
        &mut slot.into_mut().1
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
        let hash = self.lookup_hash(name)?;
        match self.table.find_entry(hash, |(n, _)| n.borrow() == name) {
            Ok(slot) => Some(slot.remove().0),
            Err(_) => None,
        }
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&Bytes, &V)> + Clone {
        self.table.iter().map(|(n, v)| (n, v))
    }

    pub fn iter_mut(&mut self) -> impl ExactSizeIterator<Item = (&Bytes, &mut V)> {
        self.table.iter_mut().map(|(n, v)| (&*n, v))
    }

    pub fn keys(&self) -> impl ExactSizeIterator<Item = &Bytes> + Clone {
        self.table.iter().map(|(n, _)| n)
    }

    pub fn values(&self) -> impl ExactSizeIterator<Item = &V> + Clone {
        self.table.iter().map(|(_, v)| v)
    }

    pub fn values_mut(&mut self) -> impl ExactSizeIterator<Item = &mut V> {
        self.table.iter_mut().map(|(_, v)| v)
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&Bytes, &mut V) -> bool) {
        self.table.retain(|(n, v)| keep(n, v));
    }

    pub fn drain(&mut self) -> impl ExactSizeIterator<Item = (Bytes, V)> + '_ {
        self.table.drain()
    }

    /// An element picked at random, each with the same chance (`None` when empty): buckets
    /// drawn at random until one is full, O(1) at the load the map keeps; if `RANDOM_DRAWS`
    /// draws all miss (a map far emptier than its table), the element at a random position of
    /// a walk, O(n) but as fair.
    pub fn random(&self, rng: &mut impl Rng) -> Option<(&Bytes, &V)> {
        if self.is_empty() {
            return None;
        }
        match draw_bucket(&self.table, rng) {
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
        // Distinct elements are distinct places in the table.
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
    type IntoIter = hashbrown::hash_table::IntoIter<(Bytes, V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.table.into_iter()
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
}
