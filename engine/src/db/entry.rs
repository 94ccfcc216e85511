//! What a key holds: its value, the version of its last whole-key write, and its expiry
//! register. Collections version each field or member, so replication (DESIGN.md, Merge
//! semantics) can merge them per field without changing this layout.

use std::collections::VecDeque;

use bytes::Bytes;

use super::effect::{ElementKind, ElementRef, Elements, Held};
use super::field_tombstones::FieldTombstones;
use super::lattice::{merge_by_held, merge_elements, ElementMap, Merge};
use super::zset::SortedSet;
use crate::hlc::Version;

pub type Key = Box<[u8]>;
use super::fieldmap::SMALL_MAX;
pub use super::fieldmap::{FieldMap, Name, NameArg, SlotHint};

/// Gives a map's memory back once at most an eighth of its buckets are used, as Redis shrinks a
/// dict under 10% full: a map never shrinks by itself, so a collection emptied down to a few
/// elements by deletes or pops kept the size of its peak. A table left with half of
/// `SMALL_MAX` elements or fewer becomes a vector again (at half, so that a map at the edge
/// does not switch at every insert and remove). Run after every edit (`Ctx::finish`) and every
/// merge (`repl::merge::fields`) of a collection. A big table shrinks a step per write, as it
/// grows (`FieldMap::shrink_gradually`): what is left moves into a table about a quarter the
/// size over the next writes, not in the one that found it sparse. Buckets, not `capacity()`:
/// hashbrown's capacity is the elements plus the free slots a table can still fill, and a
/// removal that leaves a tombstone frees none, so a full table emptied by removals reports a
/// capacity near its length and was kept at its peak (a 2,048-bucket hash shrunk at 59
/// fields, not 255; a 16-bucket one never).
///
/// Only a removal makes a map sparse or few, so a map that lost no element since the last look
/// is not looked at again (`FieldMap::may_be_sparse`): most writes only add or change.
#[inline]
pub fn shrink_if_sparse<V>(map: &mut FieldMap<V>) {
    if map.may_be_sparse() {
        shrink_sparse(map);
    }
}

fn shrink_sparse<V>(map: &mut FieldMap<V>) {
    let sparse = map.buckets() > 64 && map.buckets() > 8 * map.len();
    let few = !map.is_small() && map.len() <= SMALL_MAX / 2;
    if few {
        map.shrink_to_fit();
    } else if sparse {
        map.shrink_gradually();
    }
    map.sparse_checked();
}

/// One key's state. The version is stored as its two halves beside the access clock so the
/// entry packs into 32 bytes; the key and its expiry register sit beside it in the shard
/// table's node (`db::node`), so the register is read through the table's views
/// (`EntryRef`/`EntryMut`: `expiry`, `deadline`, `is_expired`, `last_write`).
#[derive(Debug, Clone)]
pub struct Entry {
    pub value: Value,
    hlc: u64,
    node: crate::hlc::NodeId,
    /// For eviction: seconds of the LRU clock, or a log counter and decay time under LFU
    /// (see `db::evict`).
    pub access: u32,
}

/// The expiry register: an absolute deadline (0 = persistent) and the version that set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry {
    pub deadline_ms: u64,
    pub version: Version,
}

impl Expiry {
    /// The deadline, if the register holds one (0 says the key is persistent).
    pub fn deadline(&self) -> Option<u64> {
        Some(self.deadline_ms).filter(|&d| d != 0)
    }
}

/// The expiry register is LWW: the newer version's deadline wins; at one version the held
/// register stays (a version names one write, so it is the same deadline).
///
/// Laws: the maximum by version, so commutative, associative and idempotent on registers
/// where a version names one deadline (`tests::the_expiry_register_is_a_lattice`). A key
/// without a register is `None`, the bottom (`Merge for Option`).
impl Merge for Expiry {
    fn merge(&mut self, other: &Expiry) -> bool {
        let changed = other.version > self.version;
        if changed {
            *self = *other;
        }
        changed
    }
}

/// The LWW register of a whole value — a string's bytes, a list's items — and the version
/// that wrote it. The key layer (`repl::merge`) views what a key holds, and a write that meets
/// it, as registers of their types (`Register<Kind>`, borrowed from the entry and the effect),
/// so "which whole value wins" is defined once, here (`beats`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Register<T> {
    pub value: T,
    pub version: Version,
}

/// What orders two whole values written at one version: their type (docs/merge.md, "two
/// types at one version"). A correct mesh never writes two values at one version; a faulty
/// peer can, and the order keeps the merge a lattice on that input too.
pub trait TieRank {
    fn tie_rank(&self) -> u8;
}

/// string (counters and HLLs are strings) < list < hash < set < sorted set: arbitrary but
/// fixed, so every replica keeps the same one.
impl TieRank for Kind {
    fn tie_rank(&self) -> u8 {
        match self {
            Kind::String => 1,
            Kind::List => 2,
            Kind::Hash => 3,
            Kind::Set => 4,
            Kind::ZSet => 5,
        }
    }
}

/// A write of no type (a delete, a key tombstone): below every type at one version.
impl TieRank for Option<Kind> {
    fn tie_rank(&self) -> u8 {
        self.as_ref().map_or(0, Kind::tie_rank)
    }
}

impl<T: TieRank> Register<T> {
    /// The register's rule, the one definition of which whole value wins: the newer version;
    /// at one version the higher `tie_rank`; of the same rank (the same type) the held value
    /// stays (`false`: a version names one write).
    pub fn beats<U: TieRank>(&self, held: &Register<U>) -> bool {
        (self.version, self.value.tie_rank()) > (held.version, held.value.tie_rank())
    }

    /// What this write kills of a value of `other`'s type, whether it wins or loses (pass it
    /// to a `clear_older` or a collection's `cleared`): everything older than its version, and
    /// what is at its version too when it beats `other` there (the tie rule), recorded as the
    /// version just after it.
    pub fn kills_below(&self, other: &impl TieRank) -> Version {
        let v = self.version;
        if self.value.tie_rank() > other.tie_rank() {
            match v.node.checked_add(1) {
                Some(node) => Version { hlc: v.hlc, node },
                None => Version { hlc: v.hlc.saturating_add(1), node: 0 },
            }
        } else {
            v
        }
    }
}

/// The newer version's value wins; at one version the higher-ranked type (`beats`), and of
/// one type the held value stays (a version names one write).
///
/// Laws: the maximum by `(version, tie_rank)`, a total preorder, so commutative, associative
/// and idempotent where a version and type name one value
/// (`tests::the_register_is_a_lattice`, two types at one version included).
impl<T: Clone + TieRank> Merge for Register<T> {
    fn merge(&mut self, other: &Register<T>) -> bool {
        let changed = other.beats(self);
        if changed {
            *self = other.clone();
        }
        changed
    }
}

#[derive(Debug, Clone)]
pub enum Value {
    /// A string's bytes (12 bytes: `Value` stays 16).
    Str(super::strbuf::StrBuf),
    /// Integer fast path for strings that are canonical decimal integers.
    Int(i64),
    Hash(Box<Collection<Field>>),
    Set(Box<Collection<Version>>),
    ZSet(Box<SortedSet>),
    List(Box<ListValue>),
    /// A string that `INCR` and friends keep as a PN-counter (see `db::counter`).
    Counter(Box<super::counter::Counter>),
}

/// A list's items and its key-level tombstone (lists replicate as whole values). Items are
/// kept as names are (`Name`: up to 22 bytes inside the list's own buffer, longer ones in an
/// allocation of exactly their length), where a `Bytes` took 32 bytes of the buffer and an
/// allocation of its own for every item (docs/benchmarks.md, "Hash values and list items
/// inside their collections").
///
/// Reads go through `Deref`; any mutable access (`DerefMut`) marks the list changed, so an
/// edit that changes it is replicated (`Ctx::edit`). Commands check before they touch.
#[derive(Debug, Clone, Default)]
pub struct ListValue {
    items: VecDeque<Name>,
    pub cleared: Version,
    changed: bool,
}

impl ListValue {
    /// Starts loading the line of the head item (where `LPUSH` and `LPOP` work).
    pub fn prefetch_items(&self) {
        if let Some(head) = self.items.front() {
            super::node::prefetch(std::ptr::from_ref(head).cast());
        }
    }

    pub fn new(items: VecDeque<Name>) -> ListValue {
        ListValue { items, cleared: Version::ZERO, changed: false }
    }

    /// Whether it changed since the last call.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    pub fn changed(&self) -> bool {
        self.changed
    }
}

impl std::ops::Deref for ListValue {
    type Target = VecDeque<Name>;
    fn deref(&self) -> &VecDeque<Name> {
        &self.items
    }
}

impl std::ops::DerefMut for ListValue {
    fn deref_mut(&mut self) -> &mut VecDeque<Name> {
        self.changed = true;
        &mut self.items
    }
}

/// A hash's fields or a set's members, plus what replication needs to merge them: the
/// versions of removed names (tombstones), the names changed since the last effect was
/// emitted, and the key-level tombstone everything older than which is dead.
///
/// Reads go through `Deref` to the live map; every change goes through `insert`/`remove`/
/// `drain`, which note the name, so a command cannot change a collection without its effect
/// being replicated (see `Ctx::written`).
#[derive(Debug, Clone)]
pub struct Collection<V> {
    live: FieldMap<V>,
    pub removed: FieldTombstones,
    touched: Changes,
    pub cleared: Version,
}

impl<V> Default for Collection<V> {
    fn default() -> Self {
        Collection { live: FieldMap::default(), removed: FieldTombstones::default(), touched: Changes::default(), cleared: Version::ZERO }
    }
}

/// What in-place edits changed in a collection since its last effect (`Ctx::finish`): whether
/// anything did and, for the effect to name them, which names. Standalone no effect is made,
/// so an edit turns the naming off for its length (`Editable::name_changes`): a clone of every
/// name it touched (a reference count, and an allocation the first time) was ~10% of HSET.
/// Every hash, set and sorted set holds one for its life and the names only between an edit
/// and its effect, so the list is boxed: 16 bytes here, not 32. With them, where the last
/// write put its element (`SlotHint`), so that the effect reads that element's state without
/// looking it up again (`Collection::settled`).
#[derive(Debug, Clone)]
pub struct Changes {
    names: Option<Box<Names>>,
    any: bool,
    naming: bool,
    last_written: SlotHint,
}

impl Default for Changes {
    fn default() -> Self {
        Changes { names: None, any: false, naming: true, last_written: SlotHint::NONE }
    }
}

impl Changes {
    pub fn note(&mut self, name: &[u8]) {
        // A `Name`: a short one is copied into the list itself, with no allocation of its own
        // (as a `Bytes` each was one, ~250 instructions of an origin's `HSET` with its free).
        self.note_with(|| Name::from(name));
    }

    /// `note` of a name the caller owns (a removed element's), kept as it is.
    pub fn note_owned(&mut self, name: Name) {
        self.note_with(|| name);
    }

    fn note_with(&mut self, name: impl FnOnce() -> Name) {
        self.any = true;
        if self.naming {
            self.names.get_or_insert_with(|| SPARE_NAMES.take().unwrap_or_default()).push(name());
        }
    }

    pub fn any(&self) -> bool {
        self.any
    }

    /// Notes where the element a write just noted is (`FieldMap::slot_hinted`).
    pub fn wrote_at(&mut self, hint: SlotHint) {
        self.last_written = hint;
    }

    /// Where the last write put its element, forgotten once read.
    pub fn take_last_written(&mut self) -> SlotHint {
        std::mem::replace(&mut self.last_written, SlotHint::NONE)
    }

    /// Whether the next changes are named (on again after every `take`).
    pub fn set_naming(&mut self, on: bool) {
        self.naming = on;
    }

    /// The names changed since the last call, sorted and deduplicated (none if naming was
    /// off); starts over, naming on.
    pub fn take(&mut self) -> Names {
        let mut names = match self.names.take() {
            Some(mut boxed) => {
                let names = std::mem::take(&mut *boxed);
                // `replace`, not `set`: `LocalKey::set` goes through the thread-local's
                // initialiser (~30 instructions more, callgrind).
                drop(SPARE_NAMES.replace(Some(boxed)));
                names
            }
            None => Names::new(),
        };
        // Most edits name one element, or none (standalone): nothing to sort.
        if names.len() > 1 {
            names.sort_unstable();
            names.dedup();
        }
        self.any = false;
        self.naming = true;
        names
    }
}

/// The names an edit changed (`Changes`): most edits change one, kept in the list's own
/// allocation (as a `Vec` in its box, it was two allocations an edit).
pub type Names = smallvec::SmallVec<[Name; 1]>;

thread_local! {
    /// This thread's spare box for an edit's names: `Changes::take` leaves the box it emptied
    /// here, and the next edit to name an element takes it. An origin's every edit allocated a
    /// box and freed it (~100 instructions of an `HSET`'s, callgrind).
    static SPARE_NAMES: std::cell::Cell<Option<Box<Names>>> = const { std::cell::Cell::new(None) };
}

// Most keys of a collection type hold a few elements: keep the per-collection part in the
// allocator's 80-byte class (it was 128 before small maps were vectors and this list boxed).
const _: () = assert!(std::mem::size_of::<Collection<Field>>() <= 80);
const _: () = assert!(std::mem::size_of::<Collection<Version>>() <= 80);

impl<V> std::ops::Deref for Collection<V> {
    type Target = FieldMap<V>;
    fn deref(&self) -> &FieldMap<V> {
        &self.live
    }
}

impl<N: NameArg, V> FromIterator<(N, V)> for Collection<V> {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        Collection { live: iter.into_iter().collect(), ..Collection::default() }
    }
}

impl<V> Collection<V> {
    // Inline into the commands' loops, where the compiler stopped putting it once `element_states`
    // changed (out of line: ~50 instructions of its own per `HSET`, callgrind).
    #[inline]
    pub fn insert(&mut self, name: impl NameArg, value: V) -> Option<V> {
        self.removed.remove(name.as_ref());
        self.touched.note(name.as_ref());
        let (held, unused, hint) = self.live.slot_hinted(name, value);
        self.touched.wrote_at(hint);
        unused.map(|value| std::mem::replace(held, value))
    }

    /// `insert` of a name given as bytes (a command's argument, by any reference to them),
    /// copied only if the collection does not hold it yet (`FieldMap::insert_copied`).
    pub fn insert_copied(&mut self, name: &[u8], value: V) -> Option<V> {
        self.insert(name, value)
    }

    /// Adds `name` with `value` if the collection does not hold it; returns whether it did.
    /// A name it holds is left as it is and not noted: no change to replicate or count
    /// (a standalone `SADD` of a member the set holds writes nothing, as in Redis).
    pub fn insert_if_absent(&mut self, name: &[u8], value: V) -> bool {
        let (_, unused, hint) = self.live.slot_hinted(name, value);
        let added = unused.is_none();
        if added {
            self.removed.remove(name);
            self.touched.note(name);
            self.touched.wrote_at(hint);
        }
        added
    }

    pub fn remove(&mut self, name: &[u8]) -> Option<V> {
        let (name, old) = self.live.remove_entry(name)?;
        self.touched.note_owned(name);
        Some(old)
    }

    pub fn drain(&mut self) -> Vec<(Name, V)> {
        let all: Vec<(Name, V)> = self.live.drain().collect();
        all.iter().for_each(|(k, _)| self.touched.note(k));
        all
    }

    /// Whether a name changed since the last `take_touched`.
    pub fn changed(&self) -> bool {
        self.touched.any()
    }

    /// Names changed since the last call (`Changes::take`); the map shrinks if the changes
    /// left it sparse.
    pub fn take_touched(&mut self) -> Names {
        self.shrink_if_sparse();
        self.touched.take()
    }

    /// `shrink_if_sparse` of the live map (after every edit and every merge of the collection).
    pub fn shrink_if_sparse(&mut self) {
        shrink_if_sparse(&mut self.live);
    }

    /// Whether this edit's changes are named (`Changes`).
    pub fn name_changes(&mut self, on: bool) {
        self.touched.set_naming(on);
    }

    /// Replication: sets a name without noting it as a local change.
    pub fn merge_insert(&mut self, name: &[u8], value: V) {
        self.removed.remove(name);
        self.live.insert(name, value);
    }

    /// Replication: removes a name (recording its tombstone) without noting a local change.
    pub fn merge_remove(&mut self, name: &[u8], version: Version) {
        self.live.remove(name);
        self.removed.insert(name, version);
    }

    pub fn live_mut(&mut self) -> &mut FieldMap<V> {
        &mut self.live
    }

    /// `FieldMap::step_growth` of its elements and of its tombstones.
    pub fn step_growth(&mut self) {
        self.live.step_growth();
        self.removed.step_growth();
    }
}

/// The states of `names` for an effect, one lookup each (`FieldMap::get_hinted`, `hint` where
/// the edit's last write put its element): a live one's as `live` holds it, any other a
/// tombstone at the version `absent` gives it.
pub(super) fn element_states<'a, V: ElementValue>(
    live: &'a FieldMap<V>,
    names: &'a [Name],
    hint: SlotHint,
    mut absent: impl FnMut(&[u8]) -> Version,
) -> Elements<'a> {
    let mut state = |name: &'a Name| match live.get_hinted(hint, name) {
        Some(value) => ElementRef { name, held: value.held(), version: value.version() },
        None => ElementRef { name, held: Held::Removed, version: absent(name) },
    };
    let states = match names {
        // One name (most edits): made inline whole, where `collect`'s general extend cost an
        // origin's `HSET` ~80 instructions more (callgrind).
        [only] => smallvec::SmallVec::from_buf([state(only)]),
        names => names.iter().map(state).collect(),
    };
    Elements { kind: V::KIND, states }
}

impl<V: ElementValue> Collection<V> {
    /// The states of `names` (`element_states`): a name it does not hold is a tombstone at its
    /// removal's version, or at `cleared` when it has none.
    pub fn states_of<'a>(&'a self, names: &'a [Name]) -> Elements<'a> {
        element_states(&self.live, names, SlotHint::NONE, |name| self.removed.get(name).copied().unwrap_or(self.cleared))
    }

    /// The states of `names`, which an edit at `version` changed, for its effect
    /// (`ctx::settle`): one it does not hold was removed at `version`, and its tombstone is
    /// recorded here. One lookup a name for both: recording the tombstones and then writing
    /// the effect looked each name up twice (~200 instructions of an origin's `HSET`).
    pub fn settled<'a>(&'a mut self, names: &'a [Name], version: Version) -> Elements<'a> {
        let hint = self.touched.take_last_written();
        let removed = &mut self.removed;
        element_states(&self.live, names, hint, |name| {
            removed.insert(name, version);
            version
        })
    }

    /// `ElementMap::merge_element` of a hash's field or a set's member: a live state probes
    /// the live map once (`FieldMap::slot`), where `held` and then `put` probed it twice and
    /// hashed the name each time (~200 instructions of a peer's merged `HSET`); a tombstone
    /// takes the general path (`merge_by_held`). The tombstones are searched only when they
    /// hold any. A name is live or removed, never both (`merge_insert`, `merge_remove`).
    fn merge_live_or_put(&mut self, name: &[u8], live: Option<V>, version: Version, floor: Version) -> bool
    where
        Self: ElementMap,
    {
        let Some(value) = live else {
            return merge_by_held(self, name, None, version, floor);
        };
        if version < self.cleared.max(floor) || self.removed.get(name).is_some_and(|&removed| removed >= version) {
            return false;
        }
        let (held, unused) = self.live.slot(name, value);
        if let Some(value) = unused {
            if held.version() >= version {
                return false;
            }
            *held = value;
        }
        // Most collections hold no tombstones: not even a call to find none.
        if !self.removed.is_empty() {
            self.removed.remove(name);
        }
        true
    }

    /// A key-level delete at `v` (`ElementMap::clear_older`): `cleared` grows to `v`, older
    /// elements and tombstones die.
    pub fn clear_older(&mut self, v: Version) {
        self.cleared = self.cleared.max(v);
        self.live.retain(|_, x| x.version() >= v);
        self.removed.retain(|_, removed| *removed >= v);
    }
}

/// A collection's live element as its state says it: what it holds and the version that
/// wrote it, in a collection of `KIND`.
pub trait ElementValue {
    const KIND: ElementKind;
    fn held(&self) -> Held<'_>;
    fn version(&self) -> Version;
}

/// A hash's field.
impl ElementValue for Field {
    const KIND: ElementKind = ElementKind::Hash;
    fn held(&self) -> Held<'_> {
        Held::Bytes(&self.value)
    }
    fn version(&self) -> Version {
        self.version
    }
}

/// A set's member: there by presence (an empty value).
impl ElementValue for Version {
    const KIND: ElementKind = ElementKind::Set;
    fn held(&self) -> Held<'_> {
        Held::Bytes(&[])
    }
    fn version(&self) -> Version {
        *self
    }
}

/// A hash's fields: per-field LWW with tombstones (`ElementMap`). The content is the value.
impl ElementMap for Collection<Field> {
    type Content = Name;

    fn cleared(&self) -> Version {
        self.cleared
    }

    fn held(&self, name: &[u8]) -> Option<Version> {
        self.get(name).map(|f| f.version).or_else(|| self.removed.get(name).copied())
    }

    fn put(&mut self, name: &[u8], content: Option<Name>, version: Version) {
        match content {
            Some(value) => self.merge_insert(name, Field { value, version }),
            None => self.merge_remove(name, version),
        }
    }

    fn merge_element(&mut self, name: &[u8], content: Option<Name>, version: Version, floor: Version) -> bool {
        self.merge_live_or_put(name, content.map(|value| Field { value, version }), version, floor)
    }

    fn states(&self) -> Vec<(Bytes, Option<Name>, Version)> {
        let live = self.live.iter().map(|(n, f)| (n.to_bytes(), Some(f.value.clone()), f.version));
        live.chain(self.removed.iter().map(|(n, v)| (n.to_bytes(), None, *v))).collect()
    }

    fn clear_older(&mut self, v: Version) {
        Collection::clear_older(self, v);
    }
}

/// A set's members: an LWW element set (add and remove versions per member, `ElementMap`).
impl ElementMap for Collection<Version> {
    type Content = ();

    fn cleared(&self) -> Version {
        self.cleared
    }

    fn held(&self, name: &[u8]) -> Option<Version> {
        self.get(name).copied().or_else(|| self.removed.get(name).copied())
    }

    fn put(&mut self, name: &[u8], content: Option<()>, version: Version) {
        match content {
            Some(()) => self.merge_insert(name, version),
            None => self.merge_remove(name, version),
        }
    }

    fn merge_element(&mut self, name: &[u8], content: Option<()>, version: Version, floor: Version) -> bool {
        self.merge_live_or_put(name, content.map(|()| version), version, floor)
    }

    fn states(&self) -> Vec<(Bytes, Option<()>, Version)> {
        let live = self.live.iter().map(|(n, v)| (n.to_bytes(), Some(()), *v));
        live.chain(self.removed.iter().map(|(n, v)| (n.to_bytes(), None, *v))).collect()
    }

    fn clear_older(&mut self, v: Version) {
        Collection::clear_older(self, v);
    }
}

/// A hash's fields or a set's members: per-element LWW with tombstones under the key
/// tombstone `cleared` (`ElementMap::merge_element`; the newer `cleared` kills older
/// elements).
///
/// Laws: commutative, associative and idempotent where a version names one write (one
/// element state per name and version); checked by `tests::a_hash_is_a_lattice` and
/// `tests::a_set_is_a_lattice`.
impl Merge for Collection<Field> {
    fn merge(&mut self, other: &Self) -> bool {
        merge_elements(self, other)
    }
}

/// See `Merge for Collection<Field>`: the same rule, for set members.
impl Merge for Collection<Version> {
    fn merge(&mut self, other: &Self) -> bool {
        merge_elements(self, other)
    }
}

/// A hash field: its value and the version that wrote it. The value is kept as a name is
/// (`Name`: up to 22 bytes inside the field's own slot, longer ones in an allocation of
/// exactly their length), so a field is 64 bytes of its table with no allocation for a short
/// value, where a `Bytes` took 32 bytes and an allocation of its own for every value
/// (docs/benchmarks.md, "Hash values and list items inside their collections"). Replies copy it
/// out, as they did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub value: Name,
    pub version: Version,
}

// A field and its name fill one 64-byte slot of a hash's table or vector (72 with a `Bytes`
// value); a bigger `Field` would take every hash's memory with it.
const _: () = assert!(std::mem::size_of::<(Name, Field)>() == 64);

impl Field {
    pub fn new(value: &[u8], version: Version) -> Field {
        Field { value: Name::from(value), version }
    }
}

/// Redis's type names, as `TYPE` and `SCAN TYPE` use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    String,
    Hash,
    Set,
    ZSet,
    List,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Hash => "hash",
            Kind::Set => "set",
            Kind::ZSet => "zset",
            Kind::List => "list",
        }
    }

    pub fn from_name(name: &[u8]) -> Option<Kind> {
        let name = name.to_ascii_lowercase();
        Some(match name.as_slice() {
            b"string" => Kind::String,
            b"hash" => Kind::Hash,
            b"set" => Kind::Set,
            b"zset" => Kind::ZSet,
            b"list" => Kind::List,
            _ => return None,
        })
    }
}

impl Value {
    /// Starts loading what a pipelined command on the key reads first behind its node
    /// (`Store::prefetch`): the first two cache lines of a string's bytes or of a counter,
    /// the first line of a collection. Each is an allocation of its own, so each was a cache
    /// miss of its own after the node's: an `INCR` of a key holding a counter reads its newest
    /// contribution (`Entry::newest`), a write to a small hash, set, sorted set or list its
    /// collection's header (docs/benchmarks.md, "A value's first lines loaded ahead").
    pub fn prefetch(&self) {
        let (start, len) = match self {
            Value::Str(s) => (s.as_ptr(), s.len()),
            Value::Counter(c) => (std::ptr::from_ref::<super::counter::Counter>(c).cast::<u8>(), std::mem::size_of::<super::counter::Counter>()),
            Value::Hash(c) => (std::ptr::from_ref::<Collection<Field>>(c).cast::<u8>(), 64),
            Value::Set(c) => (std::ptr::from_ref::<Collection<Version>>(c).cast::<u8>(), 64),
            Value::ZSet(z) => (std::ptr::from_ref::<SortedSet>(z).cast::<u8>(), 64),
            Value::List(l) => (std::ptr::from_ref::<ListValue>(l).cast::<u8>(), 64),
            _ => return,
        };
        super::node::prefetch(start);
        if len > 64 {
            super::node::prefetch(start.wrapping_add(64));
        }
    }

    /// Starts loading a collection's first elements, once its header is in the cache
    /// (`prefetch`, earlier): a small collection keeps them in an allocation of its own, a
    /// third cache miss after the node and the header. Returns nothing; a hint only.
    pub fn prefetch_items(&self) {
        match self {
            Value::Hash(c) => c.live.prefetch_items(),
            Value::Set(c) => c.live.prefetch_items(),
            Value::ZSet(z) => z.prefetch_items(),
            Value::List(l) => l.prefetch_items(),
            Value::Str(_) | Value::Int(_) | Value::Counter(_) => {}
        }
    }

    /// Whether the value is a collection (`prefetch_items` has something to load).
    pub fn is_collection(&self) -> bool {
        self.kind() != Kind::String
    }

    /// Starts loading what a lookup or an insert of the element `name` reads in a hash or a
    /// set (`FieldMap::prefetch`; `Store::prefetch_elements`). A hint only.
    pub fn prefetch_element(&self, name: &[u8]) {
        match self {
            Value::Hash(c) => c.live.prefetch(name),
            Value::Set(c) => c.live.prefetch(name),
            _ => {}
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Value::Str(_) | Value::Int(_) | Value::Counter(_) => Kind::String,
            Value::Hash(_) => Kind::Hash,
            Value::Set(_) => Kind::Set,
            Value::ZSet(_) => Kind::ZSet,
            Value::List(_) => Kind::List,
        }
    }

    /// A string value, choosing the integer representation when it round-trips exactly.
    pub fn string(data: &[u8]) -> Value {
        if data.len() <= 20 {
            if let Some(n) = crate::parse::parse_i64(data) {
                return Value::Int(n);
            }
        }
        Value::Str(data.into())
    }

    /// Moves a step of whatever growth is under way in a hash's, set's or sorted set's maps
    /// (`FieldMap::step_growth`); a read command's lookup of the key does, as Redis's dict
    /// moves a bucket on finds. A few instructions for any other value.
    #[inline]
    pub fn step_growth(&mut self) {
        match self {
            Value::Hash(h) => h.step_growth(),
            Value::Set(s) => s.step_growth(),
            Value::ZSet(z) => z.step_growth(),
            Value::Str(_) | Value::Int(_) | Value::Counter(_) | Value::List(_) => {}
        }
    }

    /// True for a collection that lost its last element: Redis deletes such keys.
    pub fn is_empty_collection(&self) -> bool {
        match self {
            Value::Str(_) | Value::Int(_) | Value::Counter(_) => false,
            Value::Hash(h) => h.is_empty(),
            Value::Set(s) => s.is_empty(),
            Value::ZSet(z) => z.is_empty(),
            Value::List(l) => l.is_empty(),
        }
    }

    /// Approximate heap bytes, for eviction accounting and `MEMORY USAGE`.
    pub fn approx_size(&self) -> usize {
        match self {
            Value::Str(s) => s.len(),
            Value::Int(_) => 0,
            Value::Counter(c) => c.totals.len() * 32,
            Value::Hash(h) => h.iter().map(|(k, f)| k.len() + f.value.len() + 64).sum(),
            Value::Set(s) => s.keys().map(|k| k.len() + 48).sum(),
            Value::ZSet(z) => z.len() * 96,
            Value::List(l) => l.iter().map(|v| v.len() + 32).sum(),
        }
    }
}

impl Entry {
    pub fn new(value: Value, version: Version) -> Entry {
        Entry { value, hlc: version.hlc, node: version.node, access: 0 }
    }

    /// Version of the last write to this key (whole-key LWW, and creation).
    pub fn version(&self) -> Version {
        Version { hlc: self.hlc, node: self.node }
    }

    /// The newest write the key holds, the version it competes with when another type or a
    /// whole write meets it, and that a local write must supersede: for a collection,
    /// removals included; for a counter, its latest contribution.
    pub fn newest(&self) -> Version {
        let removed_max = |r: &FieldMap<Version>| r.values().copied().fold(Version::ZERO, Version::max);
        match &self.value {
            Value::Counter(c) => c.newest(),
            // A removal is a write too: a collection whose newest write removed a field is that new.
            Value::Hash(h) => self.version().max(removed_max(&h.removed)),
            Value::Set(s) => self.version().max(removed_max(&s.removed)),
            Value::ZSet(z) => self.version().max(removed_max(&z.removed)),
            _ => self.version(),
        }
    }

    pub fn set_version(&mut self, version: Version) {
        self.hlc = version.hlc;
        self.node = version.node;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::db::lattice::check_laws;
    use crate::db::lattice::strategies::{name, version, written};

    /// A table filled to its load limit leaves most removals as tombstones (hashbrown's
    /// DELETED slots): its `capacity()` falls with its length, so a check of capacity against
    /// length never finds it sparse. Its buckets do not fall.
    #[test]
    fn a_full_table_emptied_by_removals_is_shrunk() {
        let mut map: FieldMap<usize> = FieldMap::default();
        let mut i = 0;
        while map.len() < 1000 || map.len() < map.capacity() {
            map.insert(Bytes::from(i.to_string()), i);
            i += 1;
        }
        let buckets = map.buckets();
        let names: Vec<Bytes> = map.keys().map(Name::to_bytes).collect();
        for name in &names[2..] {
            map.remove(&name[..]);
            shrink_if_sparse(&mut map);
            assert!(map.buckets() <= (8 * map.len()).max(64), "{} buckets for {} elements", map.buckets(), map.len());
        }
        assert_eq!(map.len(), 2);
        assert!(map.is_small(), "a table of {} buckets (of {buckets}) kept for 2 elements", map.buckets());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// `shrink_if_sparse` looks at a map only after a removal (`FieldMap::may_be_sparse`),
        /// yet leaves it as a look after every write would: after each write and its look, a
        /// map that is not moving between two tables is neither sparse nor few enough for a
        /// vector, through waves of adds and removals of any length (a removal that does not
        /// ask for the look fails it).
        #[test]
        fn a_map_looked_at_after_its_removals_is_never_left_sparse(waves in proptest::collection::vec((any::<bool>(), 1..3000usize), 1..12)) {
            let mut map: FieldMap<usize> = FieldMap::default();
            let mut live: Vec<Bytes> = Vec::new();
            let mut next = 0usize;
            let mut rng = rand::rng();
            for (adding, count) in waves {
                for _ in 0..count {
                    if adding || live.is_empty() {
                        let name = Bytes::from(format!("element:{next}"));
                        next += 1;
                        map.insert(name.clone(), next);
                        live.push(name);
                    } else {
                        let name = live.swap_remove(rand::Rng::random_range(&mut rng, 0..live.len()));
                        prop_assert!(map.remove(&name[..]).is_some());
                    }
                    shrink_if_sparse(&mut map);
                    prop_assert_eq!(map.len(), live.len());
                    if !map.is_growing() {
                        let (buckets, len) = (map.buckets(), map.len());
                        prop_assert!(!(buckets > 64 && buckets > 8 * len), "{} buckets left for {} elements", buckets, len);
                        prop_assert!(map.is_small() || len > SMALL_MAX / 2, "a table left for {} elements", len);
                    }
                }
            }
        }
    }

    /// An effect's states of named elements (`states_of`, what a whole-value write and a
    /// snapshot send): a live one as held, a removed one at its removal's version, one never
    /// held at the collection's `cleared`; `settled` (an edit's effect) records a tombstone at
    /// the edit's version for each name it no longer holds.
    #[test]
    fn element_states_name_live_removed_and_unknown_elements() {
        let v = |hlc| Version { hlc, node: 1 };
        let mut h = Collection::<Field> { cleared: v(1), ..Collection::default() };
        h.merge_element(b"live", Some(Name::from(&b"x"[..])), v(5), Version::ZERO);
        h.merge_element(b"gone", None, v(4), Version::ZERO);
        let names = [Name::from(&b"gone"[..]), Name::from(&b"live"[..]), Name::from(&b"never"[..])];
        let state = |name: &'static [u8], held, version| ElementRef { name, held, version };
        let expected = [state(b"gone", Held::Removed, v(4)), state(b"live", Held::Bytes(b"x"), v(5)), state(b"never", Held::Removed, v(1))];
        assert_eq!(h.states_of(&names).states[..], expected);
        assert_eq!(h.states_of(&names).kind, ElementKind::Hash);
        // One name (most edits' effect) takes a path of its own.
        for (name, state) in names.iter().zip(&expected) {
            assert_eq!(h.states_of(std::slice::from_ref(name)).states[..], [*state]);
        }
        let settled = [state(b"gone", Held::Removed, v(9)), state(b"live", Held::Bytes(b"x"), v(5)), state(b"never", Held::Removed, v(9))];
        assert_eq!(h.settled(&names, v(9)).states[..], settled);
        assert_eq!((h.removed.get(b"gone"), h.removed.get(b"never")), (Some(&v(9)), Some(&v(9))), "tombstones recorded at the edit's version");
    }

    /// `insert_if_absent` adds a name once, for a table as for a small vector, and a held
    /// name stays as it was: its value, and no change noted for replication or counting.
    #[test]
    fn insert_if_absent_adds_once_and_notes_only_the_add() {
        let (v1, v2) = (Version { hlc: 1, node: 1 }, Version { hlc: 2, node: 1 });
        for held in [3, 100] {
            let mut set: Collection<Version> = (0..held).map(|i| (Bytes::from(format!("m{i}")), v1)).collect();
            set.take_touched();
            assert!(!set.insert_if_absent(b"m0", v2), "a held member");
            assert_eq!(set.get(b"m0"), Some(&v1), "a held member keeps its version");
            assert!(set.take_touched().is_empty(), "nothing noted for a held member");
            assert!(set.insert_if_absent(b"new", v2), "a new member");
            assert_eq!((set.get(b"new"), set.len()), (Some(&v2), held + 1));
            assert_eq!(set.take_touched()[..], [Name::from(&b"new"[..])]);
        }
    }

    /// A collection as a correct mesh makes them: every element's state is the one its
    /// version wrote (live or removed, and the value), under a key tombstone.
    fn collection<M: ElementMap + Default + std::fmt::Debug>(content: impl Fn(u64) -> M::Content) -> impl Strategy<Value = M> {
        (version(), prop::collection::vec((name(), version()), 0..6)).prop_map(move |(cleared, elements)| {
            let mut m = M::default();
            m.clear_older(cleared);
            for (n, v) in elements {
                let w = written(&n, v);
                m.merge_element(&n, (!w.is_multiple_of(3)).then(|| content(w)), v, Version::ZERO);
            }
            m
        })
    }

    /// A whole value of a type, for the register's test.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Written {
        kind: Kind,
        content: u64,
    }

    impl TieRank for Written {
        fn tie_rank(&self) -> u8 {
            self.kind.tie_rank()
        }
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop::sample::select(vec![Kind::String, Kind::List, Kind::Hash, Kind::Set, Kind::ZSet])
    }

    fn same<M: ElementMap>(a: &M, b: &M) -> bool
    where
        M::Content: std::fmt::Debug,
    {
        let sorted = |m: &M| {
            let mut s: Vec<_> = m.states().into_iter().map(|(n, c, v)| (n, format!("{c:?}"), v)).collect();
            s.sort();
            (m.cleared(), s)
        };
        sorted(a) == sorted(b)
    }

    proptest! {
        #[test]
        fn a_hash_is_a_lattice(
            a in collection::<Collection<Field>>(|w| Name::from(w.to_string().as_bytes())),
            b in collection::<Collection<Field>>(|w| Name::from(w.to_string().as_bytes())),
            c in collection::<Collection<Field>>(|w| Name::from(w.to_string().as_bytes())),
        ) {
            check_laws(&a, &b, &c, same);
        }

        #[test]
        fn a_set_is_a_lattice(
            a in collection::<Collection<Version>>(|_| ()),
            b in collection::<Collection<Version>>(|_| ()),
            c in collection::<Collection<Version>>(|_| ()),
        ) {
            check_laws(&a, &b, &c, same);
        }

        #[test]
        fn the_expiry_register_is_a_lattice(a in version(), b in version(), c in version()) {
            let register = |v: Version| Expiry { deadline_ms: written(b"ttl", v), version: v };
            check_laws(&register(a), &register(b), &register(c), |x, y| x == y);
        }

        #[test]
        fn the_register_is_a_lattice(a in (version(), kind()), b in (version(), kind()), c in (version(), kind())) {
            // The value a write of `kind` at `v` wrote; two types at one version do meet.
            let register = |(v, kind): (Version, Kind)| Register { value: Written { kind, content: written(kind.name().as_bytes(), v) }, version: v };
            check_laws(&register(a), &register(b), &register(c), |x, y| x == y);
        }
    }
}
