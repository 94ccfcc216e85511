//! A mesh batch whose ops stay as they are on the wire (`EncodedBatch` in `keymesh.proto`;
//! `build.rs` maps that message to this type). An origin keeps its backlog as framed ops, back
//! to back (the engine's `repl::log`), so a live batch is one slice of it: nothing is copied,
//! counted or encoded per op per subscriber, and the stream hands the slice to h2 as it is
//! (`codec::frame_origin_message`). A link reads the ops as slices of the received frame
//! (`codec::decode_batch`).
//!
//! The bytes on the wire are those of a `Batch` of ops: `first_seq` (field 1), every op as an
//! element of the repeated field 2 (its tag, its length, its `Op` encoding), then `hlc` (field
//! 3), zero values left out.

use std::ops::Range;

use prost::bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::encoding::{self, DecodeContext, WireType};
use prost::DecodeError;

use crate::reader::Reader;

/// The key of an element of a batch's `ops` (field 2, length-delimited).
pub const OPS_TAG: u8 = 2 << 3 | 2;

/// A batch of ops (`keymesh.proto`'s `EncodedBatch`, the wire form of `Batch`).
#[derive(Clone, Default, PartialEq, Eq, Hash, Debug)]
pub struct EncodedBatch {
    /// Sequence of the first op (ops are consecutive); 0 for snapshot batches.
    pub first_seq: u64,
    pub ops: FramedOps,
    pub hlc: u64,
}

/// Ops as elements of a batch's `ops` field, back to back: each is `OPS_TAG`, its length
/// and its `Op` encoding. Two are equal when they hold the same ops in the same order (a
/// length written in more bytes than it needs reads the same).
#[derive(Clone, Default)]
pub struct FramedOps {
    bytes: Bytes,
    count: usize,
}

impl FramedOps {
    /// Frames each op (a copy of their bytes, in one buffer).
    pub fn from_ops<'a>(ops: impl IntoIterator<Item = &'a [u8]>) -> FramedOps {
        let mut out = Vec::new();
        let mut count = 0;
        for op in ops {
            frame(&mut out, op.len(), |out| out.extend_from_slice(op));
            count += 1;
        }
        FramedOps { bytes: out.into(), count }
    }

    /// `bytes` read as framed ops; `None` unless they are exactly that (every element whole).
    pub fn parse(bytes: Bytes) -> Option<FramedOps> {
        let (mut at, mut count) = (0, 0);
        while at < bytes.len() {
            next_span(&bytes, &mut at, &mut 1)?;
            count += 1;
        }
        Some(FramedOps { bytes, count })
    }

    /// `bytes` that hold `count` framed ops, as the caller knows (an origin's backlog framed
    /// them with `frame`; `codec::decode_batch` walked them). Checked in debug builds; in a
    /// release build, bytes that were not would end the iteration early, never read past them.
    pub fn framed(bytes: Bytes, count: usize) -> FramedOps {
        debug_assert_eq!(FramedOps::parse(bytes.clone()).map(|ops| ops.count), Some(count), "not {count} framed ops");
        FramedOps { bytes, count }
    }

    /// How many ops.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The field's bytes, as they go on the wire.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Each op's encoding, a slice of these bytes (no copy).
    pub fn iter(&self) -> Ops {
        self.clone().into_iter()
    }

    /// Where each op's encoding lies in `as_bytes()`: for a reader that decodes the ops where
    /// they are, without a `Bytes` handle (and its reference count) per op.
    pub fn spans(&self) -> Spans<'_> {
        Spans { bytes: &self.bytes, at: 0, left: self.count }
    }

    /// Appends one op (prost's path for a batch not in canonical form: `merge_field`). The
    /// buffer is reused when nothing else holds it, as it does not while a batch is decoded.
    fn push(&mut self, op: &[u8]) {
        let mut out = BytesMut::from(std::mem::take(&mut self.bytes));
        frame(&mut out, op.len(), |out| out.put_slice(op));
        self.bytes = out.freeze();
        self.count += 1;
    }
}

/// Writes one op's frame (`OPS_TAG` and `len`) and then the op, which `write` puts, `len` bytes.
pub fn frame<B: BufMut>(out: &mut B, len: usize, write: impl FnOnce(&mut B)) {
    out.put_u8(OPS_TAG);
    encoding::encode_varint(len as u64, out);
    write(out);
}

/// The size of an op's frame around an op of `len` bytes.
pub fn frame_len(len: usize) -> usize {
    1 + encoding::encoded_len_varint(len as u64)
}

impl PartialEq for FramedOps {
    fn eq(&self, other: &FramedOps) -> bool {
        self.count == other.count && self.iter().eq(other.iter())
    }
}

impl Eq for FramedOps {}

impl std::hash::Hash for FramedOps {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.count.hash(state);
        self.iter().for_each(|op| op.hash(state));
    }
}

impl std::fmt::Debug for FramedOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl IntoIterator for FramedOps {
    type Item = Bytes;
    type IntoIter = Ops;

    fn into_iter(self) -> Ops {
        Ops { left: self.count, bytes: self.bytes, at: 0 }
    }
}

/// The ops of a `FramedOps`, each a slice of its bytes.
pub struct Ops {
    bytes: Bytes,
    at: usize,
    left: usize,
}

impl Iterator for Ops {
    type Item = Bytes;

    #[inline]
    fn next(&mut self) -> Option<Bytes> {
        let span = next_span(&self.bytes, &mut self.at, &mut self.left)?;
        Some(self.bytes.slice(span))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Ops {}

/// Where each op of a `FramedOps` lies in its bytes (`FramedOps::spans`).
pub struct Spans<'a> {
    bytes: &'a Bytes,
    at: usize,
    left: usize,
}

impl Iterator for Spans<'_> {
    type Item = Range<usize>;

    /// Inline in the engine's merge loop too (`mesh::link::apply_all`): as a call across the
    /// crate boundary it cost ~25 instructions per merged op (callgrind).
    #[inline(always)]
    fn next(&mut self) -> Option<Range<usize>> {
        next_span(self.bytes, &mut self.at, &mut self.left)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Spans<'_> {}

/// The next op's place after the frame at `at`, `left` ops to go. Bytes that are no frame
/// (only a `FramedOps::framed` built wrongly) end the ops.
#[inline(always)]
fn next_span(bytes: &[u8], at: &mut usize, left: &mut usize) -> Option<Range<usize>> {
    if *left == 0 {
        return None;
    }
    let mut r = Reader::starting_at(bytes, *at);
    let span = r.tag().filter(|&t| t == u64::from(OPS_TAG)).and_then(|_| r.field_end()).map(|end| r.at()..end);
    *at = span.as_ref().map_or(*at, |s| s.end);
    *left = if span.is_some() { *left - 1 } else { 0 };
    span
}

impl prost::Message for EncodedBatch {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if self.first_seq != 0 {
            encoding::uint64::encode(1, &self.first_seq, buf);
        }
        buf.put_slice(&self.ops.bytes);
        if self.hlc != 0 {
            encoding::uint64::encode(3, &self.hlc, buf);
        }
    }

    fn merge_field(&mut self, tag: u32, wire_type: WireType, buf: &mut impl Buf, ctx: DecodeContext) -> Result<(), DecodeError> {
        match tag {
            1 => encoding::uint64::merge(wire_type, &mut self.first_seq, buf, ctx),
            2 => {
                let mut op = Bytes::new();
                encoding::bytes::merge(wire_type, &mut op, buf, ctx)?;
                self.ops.push(&op);
                Ok(())
            }
            3 => encoding::uint64::merge(wire_type, &mut self.hlc, buf, ctx),
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        let varint = |tag: u32, value: u64| if value == 0 { 0 } else { encoding::uint64::encoded_len(tag, &value) };
        varint(1, self.first_seq) + self.ops.bytes.len() + varint(3, self.hlc)
    }

    fn clear(&mut self) {
        *self = EncodedBatch::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{op, Batch, Op, StringSet, Version};
    use prost::Message;

    fn ops(n: u64) -> Vec<Op> {
        (0..n)
            .map(|i| {
                let set = StringSet { value: Bytes::from(vec![b'v'; (i % 7) as usize * 40]), version: Some(Version { hlc: 1 << 40 | i, node: 3 }) };
                Op { db: 0, key: Bytes::from(format!("key:{i}")), effect: Some(op::Effect::StringSet(set)) }
            })
            .collect()
    }

    /// An encoded batch is the same bytes on the wire as prost's `Batch` of the same ops, and
    /// each side reads the other's.
    #[test]
    fn an_encoded_batch_is_a_batch_on_the_wire() {
        for n in [0, 1, 300] {
            let ops = ops(n);
            let encoded: Vec<Vec<u8>> = ops.iter().map(Message::encode_to_vec).collect();
            let batch = EncodedBatch { first_seq: 17, ops: FramedOps::from_ops(encoded.iter().map(Vec::as_slice)), hlc: 99 };
            let old = Batch { first_seq: 17, ops: ops.clone(), hlc: 99 };
            assert_eq!(batch.encode_to_vec(), old.encode_to_vec());
            assert_eq!(batch.encoded_len(), old.encoded_len());
            assert_eq!(EncodedBatch::decode(&old.encode_to_vec()[..]).unwrap(), batch);
            assert_eq!(Batch::decode(&batch.encode_to_vec()[..]).unwrap(), old);
            assert_eq!(batch.ops.len(), n as usize);
            assert!(batch.ops.iter().map(|op| Op::decode(op).unwrap()).eq(ops));
        }
    }

    /// `parse` takes only whole frames of the ops field; the ops it counts are what `iter`
    /// yields.
    #[test]
    fn parse_takes_whole_frames_only() {
        let framed = FramedOps::from_ops([&b"abc"[..], b"", &[7u8; 200]]);
        let bytes = framed.as_bytes().clone();
        assert_eq!(FramedOps::parse(bytes.clone()), Some(framed.clone()));
        assert_eq!(FramedOps::parse(bytes.clone()).unwrap().len(), 3);
        for cut in 1..bytes.len() {
            let whole_frames = [0, 5, 7].contains(&cut);
            assert_eq!(FramedOps::parse(bytes.slice(..cut)).is_some(), whole_frames, "cut at {cut}");
        }
        assert!(FramedOps::parse(Bytes::from_static(&[0x1a, 0])).is_none(), "another field");
        assert_eq!(FramedOps::parse(Bytes::new()).map(|ops| ops.len()), Some(0));
    }

    /// `spans` are where `iter`'s ops lie.
    #[test]
    fn spans_are_where_the_ops_lie() {
        let framed = FramedOps::from_ops([&b"abc"[..], b"", &[7u8; 200]]);
        let spans: Vec<_> = framed.spans().collect();
        assert_eq!(spans, [2..5, 7..7, 10..210]);
        assert!(spans.iter().map(|s| framed.as_bytes().slice(s.clone())).eq(framed.iter()));
    }

    /// A length written in more bytes than it needs frames the same op.
    #[test]
    fn equal_ops_are_equal_however_their_lengths_are_written() {
        let long = FramedOps::parse(Bytes::from_static(&[OPS_TAG, 0x82, 0x00, b'h', b'i'])).unwrap();
        assert_eq!(long, FramedOps::from_ops([&b"hi"[..]]));
        assert_ne!(long, FramedOps::from_ops([&b"ho"[..]]));
    }
}
