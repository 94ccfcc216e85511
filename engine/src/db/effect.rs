//! `Effect`: the replicated form of a write, in the keyspace's own types. A local write
//! records the effect of what it did (the resulting state of what it touched, with versions;
//! never the command), `repl::merge::apply_op` merges one into a keyspace, and the mesh and
//! the snapshot file carry it as protobuf (`repl::wire`, the only place that converts), so
//! that nothing between the keyspace and the wire sees protobuf types.
//!
//! Effects carry resulting state and versions, so a peer merges them in any order, with
//! duplicates (`repl::merge`). The variants mirror the protobuf `Op` one to one, so every
//! effect has exactly one wire form and the format stays what it was.

use bytes::Bytes;
use smallvec::SmallVec;

use super::counter::CounterDelta;
use super::entry::Name;
use super::{Kind, Value};
use crate::hlc::Version;

/// One replicated write to one key (or, for `FlushDb` and `Publish`, to a database or to
/// every node's subscribers; for `Library` and `FunctionFlush`, to the node's function
/// libraries, with the library's name as the key).
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    pub db: usize,
    /// Empty for `FlushDb`, `Publish` and `FunctionFlush`; the library's name for `Library`.
    pub key: Bytes,
    pub kind: EffectKind,
}

/// What an effect writes.
#[derive(Debug, Clone, PartialEq)]
pub enum EffectKind {
    /// A string's whole value (LWW register on the key).
    StringSet { value: Bytes, version: Version },
    /// One origin's PN-counter contribution, or the base register alone (`counter::BASE_ONLY`).
    Counter(CounterDelta),
    /// A key tombstone: everything older than `version` is dead.
    Delete { version: Version },
    /// The expiry register: an absolute deadline in Unix ms (0: no TTL) and its version.
    Expire { deadline_ms: u64, version: Version },
    /// Hash fields' states (a value, or a tombstone).
    Hash(Vec<FieldState>),
    /// Set members' states (present, or a tombstone).
    Set(Vec<MemberState>),
    /// Sorted-set members' states (a score, or a tombstone).
    ZSet(Vec<ZSetMemberState>),
    /// A list's whole value (LWW on the key); an empty list is a delete.
    List { items: Vec<Bytes>, version: Version },
    /// `FLUSHDB`/`FLUSHALL`: a database-wide tombstone.
    FlushDb { version: Version },
    /// A published message, delivered to every node's subscribers.
    Publish { channel: Bytes, message: Bytes },
    /// HyperLogLog registers raised (`index << 8 | value`) in the HLL of incarnation
    /// `version` (`db::hll`).
    Hll { version: Version, registers: Vec<u32> },
    /// A `FUNCTION` library's register (`db::functions`): the library named by the effect's
    /// key holds `code` (its whole `FUNCTION LOAD` payload), or is deleted (`None`).
    Library { code: Option<Bytes>, version: Version },
    /// `FUNCTION FLUSH`: every library register older than `version` is dead.
    FunctionFlush { version: Version },
}

/// A hash field's state: `value` is `None` for a removed field (a tombstone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldState {
    pub name: Bytes,
    pub value: Option<Bytes>,
    pub version: Version,
}

/// A set member's state: added (`present`) or removed (a tombstone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberState {
    pub name: Bytes,
    pub present: bool,
    pub version: Version,
}

/// A sorted-set member's state: `score` is `None` for a removed member (a tombstone).
#[derive(Debug, Clone, PartialEq)]
pub struct ZSetMemberState {
    pub name: Bytes,
    pub score: Option<f64>,
    pub version: Version,
}

/// What an element's state says it holds (field 2 of a collection's element on the wire).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Held<'a> {
    /// A tombstone.
    Removed,
    /// A hash field's value, or a set member's presence (empty).
    Bytes(&'a [u8]),
    /// A sorted set member's score.
    Score(f64),
}

/// The types whose values are collections of named elements: what element states belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElementKind {
    Hash,
    Set,
    ZSet,
}

impl ElementKind {
    /// The key's type.
    pub fn kind(self) -> Kind {
        match self {
            ElementKind::Hash => Kind::Hash,
            ElementKind::Set => Kind::Set,
            ElementKind::ZSet => Kind::ZSet,
        }
    }
}

/// One element's state, borrowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ElementRef<'a> {
    pub name: &'a [u8],
    pub held: Held<'a>,
    pub version: Version,
}

/// A hash's, set's or sorted set's element states, borrowed, as a peer merges them
/// (`repl::merge::fields`): one form for an op read where it lies in a received frame
/// (`repl::wire::Decoded::Elements`: no name or value copied out of the frame, no allocation
/// for an op of one element; the merge copies what it keeps into the keyspace's own types) and
/// for an `Effect`'s (`Effect::elements`).
#[derive(Debug, Clone, PartialEq)]
pub struct Elements<'a> {
    pub kind: ElementKind,
    pub states: SmallVec<[ElementRef<'a>; 1]>,
}

impl Elements<'_> {
    /// The newest element's version (`Version::ZERO` for none).
    pub fn newest(&self) -> Version {
        self.states.iter().map(|e| e.version).max().unwrap_or(Version::ZERO)
    }

    /// The effect these states are, with names and values copied.
    pub fn to_effect_kind(&self) -> EffectKind {
        let copy = Bytes::copy_from_slice;
        let states = self.states.iter();
        match self.kind {
            ElementKind::Hash => EffectKind::Hash(
                states
                    .map(|e| FieldState { name: copy(e.name), value: if let Held::Bytes(v) = e.held { Some(copy(v)) } else { None }, version: e.version })
                    .collect(),
            ),
            ElementKind::Set => {
                EffectKind::Set(states.map(|e| MemberState { name: copy(e.name), present: e.held != Held::Removed, version: e.version }).collect())
            }
            ElementKind::ZSet => EffectKind::ZSet(
                states
                    .map(|e| ZSetMemberState { name: copy(e.name), score: if let Held::Score(s) = e.held { Some(s) } else { None }, version: e.version })
                    .collect(),
            ),
        }
    }
}

impl Effect {
    pub fn new(db: usize, key: &[u8], kind: EffectKind) -> Effect {
        Effect { db, key: Bytes::copy_from_slice(key), kind }
    }

    pub fn delete(db: usize, key: &[u8], version: Version) -> Effect {
        Effect::new(db, key, EffectKind::Delete { version })
    }

    pub fn expire(db: usize, key: &[u8], deadline_ms: u64, version: Version) -> Effect {
        Effect::new(db, key, EffectKind::Expire { deadline_ms, version })
    }

    pub fn flush_db(db: usize, version: Version) -> Effect {
        Effect { db, key: Bytes::new(), kind: EffectKind::FlushDb { version } }
    }

    pub fn counter(db: usize, key: &[u8], delta: CounterDelta) -> Effect {
        Effect::new(db, key, EffectKind::Counter(delta))
    }

    pub fn publish(channel: &[u8], message: &[u8]) -> Effect {
        let kind = EffectKind::Publish { channel: Bytes::copy_from_slice(channel), message: Bytes::copy_from_slice(message) };
        Effect { db: 0, key: Bytes::new(), kind }
    }

    /// A library's register (`FUNCTION LOAD`: `Some(code)`, `FUNCTION DELETE`: `None`).
    pub fn library(name: &str, code: Option<Bytes>, version: Version) -> Effect {
        Effect { db: 0, key: Bytes::copy_from_slice(name.as_bytes()), kind: EffectKind::Library { code, version } }
    }

    /// `FUNCTION FLUSH` at `version`.
    pub fn function_flush(version: Version) -> Effect {
        Effect { db: 0, key: Bytes::new(), kind: EffectKind::FunctionFlush { version } }
    }

    /// HyperLogLog registers raised (`index << 8 | value`) in the HLL of incarnation `v`.
    pub fn hll_registers(db: usize, key: &[u8], version: Version, raised: &[u32]) -> Effect {
        Effect::new(db, key, EffectKind::Hll { version, registers: raised.to_vec() })
    }

    /// A hash's, set's or sorted set's element states, borrowed from this effect; `None` for
    /// any other effect.
    pub fn elements(&self) -> Option<Elements<'_>> {
        let (kind, states) = match &self.kind {
            EffectKind::Hash(h) => (
                ElementKind::Hash,
                h.iter().map(|f| ElementRef { name: &f.name, held: f.value.as_deref().map_or(Held::Removed, Held::Bytes), version: f.version }).collect(),
            ),
            EffectKind::Set(s) => (
                ElementKind::Set,
                s.iter().map(|m| ElementRef { name: &m.name, held: if m.present { Held::Bytes(&[]) } else { Held::Removed }, version: m.version }).collect(),
            ),
            EffectKind::ZSet(z) => (
                ElementKind::ZSet,
                z.iter().map(|m| ElementRef { name: &m.name, held: m.score.map_or(Held::Removed, Held::Score), version: m.version }).collect(),
            ),
            _ => return None,
        };
        Some(Elements { kind, states })
    }

    /// Tombstones at `v` for named elements of a `kind` collection (a removal of elements this
    /// node may not hold: see `db::edit`).
    pub fn tombstones(db: usize, key: &[u8], kind: Kind, names: &[Bytes], version: Version) -> Effect {
        // Private copies: the names may be slices of a connection's read buffer, which the
        // backlog must not keep alive.
        let names: Vec<Bytes> = names.iter().map(|n| Bytes::copy_from_slice(n)).collect();
        let kind = match kind {
            Kind::Hash => EffectKind::Hash(names.iter().map(|n| FieldState { name: n.clone(), value: None, version }).collect()),
            Kind::Set => EffectKind::Set(names.iter().map(|n| MemberState { name: n.clone(), present: false, version }).collect()),
            Kind::ZSet => EffectKind::ZSet(names.iter().map(|n| ZSetMemberState { name: n.clone(), score: None, version }).collect()),
            // Strings and lists have no elements: removing "elements" of them is a delete.
            Kind::String | Kind::List => EffectKind::Delete { version },
        };
        Effect::new(db, key, kind)
    }

    /// The effect of a whole-value write or an in-place edit that touched `names` (all names
    /// for a whole write; lists and strings always replicate whole).
    pub fn of_value(db: usize, key: &[u8], value: &Value, v: Version, names: &[Name]) -> Effect {
        let kind = match value {
            Value::Str(s) => EffectKind::StringSet { value: Bytes::copy_from_slice(s), version: v },
            Value::Int(n) => EffectKind::StringSet { value: Bytes::from(n.to_string()), version: v },
            Value::Counter(c) => EffectKind::Counter(c.delta_of(c.origin_of_last_change(), v)),
            // A live element's name and value copied, not cloned: the first clone of a stored
            // one gives it a shared header (a 32-byte allocation) for its life, and the effect
            // lives only until it is encoded.
            Value::Hash(h) => h.states_of(names).to_effect_kind(),
            Value::Set(s) => s.states_of(names).to_effect_kind(),
            Value::ZSet(z) => z.states_of(names).to_effect_kind(),
            // Copied, not cloned, as a hash's values are.
            Value::List(l) => EffectKind::List { items: l.iter().map(|item| Bytes::copy_from_slice(item)).collect(), version: v },
        };
        Effect::new(db, key, kind)
    }
}
