//! What a key holds: its value, the version of its last whole-key write, and its expiry
//! register. Collections version each field or member, so replication (DESIGN.md, Merge
//! semantics) can merge them per field without changing this layout.

use std::collections::VecDeque;

use bytes::Bytes;

use super::zset::SortedSet;
use crate::hlc::Version;

pub type Key = Box<[u8]>;
pub type FieldMap<V> = std::collections::HashMap<Bytes, V, foldhash::fast::RandomState>;

/// One key's state. The version is stored as its two halves around the access clock so the
/// entry packs into 48 bytes (it sits inline in the shard's hash table).
#[derive(Debug, Clone)]
pub struct Entry {
    pub value: Value,
    hlc: u64,
    node: crate::hlc::NodeId,
    /// For eviction: seconds of the LRU clock, or a log counter and decay time under LFU
    /// (see `db::evict`).
    pub access: u32,
    /// `None` until the key ever had a TTL; afterwards the LWW expiry register.
    pub expiry: Option<Box<Expiry>>,
}

/// The expiry register: an absolute deadline (0 = persistent) and the version that set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry {
    pub deadline_ms: u64,
    pub version: Version,
}

#[derive(Debug, Clone)]
pub enum Value {
    Str(Box<[u8]>),
    /// Integer fast path for strings that are canonical decimal integers.
    Int(i64),
    Hash(Box<Collection<Field>>),
    Set(Box<Collection<Version>>),
    ZSet(Box<SortedSet>),
    List(Box<ListValue>),
    /// A string that `INCR` and friends keep as a PN-counter (see `db::counter`).
    Counter(Box<super::counter::Counter>),
}

/// A list's items and its key-level tombstone (lists replicate as whole values).
///
/// Reads go through `Deref`; any mutable access (`DerefMut`) marks the list changed, so an
/// edit that changes it is replicated (`Ctx::edit`). Commands check before they touch.
#[derive(Debug, Clone, Default)]
pub struct ListValue {
    items: VecDeque<Bytes>,
    pub cleared: Version,
    changed: bool,
}

impl ListValue {
    pub fn new(items: VecDeque<Bytes>) -> ListValue {
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
    type Target = VecDeque<Bytes>;
    fn deref(&self) -> &VecDeque<Bytes> {
        &self.items
    }
}

impl std::ops::DerefMut for ListValue {
    fn deref_mut(&mut self) -> &mut VecDeque<Bytes> {
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
    pub removed: FieldMap<Version>,
    touched: Vec<Bytes>,
    pub cleared: Version,
}

impl<V> Default for Collection<V> {
    fn default() -> Self {
        Collection { live: FieldMap::default(), removed: FieldMap::default(), touched: Vec::new(), cleared: Version::ZERO }
    }
}

impl<V> std::ops::Deref for Collection<V> {
    type Target = FieldMap<V>;
    fn deref(&self) -> &FieldMap<V> {
        &self.live
    }
}

impl<V> FromIterator<(Bytes, V)> for Collection<V> {
    fn from_iter<I: IntoIterator<Item = (Bytes, V)>>(iter: I) -> Self {
        Collection { live: iter.into_iter().collect(), ..Collection::default() }
    }
}

impl<V> Collection<V> {
    pub fn insert(&mut self, name: Bytes, value: V) -> Option<V> {
        self.removed.remove(&name[..]);
        self.touched.push(name.clone());
        self.live.insert(name, value)
    }

    pub fn remove(&mut self, name: &[u8]) -> Option<V> {
        let (name, old) = self.live.remove_entry(name)?;
        self.touched.push(name);
        Some(old)
    }

    pub fn drain(&mut self) -> Vec<(Bytes, V)> {
        let all: Vec<(Bytes, V)> = self.live.drain().collect();
        self.touched.extend(all.iter().map(|(k, _)| k.clone()));
        all
    }

    /// Whether a name changed since the last `take_touched`.
    pub fn changed(&self) -> bool {
        !self.touched.is_empty()
    }

    /// Names changed since the last call.
    pub fn take_touched(&mut self) -> Vec<Bytes> {
        let mut names = std::mem::take(&mut self.touched);
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Replication: sets a name without noting it as a local change.
    pub fn merge_insert(&mut self, name: Bytes, value: V) {
        self.removed.remove(&name[..]);
        self.live.insert(name, value);
    }

    /// Replication: removes a name (recording its tombstone) without noting a local change.
    pub fn merge_remove(&mut self, name: Bytes, version: Version) {
        self.live.remove(&name[..]);
        self.removed.insert(name, version);
    }

    pub fn live_mut(&mut self) -> &mut FieldMap<V> {
        &mut self.live
    }
}

/// A hash field: its value and the version that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub value: Bytes,
    pub version: Version,
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
        Entry { value, hlc: version.hlc, node: version.node, access: 0, expiry: None }
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

    /// The newest version anything in the entry carries, its expiry register included: a
    /// local write stamps above it, so it supersedes everything the writer could read.
    pub fn last_write(&self) -> Version {
        self.expiry.as_ref().map_or(Version::ZERO, |e| e.version).max(self.newest())
    }

    pub fn set_version(&mut self, version: Version) {
        self.hlc = version.hlc;
        self.node = version.node;
    }

    /// The deadline in ms, if the key is volatile.
    pub fn deadline(&self) -> Option<u64> {
        self.expiry.as_ref().map(|e| e.deadline_ms).filter(|&d| d != 0)
    }

    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.deadline().is_some_and(|d| d <= now_ms)
    }
}
