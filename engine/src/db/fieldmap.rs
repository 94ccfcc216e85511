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
//! A table grows a step at a time, as Redis's dict rehashes incrementally: when it is full, a
//! table twice the size takes the new elements and the old one's move into it a few buckets per
//! write (`Table::step`), lookups seeing both meanwhile. Grown all at once, as hashbrown grows,
//! a set of 2M members stalled its shard and its worker thread for ~200 ms (Redis's worst
//! request: 4.7 ms; docs/benchmarks.md, "Big collections grow a step at a time"). A read
//! command's lookup of the key moves a step too (`step_growth`, from `Ctx`'s read lookup), as
//! Redis's dict moves a bucket on finds: a map read but no longer written still finishes its
//! growth and frees the old table. One neither read nor written keeps both until it is.
//!
//! Names are `Name`s (`db::name`): a short one lives in its slot of the vector or the table, so
//! a lookup compares it where the slot is, and storing it allocates nothing.
//!
//! The methods are `HashMap`'s, with the same names and meaning, for those the engine uses;
//! a lookup takes the name as a slice.

use std::hash::BuildHasher;

use either::Either;
use foldhash::fast::RandomState;
use hashbrown::hash_table::{Entry, HashTable};
use rand::Rng;

pub use super::name::Name;
use super::slots::SlotsEnd;

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
    Small(Vec<(Name, V)>),
    /// More: a table, behind a pointer so that the map is no bigger than the vector.
    Table(Box<Table<V>>),
}

/// hashbrown's table with its own seed (two tables built from each other's walk with one
/// seed would cluster), grown a step at a time: every element is in `table` or, while the map
/// grows, in `old`, never in both.
#[derive(Clone)]
struct Table<V> {
    table: HashTable<(Name, V)>,
    /// Where `table` keeps its control bytes and slots (`FieldMap::prefetch`), learnt at each
    /// insert of a new element.
    slots: SlotsEnd,
    /// While the map grows: the table it grows from, whose elements move into `table`.
    old: Option<Moving<V>>,
    hasher: RandomState,
    /// Whether `entry::shrink_if_sparse` has a reason to look at the table: an element left it
    /// (or the table is new) since that last looked at it with no move under way. Only a
    /// removal makes a map sparse or few enough for a vector, and most writes only add or
    /// change: looked at after every one, a table cost each collection write ~30
    /// instructions on every node (callgrind, docs/benchmarks.md).
    removed_since_check: bool,
}

#[derive(Clone)]
struct Moving<V> {
    table: HashTable<(Name, V)>,
    /// Where it keeps its control bytes and slots (its own, from before the move).
    slots: SlotsEnd,
    /// Its first bucket not emptied yet.
    next: usize,
    /// Its buckets emptied per write: `STEP_BUCKETS` for a growth, `SHRINK_STEP_BUCKETS` for
    /// a shrink.
    per_write: usize,
}

/// Buckets of the old table emptied into the new one per write while a map grows (at the load
/// a full table has, three or four elements). As in Redis, which moves one bucket per
/// operation, the moves are spread thin: 2M `SADD`s into one set at -P 16 had a p99 of 2.6 ms
/// and a worst request of 4.7–7.0 ms with 4 buckets a write, 5.7 and 11 ms with 64, 3.1 and
/// 21 ms with 256, against 1.3 and 200 ms grown all at once (docs/benchmarks.md, "Big
/// collections grow a step at a time"). A growth ends after a quarter as many writes as the
/// old table had buckets, before the new table fills (`Table::grow` sizes it for that).
const STEP_BUCKETS: usize = 4;

/// Buckets of a sparse table emptied into a smaller one per write while a map shrinks: the
/// table is at most an eighth full when a shrink starts (`entry::shrink_if_sparse`), so this
/// moves about as many elements a write as a growth's step. Shrunk at once, a set emptied by
/// `SPOP` -P 16 from 4.9M members stalled every client for 130 ms when it passed ~1M (its 8M
/// buckets rehashed in one command; docs/benchmarks.md, "Big collections shrink a step at a
/// time").
pub(super) const SHRINK_STEP_BUCKETS: usize = 8 * STEP_BUCKETS;

/// The most buckets of a table shrunk at once (`FieldMap::shrink_gradually`): at most an eighth
/// full, it rehashes a few hundred elements, which a move would only spread over more writes.
const SHRINK_AT_ONCE_BUCKETS: usize = 4096;

/// Where a write put an element (`FieldMap::slot_hinted`): its index in the vector or its
/// bucket in the table, for a lookup of it soon after (`FieldMap::get_hinted`) that compares
/// the name there instead of hashing it and probing. Only a hint, never trusted: since the
/// write the element may have moved (a growth's step, the vector become a table) or been
/// removed, and another may be there. Four bytes, which `entry::Changes` keeps in its padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotHint(u32);

impl SlotHint {
    /// Nowhere: every lookup by it is a `get`.
    pub const NONE: SlotHint = SlotHint(u32::MAX);
    /// The top bit says the table (its other bits the bucket); clear, the vector's index.
    const TABLE: u32 = 1 << 31;

    fn small(at: usize) -> SlotHint {
        // A vector holds at most `SMALL_MAX` elements.
        SlotHint(at as u32)
    }

    fn table(bucket: usize) -> SlotHint {
        u32::try_from(bucket).ok().filter(|&b| b < Self::TABLE).map_or(Self::NONE, |b| SlotHint(b | Self::TABLE))
    }

    /// (in the table, index), or `None` for `NONE`.
    fn at(self) -> Option<(bool, usize)> {
        (self != Self::NONE).then_some((self.0 & Self::TABLE != 0, (self.0 & !Self::TABLE) as usize))
    }
}

impl Default for SlotHint {
    fn default() -> Self {
        SlotHint::NONE
    }
}

/// The test for the element called `name`, in either table.
fn is_named<V>(name: &[u8]) -> impl Fn(&(Name, V)) -> bool + Copy + '_ {
    move |(n, _)| n[..] == *name
}

/// Puts `item`, whose name `table` does not hold, into `table` (an element moving in from a
/// vector or from a growth's old table).
fn place<V>(table: &mut HashTable<(Name, V)>, hasher: &RandomState, item: (Name, V)) {
    table.insert_unique(hasher.hash_one(&item.0), item, |(n, _)| hasher.hash_one(n));
}

/// A table's elements and how many are left: two tables' chained are not an
/// `ExactSizeIterator` by themselves.
#[derive(Clone)]
pub struct Counted<I> {
    inner: I,
    left: usize,
}

impl<I: Iterator> Iterator for Counted<I> {
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        let item = self.inner.next()?;
        self.left -= 1;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<I: Iterator> ExactSizeIterator for Counted<I> {}

/// The elements of a table given up whole (`FieldMap`'s `IntoIterator`).
type TableIntoIter<V> = Counted<std::iter::Chain<hashbrown::hash_table::IntoIter<(Name, V)>, std::iter::Flatten<std::option::IntoIter<HashTable<(Name, V)>>>>>;

impl<V> Table<V> {
    fn with_capacity(capacity: usize) -> Table<V> {
        Table { table: HashTable::with_capacity(capacity), slots: SlotsEnd::default(), old: None, hasher: RandomState::default(), removed_since_check: true }
    }

    fn len(&self) -> usize {
        self.table.len() + self.old.as_ref().map_or(0, |old| old.table.len())
    }

    /// Buckets held, in both tables while the map grows.
    fn buckets(&self) -> usize {
        self.table.num_buckets() + self.old.as_ref().map_or(0, |old| old.table.num_buckets())
    }

    /// `name`'s hash, for a lookup in either table; `None` when the map is empty (most
    /// collections' `removed` once they had tombstones), which answers without hashing it.
    fn hash_if_any(&self, name: &[u8]) -> Option<u64> {
        (self.len() > 0).then(|| self.hasher.hash_one(name))
    }

    fn find(&self, name: &[u8]) -> Option<&(Name, V)> {
        let (hash, named) = (self.hash_if_any(name)?, is_named(name));
        self.table.find(hash, named).or_else(|| self.old.as_ref()?.table.find(hash, named))
    }

    fn find_mut(&mut self, name: &[u8]) -> Option<&mut (Name, V)> {
        let (hash, named) = (self.hash_if_any(name)?, is_named(name));
        if let Some(old) = &mut self.old {
            if let Some(found) = old.table.find_mut(hash, named) {
                return Some(found);
            }
        }
        self.table.find_mut(hash, named)
    }

    /// The value at `name`, stored first with `value` if the map does not hold it; `value`
    /// comes back when it was not stored; and where it is (`SlotHint`). A write: it moves a
    /// step of a growth first.
    fn slot<N: NameArg>(&mut self, name: N, value: V) -> (&mut V, Option<V>, SlotHint) {
        self.step();
        let (hash, named) = (self.hasher.hash_one(name.as_ref()), is_named(name.as_ref()));
        match self.old.as_ref().map(|old| old.table.find(hash, named).is_some()) {
            // Not moved yet: it stays where it is until its bucket's turn (no hint there: a
            // lookup soon after finds it the usual way).
            Some(true) => {
                let held = self.old.as_mut().and_then(|old| old.table.find_mut(hash, named)).expect("found in the old table above");
                return (&mut held.1, Some(value), SlotHint::NONE);
            }
            Some(false) => {}
            None => {
                if self.table.len() == self.table.capacity() && self.table.find(hash, named).is_none() {
                    self.grow();
                }
            }
        }
        let Table { table, slots, hasher, .. } = self;
        match table.entry(hash, named, |(n, _)| hasher.hash_one(n)) {
            Entry::Occupied(held) => {
                let hint = SlotHint::table(held.bucket_index());
                (&mut held.into_mut().1, Some(value), hint)
            }
            Entry::Vacant(free) => {
                let placed = free.insert((name.into(), value));
                slots.note(&placed);
                let hint = SlotHint::table(placed.bucket_index());
                (&mut placed.into_mut().1, None, hint)
            }
        }
    }

    /// Starts a growth: the full table becomes the old one, and a new one takes its elements
    /// and every element added until they have all moved (one per write at most, over
    /// `buckets / STEP_BUCKETS` writes), so it never grows itself meanwhile.
    fn grow(&mut self) {
        let (len, buckets) = (self.table.len(), self.table.num_buckets());
        let capacity = (2 * len).max(len + buckets / STEP_BUCKETS + 1);
        let full = std::mem::replace(&mut self.table, HashTable::with_capacity(capacity));
        self.old = Some(Moving { table: full, slots: std::mem::take(&mut self.slots), next: 0, per_write: STEP_BUCKETS });
    }

    /// Starts a shrink, moved as a growth is: the sparse table becomes the old one, and a
    /// smaller one takes its elements (`SHRINK_STEP_BUCKETS` of its buckets per write) and
    /// every element added until they have all moved, sized so that it never grows meanwhile.
    fn shrink(&mut self) {
        debug_assert!(self.old.is_none(), "a shrink starts once a move has ended");
        let (len, buckets) = (self.table.len(), self.table.num_buckets());
        let capacity = len + buckets.div_ceil(SHRINK_STEP_BUCKETS) + 1;
        let sparse = std::mem::replace(&mut self.table, HashTable::with_capacity(capacity));
        self.old = Some(Moving { table: sparse, slots: std::mem::take(&mut self.slots), next: 0, per_write: SHRINK_STEP_BUCKETS });
    }

    /// Moves the elements of the next few buckets of a move's old table (`Moving::per_write`);
    /// drops the old table once it is empty.
    fn step(&mut self) {
        let Table { table, old, hasher, .. } = self;
        let Some(moving) = old else { return };
        let end = (moving.next + moving.per_write).min(moving.table.num_buckets());
        // Moving an element hashes its name; a long one is elsewhere in memory: start loading
        // them all first, so that their cache misses overlap instead of queueing one after
        // another (a short one is in the bucket itself).
        for bucket in moving.next..end {
            if let Some((name, _)) = moving.table.get_bucket(bucket).filter(|(name, _)| name.heap_size() > 0) {
                super::node::prefetch(name.as_ptr());
            }
        }
        for bucket in moving.next..end {
            if let Ok(full) = moving.table.get_bucket_entry(bucket) {
                place(table, hasher, full.remove().0);
            }
        }
        moving.next = end;
        if moving.table.is_empty() {
            *old = None;
        }
    }

    /// Ends a move at once (before the map is shrunk at once: that rehashes every element anyway).
    fn finish(&mut self) {
        let Table { table, old, hasher, .. } = self;
        for item in old.take().into_iter().flat_map(|moving| moving.table) {
            place(table, hasher, item);
        }
    }

    fn remove(&mut self, name: &[u8]) -> Option<(Name, V)> {
        let (hash, named) = (self.hash_if_any(name)?, is_named(name));
        self.step();
        let found = match &mut self.old {
            Some(old) => old.table.find_entry(hash, named).ok().map(|found| found.remove().0),
            None => None,
        };
        let removed = found.or_else(|| self.table.find_entry(hash, named).ok().map(|found| found.remove().0));
        self.removed_since_check |= removed.is_some();
        removed
    }

    fn iter(&self) -> Counted<impl Iterator<Item = &(Name, V)> + Clone> {
        Counted { inner: self.table.iter().chain(self.old.iter().flat_map(|old| old.table.iter())), left: self.len() }
    }

    fn iter_mut(&mut self) -> Counted<impl Iterator<Item = &mut (Name, V)>> {
        let left = self.len();
        Counted { inner: self.table.iter_mut().chain(self.old.iter_mut().flat_map(|old| old.table.iter_mut())), left }
    }

    fn retain(&mut self, mut keep: impl FnMut(&Name, &mut V) -> bool) {
        self.removed_since_check = true;
        self.table.retain(|(n, v)| keep(n, v));
        if let Some(old) = &mut self.old {
            old.table.retain(|(n, v)| keep(n, v));
        }
    }

    fn drain(&mut self) -> Counted<impl Iterator<Item = (Name, V)> + '_> {
        self.removed_since_check = true;
        let left = self.len();
        let old = self.old.take().map(|moving| moving.table);
        Counted { inner: self.table.drain().chain(old.into_iter().flatten()), left }
    }

    fn into_elements(self) -> TableIntoIter<V> {
        let left = self.len();
        Counted { inner: self.table.into_iter().chain(self.old.map(|moving| moving.table).into_iter().flatten()), left }
    }

    /// An element at random (`draw_bucket`), each with the same chance. While the map moves,
    /// the draws are among the buckets of both tables that can hold an element: all of the new
    /// one's, and the old one's not emptied yet. Each holds one element at most, so the first
    /// full one drawn is any element with the same chance. Choosing a table first by how many
    /// each holds, then drawing in it, met tables far emptier than the map: a growth's new
    /// table and a shrink's old one (an eighth full, with its emptied buckets counted), whose
    /// draws all missed often enough that `SPOP` walked the map (docs/benchmarks.md, "Big
    /// collections shrink a step at a time"). Together they are at least a tenth full.
    fn random(&self, rng: &mut impl Rng) -> Option<&(Name, V)> {
        let Some(old) = &self.old else { return draw_bucket(&self.table, rng) };
        let new = self.table.num_buckets();
        let candidates = new + old.table.num_buckets().saturating_sub(old.next);
        if self.len() == 0 || candidates == 0 {
            return None;
        }
        (0..MOVING_DRAWS).find_map(|_| match rng.random_range(0..candidates) {
            bucket if bucket < new => self.table.get_bucket(bucket),
            bucket => old.table.get_bucket(old.next + bucket - new),
        })
    }
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

/// How many buckets `Table::random` draws while the map moves between two tables, whose
/// candidate buckets are at least a tenth full (a shrink's start: an eighth of the old table's
/// buckets, plus the new one's quarter as many, empty): all miss with a chance of ~1e-12.
const MOVING_DRAWS: usize = 4 * RANDOM_DRAWS;

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

/// A name to store: a command's argument or a name the caller holds, made a `Name` only when
/// it is stored (`FieldMap::insert_copied`): an existing name keeps its stored bytes.
pub trait NameArg: AsRef<[u8]> + Into<Name> {}

impl<N: AsRef<[u8]> + Into<Name>> NameArg for N {}

/// Where `name` is in a small map's vector.
fn position<V>(items: &[(Name, V)], name: &[u8]) -> Option<usize> {
    items.iter().position(|(n, _)| n[..] == *name)
}

impl<V> Default for FieldMap<V> {
    fn default() -> Self {
        FieldMap { repr: Repr::Small(Vec::new()) }
    }
}

impl<V> FieldMap<V> {
    /// Starts loading a small map's first elements (its vector's buffer, an allocation of its
    /// own), for a pipelined command about to look an element up (`Value::prefetch_items`).
    /// A table's lines depend on the element's hash (`prefetch`). A hint only.
    pub fn prefetch_items(&self) {
        if let Repr::Small(items) = &self.repr {
            if !items.is_empty() {
                super::node::prefetch(items.as_ptr().cast());
            }
        }
    }

    pub fn with_capacity(capacity: usize) -> FieldMap<V> {
        let repr = if capacity <= SMALL_MAX { Repr::Small(Vec::with_capacity(capacity)) } else { Repr::Table(Box::new(Table::with_capacity(capacity))) };
        FieldMap { repr }
    }

    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Small(items) => items.len(),
            Repr::Table(t) => t.len(),
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
            // The new table's while the map grows: it will hold them all.
            Repr::Table(t) => t.table.capacity(),
        }
    }

    /// Slots the map holds, used or not: a table's buckets (its `capacity()` is fewer, and
    /// falls as removals leave tombstones), a vector's capacity.
    pub fn buckets(&self) -> usize {
        match &self.repr {
            Repr::Small(items) => items.capacity(),
            Repr::Table(t) => t.buckets(),
        }
    }

    /// Moves a step of a growth under way, as every write does first: what a read command's
    /// lookup of the key does (`entry::Value::step_growth`), so that a map that is read but no
    /// longer written still finishes growing. Nothing for a map that is not growing.
    #[inline]
    pub fn step_growth(&mut self) {
        if let Repr::Table(t) = &mut self.repr {
            if t.old.is_some() {
                t.step();
            }
        }
    }

    /// Whether the map is growing: two tables, its elements moving from the old one (tests of
    /// `step_growth`).
    #[cfg(test)]
    pub fn is_growing(&self) -> bool {
        matches!(&self.repr, Repr::Table(t) if t.old.is_some())
    }

    /// Whether `entry::shrink_if_sparse` has a reason to look at the map: a table that lost an
    /// element since it last looked (or is new). A vector never has: it is left alone.
    #[inline]
    pub fn may_be_sparse(&self) -> bool {
        matches!(&self.repr, Repr::Table(t) if t.removed_since_check)
    }

    /// `entry::shrink_if_sparse` looked at the map and did what it had to. Not while the table
    /// moves (a growth, or the shrink it just started): a shrink cannot start then, so the look
    /// is repeated after each write until the move ends and the table can be judged alone. (At
    /// today's step sizes a move ends before removals can leave it sparse, so this is the safe
    /// side of a rule, not a case the tests reach.)
    #[inline]
    pub fn sparse_checked(&mut self) {
        if let Repr::Table(t) = &mut self.repr {
            if t.old.is_none() {
                t.removed_since_check = false;
            }
        }
    }

    /// Gives back what a table does not use: a table of up to `SHRINK_AT_ONCE_BUCKETS`
    /// buckets at once (`shrink_to_fit`), a bigger one a step per write (`Table::shrink`),
    /// unless it is moving between two tables already (a growth or a shrink, which ends within
    /// some thousands of writes; the caller asks again after its writes). A vector is left
    /// alone.
    pub fn shrink_gradually(&mut self) {
        self.shrink_beyond(SHRINK_AT_ONCE_BUCKETS);
    }

    /// `shrink_gradually` with its bound: a table of up to `at_once` buckets shrinks at once,
    /// a bigger one a step per write (the tests start step-wise shrinks of small tables).
    fn shrink_beyond(&mut self, at_once: usize) {
        let Repr::Table(t) = &mut self.repr else { return };
        if t.old.is_some() {
            return;
        }
        if t.table.num_buckets() <= at_once {
            self.shrink_to_fit();
        } else {
            t.shrink();
        }
    }

    /// Gives back what the map does not use, at once; a table left with at most `SMALL_MAX`
    /// elements becomes a vector again.
    pub fn shrink_to_fit(&mut self) {
        match &mut self.repr {
            Repr::Small(items) => items.shrink_to_fit(),
            Repr::Table(t) if t.len() <= SMALL_MAX => self.repr = Repr::Small(t.drain().collect()),
            Repr::Table(t) => {
                t.finish();
                let Table { table, slots, hasher, .. } = &mut **t;
                table.shrink_to_fit(|(name, _)| hasher.hash_one(name));
                slots.forget();
            }
        }
    }

    /// Starts loading the lines a lookup or an insert of `name` reads first, in both tables
    /// while the map grows (`SlotsEnd::prefetch`): for a pipelined batch's commands on one big
    /// collection, whose elements' probes would otherwise each wait for their cache misses in
    /// turn (`Store::prefetch_elements`). Nothing for a vector, whose few elements the command
    /// reads anyway. A hint only.
    pub fn prefetch(&self, name: &[u8]) {
        if let Repr::Table(t) = &self.repr {
            let hash = t.hasher.hash_one(name);
            t.slots.prefetch(&t.table, hash, 2);
            if let Some(old) = &t.old {
                old.slots.prefetch(&old.table, hash, 2);
            }
        }
    }

    pub fn get(&self, name: &[u8]) -> Option<&V> {
        match &self.repr {
            Repr::Small(items) => position(items, name).map(|i| &items[i].1),
            Repr::Table(t) => t.find(name).map(|(_, v)| v),
        }
    }

    /// `get`, looking first where `hint` says a write put `name` (`slot_hinted`): the name
    /// found there is compared, and anything else (the element moved, another is there, no
    /// element is) is looked up as `get` does. Right after the write, no hash and no probe:
    /// an edit's effect reads the states of what it changed this way (`Collection::settled`;
    /// by `get`, ~190 instructions of an origin's `HSET` into a big hash, callgrind).
    pub fn get_hinted(&self, hint: SlotHint, name: &[u8]) -> Option<&V> {
        match self.at_hint(hint) {
            Some((n, value)) if n[..] == *name => Some(value),
            _ => self.get(name),
        }
    }

    /// The element where `hint` points, whichever it is (none: an empty slot, a hint of the
    /// vector for a table or the other way round, `SlotHint::NONE`).
    #[inline]
    fn at_hint(&self, hint: SlotHint) -> Option<&(Name, V)> {
        match (&self.repr, hint.at()?) {
            (Repr::Small(items), (false, at)) => items.get(at),
            (Repr::Table(t), (true, bucket)) => t.table.get_bucket(bucket),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, name: &[u8]) -> Option<&mut V> {
        match &mut self.repr {
            Repr::Small(items) => position(items, name).map(|i| &mut items[i].1),
            Repr::Table(t) => t.find_mut(name).map(|(_, v)| v),
        }
    }

    pub fn contains_key(&self, name: &[u8]) -> bool {
        self.get(name).is_some()
    }

    /// Sets `name` to `value`; returns the value it replaced (the stored name stays).
    pub fn insert(&mut self, name: impl NameArg, value: V) -> Option<V> {
        let (held, unused) = self.slot(name, value);
        unused.map(|value| std::mem::replace(held, value))
    }

    /// `insert` of a name given as bytes, made a `Name` (a copy) only when the map
    /// does not hold it yet: an existing name keeps its stored bytes, and the command's
    /// argument is never what the map keeps (`cmd::args::own` says why).
    pub fn insert_copied(&mut self, name: &[u8], value: V) -> Option<V> {
        let (held, unused) = self.slot(name, value);
        unused.map(|value| std::mem::replace(held, value))
    }

    /// The value at `name`, inserted as `value` first if it has none
    /// (`HashMap::entry(name).or_insert(value)`).
    pub fn get_or_insert(&mut self, name: impl NameArg, value: V) -> &mut V {
        self.slot(name, value).0
    }

    /// The value at `name`, stored first with `value` if the map does not hold it; `value`
    /// comes back when it was not stored, for the caller to weigh against what is held (one
    /// lookup where `get` and then `insert` made two).
    pub fn slot<N: NameArg>(&mut self, name: N, value: V) -> (&mut V, Option<V>) {
        let (held, unused, _) = self.slot_hinted(name, value);
        (held, unused)
    }

    /// `slot`, and where the element is, for a lookup of it soon after (`get_hinted`).
    pub fn slot_hinted<N: NameArg>(&mut self, name: N, value: V) -> (&mut V, Option<V>, SlotHint) {
        match self.small_slot(name, value) {
            Ok((at, unused)) => match &mut self.repr {
                Repr::Small(items) => (&mut items[at].1, unused, SlotHint::small(at)),
                Repr::Table(_) => unreachable!("small_slot found it in the vector"),
            },
            Err((name, value)) => {
                let Repr::Table(t) = &mut self.repr else { unreachable!("small_slot leaves a table") };
                t.slot(name, value)
            }
        }
    }

    /// `slot` in a vector: the index of `name`, pushed with `value` if absent and the vector
    /// has room. Hands both back for a table, and for a full vector, which becomes one.
    fn small_slot<N: NameArg>(&mut self, name: N, value: V) -> Result<(usize, Option<V>), (N, V)> {
        let Repr::Small(items) = &mut self.repr else { return Err((name, value)) };
        if let Some(at) = position(items, name.as_ref()) {
            return Ok((at, Some(value)));
        }
        if items.len() < SMALL_MAX {
            if items.len() == items.capacity() {
                grow_by_one(items);
            }
            items.push((name.into(), value));
            return Ok((items.len() - 1, None));
        }
        let mut t = Table::with_capacity(2 * SMALL_MAX);
        for item in std::mem::take(items) {
            place(&mut t.table, &t.hasher, item);
        }
        self.repr = Repr::Table(Box::new(t));
        Err((name, value))
    }

    pub fn remove(&mut self, name: &[u8]) -> Option<V> {
        self.remove_entry(name).map(|(_, v)| v)
    }

    pub fn remove_entry(&mut self, name: &[u8]) -> Option<(Name, V)> {
        match &mut self.repr {
            Repr::Small(items) => position(items, name).map(|i| items.remove(i)),
            Repr::Table(t) => t.remove(name),
        }
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&Name, &V)> + Clone {
        match &self.repr {
            Repr::Small(items) => Either::Left(items.iter().map(|(n, v)| (n, v))),
            Repr::Table(t) => Either::Right(t.iter().map(|(n, v)| (n, v))),
        }
    }

    pub fn iter_mut(&mut self) -> impl ExactSizeIterator<Item = (&Name, &mut V)> {
        match &mut self.repr {
            Repr::Small(items) => Either::Left(items.iter_mut().map(|(n, v)| (&*n, v))),
            Repr::Table(t) => Either::Right(t.iter_mut().map(|(n, v)| (&*n, v))),
        }
    }

    pub fn keys(&self) -> impl ExactSizeIterator<Item = &Name> + Clone {
        self.iter().map(|(n, _)| n)
    }

    pub fn values(&self) -> impl ExactSizeIterator<Item = &V> + Clone {
        self.iter().map(|(_, v)| v)
    }

    pub fn values_mut(&mut self) -> impl ExactSizeIterator<Item = &mut V> {
        self.iter_mut().map(|(_, v)| v)
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&Name, &mut V) -> bool) {
        match &mut self.repr {
            Repr::Small(items) => items.retain_mut(|(n, v)| keep(n, v)),
            Repr::Table(t) => t.retain(keep),
        }
    }

    pub fn drain(&mut self) -> impl ExactSizeIterator<Item = (Name, V)> + '_ {
        match &mut self.repr {
            Repr::Small(items) => Either::Left(items.drain(..)),
            Repr::Table(t) => Either::Right(t.drain()),
        }
    }

    /// An element picked at random, each with the same chance (`None` when empty): in a
    /// vector, at a random position; in a table, buckets drawn at random until one is full,
    /// O(1) at the load the map keeps; if `RANDOM_DRAWS` draws all miss (a map far emptier
    /// than its table), the element at a random position of a walk, O(n) but as fair.
    pub fn random(&self, rng: &mut impl Rng) -> Option<(&Name, &V)> {
        if self.is_empty() {
            return None;
        }
        let drawn = match &self.repr {
            Repr::Small(items) => items.get(rng.random_range(0..items.len())),
            Repr::Table(t) => t.random(rng),
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
    pub fn sample(&self, count: i64, rng: &mut impl Rng) -> Vec<(&Name, &V)> {
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
            if seen.insert(name as *const Name) {
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

impl<N: NameArg, V> Extend<(N, V)> for FieldMap<V> {
    fn extend<I: IntoIterator<Item = (N, V)>>(&mut self, items: I) {
        for (name, value) in items {
            self.insert(name, value);
        }
    }
}

impl<N: NameArg, V> FromIterator<(N, V)> for FieldMap<V> {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(items: I) -> Self {
        let items = items.into_iter();
        let mut map = FieldMap::with_capacity(items.size_hint().0);
        map.extend(items);
        map
    }
}

impl<V> IntoIterator for FieldMap<V> {
    type Item = (Name, V);
    type IntoIter = Either<std::vec::IntoIter<(Name, V)>, TableIntoIter<V>>;
    fn into_iter(self) -> Self::IntoIter {
        match self.repr {
            Repr::Small(items) => Either::Left(items.into_iter()),
            Repr::Table(t) => Either::Right(t.into_elements()),
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn behaves_as_a_map_by_name_or_slice() {
        let mut m = FieldMap::default();
        assert_eq!(m.insert(Bytes::from_static(b"a"), 1), None);
        assert_eq!(m.insert(Bytes::from_static(b"b"), 2), None);
        assert_eq!(m.insert(Bytes::from_static(b"a"), 3), Some(1));
        assert_eq!((m.len(), m.get(&b"a"[..]), m.get(&Bytes::from_static(b"b"))), (2, Some(&3), Some(&2)));
        *m.get_mut(&b"b"[..]).unwrap() += 10;
        assert_eq!(m.remove_entry(&b"b"[..]), Some((Name::from(&b"b"[..]), 12)));
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
            assert!(picks.iter().all(|(n, v)| m.get(n) == Some(*v)));
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
        ShrinkStepwise,
        Drain,
    }

    /// Ops on `names` names; `removes` weighs removals against 7 for the inserts.
    fn op(names: u8, removes: u32) -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0..names, any::<u32>()).prop_map(|(n, v)| Op::Insert(n, v)),
            2 => (0..names, any::<u32>()).prop_map(|(n, v)| Op::InsertCopied(n, v)),
            1 => (0..names, any::<u32>()).prop_map(|(n, v)| Op::GetOrInsert(n, v)),
            removes => (0..names).prop_map(Op::Remove),
            1 => (1u32..4).prop_map(Op::Retain),
            1 => Just(Op::Shrink),
            1 => Just(Op::ShrinkStepwise),
            1 => Just(Op::Drain),
        ]
    }

    fn name(n: u8) -> Bytes {
        // Names of two lengths, so a lookup meets names of its own length and of another.
        Bytes::from(if n.is_multiple_of(2) { format!("f{n}") } else { format!("field:{n}") })
    }

    proptest::proptest! {
        /// Every answer against `std::collections::HashMap`, through both representations and
        /// the moves between them; a vector keeps insertion order, removals included. 24
        /// names, so maps cross `SMALL_MAX` both ways.
        #[test]
        fn a_field_map_answers_as_a_hash_map(ops in proptest::collection::vec(op(24, 4), 1..200)) {
            answers_as_a_hash_map(ops)?;
        }

        /// The same with 120 names and fewer removals: tables fill and grow, and every op
        /// meets maps half moved from their old table to the new one (`Table::step`), by a
        /// growth or a shrink.
        #[test]
        fn a_growing_field_map_answers_as_a_hash_map(ops in proptest::collection::vec(op(120, 1), 1..400)) {
            answers_as_a_hash_map(ops)?;
        }
    }

    fn answers_as_a_hash_map(ops: Vec<Op>) -> Result<(), proptest::test_runner::TestCaseError> {
        {
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
                        proptest::prop_assert_eq!(map.remove_entry(&name(n)[..]).map(|(n, v)| (n.to_bytes(), v)), model.remove_entry(&name(n)));
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
                            order = map.keys().map(Name::to_bytes).collect();
                        }
                    }
                    // A table starts moving into a smaller one, a step per write from here
                    // (`shrink_gradually` does so only for tables bigger than these).
                    Op::ShrinkStepwise => map.shrink_beyond(0),
                    Op::Drain => {
                        let mut drained: Vec<_> = map.drain().map(|(n, v)| (n.to_bytes(), v)).collect();
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
                let mut held: Vec<_> = map.iter().map(|(n, v)| (n.to_bytes(), *v)).collect();
                if matches!(map.repr, Repr::Small(_)) {
                    proptest::prop_assert!(map.len() <= SMALL_MAX);
                    let names: Vec<_> = held.iter().map(|(n, _)| n.clone()).collect();
                    proptest::prop_assert_eq!(&names, &order, "a vector keeps insertion order");
                }
                held.sort();
                let mut want: Vec<_> = model.iter().map(|(n, v)| (n.clone(), *v)).collect();
                want.sort();
                proptest::prop_assert_eq!(held, want);
                proptest::prop_assert_eq!(map.iter().len(), model.len());
            }
        }
        Ok(())
    }

    /// A full table grows a step per write: the next insert starts it, every element stays
    /// found in one table or the other, each write empties `STEP_BUCKETS` of the old table's
    /// buckets, the new table never grows meanwhile, and the old one is freed once empty.
    /// `prefetch` loads the lines where the map keeps an element: after every insert of a new
    /// one, across the move from a vector to a table and through growths (when the old table
    /// is not yet emptied, the new one's layout is the one learnt), `slots` locates it.
    #[test]
    fn the_map_knows_where_its_new_elements_lie() {
        let mut map: FieldMap<u32> = FieldMap::default();
        let mut growths = 0;
        for i in 0..5_000u32 {
            let name = format!("element:{i}");
            let was_growing = map.is_growing();
            assert_eq!(map.insert(Bytes::from(name.clone()), i), None);
            growths += usize::from(map.is_growing() && !was_growing);
            let Repr::Table(t) = &map.repr else { continue };
            let hash = t.hasher.hash_one(name.as_bytes());
            assert!(t.slots.locates(&t.table, hash, |(n, _)| n[..] == *name.as_bytes()), "{name}");
        }
        assert!(growths > 5, "{growths} growths");
    }

    /// A write's `SlotHint` points at the element it wrote (in the vector, and in a table
    /// unless the element waits in a growth's old table), so `get_hinted` reads it there; any
    /// hint, however stale (elements moved by growths, removed, another element in its slot),
    /// and of any element, answers exactly as `get`.
    #[test]
    fn a_hint_points_at_what_a_write_put_and_never_misleads_a_lookup() {
        let mut m: FieldMap<usize> = FieldMap::default();
        let name = |i: usize| format!("element:{i}").into_bytes();
        let mut hints = Vec::new();
        let (mut hit, mut in_old) = (0, 0);
        for i in 0..5_000 {
            let (_, unused, hint) = m.slot_hinted(name(i).as_slice(), i);
            assert!(unused.is_none());
            match m.at_hint(hint) {
                Some((n, v)) => {
                    assert_eq!((&n[..], *v), (name(i).as_slice(), i), "a hint of another element");
                    hit += 1;
                }
                None => {
                    assert_eq!(hint, SlotHint::NONE, "a hint of an empty slot");
                    in_old += 1;
                }
            }
            // A write to an element the map holds (or held: some are removed) points at it too.
            if i % 5 == 0 {
                let held = m.contains_key(&name(i / 2));
                let (_, unused, again) = m.slot_hinted(name(i / 2).as_slice(), i / 2);
                assert_eq!(unused.is_some(), held);
                assert!(again == SlotHint::NONE || m.at_hint(again).is_some_and(|(n, _)| n[..] == *name(i / 2)));
            }
            if i % 7 == 3 {
                m.remove(&name(i - 3));
            }
            hints.push(hint);
        }
        assert!(m.is_growing() || m.len() > 1000, "the map became a table and grew");
        assert!(hit > 4_500, "{hit} of 5,000 writes pointed at what they wrote ({in_old} in an old table)");
        for (i, &hint) in hints.iter().enumerate() {
            for other in [i, i + 1, i + 3, 4_999 - i] {
                assert_eq!(m.get_hinted(hint, &name(other)), m.get(&name(other)), "element {other} by the hint of {i}");
            }
        }
        assert_eq!(m.get_hinted(SlotHint::NONE, &name(1)), Some(&1));
    }

    #[test]
    fn a_full_table_grows_a_step_per_write() {
        let mut m: FieldMap<usize> = FieldMap::default();
        let mut held = std::collections::BTreeSet::new();
        let mut next = 0;
        let mut add = |m: &mut FieldMap<usize>, held: &mut std::collections::BTreeSet<usize>| {
            assert_eq!(m.insert(Bytes::from(next.to_string()), next), None);
            held.insert(next);
            next += 1;
        };
        while m.is_small() || m.len() < 1000 || m.len() < m.capacity() {
            add(&mut m, &mut held);
        }
        let Repr::Table(t) = &m.repr else { unreachable!() };
        let old_buckets = t.table.num_buckets();
        assert!(t.old.is_none());
        add(&mut m, &mut held);
        let Repr::Table(t) = &m.repr else { unreachable!() };
        let new_buckets = t.table.num_buckets();
        assert!(t.old.is_some() && new_buckets >= 2 * old_buckets, "{new_buckets} buckets from {old_buckets}");
        let (mut writes, mut picked) = (1, false);
        loop {
            let Repr::Table(t) = &m.repr else { unreachable!() };
            let Some(old) = &t.old else { break };
            // The write that started the growth moved nothing yet.
            assert_eq!(old.next, (writes - 1) * STEP_BUCKETS);
            assert_eq!(t.table.num_buckets(), new_buckets, "the new table grew while the old one moved");
            // Adds, and removals of elements from either table.
            if writes % 3 == 0 {
                let gone = *held.iter().nth(writes % held.len()).unwrap();
                assert_eq!(m.remove(gone.to_string().as_bytes()), Some(gone));
                held.remove(&gone);
            } else {
                add(&mut m, &mut held);
            }
            writes += 1;
            assert_eq!(m.len(), held.len());
            assert_eq!(m.iter().len(), held.len());
            if writes == old_buckets / STEP_BUCKETS / 2 {
                // Half moved: picks at random come from both tables, as many from each as it holds.
                let Repr::Table(t) = &m.repr else { unreachable!() };
                let in_old = t.old.as_ref().map_or(0, |old| old.table.len());
                let mut rng = rand::rng();
                let from_old = (0..20_000)
                    .map(|_| m.random(&mut rng).unwrap())
                    .inspect(|(n, v)| assert!(held.contains(v) && n[..] == *v.to_string().as_bytes()))
                    .filter(|(n, _)| t.old.as_ref().is_some_and(|old| old.table.iter().any(|(o, _)| o == *n)))
                    .count();
                let expected = 20_000 * in_old / held.len();
                assert!(from_old.abs_diff(expected) < 600, "{from_old} picks from the old table, {expected} expected");
                picked = true;
            }
        }
        assert!(picked && writes <= old_buckets / STEP_BUCKETS + 2, "{writes} writes for {old_buckets} buckets");
        assert!((0..next).all(|k| m.get(k.to_string().as_bytes()) == held.contains(&k).then_some(&k)));
        assert_eq!(m.buckets(), new_buckets, "the old table is freed");
    }

    /// A big sparse table shrinks a step per write: `shrink_gradually` sets a table about a
    /// quarter the size to take the elements, every element stays found in one table or the
    /// other, each write empties `SHRINK_STEP_BUCKETS` of the old table's buckets, the new
    /// table never grows meanwhile (inserts included), picks at random come from both tables as
    /// many from each as it holds (none walking the table), and the old one is freed once empty.
    #[test]
    fn a_sparse_table_shrinks_a_step_per_write() {
        let mut m: FieldMap<usize> = FieldMap::default();
        let mut held = std::collections::BTreeSet::new();
        for i in 0..20_000 {
            assert_eq!(m.insert(Bytes::from(i.to_string()), i), None);
            held.insert(i);
        }
        while m.is_growing() {
            m.insert(Bytes::from("filler"), 0);
            m.remove(b"filler");
        }
        let old_buckets = m.buckets();
        for i in 0..20_000 {
            if m.len() * 8 < old_buckets {
                break;
            }
            assert_eq!(m.remove(i.to_string().as_bytes()), Some(i));
            held.remove(&i);
        }
        m.shrink_gradually();
        let Repr::Table(t) = &m.repr else { unreachable!() };
        let new_buckets = t.table.num_buckets();
        assert!(t.old.is_some() && 4 * new_buckets <= old_buckets, "{new_buckets} buckets from {old_buckets}");
        let (mut writes, mut next, mut picked) = (0, 100_000, false);
        loop {
            let Repr::Table(t) = &m.repr else { unreachable!() };
            let Some(old) = &t.old else { break };
            assert_eq!(old.next, writes * SHRINK_STEP_BUCKETS);
            assert_eq!(t.table.num_buckets(), new_buckets, "the new table grew while the old one moved");
            m.shrink_gradually();
            if writes % 2 == 0 {
                let gone = *held.iter().nth(writes % held.len()).unwrap();
                assert_eq!(m.remove(gone.to_string().as_bytes()), Some(gone));
                held.remove(&gone);
            } else {
                assert_eq!(m.insert(Bytes::from(next.to_string()), next), None);
                held.insert(next);
                next += 1;
            }
            writes += 1;
            assert_eq!(m.len(), held.len());
            assert_eq!(m.iter().len(), held.len());
            if writes == old_buckets / SHRINK_STEP_BUCKETS * 3 / 4 {
                // Three quarters moved: picks draw among the new table's buckets and the old
                // one's last quarter, none of them walking the map.
                let Repr::Table(t) = &m.repr else { unreachable!() };
                let old = t.old.as_ref().unwrap();
                let mut rng = rand::rng();
                let (mut from_old, mut walks) = (0, 0);
                for _ in 0..20_000 {
                    let Some((n, v)) = t.random(&mut rng) else {
                        walks += 1;
                        continue;
                    };
                    assert!(held.contains(v) && n[..] == *v.to_string().as_bytes());
                    from_old += usize::from(old.table.iter().any(|(o, _)| o == n));
                }
                assert_eq!(walks, 0, "picks that fell back to a walk");
                let expected = 20_000 * old.table.len() / held.len();
                assert!(from_old.abs_diff(expected) < 600, "{from_old} picks from the old table, {expected} expected");
                picked = true;
            }
        }
        assert!(picked && writes <= old_buckets / SHRINK_STEP_BUCKETS + 1, "{writes} writes for {old_buckets} buckets");
        assert!(held.iter().all(|k| m.get(k.to_string().as_bytes()) == Some(k)));
        assert_eq!(m.buckets(), new_buckets, "the old table is freed");
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
