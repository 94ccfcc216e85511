//! `KeyTable`: a shard's key → entry map, stored as a hash table of thin pointers to nodes
//! that each hold one key, its entry and, only if the key has one, its expiry register.
//!
//! Why not `HashMap<Key, Entry>`: a hash table keeps its slots inline and grows by doubling,
//! so at a typical 45–85% load each key pays for ~2 slots. With 64-byte slots that was 136
//! bytes per key at 1M keys (measured: 1.54x Redis's RSS); with 8-byte pointer slots it is 17.
//! The key lives inside the node, so a lookup follows one pointer, not two (the second cache
//! miss was the top of a SET profile). A node (`db::node`) is the 32-byte `Entry` (its `Value`
//! is 16 bytes, `db::strbuf`), a length byte and the key at its exact length: 47 bytes for a
//! 14-byte key, jemalloc's 48-byte class; a key with a TTL carries its 24-byte register at the
//! tail (the node is reallocated when the key gains or loses one). See docs/benchmarks.md.
//!
//! Since the register is not in the `Entry`, the table hands out views that carry both
//! (`EntryRef`, `EntryMut`, and `Removed` for what it gives back): whoever needs a key's
//! deadline or its newest write (`last_write`) must hold one, and only `set_expiry` changes
//! a register (through `Shard::set_expiry`, which keeps the expiry index in step).

use hashbrown::hash_table::{Entry as Slot, HashTable};

use super::entry::{Entry, Expiry};
use super::fieldmap::draw_bucket;
use super::hashed::{hash_key, TableKey};
use super::node::Node;
use super::slots::SlotsEnd;
use crate::hlc::Version;

/// A key's entry and its expiry register, borrowed from the table. The only way to read a
/// stored key's register: the `Entry` itself has none (it lives at the node's tail), so a
/// caller that needs the deadline or the newest write (`last_write`) cannot forget it.
#[derive(Clone, Copy)]
pub struct EntryRef<'a> {
    entry: &'a Entry,
    expiry: Option<&'a Expiry>,
}

/// A key's entry to change in place, and its register to read. The register changes only
/// through `Shard::set_expiry` (the table's `set_expiry`), which keeps the expiry index in
/// step and may move the node.
pub struct EntryMut<'a> {
    entry: &'a mut Entry,
    expiry: Option<&'a Expiry>,
}

/// What `KeyTable::get_live_mut` found.
pub enum Live<'a> {
    Found(EntryMut<'a>),
    /// The key was there but dead, and is removed.
    Removed(Removed),
    Missing,
}

/// What `KeyTable::entry` found with its one probe.
pub enum Probed<'a> {
    Found(EntryMut<'a>),
    Vacant(VacantKey<'a>),
}

/// The bucket a missing key's insert takes, found by the probe that found the key missing.
pub struct VacantKey<'a> {
    slot: hashbrown::hash_table::VacantEntry<'a, Node>,
    slots: &'a mut SlotsEnd,
    key: &'a [u8],
}

impl VacantKey<'_> {
    /// The missing key.
    pub fn key(&self) -> &[u8] {
        self.key
    }

    /// Inserts the key with its first entry (and no expiry register).
    pub fn insert(self, entry: Entry) {
        self.slots.note(&self.slot.insert(Node::new(self.key, entry)));
    }

    /// Inserts the key with its first entry and expiry register.
    pub fn insert_expiring(self, entry: Entry, expiry: Expiry) {
        self.slots.note(&self.slot.insert(Node::with_expiry(self.key, entry, expiry)));
    }
}

/// A key's entry and register taken out of the table (`remove`, `insert`'s old entry).
#[derive(Debug)]
pub struct Removed {
    pub entry: Entry,
    pub expiry: Option<Expiry>,
}

/// What every view of a key's state says about its register.
fn deadline_of(expiry: Option<&Expiry>) -> Option<u64> {
    expiry.and_then(Expiry::deadline)
}

fn last_write_of(entry: &Entry, expiry: Option<&Expiry>) -> Version {
    expiry.map_or(Version::ZERO, |e| e.version).max(entry.newest())
}

impl<'a> EntryRef<'a> {
    /// The entry alone, for readers of the value and version.
    pub fn entry(self) -> &'a Entry {
        self.entry
    }

    /// `None` until the key ever had a TTL; afterwards the LWW expiry register.
    pub fn expiry(self) -> Option<&'a Expiry> {
        self.expiry
    }

    /// The deadline in ms, if the key is volatile.
    pub fn deadline(self) -> Option<u64> {
        deadline_of(self.expiry)
    }

    pub fn is_expired(self, now_ms: u64) -> bool {
        self.deadline().is_some_and(|d| d <= now_ms)
    }

    /// The newest version anything the key holds carries, its expiry register included: a
    /// local write stamps above it, so it supersedes everything the writer could read.
    pub fn last_write(self) -> Version {
        last_write_of(self.entry, self.expiry)
    }
}

impl std::ops::Deref for EntryRef<'_> {
    type Target = Entry;
    fn deref(&self) -> &Entry {
        self.entry
    }
}

impl std::fmt::Debug for EntryRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntryRef").field("entry", self.entry).field("expiry", &self.expiry).finish()
    }
}

impl<'a> EntryMut<'a> {
    pub fn into_entry(self) -> &'a mut Entry {
        self.entry
    }

    pub fn into_ref(self) -> EntryRef<'a> {
        EntryRef { entry: self.entry, expiry: self.expiry }
    }

    pub fn as_ref(&self) -> EntryRef<'_> {
        EntryRef { entry: self.entry, expiry: self.expiry }
    }

    pub fn expiry(&self) -> Option<&Expiry> {
        self.expiry
    }

    pub fn deadline(&self) -> Option<u64> {
        deadline_of(self.expiry)
    }

    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.as_ref().is_expired(now_ms)
    }

    pub fn last_write(&self) -> Version {
        last_write_of(self.entry, self.expiry)
    }
}

impl std::ops::Deref for EntryMut<'_> {
    type Target = Entry;
    fn deref(&self) -> &Entry {
        self.entry
    }
}

impl std::ops::DerefMut for EntryMut<'_> {
    fn deref_mut(&mut self) -> &mut Entry {
        self.entry
    }
}

impl Removed {
    pub fn deadline(&self) -> Option<u64> {
        deadline_of(self.expiry.as_ref())
    }
}

fn view(n: &Node) -> EntryRef<'_> {
    let (entry, expiry) = n.parts();
    EntryRef { entry, expiry }
}

fn view_mut(n: &mut Node) -> EntryMut<'_> {
    let (entry, expiry) = n.parts_mut();
    EntryMut { entry, expiry }
}

/// The table takes keys as `TableKey`s: the hash the caller computed (once per command, with
/// the shard) is the one it probes with; a resize rehashes the stored keys with the same
/// function (`hashed::hash_key`), so no node carries its hash (it would cost 8 bytes a key).
#[derive(Default)]
pub struct KeyTable {
    table: HashTable<Node>,
    /// Where the table keeps its control bytes and slots, for `prefetch_slots`.
    slots: SlotsEnd,
}

impl std::fmt::Debug for KeyTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyTable").field("len", &self.table.len()).finish()
    }
}

impl KeyTable {
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    fn node_mut(&mut self, key: TableKey<'_>) -> Option<&mut Node> {
        let k = key.key();
        self.table.find_mut(key.hash(), |n| n.key() == k)
    }

    /// Starts loading the lines a lookup or an insert of `key` reads first, without reading
    /// anything but the table's size: the group of control bytes its probe starts at and the
    /// slots of that group's first 8 buckets, one of which a new key's insert writes
    /// (`SlotsEnd::prefetch` says why that matters). The first of `Store::prefetch`'s three
    /// passes; `prefetch`, then `prefetch_value`, follow. A hint only.
    pub fn prefetch_slots(&self, key: TableKey<'_>) {
        self.slots.prefetch(&self.table, key.hash(), 8);
    }

    /// Starts loading the node `key` most likely has, without reading any node: the first
    /// slot whose hash bits match is taken as the key's (`Store::prefetch`, once
    /// `prefetch_slots` loaded the control bytes and slots this reads). A hint only.
    pub fn prefetch(&self, key: TableKey<'_>) {
        if let Some(node) = self.table.find(key.hash(), |_| true) {
            node.prefetch();
        }
    }

    /// Starts loading the first lines of `key`'s value (`Value::prefetch`: a string's bytes, a
    /// counter, a collection's header), once its node is in the cache (`prefetch`, earlier).
    /// A hint only. Inlined into `Store::prefetch`'s pass: left a call, it cost a `SET` ~20
    /// instructions (callgrind). Returns whether the value is a collection, whose first
    /// elements `prefetch_items` can load once this has loaded its header.
    #[inline]
    pub fn prefetch_value(&self, key: TableKey<'_>) -> bool {
        match self.get(key) {
            Some(found) => {
                found.value.prefetch();
                found.value.is_collection()
            }
            None => false,
        }
    }

    /// Starts loading a collection's first elements (`Value::prefetch_items`), once
    /// `prefetch_value` loaded its header. A hint only.
    pub fn prefetch_items(&self, key: TableKey<'_>) {
        if let Some(found) = self.get(key) {
            found.value.prefetch_items();
        }
    }

    #[inline]
    pub fn get(&self, key: TableKey<'_>) -> Option<EntryRef<'_>> {
        let k = key.key();
        self.table.find(key.hash(), |n| n.key() == k).map(view)
    }

    #[inline]
    pub fn get_mut(&mut self, key: TableKey<'_>) -> Option<EntryMut<'_>> {
        self.node_mut(key).map(view_mut)
    }

    pub fn contains_key(&self, key: TableKey<'_>) -> bool {
        self.get(key).is_some()
    }

    /// Inserts or replaces; the key's register goes with the entry it replaces (the new entry
    /// has none). Returns the previous entry and register.
    pub fn insert(&mut self, key: TableKey<'_>, entry: Entry) -> Option<Removed> {
        let k = key.key();
        self.make_room();
        match self.table.entry(key.hash(), |n| n.key() == k, |n| hash_key(n.key())) {
            Slot::Occupied(mut slot) => {
                let node = slot.get_mut();
                let expiry = node.set_expiry(None);
                let entry = std::mem::replace(node.parts_mut().0, entry);
                Some(Removed { entry, expiry })
            }
            Slot::Vacant(slot) => {
                self.slots.note(&slot.insert(Node::new(k, entry)));
                None
            }
        }
    }

    /// The key's entry, or the bucket its insert takes: one probe where a lookup and then an
    /// insert took two (a write that creates its key: most of a loading `SET` load's, on the
    /// node that takes it and on every peer that merges it).
    pub fn entry<'a>(&'a mut self, key: TableKey<'a>) -> Probed<'a> {
        let k = key.key();
        if self.table.len() == self.table.capacity() {
            // Full: grown here for a new key, as `insert` grows it (`make_room`); hashbrown's
            // `entry` would grow it even for a key it holds, and an overwrite never grows it.
            if self.contains_key(key) {
                return Probed::Found(self.get_mut(key).expect("the key was just found"));
            }
            self.grow();
        }
        match self.table.entry(key.hash(), |n| n.key() == k, |n| hash_key(n.key())) {
            Slot::Occupied(slot) => Probed::Found(view_mut(slot.into_mut())),
            Slot::Vacant(slot) => Probed::Vacant(VacantKey { slot, slots: &mut self.slots, key: k }),
        }
    }

    /// Grows a full table before a probe that may insert: hashbrown's `entry` would grow it
    /// itself, the slow way (`grow`).
    fn make_room(&mut self) {
        if self.table.len() == self.table.capacity() {
            self.grow();
        }
    }

    /// Moves the nodes into a table with room for twice as many, before an insert makes
    /// hashbrown grow this one. hashbrown rehashes in bucket order, reading each node's key to
    /// hash it and waiting for that read before the next: one cache miss after another, ~5% of
    /// the server's time under a `SET` load that fills 632k new keys (docs/benchmarks.md, "The
    /// key table grows with its reads ahead"). Here each node is loaded `AHEAD` nodes before it
    /// is hashed, so the misses overlap. The two tables are held at once, as hashbrown holds
    /// them while it resizes.
    #[cold]
    fn grow(&mut self) {
        const AHEAD: usize = 16;
        // A shard's first table: room for its first few keys, as hashbrown's smallest has.
        const FIRST: usize = 3;
        let old = std::mem::take(&mut self.table);
        let mut bigger = HashTable::with_capacity((old.len() * 2).max(FIRST));
        // The new table's layout is learnt at the next insert of a new key (the one this
        // growth is for, mostly).
        self.slots.forget();
        let mut place = |node: Node| {
            bigger.insert_unique(hash_key(node.key()), node, |n| hash_key(n.key()));
        };
        // The nodes waiting for their keys to load, in a ring: node `i` waits at `i % AHEAD`
        // and is placed when node `i + AHEAD` takes its place (a `VecDeque`'s bookkeeping
        // cost a node moved ~10 instructions more, callgrind).
        let mut ahead: [Option<Node>; AHEAD] = Default::default();
        for (i, node) in old.into_iter().enumerate() {
            node.prefetch_key();
            if let Some(loaded) = ahead[i % AHEAD].replace(node) {
                place(loaded);
            }
        }
        ahead.into_iter().flatten().for_each(place);
        self.table = bigger;
    }

    /// Sets or removes a key's register (the node moves when it gains or loses one); returns
    /// the old one, or `None` if the key is missing (then nothing changes).
    pub fn set_expiry(&mut self, key: TableKey<'_>, expiry: Option<Expiry>) -> Option<Option<Expiry>> {
        Some(self.node_mut(key)?.set_expiry(expiry))
    }

    /// The key's entry to change, unless `dead` says it must go: then it is removed and
    /// returned. One probe either way (a lazy expiry's check and the read that follows it).
    pub fn get_live_mut(&mut self, key: TableKey<'_>, dead: impl FnOnce(EntryRef<'_>) -> bool) -> Live<'_> {
        let k = key.key();
        match self.table.find_entry(key.hash(), |n| n.key() == k) {
            Err(_) => Live::Missing,
            Ok(slot) if dead(view(slot.get())) => {
                let (entry, expiry) = slot.remove().0.into_parts();
                Live::Removed(Removed { entry, expiry })
            }
            Ok(slot) => Live::Found(view_mut(slot.into_mut())),
        }
    }

    pub fn remove(&mut self, key: TableKey<'_>) -> Option<Removed> {
        let k = key.key();
        match self.table.find_entry(key.hash(), |n| n.key() == k) {
            Ok(slot) => {
                let (entry, expiry) = slot.remove().0.into_parts();
                Some(Removed { entry, expiry })
            }
            Err(_) => None,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], EntryRef<'_>)> {
        self.table.iter().map(|n| (n.key(), view(n)))
    }

    /// The keys of table hash `hash` whose deadline is `deadline_ms` (what one pair of the
    /// shard's `ExpiryIndex` stands for): the probe's candidates are checked by their hash, as
    /// hashbrown matches only seven of its bits.
    pub fn expiring_at(&self, hash: u64, deadline_ms: u64) -> impl Iterator<Item = &[u8]> {
        self.table.iter_hash(hash).filter(move |n| deadline_of(n.expiry()) == Some(deadline_ms) && hash_key(n.key()) == hash).map(Node::key)
    }

    /// A key at random, each with the same chance, or `None` when the draws found only empty
    /// buckets (`fieldmap::draw_bucket`).
    pub fn draw(&self, rng: &mut impl rand::Rng) -> Option<(&[u8], EntryRef<'_>)> {
        draw_bucket(&self.table, rng).map(|n| (n.key(), view(n)))
    }

    pub fn entries_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        self.table.iter_mut().map(|n| n.parts_mut().0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::hashed::KeyLike;
    use crate::db::Value;

    fn hk<K: KeyLike + ?Sized>(k: &K) -> TableKey<'_> {
        k.table_key()
    }

    fn v(n: u64) -> Version {
        Version { hlc: n, node: 1 }
    }

    #[test]
    fn insert_replace_remove() {
        let mut t = KeyTable::default();
        assert!(t.insert(hk(b"a"), Entry::new(Value::Int(1), Version::ZERO)).is_none());
        assert!(t.insert(hk(b"a"), Entry::new(Value::Int(2), Version::ZERO)).is_some());
        assert!(matches!(t.get(hk(b"a")).map(|e| &e.entry().value), Some(Value::Int(2))));
        assert_eq!(t.len(), 1);
        assert!(t.remove(hk(b"a")).is_some());
        assert!(t.is_empty());
        let long = vec![b'k'; 100];
        t.insert(hk(&long), Entry::new(Value::Int(3), Version::ZERO));
        assert!(t.get(hk(&long)).is_some() && t.get(hk(&long[..99])).is_none());
    }

    /// After every insert of a new key, through the table's growths, `slots` locates it: the
    /// table notes its layout where `prefetch_slots` needs it.
    #[test]
    fn the_table_knows_where_its_new_keys_lie() {
        let mut t = KeyTable::default();
        for i in 0..5_000 {
            let k = format!("key:{i}");
            let entry = Entry::new(Value::Int(i), Version::ZERO);
            // Both ways a key is inserted: `insert`, and `entry`'s vacant bucket.
            if i % 2 == 0 {
                t.insert(hk(k.as_bytes()), entry);
            } else {
                let Probed::Vacant(vacant) = t.entry(hk(k.as_bytes())) else { panic!("{k} is new") };
                vacant.insert(entry);
            }
            let key = hk(k.as_bytes());
            assert!(t.slots.locates(&t.table, key.hash(), |n| n.key() == k.as_bytes()), "{k}");
        }
    }

    /// A full table grows for a new key's `entry`, never for one it holds (hashbrown's own
    /// `entry` grows a full table either way).
    #[test]
    fn an_overwrite_never_grows_a_full_table() {
        let mut t = KeyTable::default();
        let mut i = 0;
        while t.len() < 100 || t.len() < t.table.capacity() {
            t.insert(hk(format!("key:{i}").as_bytes()), Entry::new(Value::Int(i), Version::ZERO));
            i += 1;
        }
        let full = t.table.capacity();
        for j in [0, i / 2, i - 1] {
            let k = format!("key:{j}");
            let Probed::Found(mut e) = t.entry(hk(k.as_bytes())) else { panic!("{k} is there") };
            e.value = Value::Int(-1);
            assert_eq!(t.table.capacity(), full, "the overwrite of key:{j} grew the table");
        }
        let Probed::Vacant(vacant) = t.entry(hk(b"new")) else { panic!("new is new") };
        vacant.insert(Entry::new(Value::Int(0), Version::ZERO));
        assert!(t.table.capacity() > full);
        assert_eq!(t.len(), i as usize + 1);
        assert!(matches!(t.get(hk(b"key:0")).map(|e| &e.entry().value), Some(Value::Int(-1))));
    }

    #[test]
    fn a_draw_finds_every_key_about_equally_often() {
        let mut t = KeyTable::default();
        assert!(t.draw(&mut rand::rng()).is_none());
        let keys: Vec<String> = (0..50).map(|i| format!("key:{i}")).collect();
        for (i, k) in keys.iter().enumerate() {
            t.insert(hk(k.as_bytes()), Entry::new(Value::Int(i as i64), Version::ZERO));
        }
        let mut seen = std::collections::HashMap::new();
        for _ in 0..50_000 {
            let (key, entry) = t.draw(&mut rand::rng()).expect("a 64-bucket table half full");
            assert!(matches!(entry.entry().value, Value::Int(i) if keys[i as usize].as_bytes() == key));
            *seen.entry(key.to_vec()).or_insert(0) += 1;
        }
        // 1,000 expected each, standard deviation 31: within ±20% is six deviations.
        assert_eq!(seen.len(), 50);
        assert!(seen.values().all(|&n| (800..=1200).contains(&n)), "{seen:?}");
    }

    #[test]
    fn the_register_is_read_with_the_entry_and_goes_with_it() {
        let mut t = KeyTable::default();
        let ttl = Expiry { deadline_ms: 1000, version: v(5) };
        assert_eq!(t.set_expiry(hk(b"k"), Some(ttl)), None, "a missing key takes no register");
        t.insert(hk(b"k"), Entry::new(Value::Int(1), v(2)));
        assert_eq!(t.set_expiry(hk(b"k"), Some(ttl)), Some(None));
        let e = t.get(hk(b"k")).unwrap();
        assert_eq!((e.expiry(), e.deadline(), e.last_write()), (Some(&ttl), Some(1000), v(5)));
        assert!(e.is_expired(1000) && !e.is_expired(999));
        // A persistent register (deadline 0) is still a register, with a version.
        t.set_expiry(hk(b"k"), Some(Expiry { deadline_ms: 0, version: v(6) }));
        let e = t.get_mut(hk(b"k")).unwrap();
        assert_eq!((e.deadline(), e.last_write(), e.is_expired(u64::MAX)), (None, v(6), false));
        // Replacing the entry drops the register, which comes back with the old entry.
        let old = t.insert(hk(b"k"), Entry::new(Value::Int(2), v(7))).unwrap();
        assert_eq!(old.expiry.map(|e| e.version), Some(v(6)));
        assert_eq!(t.get(hk(b"k")).unwrap().expiry(), None);
        t.set_expiry(hk(b"k"), Some(ttl));
        let removed = t.remove(hk(b"k")).unwrap();
        assert_eq!((removed.expiry, removed.deadline(), removed.entry.version()), (Some(ttl), Some(1000), v(7)));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(Vec<u8>, Vec<u8>),
        /// Writes the value through `entry`: in place if the key is there, else inserted.
        Write(Vec<u8>, Vec<u8>),
        Remove(Vec<u8>),
        Append(Vec<u8>, u8),
        /// Sets (`Some`) or removes the register; a deadline of 0 is a persistent register.
        Expire(Vec<u8>, Option<u64>),
        /// Changes the version through `get_mut`, as a write does.
        Stamp(Vec<u8>, u64),
    }

    fn value_bytes(entry: &Entry) -> Vec<u8> {
        match &entry.value {
            Value::Str(s) => s.to_vec(),
            Value::Int(n) => n.to_string().into_bytes(),
            other => panic!("only strings are stored here: {other:?}"),
        }
    }

    /// What the model holds per key: the value, the version and the register.
    type Held = (Vec<u8>, Version, Option<Expiry>);

    fn held(entry: &Entry, expiry: Option<Expiry>) -> Held {
        (value_bytes(entry), entry.version(), expiry)
    }

    proptest::proptest! {
        /// The table against a `HashMap` model: keys of many lengths (empty, short, at the
        /// node's one-byte length limit and past it, long), empty, integer and heap string
        /// values, enough keys to resize, values and versions edited in place, registers set,
        /// changed and removed (the node moves), replaced and removed with their entries.
        #[test]
        fn behaves_like_a_hash_map(ops in proptest::collection::vec(op(), 1..400)) {
            let mut t = KeyTable::default();
            let mut model = std::collections::HashMap::<Vec<u8>, Held>::new();
            let mut version = 0;
            for op in ops {
                version += 1;
                match op {
                    Op::Insert(k, val) => {
                        let old = t.insert(hk(&k), Entry::new(Value::string(&val), v(version))).map(|r| held(&r.entry, r.expiry));
                        let expected = model.insert(k.clone(), (val.clone(), v(version), None));
                        // `Value::string` keeps canonical integers as `Int`, which print back the same.
                        proptest::prop_assert_eq!(old, expected);
                    }
                    Op::Write(k, val) => {
                        // One probe (`entry`), as a SET does: a key there is written in place
                        // (its register kept), a missing one inserted where the probe found room.
                        let found = match t.entry(hk(&k)) {
                            Probed::Found(mut e) => {
                                e.value = Value::string(&val);
                                e.set_version(v(version));
                                true
                            }
                            Probed::Vacant(vacant) => {
                                vacant.insert(Entry::new(Value::string(&val), v(version)));
                                false
                            }
                        };
                        proptest::prop_assert_eq!(found, model.contains_key(&k));
                        let held = model.entry(k).or_insert((Vec::new(), Version::ZERO, None));
                        (held.0, held.1) = (val, v(version));
                    }
                    Op::Remove(k) => {
                        proptest::prop_assert_eq!(t.remove(hk(&k)).map(|r| held(&r.entry, r.expiry)), model.remove(&k));
                    }
                    Op::Append(k, b) => {
                        // An in-place edit through `get_mut`, as APPEND does.
                        if let Some(mut e) = t.get_mut(hk(&k)) {
                            let mut bytes = value_bytes(&e);
                            bytes.push(b);
                            e.value = Value::Str(bytes.clone().into());
                            model.get_mut(&k).unwrap().0 = bytes;
                        } else {
                            proptest::prop_assert!(!model.contains_key(&k));
                        }
                    }
                    Op::Expire(k, deadline) => {
                        let register = deadline.map(|deadline_ms| Expiry { deadline_ms, version: v(version) });
                        let old = t.set_expiry(hk(&k), register);
                        let expected = model.get_mut(&k).map(|h| std::mem::replace(&mut h.2, register));
                        proptest::prop_assert_eq!(old, expected);
                    }
                    Op::Stamp(k, hlc) => {
                        if let Some(mut e) = t.get_mut(hk(&k)) {
                            e.set_version(v(hlc));
                            model.get_mut(&k).unwrap().1 = v(hlc);
                        }
                    }
                }
                proptest::prop_assert_eq!(t.len(), model.len());
            }
            for (k, h) in &model {
                let got = t.get(hk(k)).map(|e| held(e.entry(), e.expiry().copied()));
                proptest::prop_assert_eq!(got.as_ref(), Some(h));
                let deadline = h.2.map(|e| e.deadline_ms).filter(|&d| d != 0);
                proptest::prop_assert_eq!(t.get(hk(k)).and_then(EntryRef::deadline), deadline);
                proptest::prop_assert_eq!(t.get_mut(hk(k)).map(|e| e.last_write()), Some(h.1.max(h.2.map_or(Version::ZERO, |e| e.version))));
            }
            let mut listed: Vec<(Vec<u8>, Held)> = t.iter().map(|(k, e)| (k.to_vec(), held(e.entry(), e.expiry().copied()))).collect();
            listed.sort_by(|a, b| a.0.cmp(&b.0));
            let mut expected: Vec<(Vec<u8>, Held)> = model.into_iter().collect();
            expected.sort_by(|a, b| a.0.cmp(&b.0));
            proptest::prop_assert_eq!(listed, expected);
            for e in t.entries_mut() {
                e.access = 7;
            }
            proptest::prop_assert!(t.iter().all(|(_, e)| e.access == 7));
        }
    }

    fn key() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        // Few keys of each length (so operations meet): short ones, lengths around the
        // one-byte length limit (126, 127), and long ones.
        prop_oneof![
            3 => (0u8..40).prop_map(|i| format!("k{i}").into_bytes()),
            1 => Just(Vec::new()),
            1 => (0u8..4, 0usize..24).prop_map(|(i, len)| vec![b'a' + i; len]),
            1 => (0u8..4, 124usize..130).prop_map(|(i, len)| vec![b'a' + i; len]),
            1 => (0u8..4, 0usize..3).prop_map(|(i, n)| vec![b'a' + i; 200 + n * 150]),
        ]
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let value = prop_oneof![Just(Vec::new()), any::<i64>().prop_map(|n| n.to_string().into_bytes()), proptest::collection::vec(any::<u8>(), 0..200),];
        let deadline = prop_oneof![Just(None), Just(Some(0)), (1u64..1000).prop_map(Some)];
        prop_oneof![
            4 => (key(), value.clone()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => (key(), value).prop_map(|(k, v)| Op::Write(k, v)),
            2 => key().prop_map(Op::Remove),
            1 => (key(), any::<u8>()).prop_map(|(k, b)| Op::Append(k, b)),
            3 => (key(), deadline).prop_map(|(k, d)| Op::Expire(k, d)),
            1 => (key(), 0u64..1000).prop_map(|(k, n)| Op::Stamp(k, n)),
        ]
    }
}
