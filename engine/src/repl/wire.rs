//! The protobuf form of effects (`keymesh_proto::Op`): the one place that converts between
//! `db::effect::Effect` and the wire. The mesh stream (`mesh::origin` encodes, `mesh::link`
//! decodes) and the snapshot file (`persist`) call it at their edges; the keyspace and the
//! merge see only `Effect`, the backlog only encoded ops (`OpBuffer`).
//!
//! The mapping is one to one for every effect a node makes, so the bytes on the wire and in
//! snapshot files are what they were before `Effect` existed, and peers of either version
//! interoperate. Decoding keeps what the merge always did with a peer's message: a missing
//! version reads as `Version::ZERO`, a set member's `value` counts by presence, a database
//! number is checked against the keyspace by `apply_op`, register entries no HLL holds are
//! skipped by the merge. What cannot be merged at all is a `WireError`: an op without an effect
//! (or one of a kind this node does not know), and a full-sync `KeyState` (no version sends it:
//! full syncs are ordinary effects); a receiver counts such an op as superseded, as before.

use bytes::buf::UninitSlice;
use bytes::Bytes;
use keymesh_proto as pb;
use pb::batch::{self, FramedOps};
use pb::op::Effect as PbEffect;
use pb::reader::Reader;
use prost::encoding::{encoded_len_varint, key_len};
use prost::Message;
use smallvec::SmallVec;

use crate::db::counter::CounterDelta;
use crate::db::effect::{Effect, EffectKind, ElementKind, ElementRef, Elements, FieldState, Held, MemberState, ZSetMemberState};
use crate::db::entry::Name;
use crate::db::Value;
use crate::hlc::Version;

/// Why an op from a peer or a file is not an effect this node merges.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("failed to decode op: it carries no effect (none, or one this node does not know)")]
    NoEffect,
    #[error("failed to decode op: a full-sync KeyState is not a mergeable effect")]
    KeyState,
    /// The bytes are no `Op` at all (`decode`): a broken stream, not an op to skip.
    #[error("failed to decode op: {0}")]
    Malformed(prost::DecodeError),
}

/// Ops encoded and framed as elements of a batch's `ops` field (`keymesh_proto::batch`),
/// back to back: a command's writes on their way to the backlog (`Ctx::effects`,
/// `ReplLog::append`, which copies them in one piece), or a snapshot batch's ops. Each op is
/// encoded once, here. Its buffers are this thread's spare ones when there are some (`SPARE`,
/// `recycle`): a write command would otherwise allocate and free them (~80 instructions of an
/// origin's ~5,750 per SET, callgrind), and a pipelined batch's ops, published together
/// (`client::ClientWrites`), would grow `ends` past any inline room, three times per batch
/// of 16 (~75 instructions per SET at -P 16).
#[derive(Debug, Default)]
pub struct OpBuffer {
    bytes: Vec<u8>,
    /// Where each op's frame ends in `bytes`.
    ends: Vec<u32>,
}

impl OpBuffer {
    /// A buffer holding the op of a write that left `value` at `key` (`push_value`).
    pub fn of_value(db: usize, key: &[u8], value: &Value, v: Version, names: &[Name]) -> OpBuffer {
        let mut ops = OpBuffer::default();
        ops.push_value(db, key, value, v, names);
        ops
    }

    /// Appends `e`'s op.
    /// A string's write (most writes) is written here field by field (`StringSetOp`), a third
    /// of prost's instructions for it, and so are a counter's, a list's, a tombstone and an
    /// expiry register; every other kind by prost. `encode_writes_what_prost_writes` checks the
    /// bytes against prost's for every kind.
    pub fn push(&mut self, e: Effect) {
        match &e.kind {
            EffectKind::StringSet { value, version } => self.push_string_set(&StringSetOp::new(e.db, &e.key, value, *version)),
            EffectKind::Counter(delta) => self.push_counter(e.db, &e.key, delta),
            EffectKind::List { items, version } => self.push_list(e.db, &e.key, items.iter().map(|item| &item[..]), *version),
            EffectKind::Delete { version } => self.push_delete(e.db, &e.key, *version),
            EffectKind::Expire { deadline_ms, version } => self.push_expire(e.db, &e.key, *deadline_ms, *version),
            _ => self.push_with(encoded_len(&e), |out| pb::Op::from(e).encode_raw(out)),
        }
    }

    /// Appends the op of a write that left `value` at `key` (`Effect::of_value`'s). A string's
    /// (most writes) is encoded straight from the stored bytes: no `Effect`, with its copies of
    /// key and value, is built and dropped on the way.
    ///
    /// A hash's, set's or sorted set's (each of their edits) is written here too, element by
    /// element from the collection (`push_elements`): an `Effect` with a copy of every named
    /// element, converted to prost's `Op` and encoded by prost, cost an origin's `HSET` ~2,000
    /// instructions (callgrind, docs/benchmarks.md).
    pub fn push_value(&mut self, db: usize, key: &[u8], value: &Value, v: Version, names: &[Name]) {
        // `Effect::of_value`'s element states, borrowed from the collection (`states_of`).
        match value {
            Value::Str(s) => self.push_string_set(&StringSetOp::new(db, key, s, v)),
            Value::Hash(h) => self.push_elements(db, key, &h.states_of(names)),
            Value::Set(s) => self.push_elements(db, key, &s.states_of(names)),
            Value::ZSet(z) => self.push_elements(db, key, &z.states_of(names)),
            Value::Counter(c) => self.push_counter(db, key, &c.delta_of(c.origin_of_last_change(), v)),
            Value::List(l) => self.push_list(db, key, l.iter().map(|item| &item[..]), v),
            _ => self.push(Effect::of_value(db, key, value, v, names)),
        }
    }

    /// Appends a hash's, set's or sorted set's op (`Collection::settled`'s element states),
    /// framed, its elements written as `ElementState::write` writes them.
    pub fn push_elements(&mut self, db: usize, key: &[u8], elements: &Elements<'_>) {
        let effect_tag = match elements.kind {
            ElementKind::Hash => HASH_TAG,
            ElementKind::Set => SET_TAG,
            ElementKind::ZSet => ZSET_TAG,
        };
        match &elements.states[..] {
            // One element (most edits): its lengths worked out once.
            [only] => {
                let state = ElementState::new(only);
                self.push_op(db, key, effect_tag, message_field(1, state.len), |w| state.write(w));
            }
            // Each element's lengths are worked out twice, for the op's length and as it is
            // written: a few additions, where keeping them in a vector cost an HSET's origin
            // ~120 instructions.
            states => {
                let inner_len = states.iter().map(|e| message_field(1, ElementState::new(e).len)).sum();
                self.push_op(db, key, effect_tag, inner_len, |w| states.iter().for_each(|e| ElementState::new(e).write(w)));
            }
        }
    }

    /// Appends an op of database `db` and `key` whose one effect (`Op` field `effect_tag`)
    /// takes `inner_len` bytes, which `write_effect` writes: the op's frame, its `db` and `key`
    /// and the effect's key and length go around them, as prost writes them. Every op written
    /// by hand goes through here but a string's (`StringSetOp`, whose lengths are worked out
    /// whole beforehand).
    #[inline(always)]
    fn push_op(&mut self, db: usize, key: &[u8], effect_tag: u8, inner_len: usize, write_effect: impl FnOnce(&mut OpWriter<'_>)) {
        let len = varint_field(1, db as u64) + bytes_field(2, key.len()) + message_field(effect_tag.into(), inner_len);
        self.reserve(batch::frame_len(len) + len);
        write_framed(&mut self.bytes, len, |w| {
            w.db_and_key(db, key);
            w.field(effect_tag, LEN, inner_len as u64);
            write_effect(w);
        });
        self.ends.push(self.bytes.len() as u32);
    }

    /// Appends a counter's contribution (`Op.counter`), written field by field as prost writes
    /// it: built as an `Effect`, converted and encoded by prost, it cost an origin's `INCR`
    /// ~1,550 instructions (callgrind, docs/benchmarks.md).
    fn push_counter(&mut self, db: usize, key: &[u8], d: &CounterDelta) {
        self.push_op(db, key, COUNTER_TAG, counter_len(d), |w| {
            w.scalar(1, u64::from(d.origin));
            w.scalar(2, d.incr_total as u64);
            w.scalar(3, d.decr_total as u64);
            w.version(4, d.base, version_len(d.base));
            w.version(5, d.version, version_len(d.version));
            w.scalar(6, d.base_value as u64);
        });
    }

    /// Appends a key's tombstone (`Op.delete`), written as prost writes it. Through prost, with
    /// an `Effect` holding a copy of the key, it cost an origin's `DEL` of a key no node holds
    /// ~560 instructions more (callgrind, docs/benchmarks.md).
    pub fn push_delete(&mut self, db: usize, key: &[u8], v: Version) {
        let version_len = version_len(v);
        self.push_op(db, key, DELETE_TAG, message_field(1, version_len), |w| w.version(1, v, version_len));
    }

    /// Appends a key's expiry register (`Op.expire`: its deadline, 0 for none, and its
    /// version), written as prost writes it: every `SET … EX` sends one after its value.
    pub fn push_expire(&mut self, db: usize, key: &[u8], deadline_ms: u64, v: Version) {
        let version_len = version_len(v);
        let inner_len = varint_field(1, deadline_ms) + message_field(2, version_len);
        self.push_op(db, key, EXPIRE_TAG, inner_len, |w| {
            w.scalar(1, deadline_ms);
            w.version(2, v, version_len);
        });
    }

    /// Appends a list's whole value (`Op.list`: its items, then its version), written item by
    /// item from the list as prost writes it. A list replicates whole (DESIGN.md), so every
    /// write to one sends all its items: built as an `Effect` (a `Bytes` copy of every item),
    /// converted and encoded by prost, an `LPUSH` onto a list of ~45 items cost an origin
    /// ~23,000 instructions more than a standalone node's (callgrind, docs/benchmarks.md).
    fn push_list<'i>(&mut self, db: usize, key: &[u8], items: impl Iterator<Item = &'i [u8]> + Clone, v: Version) {
        let version_len = version_len(v);
        let inner_len = items.clone().map(|item| present_bytes(1, item.len())).sum::<usize>() + message_field(2, version_len);
        self.push_op(db, key, LIST_TAG, inner_len, |w| {
            for item in items {
                w.field(1, LEN, item.len() as u64);
                w.bytes(item);
            }
            w.version(2, v, version_len);
        });
    }

    /// Appends `other`'s ops after these; `other`'s buffer is left as this thread's spare
    /// (`recycle`). Into an empty buffer nothing is copied: `other` takes its place.
    pub fn append(&mut self, other: OpBuffer) {
        if self.is_empty() {
            std::mem::replace(self, other).recycle();
            return;
        }
        let base = self.bytes.len() as u32;
        self.bytes.extend_from_slice(&other.bytes);
        self.ends.extend(other.ends.iter().map(|end| base + end));
        other.recycle();
    }

    /// Frames an op of `len` bytes, which `write` writes.
    fn push_with(&mut self, len: usize, write: impl FnOnce(&mut Vec<u8>)) {
        self.reserve(batch::frame_len(len) + len);
        batch::frame(&mut self.bytes, len, write);
        self.ends.push(self.bytes.len() as u32);
    }

    /// A string's write (most ops), framed: its frame's tag and length go out with the op's
    /// first fields (`StringSetOp::write_framed`).
    fn push_string_set(&mut self, op: &StringSetOp<'_>) {
        self.reserve(op.framed_len());
        op.write_framed(&mut self.bytes);
        self.ends.push(self.bytes.len() as u32);
    }

    /// Room for `additional` more bytes, in this thread's spare buffers if this one has none
    /// (then it holds no op: every op reserves its bytes first).
    fn reserve(&mut self, additional: usize) {
        if self.bytes.capacity() == 0 {
            debug_assert!(self.ends.is_empty());
            (self.bytes, self.ends) = SPARE.take();
        }
        self.bytes.reserve(additional);
    }

    /// How many ops.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The framed ops' bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Where each op's frame ends in `bytes`.
    pub fn ends(&self) -> &[u32] {
        &self.ends
    }

    /// The ops, as a batch carries them.
    pub fn into_framed(self) -> FramedOps {
        FramedOps::framed(self.bytes.into(), self.ends.len())
    }

    /// Leaves this buffer's bytes and ends, emptied, as its thread's spares (for the next
    /// command's writes: `ClientWrites::publish` calls it once the backlog has copied them).
    /// A buffer not recycled is freed: an allocation, not a mistake. No `Drop` does it: every
    /// command's context holds an `OpBuffer`, most never written, and a `Drop` cost each of
    /// them ~40 instructions.
    pub fn recycle(mut self) {
        if self.bytes.capacity() <= SPARE_MAX {
            self.bytes.clear();
            self.ends.clear();
            // Whatever spare buffers there were are freed.
            drop(SPARE.replace((self.bytes, self.ends)));
        }
    }
}

/// A buffer kept larger than this is freed rather than kept spare.
const SPARE_MAX: usize = 64 << 10;

thread_local! {
    /// This thread's spare `OpBuffer` bytes and ends: a recycled buffer leaves them here,
    /// emptied, and the next buffer this thread fills takes them.
    static SPARE: std::cell::Cell<(Vec<u8>, Vec<u32>)> = const { std::cell::Cell::new((Vec::new(), Vec::new())) };
}

/// `e`'s protobuf encoding (one `Op`, unframed), as a buffer of ops holds it.
#[cfg(test)]
pub fn encode(e: Effect) -> Bytes {
    let mut ops = OpBuffer::default();
    ops.push(e);
    ops.into_framed().iter().next().expect("the op just pushed")
}

/// A string's write as an `Op` (`db`, `key`, `string_set { value, version { hlc, node } }`),
/// its lengths worked out once, for its frame and its fields, and then written field by field
/// into the buffer's room for it (`OpWriter`): prost's `encode_varint` into a `BufMut` costs a
/// capacity check per byte (~45 instructions for each of the op's nine varints), and working
/// the lengths out apart from the writing (`encoded_len`, then again field by field) cost as
/// much again.
struct StringSetOp<'a> {
    db: usize,
    key: &'a [u8],
    value: &'a [u8],
    version: Version,
    /// The `version` message's length.
    version_len: usize,
    /// The `string_set` message's length.
    set_len: usize,
    /// The whole op's length.
    len: usize,
}

impl<'a> StringSetOp<'a> {
    #[inline]
    fn new(db: usize, key: &'a [u8], value: &'a [u8], version: Version) -> StringSetOp<'a> {
        let version_len = varint_field(1, version.hlc) + varint_field(2, u64::from(version.node));
        let set_len = bytes_field(1, value.len()) + message_field(2, version_len);
        let len = varint_field(1, db as u64) + bytes_field(2, key.len()) + message_field(3, set_len);
        StringSetOp { db, key, value, version, version_len, set_len, len }
    }

    /// The op's size as an element of a batch's `ops`, with `batch::frame`'s tag and length.
    #[inline]
    fn framed_len(&self) -> usize {
        batch::frame_len(self.len) + self.len
    }

    /// Writes the op as an element of a batch's `ops` at the end of `out`: `batch::frame`'s tag
    /// and length first, then the fields prost writes, in its order.
    #[inline]
    fn write_framed(&self, out: &mut Vec<u8>) {
        write_framed(out, self.len, |w| {
            w.db_and_key(self.db, self.key);
            w.field(3, LEN, self.set_len as u64);
            if !self.value.is_empty() {
                w.field(1, LEN, self.value.len() as u64);
                w.bytes(self.value);
            }
            w.version(2, self.version, self.version_len);
        });
    }
}

/// The protobuf wire types an op's writer writes.
const VARINT: u8 = 0;
const I64: u8 = 1;
const LEN: u8 = 2;

/// `Op`'s fields of a counter's contribution, a key's tombstone, its expiry register and a
/// list's whole value.
const COUNTER_TAG: u8 = 4;
const DELETE_TAG: u8 = 5;
const EXPIRE_TAG: u8 = 6;
const LIST_TAG: u8 = 10;

/// `Op`'s fields of a hash's, a set's and a sorted set's elements.
const HASH_TAG: u8 = 7;
const SET_TAG: u8 = 8;
const ZSET_TAG: u8 = 9;

/// Writes an op of `len` bytes as an element of a batch's `ops` at the end of `out`:
/// `batch::frame`'s tag and length, then what `write` writes, which must be `len` bytes.
#[inline(always)]
// The one `set_len` below (the workspace denies `unsafe`; Cargo.toml lists where it is
// allowed): writing the op over zeroed bytes instead cost ~80 more instructions per op.
#[allow(unsafe_code)]
fn write_framed(out: &mut Vec<u8>, len: usize, write: impl FnOnce(&mut OpWriter<'_>)) {
    let framed = batch::frame_len(len) + len;
    // Written into the vector's spare room, not zeroed first (see above), with room for
    // `long_varint`'s eight-byte writes past the end.
    out.reserve(framed + VARINT_ROOM);
    let start = out.len();
    let mut w = OpWriter { buf: UninitSlice::uninit(&mut out.spare_capacity_mut()[..framed + VARINT_ROOM]), at: 0 };
    w.byte(batch::OPS_TAG);
    w.varint(len as u64);
    write(&mut w);
    let written = w.at;
    // Checked in release builds too: a length worked out apart from the writing must match
    // it, or the frame would claim bytes of the next op.
    assert_eq!(written, framed, "an op's writes fill the room its lengths made");
    // SAFETY: `OpWriter`'s first `at` bytes are written (each of its writes starts at `at`
    // or after it and moves `at` only over bytes it wrote), so out[start..start + written]
    // is initialised; and it lies within the capacity `reserve` made, as `buf` is a
    // bounds-checked slice of the spare room.
    unsafe { out.set_len(start + written) };
}

/// One element's state as its collection's op carries it (`FieldState`, `ZSetMember`), its
/// lengths worked out once.
struct ElementState<'a> {
    name: &'a [u8],
    held: Held<'a>,
    version: Version,
    /// The `version` message's length.
    version_len: usize,
    /// The element message's length.
    len: usize,
}

impl<'a> ElementState<'a> {
    #[inline(always)]
    fn new(&ElementRef { name, held, version }: &ElementRef<'a>) -> ElementState<'a> {
        let version_len = varint_field(1, version.hlc) + varint_field(2, u64::from(version.node));
        let held_len = match held {
            Held::Removed => 0,
            Held::Bytes(b) => present_bytes(2, b.len()),
            Held::Score(_) => key_len(2) + 8,
        };
        let len = bytes_field(1, name.len()) + held_len + message_field(3, version_len);
        ElementState { name, held, version, version_len, len }
    }

    /// The element as an element of its effect's repeated field, as prost writes it: the
    /// field's key and length, then the element's fields.
    #[inline(always)]
    fn write(&self, w: &mut OpWriter<'_>) {
        w.field(1, LEN, self.len as u64);
        if !self.name.is_empty() {
            w.field(1, LEN, self.name.len() as u64);
            w.bytes(self.name);
        }
        match self.held {
            Held::Removed => {}
            Held::Bytes(b) => {
                w.field(2, LEN, b.len() as u64);
                w.bytes(b);
            }
            Held::Score(score) => {
                w.byte(2 << 3 | I64);
                w.bytes(&score.to_le_bytes());
            }
        }
        w.version(3, self.version, self.version_len);
    }
}

/// Room past an op's end for `OpWriter::long_varint`'s eight-byte writes: a varint of three to
/// eight bytes writes up to five past its end (one of nine or ten bytes writes none), whatever
/// field ends the op (a node id, a counter's base value).
const VARINT_ROOM: usize = 8;

/// A cursor writing an op's fields into the room made for them (`StringSetOp::write_framed`).
/// Its first `at` bytes are written: every write starts at `at` or after it, and moves `at`
/// only over bytes it wrote (`write_framed` relies on this).
struct OpWriter<'b> {
    buf: &'b mut UninitSlice,
    at: usize,
}

impl OpWriter<'_> {
    /// An op's `db` and `key` (each left out when empty, as prost leaves them).
    #[inline(always)]
    fn db_and_key(&mut self, db: usize, key: &[u8]) {
        if db != 0 {
            self.field(1, VARINT, db as u64);
        }
        if !key.is_empty() {
            self.field(2, LEN, key.len() as u64);
            self.bytes(key);
        }
    }

    /// A `Version` message as field `field`, `len` long (its `hlc` and `node`, each left out
    /// when zero).
    #[inline(always)]
    fn version(&mut self, field: u8, v: Version, len: usize) {
        self.field(field, LEN, len as u64);
        if v.hlc != 0 {
            self.field(1, VARINT, v.hlc);
        }
        if v.node != 0 {
            self.field(2, VARINT, u64::from(v.node));
        }
    }

    /// A proto3 scalar field (a varint), left out when zero, as prost leaves it.
    #[inline(always)]
    fn scalar(&mut self, field: u8, value: u64) {
        if value != 0 {
            self.field(field, VARINT, value);
        }
    }

    /// A field's key (its number, below 16, and wire type: one byte) and then `value`, a
    /// varint or a length.
    #[inline(always)]
    fn field(&mut self, field: u8, wire_type: u8, value: u64) {
        debug_assert!(field < 16);
        self.byte(field << 3 | wire_type);
        self.varint(value);
    }

    #[inline(always)]
    fn byte(&mut self, byte: u8) {
        self.buf.write_byte(self.at, byte);
        self.at += 1;
    }

    #[inline(always)]
    fn bytes(&mut self, bytes: &[u8]) {
        self.buf[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }

    /// A varint as prost writes it. Keys, small lengths and the length of an op of up to
    /// 16 KiB take one or two bytes, written inline; a longer one (an HLC takes nine bytes, a
    /// node id up to five) in `long_varint`.
    #[inline(always)]
    fn varint(&mut self, value: u64) {
        if value < 0x80 {
            return self.byte(value as u8);
        }
        if value < 0x4000 {
            self.byte(value as u8 | 0x80);
            return self.byte((value >> 7) as u8);
        }
        self.long_varint(value);
    }

    /// A varint of three bytes or more (an HLC takes nine, a node id up to five), spread into
    /// seven-bit groups eight bytes at a time (`spread_seven_bit_groups`): a loop over their
    /// bytes cost ~110 instructions per op for the HLC and the node id (callgrind). The eight
    /// bytes fit, as `VARINT_ROOM` leaves room after the op's last field; those past the
    /// varint's end are overwritten by the fields after it, or left past the op's end.
    #[inline(always)]
    fn long_varint(&mut self, value: u64) {
        let n = encoded_len_varint(value);
        // Every byte but the varint's last has its top bit set.
        let continued = if n > 8 { u64::MAX } else { (1 << (8 * (n - 1))) - 1 };
        let eight = spread_seven_bit_groups(value) | (continued & 0x8080_8080_8080_8080);
        self.buf[self.at..self.at + 8].copy_from_slice(&eight.to_le_bytes());
        if n > 8 {
            // The ninth byte, and for a value of 2^63 or more the tenth.
            let high = value >> 56;
            if n == 9 {
                self.buf.write_byte(self.at + 8, high as u8);
            } else {
                self.buf.write_byte(self.at + 8, high as u8 | 0x80);
                self.buf.write_byte(self.at + 9, (high >> 7) as u8);
            }
        }
        self.at += n;
    }
}

/// The low 56 bits of `value` as eight seven-bit groups, one per byte (group `i` in byte `i`,
/// top bits clear): `keymesh_proto::reader`'s packing undone, halves first, then pairs of pairs,
/// then pairs.
#[inline]
fn spread_seven_bit_groups(value: u64) -> u64 {
    let x = (value & 0x0000_0000_0fff_ffff) | (value & 0x00ff_ffff_f000_0000) << 4;
    let x = (x & 0x0000_3fff_0000_3fff) | (x & 0x0fff_c000_0fff_c000) << 2;
    (x & 0x007f_007f_007f_007f) | (x & 0x3f80_3f80_3f80_3f80) << 1
}

/// Decodes one op's encoding (an element of a received `EncodedBatch.ops`) into an effect,
/// read as `decode_in` reads it where it lies. The byte fields are slices of `op`'s buffer (no
/// copy), except those a merge keeps as `Bytes` (see `owned`).
pub fn decode(op: Bytes) -> Result<Effect, WireError> {
    Ok(match decode_in(&op, 0..op.len())? {
        Decoded::StringSet(set) => {
            let kind = EffectKind::StringSet { value: op.slice_ref(set.value), version: set.version };
            Effect { db: set.db, key: op.slice_ref(set.key), kind }
        }
        Decoded::Elements(elements) => elements.to_effect(&op),
        Decoded::Counter(counter) => counter.to_effect(&op),
        Decoded::List(list) => Effect { db: list.db, key: op.slice_ref(list.key), kind: list.to_effect_kind() },
        Decoded::Delete(d) => Effect { db: d.db, key: op.slice_ref(d.key), kind: EffectKind::Delete { version: d.version } },
        Decoded::Expire(e) => Effect { db: e.db, key: op.slice_ref(e.key), kind: EffectKind::Expire { deadline_ms: e.deadline_ms, version: e.version } },
        Decoded::Effect(e) => e,
    })
}

/// An op that none of the readers here reads, decoded by prost (or refused).
fn decode_by_prost(op: Bytes) -> Result<Effect, WireError> {
    Effect::try_from(pb::Op::decode(op).map_err(WireError::Malformed)?)
}

/// A counter's contribution as `OpBuffer::push_counter` (and prost) writes it, read field by
/// field where it lies, from the field after the op's `db` and `key` (`COUNTER_KEY`, read
/// already) to the op's `end`: each field at most once, in prost's order, absent when zero.
/// `None` for anything else (fields out of order, repeated or unknown, a value out of range, a
/// truncated field), which prost then decodes (or refuses). Through prost it cost a peer's
/// merged `INCR` ~1,500 instructions (callgrind). `decode_reads_what_prost_reads` checks it
/// against prost.
fn read_counter_after_key<'a>(mut r: Reader<'a>, db: u32, key: &'a [u8], end: usize) -> Option<CounterRef<'a>> {
    let inner_end = r.field_end()?;
    let mut d = CounterDelta { origin: 0, incr_total: 0, decr_total: 0, base: Version::ZERO, version: Version::ZERO, base_value: 0 };
    let mut tag = tag_before(&mut r, inner_end)?;
    if tag == 1 << 3 {
        d.origin = u32::try_from(r.varint()?).ok()?;
        tag = tag_before(&mut r, inner_end)?;
    }
    if tag == 2 << 3 {
        d.incr_total = r.varint()? as i64;
        tag = tag_before(&mut r, inner_end)?;
    }
    if tag == 3 << 3 {
        d.decr_total = r.varint()? as i64;
        tag = tag_before(&mut r, inner_end)?;
    }
    if tag == 4 << 3 | u64::from(LEN) {
        d.base = read_version(&mut r)?;
        tag = tag_before(&mut r, inner_end)?;
    }
    if tag == 5 << 3 | u64::from(LEN) {
        d.version = read_version(&mut r)?;
        tag = tag_before(&mut r, inner_end)?;
    }
    if tag == 6 << 3 {
        d.base_value = r.varint()? as i64;
        tag = tag_before(&mut r, inner_end)?;
    }
    read_whole(tag, &r, inner_end, end)?;
    Some(CounterRef { db: db as usize, key, delta: d })
}

/// An op of database 0 in one of the usual layouts `read_usual_elements` and
/// `read_usual_expire` read, or a tombstone with both halves of its version set, its key's
/// length one or two bytes; `None` for anything else.
#[inline(always)]
fn read_usual_op(whole: &[u8], span: std::ops::Range<usize>) -> Option<Decoded<'_>> {
    let end = span.end;
    let at = expect_tag(whole, span.start, 2 << 3 | LEN)?;
    let (key_len, at) = short_length(whole, at)?;
    let key = whole.get(at..at + key_len)?;
    let at = at + key_len;
    // The effect ends where the op ends.
    let effect_at = |at| short_length(whole, at + 1).filter(|&(effect_len, at)| at + effect_len == end).map(|(_, at)| at);
    match *whole.get(at)? {
        tag if tag == HASH_TAG << 3 | LEN => read_usual_elements(whole, key, ElementKind::Hash, effect_at(at)?, end).map(Decoded::Elements),
        tag if tag == SET_TAG << 3 | LEN => read_usual_elements(whole, key, ElementKind::Set, effect_at(at)?, end).map(Decoded::Elements),
        tag if tag == ZSET_TAG << 3 | LEN => read_usual_elements(whole, key, ElementKind::ZSet, effect_at(at)?, end).map(Decoded::Elements),
        tag if tag == EXPIRE_TAG << 3 | LEN => read_usual_expire(whole, key, effect_at(at)?, end).map(Decoded::Expire),
        tag if tag == COUNTER_TAG << 3 | LEN => read_usual_counter(whole, key, effect_at(at)?, end).map(Decoded::Counter),
        // A tombstone is its version alone (read field by field by `read_delete_after_key`,
        // ~115 instructions more of a peer's merged `DEL`, callgrind).
        tag if tag == DELETE_TAG << 3 | LEN => {
            let version = usual_version_at_end(whole, effect_at(at)?, 1 << 3 | LEN, end)?;
            Some(Decoded::Delete(DeleteRef { db: 0, key, version }))
        }
        _ => None,
    }
}

/// A key's expiry register as `OpBuffer::push_expire` writes a deadline (`SET … EX`, `EXPIRE`),
/// from its effect's first field at `at`: the deadline, then a version with both halves set.
/// Read field by field (`read_expire_after_key`), such an op cost a peer ~120 instructions
/// more (a merged `SETEX`'s second op: ~420 to decode, callgrind). `None` for anything else
/// (no deadline: `PERSIST`).
#[inline(always)]
fn read_usual_expire<'a>(whole: &'a [u8], key: &'a [u8], at: usize, end: usize) -> Option<ExpireRef<'a>> {
    let mut r = Reader::starting_at(whole, expect_tag(whole, at, 1 << 3)?);
    let deadline_ms = r.varint()?;
    let version = usual_version_at_end(whole, r.at(), 2 << 3 | LEN, end)?;
    Some(ExpireRef { db: 0, key, deadline_ms, version })
}

/// A counter's contribution as `OpBuffer::push_counter` writes an `INCR`'s or a `DECRBY`'s,
/// from its effect's first field at `at`: its origin, its totals where not zero, the base it
/// counted from (none, or both halves set), its version with both halves set and the base's
/// value where not zero, each field's key one expected byte. `None` for anything else (a
/// base-only delta, which has no origin; a version with a half unset), which
/// `read_counter_after_key` reads field by field: read that way, with the op's key read twice,
/// such an op cost a peer ~550 instructions (a merged `INCR`'s, callgrind). Out of line: inlined
/// into `read_usual_op`, it cost a merged tombstone ~12 instructions more (callgrind), and
/// saved a merged `INCR` ~20.
#[inline(never)]
fn read_usual_counter<'a>(whole: &'a [u8], key: &'a [u8], at: usize, end: usize) -> Option<CounterRef<'a>> {
    let mut r = Reader::starting_at(whole, expect_tag(whole, at, 1 << 3)?);
    let origin = u32::try_from(r.varint()?).ok()?;
    let incr_total = if r.expect(2 << 3).is_some() { r.varint()? as i64 } else { 0 };
    let decr_total = if r.expect(3 << 3).is_some() { r.varint()? as i64 } else { 0 };
    r.expect(4 << 3 | LEN)?;
    // A base of zero (no `SET` or `DEL` seen yet) is an empty message.
    let (base, at) = if r.expect(0).is_some() { (Version::ZERO, r.at()) } else { usual_version(whole, r.at())? };
    let (version, at) = usual_version(whole, expect_tag(whole, at, 5 << 3 | LEN)?)?;
    let mut r = Reader::starting_at(whole, at);
    // The base's value, if any, ends the op: a byte past its end belongs to the next op.
    let base_value = if r.at() < end {
        r.expect(6 << 3)?;
        r.varint()? as i64
    } else {
        0
    };
    (r.at() == end).then_some(CounterRef { db: 0, key, delta: CounterDelta { origin, incr_total, decr_total, base, version, base_value } })
}

/// A `Version` message with both halves set, from its length at `at` (its key read already):
/// the length, the `hlc` and the `node`, ending where the length says; the version and the
/// position after it, or `None` for anything else.
#[inline(always)]
fn usual_version(whole: &[u8], at: usize) -> Option<(Version, usize)> {
    let (len, at) = short_length(whole, at)?;
    let mut r = Reader::starting_at(whole, expect_tag(whole, at, 1 << 3)?);
    let hlc = r.varint()?;
    r.expect(2 << 3)?;
    let node = u32::try_from(r.varint()?).ok()?;
    (r.at() == at + len).then_some((Version { hlc, node }, r.at()))
}

/// A hash's, set's or sorted set's op in the one layout `OpBuffer::push_elements` writes for
/// an edit of one element (most edits), from its effect's first field at `at` (`read_usual_op`
/// read the key): its name not empty and both halves of its version set, the lengths one or
/// two bytes, as `read_usual_string_set` reads a string's. Read field by field
/// (`read_elements_after_key`), such an op cost a peer ~380 instructions (a merged `HSET`'s,
/// callgrind). `None` for anything else.
#[inline(always)]
fn read_usual_elements<'a>(whole: &'a [u8], key: &'a [u8], kind: ElementKind, at: usize, end: usize) -> Option<ElementsRef<'a>> {
    // Its one element ends where the op ends.
    let at = expect_tag(whole, at, 1 << 3 | LEN)?;
    let (element_len, at) = short_length(whole, at)?;
    (at + element_len == end).then_some(())?;
    let at = expect_tag(whole, at, 1 << 3 | LEN)?;
    let (name_len, at) = short_length(whole, at)?;
    let name = whole.get(at..at + name_len)?;
    let at = at + name_len;
    // What the element holds, if anything (a removed one holds nothing: its version follows).
    let (held, at) = match (kind, *whole.get(at)?) {
        (ElementKind::ZSet, tag) if tag == 2 << 3 | I64 => {
            let score = whole.get(at + 1..at + 9)?;
            (Held::Score(f64::from_le_bytes(score.try_into().ok()?)), at + 9)
        }
        (ElementKind::Hash | ElementKind::Set, tag) if tag == 2 << 3 | LEN => {
            let (len, at) = short_length(whole, at + 1)?;
            (Held::Bytes(whole.get(at..at + len)?), at + len)
        }
        _ => (Held::Removed, at),
    };
    let version = usual_version_at_end(whole, at, 3 << 3 | LEN, end)?;
    // Made inline whole (`smallvec!` pushes).
    let states = SmallVec::from_buf([ElementRef { name, held, version }]);
    Some(ElementsRef { db: 0, key, elements: Elements { kind, states } })
}

/// A hash's, set's or sorted set's op as `OpBuffer::push_value` (and prost) writes it, read
/// field by field where it lies, from the field after the op's `db` and `key` (`tag` its key,
/// read already) to the op's `end`: `None` for anything else (another kind, fields out of
/// order, repeated or unknown, a truncated field), which prost then decodes (or refuses).
/// Through prost, such an op was decoded into prost's messages and then converted, a second
/// vector and every name and value handled twice: ~2,400 instructions of a peer's ~5,000 per
/// merged `HSET` (callgrind); read into an `Effect`, every name and value was still copied out
/// of the frame and freed after the merge, which copies them again into the keyspace (~600 of
/// a peer's ~3,550). `decode_reads_what_prost_reads` checks it against prost.
fn read_elements_after_key<'a>(mut r: Reader<'a>, db: u32, key: &'a [u8], mut tag: u64, end: usize) -> Option<ElementsRef<'a>> {
    let kind = match (tag >> 3) as u8 {
        HASH_TAG => ElementKind::Hash,
        SET_TAG => ElementKind::Set,
        ZSET_TAG => ElementKind::ZSet,
        _ => return None,
    };
    if tag & 7 != u64::from(LEN) {
        return None;
    }
    let inner_end = r.field_end()?;
    let mut states: SmallVec<[ElementRef<'_>; 1]> = SmallVec::new();
    while r.at() < inner_end {
        r.expect(1 << 3 | LEN)?;
        let element_end = r.field_end()?;
        let mut name: &[u8] = &[];
        let mut held = Held::Removed;
        let mut version = Version::ZERO;
        tag = tag_before(&mut r, element_end)?;
        if tag == u64::from(1 << 3 | LEN) {
            name = r.slice()?;
            tag = tag_before(&mut r, element_end)?;
        }
        if kind == ElementKind::ZSet && tag == u64::from(2 << 3 | I64) {
            held = Held::Score(f64::from_bits(r.fixed64()?));
            tag = tag_before(&mut r, element_end)?;
        } else if kind != ElementKind::ZSet && tag == u64::from(2 << 3 | LEN) {
            held = Held::Bytes(r.slice()?);
            tag = tag_before(&mut r, element_end)?;
        }
        if tag == u64::from(3 << 3 | LEN) {
            version = read_version(&mut r)?;
        } else if tag != 0 {
            return None;
        }
        if r.at() != element_end {
            return None;
        }
        states.push(ElementRef { name, held, version });
    }
    // Nothing after the effect: a repeated field would be merged by prost.
    if r.at() != inner_end || r.at() != end {
        return None;
    }
    Some(ElementsRef { db: db as usize, key, elements: Elements { kind, states } })
}

/// Whether a hand reader read its effect whole: no field left after the last it knows (`tag`
/// 0: a field repeated or unknown would be merged by prost), and the effect ending at
/// `inner_end` where the op ends (`end`).
#[inline(always)]
fn read_whole(tag: u64, r: &Reader<'_>, inner_end: usize, end: usize) -> Option<()> {
    (tag == 0 && r.at() == inner_end && r.at() == end).then_some(())
}

/// The key of the next field if one starts before `end`, else 0 (a message's end).
#[inline(always)]
fn tag_before(r: &mut Reader<'_>, end: usize) -> Option<u64> {
    if r.at() < end {
        r.tag()
    } else {
        Some(0)
    }
}

/// An op's `db` and `key` (each absent when zero or empty), and the key of the field after
/// them.
#[inline(always)]
fn read_db_and_key<'a>(r: &mut Reader<'a>) -> Option<(u32, &'a [u8], u64)> {
    let mut db = 0;
    let mut key: &[u8] = &[];
    let mut tag = r.tag()?;
    if tag == 1 << 3 {
        db = u32::try_from(r.varint()?).ok()?;
        tag = r.tag()?;
    }
    if tag == 2 << 3 | 2 {
        key = r.slice()?;
        tag = r.tag()?;
    }
    Some((db, key, tag))
}

/// A `Version` message (its key read already): `hlc` and `node` in that order, each absent
/// when zero; `None` for anything else.
#[inline(always)]
fn read_version(r: &mut Reader<'_>) -> Option<Version> {
    let mut version = Version::ZERO;
    let version_end = r.field_end()?;
    if r.at() < version_end {
        let mut tag = r.tag()?;
        if tag == 1 << 3 {
            version.hlc = r.varint()?;
            tag = tag_before(r, version_end)?;
        }
        if tag == 2 << 3 {
            version.node = u32::try_from(r.varint()?).ok()?;
        } else if tag != 0 {
            return None;
        }
    }
    (r.at() == version_end).then_some(version)
}

/// A string's write (most ops), its key and value borrowed from the bytes it was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StringSetRef<'a> {
    pub db: usize,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub version: Version,
}

/// A key's tombstone, with its key borrowed from the bytes it was read from
/// (`read_delete_after_key`).
#[derive(Debug, Clone, Copy)]
pub struct DeleteRef<'a> {
    pub db: usize,
    pub key: &'a [u8],
    pub version: Version,
}

/// A key's expiry register (its deadline, 0 for none), with its key borrowed from the bytes
/// it was read from (`read_expire_after_key`).
#[derive(Debug, Clone, Copy)]
pub struct ExpireRef<'a> {
    pub db: usize,
    pub key: &'a [u8],
    pub deadline_ms: u64,
    pub version: Version,
}

/// A key's tombstone as `OpBuffer::push_delete` (and prost) writes it, read where it lies from
/// the field after the op's `db` and `key` (`DELETE_KEY`, read already) to the op's `end`:
/// its version, if any. `None` for anything else, which prost then decodes (or refuses).
/// Through prost (an `Effect` with its key copied) it cost a peer ~830 instructions more
/// (callgrind). `decode_reads_what_prost_reads` checks it against prost.
fn read_delete_after_key<'a>(mut r: Reader<'a>, db: u32, key: &'a [u8], end: usize) -> Option<DeleteRef<'a>> {
    let inner_end = r.field_end()?;
    let mut version = Version::ZERO;
    let mut tag = tag_before(&mut r, inner_end)?;
    if tag == 1 << 3 | u64::from(LEN) {
        version = read_version(&mut r)?;
        tag = tag_before(&mut r, inner_end)?;
    }
    read_whole(tag, &r, inner_end, end)?;
    Some(DeleteRef { db: db as usize, key, version })
}

/// A key's expiry register as `OpBuffer::push_expire` (and prost) writes it, read where it lies
/// as `read_delete_after_key` reads a tombstone: its deadline (absent when 0), then its
/// version.
fn read_expire_after_key<'a>(mut r: Reader<'a>, db: u32, key: &'a [u8], end: usize) -> Option<ExpireRef<'a>> {
    let inner_end = r.field_end()?;
    let (mut deadline_ms, mut version) = (0, Version::ZERO);
    let mut tag = tag_before(&mut r, inner_end)?;
    if tag == 1 << 3 {
        deadline_ms = r.varint()?;
        tag = tag_before(&mut r, inner_end)?;
    }
    if tag == 2 << 3 | u64::from(LEN) {
        version = read_version(&mut r)?;
        tag = tag_before(&mut r, inner_end)?;
    }
    read_whole(tag, &r, inner_end, end)?;
    Some(ExpireRef { db: db as usize, key, deadline_ms, version })
}

/// A list's whole value, with its key and items borrowed from the bytes it was read from
/// (`read_list_after_key`).
#[derive(Debug, Clone, Copy)]
pub struct ListRef<'a> {
    pub db: usize,
    pub key: &'a [u8],
    /// The items' fields as they lie, each its key, its length and its bytes, read and checked
    /// already (`items` walks them).
    fields: &'a [u8],
    /// How many items.
    pub len: usize,
    pub version: Version,
}

impl<'a> ListRef<'a> {
    /// The items, in order.
    pub fn items(&self) -> impl ExactSizeIterator<Item = &'a [u8]> + 'a {
        let (fields, mut at) = (self.fields, 0);
        // Each field was checked as it was read (`next_item`): it is there, whole.
        (0..self.len).map(move |_| {
            let (item, next) = next_item(fields, at, fields.len()).expect("a list item read already");
            at = next;
            item
        })
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The effect's kind, its items copied (`owned`).
    fn to_effect_kind(self) -> EffectKind {
        EffectKind::List { items: self.items().map(Bytes::copy_from_slice).collect(), version: self.version }
    }
}

/// A list's whole value as `OpBuffer::push_list` (and prost) writes it, read where it lies from
/// the field after the op's `db` and `key` (`LIST_KEY`, read already) to the op's `end`: its
/// items, in order, then its version. `None` for anything else (fields out of order, repeated
/// or unknown, an item's key written in more bytes than prost writes it, a truncated field),
/// which prost then decodes (or refuses). An item whose length runs past the value ends the
/// items there, and is refused as the field after them. `decode_reads_what_prost_reads`
/// checks it against prost.
fn read_list_after_key<'a>(whole: &'a [u8], mut r: Reader<'a>, db: u32, key: &'a [u8], end: usize) -> Option<ListRef<'a>> {
    let inner_end = r.field_end()?;
    let (fields_start, mut fields_end, mut len) = (r.at(), r.at(), 0);
    while let Some((_, next)) = next_item(whole, fields_end, inner_end) {
        (fields_end, len) = (next, len + 1);
    }
    // The field after the items, read as any other.
    r = Reader::starting_at(whole, fields_end);
    let mut tag = tag_before(&mut r, inner_end)?;
    let mut version = Version::ZERO;
    if tag == 2 << 3 | u64::from(LEN) {
        version = read_version(&mut r)?;
        tag = tag_before(&mut r, inner_end)?;
    }
    read_whole(tag, &r, inner_end, end)?;
    Some(ListRef { db: db as usize, key, fields: &whole[fields_start..fields_end], len, version })
}

/// The list item whose field starts at `at` (its key the one byte prost writes for it), and
/// where the field after it starts; `None` at `end`, at another field, or for an item whose
/// length runs past `end` (which the caller then reads as another field, or refuses). Items
/// are read twice, to check and count them and then to copy them (`ListRef::items`): a field's
/// key read as a varint, its length by `Reader::slice`, cost ~80 instructions an item both times.
#[inline(always)]
fn next_item(bytes: &[u8], at: usize, end: usize) -> Option<(&[u8], usize)> {
    const ITEM_KEY: u8 = 1 << 3 | LEN;
    if at >= end || *bytes.get(at)? != ITEM_KEY {
        return None;
    }
    let mut r = Reader::starting_at(bytes, at + 1);
    let len = usize::try_from(r.varint()?).ok()?;
    let start = r.at();
    let next = start.checked_add(len).filter(|&next| next <= end)?;
    Some((&bytes[start..next], next))
}

/// A counter's contribution, with its key borrowed from the bytes it was read from
/// (`read_counter_after_key`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CounterRef<'a> {
    pub db: usize,
    pub key: &'a [u8],
    pub delta: CounterDelta,
}

impl CounterRef<'_> {
    /// The op as an `Effect` of its own, its key a slice of `whole` (the bytes it was read from).
    fn to_effect(self, whole: &Bytes) -> Effect {
        Effect { db: self.db, key: whole.slice_ref(self.key), kind: EffectKind::Counter(self.delta) }
    }
}

/// A hash's, set's or sorted set's element states, with its key, borrowed from the bytes they
/// were read from (`read_usual_elements`, `read_elements_after_key`).
#[derive(Debug, Clone, PartialEq)]
pub struct ElementsRef<'a> {
    pub db: usize,
    pub key: &'a [u8],
    pub elements: Elements<'a>,
}

impl ElementsRef<'_> {
    /// The op as an `Effect` of its own, its key a slice of `whole` (the bytes it was read
    /// from), its names and values copied (`owned`).
    fn to_effect(&self, whole: &Bytes) -> Effect {
        Effect { db: self.db, key: whole.slice_ref(self.key), kind: self.elements.to_effect_kind() }
    }
}

/// An op read where it lies in a received batch (`decode_in`).
#[derive(Debug)]
pub enum Decoded<'a> {
    /// A string's write, borrowed: no `Bytes` handle for the op, its key or its value (each
    /// was two atomic operations on the frame's reference count, ~6% of a peer's CPU).
    StringSet(StringSetRef<'a>),
    /// A collection's element states, borrowed.
    Elements(ElementsRef<'a>),
    /// A counter's contribution, its key borrowed.
    Counter(CounterRef<'a>),
    /// A list's whole value, its key and items borrowed.
    List(ListRef<'a>),
    /// A key's tombstone, its key borrowed.
    Delete(DeleteRef<'a>),
    /// A key's expiry register, its key borrowed.
    Expire(ExpireRef<'a>),
    Effect(Effect),
}

impl Decoded<'_> {
    pub fn db(&self) -> usize {
        match self {
            Decoded::StringSet(set) => set.db,
            Decoded::Elements(op) => op.db,
            Decoded::Counter(op) => op.db,
            Decoded::List(op) => op.db,
            Decoded::Delete(op) => op.db,
            Decoded::Expire(op) => op.db,
            Decoded::Effect(e) => e.db,
        }
    }

    pub fn key(&self) -> &[u8] {
        match self {
            Decoded::StringSet(set) => set.key,
            Decoded::Elements(op) => op.key,
            Decoded::Counter(op) => op.key,
            Decoded::List(op) => op.key,
            Decoded::Delete(op) => op.key,
            Decoded::Expire(op) => op.key,
            Decoded::Effect(e) => &e.key,
        }
    }

    /// The op as an `Effect` of its own (a borrowed op's key, names and values copied): what
    /// `decode` gives, for the checks that compare the two.
    pub fn to_effect(&self) -> Effect {
        match self {
            Decoded::StringSet(set) => Effect::new(set.db, set.key, EffectKind::StringSet { value: Bytes::copy_from_slice(set.value), version: set.version }),
            Decoded::Elements(op) => Effect::new(op.db, op.key, op.elements.to_effect_kind()),
            Decoded::Counter(op) => Effect::counter(op.db, op.key, op.delta),
            Decoded::List(op) => Effect::new(op.db, op.key, op.to_effect_kind()),
            Decoded::Delete(op) => Effect::delete(op.db, op.key, op.version),
            Decoded::Expire(op) => Effect::expire(op.db, op.key, op.deadline_ms, op.version),
            Decoded::Effect(e) => e.clone(),
        }
    }
}

/// Decodes the op at `span` of `frame` (a received batch's ops, `FramedOps::spans`): a
/// string's write borrowed from the frame, any other as `decode` decodes it.
#[inline]
pub fn decode_in(frame: &Bytes, span: std::ops::Range<usize>) -> Result<Decoded<'_>, WireError> {
    if let Some(set) = read_usual_string_set(frame, span.clone()) {
        return Ok(Decoded::StringSet(set));
    }
    decode_unusual_in(frame, span)
}

/// The keys of `Op`'s `string_set`, `counter`, `delete`, `expire` and `list` fields.
const STRING_SET_KEY: u64 = 3 << 3 | LEN as u64;
const COUNTER_KEY: u64 = (COUNTER_TAG << 3 | LEN) as u64;
const DELETE_KEY: u64 = (DELETE_TAG << 3 | LEN) as u64;
const EXPIRE_KEY: u64 = (EXPIRE_TAG << 3 | LEN) as u64;
const LIST_KEY: u64 = (LIST_TAG << 3 | LEN) as u64;

/// `decode_in` of an op that is not a usual string write, out of line: the usual one's reader
/// stays small where it is inlined.
#[inline(never)]
fn decode_unusual_in(frame: &Bytes, span: std::ops::Range<usize>) -> Result<Decoded<'_>, WireError> {
    if let Some(op) = read_usual_op(frame, span.clone()) {
        return Ok(op);
    }
    // The op's `db` and `key` read once, its kind by the field after them.
    let mut r = Reader::starting_at(frame, span.start);
    if let Some((db, key, tag)) = read_db_and_key(&mut r) {
        let read = match tag {
            STRING_SET_KEY => read_string_set_after_key(r, db, key, tag, span.end).map(Decoded::StringSet),
            COUNTER_KEY => read_counter_after_key(r, db, key, span.end).map(Decoded::Counter),
            LIST_KEY => read_list_after_key(frame, r, db, key, span.end).map(Decoded::List),
            DELETE_KEY => read_delete_after_key(r, db, key, span.end).map(Decoded::Delete),
            EXPIRE_KEY => read_expire_after_key(r, db, key, span.end).map(Decoded::Expire),
            _ => read_elements_after_key(r, db, key, tag, span.end).map(Decoded::Elements),
        };
        if let Some(op) = read {
            return Ok(op);
        }
    }
    decode_by_prost(frame.slice(span)).map(Decoded::Effect)
}

/// A string's write as `OpBuffer::push` (and prost) writes it, of any layout, read field by
/// field from the field after the op's `db` and `key` (`tag` its key, read already) to the
/// op's `end`: `None` for anything else (fields out of order, repeated or unknown, a value out
/// of range, a truncated field), which prost then decodes (or refuses).
/// `decode_reads_what_prost_reads` checks it against prost. A field that claims to run past
/// the span leaves the cursor past its end, which the last check refuses (reads only move
/// forward, and never past `whole`).
fn read_string_set_after_key<'a>(mut r: Reader<'a>, db: u32, key: &'a [u8], tag: u64, end: usize) -> Option<StringSetRef<'a>> {
    if tag != 3 << 3 | 2 {
        return None;
    }
    let inner_end = r.field_end()?;
    let mut value: &[u8] = &[];
    let mut version = Version::ZERO;
    if r.at() < inner_end {
        let mut tag = r.tag()?;
        if tag == 1 << 3 | 2 {
            value = r.slice()?;
            tag = tag_before(&mut r, inner_end)?;
        }
        if tag == 2 << 3 | 2 {
            version = read_version(&mut r)?;
        } else if tag != 0 {
            return None;
        }
    }
    // Nothing after the effect: a repeated field would be merged by prost.
    if r.at() != inner_end || r.at() != end {
        return None;
    }
    Some(StringSetRef { db: db as usize, key, value, version })
}

/// A string's write in the one layout `StringSetOp::write_framed` writes for a write in
/// database 0 with a key, a value and both halves of its version set (every string write a
/// node stamps there), each field's key one expected byte, the key's, the value's and the
/// messages' lengths one or two bytes, and the two messages ending where the op ends. `None`
/// for anything else, which `read_string_set_after_key` reads field by field. Each length
/// moves the position, and a position is checked only where a byte is read there (`get`); the
/// two messages' ends are compared with the span's, which bounds everything after the first.
/// Its version is the op's last field (`usual_version_at_end`).
#[inline(always)]
fn read_usual_string_set(whole: &[u8], span: std::ops::Range<usize>) -> Option<StringSetRef<'_>> {
    let end = span.end;
    let at = expect_tag(whole, span.start, 2 << 3 | 2)?;
    let (key_len, at) = short_length(whole, at)?;
    let key = whole.get(at..at + key_len)?;
    let at = expect_tag(whole, at + key_len, 3 << 3 | 2)?;
    let (set_len, at) = short_length(whole, at)?;
    (at + set_len == end).then_some(())?;
    let at = expect_tag(whole, at, 1 << 3 | 2)?;
    let (value_len, at) = short_length(whole, at)?;
    let value = whole.get(at..at + value_len)?;
    let version = usual_version_at_end(whole, at + value_len, 2 << 3 | 2, end)?;
    Some(StringSetRef { db: 0, key, value, version })
}

/// A version with both halves set, as field `tag` (its key) at `at`, the op's last field: its
/// key, its length, the `hlc` and the `node`, ending at `end`. The node id is read eight bytes
/// at a time from the bytes after it (`Reader::varint`): the frame's, as a cursor over the op
/// alone read it through a padded copy. `usual_version` with its end checked before the reads:
/// written as a call to it, checking the end after, a merged `SET` cost ~6 instructions more
/// (callgrind), so this hottest of readers keeps its own lines.
#[inline(always)]
fn usual_version_at_end(whole: &[u8], at: usize, tag: u8, end: usize) -> Option<Version> {
    let at = expect_tag(whole, at, tag)?;
    let (version_len, at) = short_length(whole, at)?;
    (at + version_len == end).then_some(())?;
    let mut r = Reader::starting_at(whole, expect_tag(whole, at, 1 << 3)?);
    let hlc = r.varint()?;
    r.expect(2 << 3)?;
    let node = u32::try_from(r.varint()?).ok()?;
    (r.at() == end).then_some(Version { hlc, node })
}

/// The position after the byte at `at` if it is `tag` (a field's one-byte key).
#[inline(always)]
fn expect_tag(bytes: &[u8], at: usize, tag: u8) -> Option<usize> {
    (*bytes.get(at)? == tag).then_some(at + 1)
}

/// A length of one or two bytes at `at` (up to 16 KiB), as prost reads it, and the position
/// after it; `None` for a longer one (read field by field).
#[inline(always)]
fn short_length(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    let first = *bytes.get(at)?;
    if first < 0x80 {
        return Some((usize::from(first), at + 1));
    }
    let second = *bytes.get(at + 1)?;
    (second < 0x80).then_some((usize::from(first & 0x7f) | usize::from(second) << 7, at + 2))
}

pub fn version(v: Version) -> Option<pb::Version> {
    Some(pb::Version { hlc: v.hlc, node: v.node })
}

pub fn from_pb(v: Option<&pb::Version>) -> Version {
    v.map_or(Version::ZERO, |v| Version { hlc: v.hlc, node: v.node })
}

/// A received byte field that the node keeps as `Bytes` (a list item, a hash field's name or
/// value, a set or sorted-set member, a library's code, a published message queued for slow
/// subscribers), copied out of the frame it arrived in: decoding slices the receive buffer,
/// and what the node keeps must not pin that whole buffer for as long as it lives.
///
/// The key and a string's value stay slices of the frame, without a copy: an effect lives
/// only while it is merged, and the merge copies what it keeps of them into the keyspace's own
/// types (the key into the table's allocation or a tombstone's, a string's value into its
/// `StrBuf`, a keyspace event's key into the event, `notify::merged_events`). The test
/// `a_merged_op_keeps_no_slice_of_the_frame_it_arrived_in` checks that no effect kind leaves
/// the frame shared after its merge.
fn owned(b: Bytes) -> Bytes {
    Bytes::copy_from_slice(&b)
}

impl From<CounterDelta> for pb::CounterDelta {
    fn from(d: CounterDelta) -> pb::CounterDelta {
        pb::CounterDelta {
            origin: d.origin,
            incr_total: d.incr_total,
            decr_total: d.decr_total,
            base: version(d.base),
            version: version(d.version),
            base_value: d.base_value,
        }
    }
}

impl From<&pb::CounterDelta> for CounterDelta {
    fn from(d: &pb::CounterDelta) -> CounterDelta {
        CounterDelta {
            origin: d.origin,
            incr_total: d.incr_total,
            decr_total: d.decr_total,
            base: from_pb(d.base.as_ref()),
            version: from_pb(d.version.as_ref()),
            base_value: d.base_value,
        }
    }
}

impl From<Effect> for pb::Op {
    fn from(e: Effect) -> pb::Op {
        let effect = match e.kind {
            EffectKind::StringSet { value, version: v } => PbEffect::StringSet(pb::StringSet { value, version: version(v) }),
            EffectKind::Counter(d) => PbEffect::Counter(d.into()),
            EffectKind::Delete { version: v } => PbEffect::Delete(pb::Delete { version: version(v) }),
            EffectKind::Expire { deadline_ms, version: v } => PbEffect::Expire(pb::Expire { deadline_ms, version: version(v) }),
            EffectKind::Hash(fields) => PbEffect::Hash(pb::HashFields {
                fields: fields.into_iter().map(|f| pb::FieldState { name: f.name, value: f.value, version: version(f.version) }).collect(),
            }),
            EffectKind::Set(members) => PbEffect::Set(pb::SetMembers {
                members: members.into_iter().map(|m| pb::FieldState { name: m.name, value: m.present.then(Bytes::new), version: version(m.version) }).collect(),
            }),
            EffectKind::ZSet(members) => PbEffect::Zset(pb::ZSetMembers {
                members: members.into_iter().map(|m| pb::ZSetMember { name: m.name, score: m.score, version: version(m.version) }).collect(),
            }),
            EffectKind::List { items, version: v } => PbEffect::List(pb::ListValue { items, version: version(v) }),
            EffectKind::FlushDb { version: v } => PbEffect::FlushDb(pb::FlushDb { version: version(v) }),
            EffectKind::Publish { channel, message } => PbEffect::Publish(pb::Publish { channel, message }),
            EffectKind::Hll { version: v, registers } => PbEffect::Hll(pb::HllRegisters { version: version(v), registers }),
            EffectKind::Library { code, version: v } => PbEffect::FunctionLibrary(pb::FunctionLibrary { code, version: version(v) }),
            EffectKind::FunctionFlush { version: v } => PbEffect::FunctionFlush(pb::FunctionFlush { version: version(v) }),
        };
        pb::Op { db: e.db as u32, key: e.key, effect: Some(effect) }
    }
}

impl TryFrom<pb::Op> for Effect {
    type Error = WireError;

    fn try_from(op: pb::Op) -> Result<Effect, WireError> {
        let kind = match op.effect.ok_or(WireError::NoEffect)? {
            // Copied by the merge (`Value::string`): not here too.
            PbEffect::StringSet(s) => EffectKind::StringSet { value: s.value, version: from_pb(s.version.as_ref()) },
            PbEffect::Counter(d) => EffectKind::Counter((&d).into()),
            PbEffect::Delete(d) => EffectKind::Delete { version: from_pb(d.version.as_ref()) },
            PbEffect::Expire(e) => EffectKind::Expire { deadline_ms: e.deadline_ms, version: from_pb(e.version.as_ref()) },
            PbEffect::Hash(h) => EffectKind::Hash(
                h.fields.into_iter().map(|f| FieldState { version: from_pb(f.version.as_ref()), name: owned(f.name), value: f.value.map(owned) }).collect(),
            ),
            PbEffect::Set(s) => EffectKind::Set(
                s.members.into_iter().map(|m| MemberState { version: from_pb(m.version.as_ref()), name: owned(m.name), present: m.value.is_some() }).collect(),
            ),
            PbEffect::Zset(z) => EffectKind::ZSet(
                z.members.into_iter().map(|m| ZSetMemberState { version: from_pb(m.version.as_ref()), name: owned(m.name), score: m.score }).collect(),
            ),
            PbEffect::List(l) => EffectKind::List { version: from_pb(l.version.as_ref()), items: l.items.into_iter().map(owned).collect() },
            PbEffect::FlushDb(f) => EffectKind::FlushDb { version: from_pb(f.version.as_ref()) },
            PbEffect::Publish(p) => EffectKind::Publish { channel: owned(p.channel), message: owned(p.message) },
            PbEffect::Hll(h) => EffectKind::Hll { version: from_pb(h.version.as_ref()), registers: h.registers },
            PbEffect::FunctionLibrary(l) => EffectKind::Library { code: l.code.map(owned), version: from_pb(l.version.as_ref()) },
            PbEffect::FunctionFlush(f) => EffectKind::FunctionFlush { version: from_pb(f.version.as_ref()) },
            PbEffect::KeyState(_) => return Err(WireError::KeyState),
        };
        // The key is copied where the keyspace keeps it (its table entry, a tombstone).
        Ok(Effect { db: op.db as usize, key: op.key, kind })
    }
}

/// The length of `e`'s protobuf encoding (`pb::Op::from(e).encoded_len()`), computed without
/// building it: the backlog sizes its entries by it (`repl::log`), as it did when it held ops.
pub fn encoded_len(e: &Effect) -> usize {
    let inner = match &e.kind {
        EffectKind::StringSet { value, version: v } => bytes_field(1, value.len()) + version_field(2, *v),
        EffectKind::Counter(d) => counter_len(d),
        EffectKind::Delete { version: v } | EffectKind::FlushDb { version: v } | EffectKind::FunctionFlush { version: v } => version_field(1, *v),
        EffectKind::Expire { deadline_ms, version: v } => varint_field(1, *deadline_ms) + version_field(2, *v),
        EffectKind::Hash(fields) => fields
            .iter()
            .map(|f| message_field(1, bytes_field(1, f.name.len()) + f.value.as_ref().map_or(0, |b| present_bytes(2, b.len())) + version_field(3, f.version)))
            .sum(),
        EffectKind::Set(members) => members
            .iter()
            .map(|m| message_field(1, bytes_field(1, m.name.len()) + if m.present { present_bytes(2, 0) } else { 0 } + version_field(3, m.version)))
            .sum(),
        EffectKind::ZSet(members) => {
            members.iter().map(|m| message_field(1, bytes_field(1, m.name.len()) + m.score.map_or(0, |_| key_len(2) + 8) + version_field(3, m.version))).sum()
        }
        EffectKind::List { items, version: v } => items.iter().map(|i| present_bytes(1, i.len())).sum::<usize>() + version_field(2, *v),
        EffectKind::Publish { channel, message } => bytes_field(1, channel.len()) + bytes_field(2, message.len()),
        EffectKind::Hll { version: v, registers } => {
            let packed: usize = registers.iter().map(|&r| encoded_len_varint(u64::from(r))).sum();
            version_field(1, *v) + if registers.is_empty() { 0 } else { message_field(2, packed) }
        }
        EffectKind::Library { code, version: v } => code.as_ref().map_or(0, |c| present_bytes(1, c.len())) + version_field(2, *v),
    };
    varint_field(1, e.db as u64) + bytes_field(2, e.key.len()) + message_field(oneof_tag(&e.kind), inner)
}

fn oneof_tag(kind: &EffectKind) -> u32 {
    match kind {
        EffectKind::StringSet { .. } => 3,
        EffectKind::Counter(_) => 4,
        EffectKind::Delete { .. } => 5,
        EffectKind::Expire { .. } => 6,
        EffectKind::Hash(_) => 7,
        EffectKind::Set(_) => 8,
        EffectKind::ZSet(_) => 9,
        EffectKind::List { .. } => 10,
        EffectKind::FlushDb { .. } => 11,
        EffectKind::Publish { .. } => 12,
        EffectKind::Hll { .. } => 14,
        EffectKind::Library { .. } => 15,
        EffectKind::FunctionFlush { .. } => 16,
    }
}

fn counter_len(d: &CounterDelta) -> usize {
    varint_field(1, u64::from(d.origin))
        + varint_field(2, d.incr_total as u64)
        + varint_field(3, d.decr_total as u64)
        + version_field(4, d.base)
        + version_field(5, d.version)
        + varint_field(6, d.base_value as u64)
}

/// A proto3 scalar: absent when zero.
fn varint_field(tag: u32, value: u64) -> usize {
    if value == 0 {
        0
    } else {
        key_len(tag) + encoded_len_varint(value)
    }
}

/// A proto3 `bytes`: absent when empty.
fn bytes_field(tag: u32, len: usize) -> usize {
    if len == 0 {
        0
    } else {
        present_bytes(tag, len)
    }
}

/// A length-delimited field that is always written (an `optional` or repeated element).
fn present_bytes(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

/// A set message field (always written, even when empty).
fn message_field(tag: u32, len: usize) -> usize {
    present_bytes(tag, len)
}

/// A `Version` message field (always set by `version`).
fn version_field(tag: u32, v: Version) -> usize {
    message_field(tag, version_len(v))
}

/// A `Version` message's length (its `hlc` and `node`, each left out when zero).
fn version_len(v: Version) -> usize {
    varint_field(1, v.hlc) + varint_field(2, u64::from(v.node))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ver() -> impl Strategy<Value = Version> {
        (prop_oneof![Just(0u64), any::<u64>(), 0..300u64], prop_oneof![Just(0u32), any::<u32>()]).prop_map(|(hlc, node)| Version { hlc, node })
    }

    fn name() -> impl Strategy<Value = Bytes> {
        prop::collection::vec(any::<u8>(), 0..200).prop_map(Bytes::from)
    }

    fn kind() -> impl Strategy<Value = EffectKind> {
        prop_oneof![
            (name(), ver()).prop_map(|(value, version)| EffectKind::StringSet { value, version }),
            (any::<u32>(), any::<i64>(), any::<i64>(), ver(), ver(), any::<i64>()).prop_map(|(origin, incr_total, decr_total, base, version, base_value)| {
                EffectKind::Counter(CounterDelta { origin, incr_total, decr_total, base, version, base_value })
            }),
            ver().prop_map(|version| EffectKind::Delete { version }),
            (any::<u64>(), ver()).prop_map(|(deadline_ms, version)| EffectKind::Expire { deadline_ms, version }),
            prop::collection::vec((name(), prop::option::of(name()), ver()), 0..5)
                .prop_map(|f| EffectKind::Hash(f.into_iter().map(|(name, value, version)| FieldState { name, value, version }).collect())),
            prop::collection::vec((name(), any::<bool>(), ver()), 0..5)
                .prop_map(|m| EffectKind::Set(m.into_iter().map(|(name, present, version)| MemberState { name, present, version }).collect())),
            prop::collection::vec((name(), prop::option::of(any::<f64>()), ver()), 0..5)
                .prop_map(|m| EffectKind::ZSet(m.into_iter().map(|(name, score, version)| ZSetMemberState { name, score, version }).collect())),
            (prop::collection::vec(name(), 0..5), ver()).prop_map(|(items, version)| EffectKind::List { items, version }),
            ver().prop_map(|version| EffectKind::FlushDb { version }),
            (name(), name()).prop_map(|(channel, message)| EffectKind::Publish { channel, message }),
            (ver(), prop::collection::vec(any::<u32>(), 0..40)).prop_map(|(version, registers)| EffectKind::Hll { version, registers }),
            (prop::option::of(name()), ver()).prop_map(|(code, version)| EffectKind::Library { code, version }),
            ver().prop_map(|version| EffectKind::FunctionFlush { version }),
        ]
    }

    fn effect() -> impl Strategy<Value = Effect> {
        (prop_oneof![Just(0usize), 0..16usize], name(), kind()).prop_map(|(db, key, kind)| Effect { db, key, kind })
    }

    proptest! {
        /// An effect survives the wire unchanged (NaN scores compared by bits), and
        /// `encoded_len` is its encoding's length.
        #[test]
        fn an_effect_round_trips_through_the_wire_and_its_length_is_exact(e in effect()) {
            let op = pb::Op::from(e.clone());
            let encoded = op.encode_to_vec();
            prop_assert_eq!(encoded_len(&e), encoded.len());
            let back = Effect::try_from(pb::Op::decode(encoded.as_slice()).unwrap()).unwrap();
            prop_assert_eq!(format!("{back:?}"), format!("{e:?}"));
        }
    }

    proptest! {
        /// `encode` writes the bytes prost writes for every kind (its own writer for strings).
        #[test]
        fn encode_writes_what_prost_writes(e in effect()) {
            prop_assert_eq!(encode(e.clone()).to_vec(), pb::Op::from(e).encode_to_vec());
        }

        /// `decode` (its own reader for strings) reads what prost reads, from an effect's
        /// encoding and from an encoding with a field changed, repeated or cut.
        #[test]
        fn decode_reads_what_prost_reads(e in effect(), cut in any::<prop::sample::Index>(), extra in prop::collection::vec(any::<u8>(), 0..12)) {
            let encoded = pb::Op::from(e).encode_to_vec();
            let by_prost = |b: &[u8]| format!("{:?}", pb::Op::decode(b).map_err(WireError::Malformed).and_then(Effect::try_from));
            prop_assert_eq!(format!("{:?}", decode(Bytes::from(encoded.clone()))), by_prost(&encoded));
            let mut changed = encoded.clone();
            changed.extend_from_slice(&extra);
            prop_assert_eq!(format!("{:?}", decode(Bytes::from(changed.clone()))), by_prost(&changed));
            let twice = [encoded.clone(), encoded.clone()].concat();
            prop_assert_eq!(format!("{:?}", decode(Bytes::from(twice.clone()))), by_prost(&twice));
            let short = &encoded[..cut.index(encoded.len() + 1)];
            prop_assert_eq!(format!("{:?}", decode(Bytes::copy_from_slice(short))), by_prost(short));
        }

        /// A string's op written from the stored bytes (`push_value`) is its effect's, for
        /// every database, key, value and version (lengths and numbers of one byte and more),
        /// and each op in a buffer is framed whole.
        #[test]
        fn a_strings_value_encodes_as_its_effect(db in prop_oneof![0usize..20, 100usize..300], key in prop::collection::vec(any::<u8>(), 0..200), value in prop::collection::vec(any::<u8>(), 0..3000), hlc in any::<u64>(), node in any::<u32>()) {
            let v = Version { hlc, node };
            let stored = Value::string(&value);
            let effect = Effect::of_value(db, &key, &stored, v, &[]);
            let mut ops = OpBuffer::of_value(db, &key, &stored, v, &[]);
            ops.push(effect.clone());
            ops.append(OpBuffer::of_value(db, &key, &stored, v, &[]));
            prop_assert_eq!(ops.len(), 3);
            let framed = FramedOps::parse(Bytes::copy_from_slice(ops.bytes())).expect("whole frames");
            prop_assert_eq!(&ops.ends().iter().map(|&e| e as usize).collect::<Vec<_>>(), &(1..=3).map(|i| i * ops.bytes().len() / 3).collect::<Vec<_>>());
            prop_assert!(framed.iter().all(|op| op == encode(effect.clone())));
            prop_assert_eq!(ops.into_framed(), framed);
        }

        /// A hash's, set's or sorted set's op written from the collection (`push_value`) is its
        /// effect's (`Effect::of_value`, encoded by prost), for every database and key, names
        /// held, removed (at their tombstone's version or the collection's `cleared`) or both,
        /// empty names and values, versions of every length, and scores of every kind.
        #[test]
        fn a_collections_value_encodes_as_its_effect(
            db in prop_oneof![0usize..3, 100usize..300],
            key in prop::collection::vec(any::<u8>(), 0..150),
            elements in prop::collection::vec((prop::collection::vec(0u8..4, 0..3), prop::collection::vec(any::<u8>(), 0..200), any::<f64>(), 0u8..3, any::<u64>(), any::<u32>()), 0..12),
            cleared in (any::<u64>(), any::<u32>()),
            kind in 0u8..3,
        ) {
            use crate::db::entry::{Collection, Field};
            use crate::db::zset::SortedSet;
            let cleared = Version { hlc: cleared.0, node: cleared.1 };
            let (mut hash, mut set, mut zset) = (Collection::<Field>::default(), Collection::<Version>::default(), SortedSet::default());
            (hash.cleared, set.cleared, zset.cleared) = (cleared, cleared, cleared);
            let mut names = Vec::new();
            for (name, value, score, state, hlc, node) in &elements {
                let (name, v) = (Bytes::copy_from_slice(name), Version { hlc: *hlc, node: *node });
                match state {
                    // Held.
                    0 => {
                        hash.insert(name.clone(), Field::new(value, v));
                        set.insert(name.clone(), v);
                        zset.insert(name.clone(), *score, v);
                    }
                    // Removed: a tombstone.
                    1 => {
                        hash.remove(&name);
                        set.remove(&name);
                        zset.remove(&name);
                        hash.removed.insert(name.clone(), v);
                        set.removed.insert(name.clone(), v);
                        zset.removed.insert(name.clone(), v);
                    }
                    // Named but neither: removed at `cleared`.
                    _ => {}
                }
                names.push(Name::from(name));
            }
            let value = match kind {
                0 => Value::Hash(Box::new(hash)),
                1 => Value::Set(Box::new(set)),
                _ => Value::ZSet(Box::new(zset)),
            };
            let v = Version { hlc: 1, node: 1 };
            let mut ops = OpBuffer::of_value(db, &key, &value, v, &names);
            ops.append(OpBuffer::of_value(db, &key, &value, v, &names));
            let framed = FramedOps::parse(Bytes::copy_from_slice(ops.bytes())).expect("whole frames");
            prop_assert_eq!(framed.len(), 2);
            let by_prost = pb::Op::from(Effect::of_value(db, &key, &value, v, &names)).encode_to_vec();
            prop_assert!(framed.iter().all(|op| op.to_vec() == by_prost));
        }

        /// `decode_in` reads each op of a batch where it lies as `decode` reads it alone: the
        /// ops of effects, of effects cut short (whose fields then claim bytes of the next op)
        /// and arbitrary bytes.
        #[test]
        fn decoding_in_place_reads_what_decode_reads(
            effects in prop::collection::vec((effect(), any::<prop::sample::Index>()), 0..8),
            junk in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..4),
        ) {
            let mut ops: Vec<Vec<u8>> = Vec::new();
            for (e, cut) in effects {
                let encoded = pb::Op::from(e).encode_to_vec();
                ops.push(encoded[..cut.index(encoded.len() + 1)].to_vec());
                ops.push(encoded);
            }
            ops.extend(junk);
            let framed = FramedOps::from_ops(ops.iter().map(Vec::as_slice));
            for span in framed.spans() {
                let alone = decode(framed.as_bytes().slice(span.clone()));
                let in_place = decode_in(framed.as_bytes(), span).map(|op| op.to_effect());
                prop_assert_eq!(format!("{in_place:?}"), format!("{alone:?}"));
            }
        }

        /// Arbitrary bytes decode as prost decodes them (or fail with it).
        #[test]
        fn decode_reads_arbitrary_bytes_as_prost(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let by_prost = format!("{:?}", pb::Op::decode(&bytes[..]).map_err(WireError::Malformed).and_then(Effect::try_from));
            prop_assert_eq!(format!("{:?}", decode(Bytes::from(bytes))), by_prost);
        }
    }

    proptest! {
        /// A string's op with one byte changed, at every position and to several values (a
        /// key, a length of one or two bytes, a varint's byte, a value's byte), decodes as
        /// prost decodes it: both readers (`read_usual_string_set` first, then field by field)
        /// take only what prost takes, and read it as prost does.
        #[test]
        fn a_string_op_with_a_byte_changed_decodes_as_prost_decodes_it(db in prop_oneof![3 => Just(0usize), 1 => 0..3usize], key in prop::collection::vec(any::<u8>(), 0..4), value in prop_oneof![3 => prop::collection::vec(any::<u8>(), 0..20), 1 => prop::collection::vec(any::<u8>(), 120..140)], hlc in prop_oneof![1 => Just(0u64), 3 => any::<u64>()], node in prop_oneof![1 => Just(0u32), 3 => any::<u32>()]) {
            let e = Effect::new(db, &key, EffectKind::StringSet { value: Bytes::from(value), version: Version { hlc, node } });
            let encoded = encode(e).to_vec();
            for at in 0..encoded.len() {
                let was = encoded[at];
                for byte in [0, 1, 2, was.wrapping_sub(1), was.wrapping_add(1), 0x7f, 0x80, 0xff] {
                    let mut changed = encoded.clone();
                    changed[at] = byte;
                    let by_prost = format!("{:?}", pb::Op::decode(&changed[..]).map_err(WireError::Malformed).and_then(Effect::try_from));
                    prop_assert_eq!(format!("{:?}", decode(Bytes::from(changed))), by_prost);
                }
            }
        }
    }

    /// The layout a node writes for its string writes in database 0 is read by
    /// `read_usual_string_set`, with key and value lengths of one or two bytes (up to 16 KiB);
    /// another database, an empty key or value, a version without an HLC or a node id, or a
    /// length of three bytes by the field-by-field reader (`read_string_set_after_key`), to the
    /// same op.
    #[test]
    fn a_usual_string_op_is_read_in_one_go_and_the_others_field_by_field() {
        let long = |n: usize| "x".repeat(n);
        for (db, key, value, hlc, node, usual) in [
            (0, "k".to_string(), "v".to_string(), 1, 1, true),
            (0, "key".to_string(), "value".to_string(), u64::MAX, u32::MAX, true),
            (0, long(127), long(128), 1, 1, true),
            (0, long(300), long(16_000), 1 << 60, 3, true),
            (0, "k".to_string(), long(16_384), 1, 1, false),
            (0, long(16_384), "v".to_string(), 1, 1, false),
            (1, "k".to_string(), "v".to_string(), 1, 1, false),
            (0, String::new(), "v".to_string(), 1, 1, false),
            (0, "k".to_string(), String::new(), 1, 1, false),
            (0, "k".to_string(), "v".to_string(), 0, 1, false),
            (0, "k".to_string(), "v".to_string(), 1, 0, false),
        ] {
            let e = Effect::new(db, key.as_bytes(), EffectKind::StringSet { value: Bytes::copy_from_slice(value.as_bytes()), version: Version { hlc, node } });
            let encoded = encode(e.clone());
            assert_eq!(read_usual_string_set(&encoded, 0..encoded.len()).is_some(), usual, "{e:?}");
            let Ok(Decoded::StringSet(set)) = decode_in(&encoded, 0..encoded.len()) else { panic!("a string op, read as one: {e:?}") };
            assert_eq!((set.db, set.key, set.value, set.version), (db, key.as_bytes(), value.as_bytes(), Version { hlc, node }));
        }
    }

    /// A tombstone, and an expiry register with a deadline, of database 0 with both halves of
    /// the version set are read in one go (`read_usual_op`); the others (another database, no
    /// deadline, a half of the version zero) field by field; each as prost reads it.
    #[test]
    fn a_usual_tombstone_or_deadline_is_read_in_one_go_and_the_others_field_by_field() {
        for (db, deadline_ms, hlc, node, usual) in [
            (0, None, 1 << 50, 1 << 30, true),
            (0, Some(4_000_000_000_000u64), 1 << 50, 1 << 30, true),
            (0, Some(1), 1, 1, true),
            (0, Some(0), 1, 1, false),
            (2, None, 1, 1, false),
            (2, Some(5), 1, 1, false),
            (0, None, 0, 1, false),
            (0, Some(5), 1, 0, false),
        ] {
            let version = Version { hlc, node };
            let kind = match deadline_ms {
                None => EffectKind::Delete { version },
                Some(deadline_ms) => EffectKind::Expire { deadline_ms, version },
            };
            let e = Effect::new(db, b"key", kind);
            let encoded = encode(e.clone());
            assert_eq!(read_usual_op(&encoded, 0..encoded.len()).is_some(), usual, "{e:?}");
            let read = match decode_in(&encoded, 0..encoded.len()) {
                Ok(Decoded::Delete(d)) => (d.db, d.key.to_vec(), None, d.version),
                Ok(Decoded::Expire(x)) => (x.db, x.key.to_vec(), Some(x.deadline_ms), x.version),
                other => panic!("{e:?} read as {other:?}"),
            };
            assert_eq!(read, (db, b"key".to_vec(), deadline_ms, version), "{e:?}");
            assert_eq!(decode(encoded).unwrap(), e);
        }
    }

    /// A counter's op as an `INCR` or a `DECRBY` writes it (an origin, a version with both
    /// halves set, a base of none or both halves) is read in one go, with or without totals
    /// and a base value; a base-only delta, a version with a half unset and another database
    /// are read field by field. Both read what was written.
    #[test]
    fn a_usual_counter_is_read_in_one_go_and_the_others_field_by_field() {
        let full = Version { hlc: 1 << 56, node: u32::MAX };
        let small = Version { hlc: 1, node: 1 };
        for (db, origin, incr_total, decr_total, base, version, base_value, usual) in [
            (0, 7, 5, 0, Version::ZERO, full, 0, true),
            (0, u32::MAX, 1 << 40, 3, small, full, -9, true),
            (0, 1, 0, 0, full, small, 1 << 62, true),
            (0, 2, -1, -1, Version::ZERO, small, 0, true),
            (0, crate::db::counter::BASE_ONLY, 0, 0, small, small, 4, false),
            (0, 3, 1, 0, Version { hlc: 5, node: 0 }, small, 0, false),
            (0, 3, 1, 0, Version::ZERO, Version { hlc: 0, node: 5 }, 0, false),
            (4, 3, 1, 0, Version::ZERO, small, 0, false),
        ] {
            let delta = CounterDelta { origin, incr_total, decr_total, base, version, base_value };
            let e = Effect::counter(db, b"counter", delta);
            let encoded = encode(e.clone());
            assert_eq!(read_usual_op(&encoded, 0..encoded.len()).is_some(), usual, "{e:?}");
            match decode_in(&encoded, 0..encoded.len()) {
                Ok(Decoded::Counter(c)) => assert_eq!((c.db, c.key, c.delta), (db, &b"counter"[..], delta), "{e:?}"),
                other => panic!("{e:?} read as {other:?}"),
            }
            // Followed by another op in the frame, as in a batch: the next op's first byte
            // (here a base value's key) is not read as the counter's.
            let mut framed = encoded.to_vec();
            framed.extend_from_slice(&[6 << 3, 1]);
            assert_eq!(read_usual_op(&framed, 0..encoded.len()).map(|op| op.key().to_vec()), usual.then(|| b"counter".to_vec()), "{e:?}");
            assert_eq!(decode(encoded).unwrap(), e);
        }
    }

    /// Strings the generators rarely make: a string op with every field at its edge.
    #[test]
    fn a_string_op_at_its_edges_decodes_as_prost_decodes_it() {
        for (db, key, value, hlc, node) in [(0, "", "", 0, 0), (15, "k", "", u64::MAX, u32::MAX), (1, "", "v", 1, 0), (0, "key", "value", 0, 7)] {
            let e = Effect::new(db, key.as_bytes(), EffectKind::StringSet { value: Bytes::copy_from_slice(value.as_bytes()), version: Version { hlc, node } });
            let encoded = encode(e.clone());
            assert_eq!(encoded.to_vec(), pb::Op::from(e.clone()).encode_to_vec());
            assert!(matches!(decode_in(&encoded, 0..encoded.len()), Ok(Decoded::StringSet(_))), "the string reader reads {e:?}");
            assert_eq!(decode(encoded).unwrap(), e);
        }
    }

    /// Every length of varint a string's op carries, written as prost writes it: an HLC and a
    /// node id of each bit length, 0 to 64 and 0 to 32, with the other at either end (so that
    /// the HLC is the op's last field, or not), and a database and a key length of one to
    /// three bytes.
    #[test]
    fn a_string_ops_varints_are_written_as_prost_writes_them() {
        let values = |bits: u32| [0u64, 1, 0x7f, 0x80].into_iter().chain((1..=bits).flat_map(|b| [1u64 << (b - 1), u64::MAX >> (64 - b)]));
        let mut checked = 0;
        for hlc in values(64) {
            for node in [0, 1, u32::MAX] {
                for (db, key_len) in [(0, 0), (1, 1), (200, 200), (20000, 20000)] {
                    let key = vec![b'k'; key_len];
                    let e = Effect::new(db, &key, EffectKind::StringSet { value: Bytes::from_static(b"v"), version: Version { hlc, node } });
                    assert_eq!(encode(e.clone()).to_vec(), pb::Op::from(e).encode_to_vec(), "hlc {hlc:#x} node {node:#x} db {db}");
                    checked += 1;
                }
            }
        }
        for node in values(32) {
            let e = Effect::new(0, b"k", EffectKind::StringSet { value: Bytes::new(), version: Version { hlc: u64::MAX, node: node as u32 } });
            assert_eq!(encode(e.clone()).to_vec(), pb::Op::from(e).encode_to_vec(), "node {node:#x}");
        }
        assert!(checked > 1500);
    }

    #[test]
    fn an_op_without_an_effect_or_with_a_key_state_is_refused_with_a_reason() {
        let empty = pb::Op { db: 0, key: b"k".to_vec().into(), effect: None };
        assert_eq!(Effect::try_from(empty), Err(WireError::NoEffect));
        let state = pb::Op { db: 0, key: b"k".to_vec().into(), effect: Some(PbEffect::KeyState(pb::KeyState::default())) };
        assert_eq!(Effect::try_from(state), Err(WireError::KeyState));
    }

    #[test]
    fn a_missing_version_reads_as_zero_as_the_merge_always_took_it() {
        let op = pb::Op { db: 1, key: b"k".to_vec().into(), effect: Some(PbEffect::Delete(pb::Delete { version: None })) };
        assert_eq!(Effect::try_from(op).unwrap(), Effect::delete(1, b"k", Version::ZERO));
    }

    /// What a link does with a received frame: decode each op (`decode`, its key and a string's
    /// value are slices of the frame), merge it, fire its keyspace events. Once the effects are
    /// gone nothing may still share the frame: not the keyspace, not the function registers,
    /// not the events queued for subscribers. A field kept without its copy would leave the
    /// frame shared and fail this.
    #[test]
    fn a_merged_op_keeps_no_slice_of_the_frame_it_arrived_in() {
        use std::sync::{Arc, Mutex};

        use crate::db::Store;
        use crate::hlc::{Hlc, SystemClock};
        use crate::repl::merge::{apply_op, ApplyOutcome};

        let store = Store::new(2, Hlc::new(Arc::new(SystemClock), 500), 9);
        store.enable_replication();
        let events: Arc<Mutex<Vec<(Bytes, Bytes)>>> = Arc::default();
        let sink = events.clone();
        store.notify.set_sink(Box::new(move |channel, message| sink.lock().unwrap().push((channel, message))));
        store.notify.set_classes(crate::notify::parse_classes("KEA").unwrap());
        let v = Version { hlc: 1 << 40, node: 2 };
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        let effects = vec![
            Effect::new(0, b"string", EffectKind::StringSet { value: b(&"x".repeat(100)), version: v }),
            Effect::new(0, b"int", EffectKind::StringSet { value: b("12345"), version: v }),
            Effect::counter(0, b"counter", CounterDelta { origin: 2, incr_total: 5, decr_total: 1, base: Version::ZERO, version: v, base_value: 3 }),
            Effect::expire(0, b"string", 4_000_000_000_000, v),
            Effect::delete(0, b"deleted", v),
            Effect::new(
                0,
                b"hash",
                EffectKind::Hash(vec![
                    FieldState { name: b("field"), value: Some(b("value")), version: v },
                    FieldState { name: b("gone"), value: None, version: v },
                ]),
            ),
            Effect::new(0, b"set", EffectKind::Set(vec![MemberState { name: b("member"), present: true, version: v }])),
            Effect::new(0, b"zset", EffectKind::ZSet(vec![ZSetMemberState { name: b("member"), score: Some(1.5), version: v }])),
            Effect::new(1, b"list", EffectKind::List { items: vec![b("a"), b("b")], version: v }),
            Effect::hll_registers(0, b"hll", v, &[5 << 8 | 2]),
            Effect::publish(b"channel", b"message"),
            Effect::library("lib", Some(b("#!lua name=lib\nredis.register_function('f', function() return 1 end)")), v),
        ];
        let mut ops = OpBuffer::default();
        effects.iter().for_each(|e| ops.push(e.clone()));
        let message = pb::OriginMessage { body: Some(pb::origin_message::Body::Batch(pb::EncodedBatch { first_seq: 1, ops: ops.into_framed(), hlc: 1 })) };
        let frame = Bytes::from(message.encode_to_vec());
        // As a link's codec reads it (`FlatDecoder`).
        let batch = pb::codec::decode_batch(&frame).expect("a batch");
        let span = frame.as_ptr() as usize..frame.as_ptr() as usize + frame.len();
        let mut outcomes = Vec::new();
        for (op, sent) in batch.ops.into_iter().zip(&effects) {
            let effect = decode(op).unwrap();
            assert_eq!(&effect, sent);
            if !effect.key.is_empty() {
                assert!(span.contains(&(effect.key.as_ptr() as usize)), "the key is decoded without a copy");
            }
            let outcome = apply_op(&store, &effect);
            if outcome == ApplyOutcome::Applied {
                store.notify.merged_write(&effect);
            }
            outcomes.push(outcome);
        }
        assert!(outcomes.iter().filter(|o| **o == ApplyOutcome::Applied).count() >= 9, "{outcomes:?}");
        assert!(!events.lock().unwrap().is_empty());
        assert!(frame.is_unique(), "something merged still shares the received frame");
    }

    /// Bytes as a node before `Effect` wrote them (a `SET k v` at (5, 1) in database 2): the
    /// wire form did not change.
    #[test]
    fn the_wire_form_is_the_one_nodes_wrote_before() {
        let before = pb::Op {
            db: 2,
            key: b"k".to_vec().into(),
            effect: Some(PbEffect::StringSet(pb::StringSet { value: b"v".to_vec().into(), version: Some(pb::Version { hlc: 5, node: 1 }) })),
        };
        let e = Effect::new(2, b"k", EffectKind::StringSet { value: Bytes::from_static(b"v"), version: Version { hlc: 5, node: 1 } });
        assert_eq!(pb::Op::from(e).encode_to_vec(), before.encode_to_vec());
    }
}
