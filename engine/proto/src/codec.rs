//! The gRPC codec of both services (`build.rs` names it): prost's, except that a received
//! message is decoded from one contiguous `Bytes` instead of from tonic's `DecodeBuf`, and a
//! mesh batch by hand (`decode_batch`). The bytes on the wire are prost's.
//!
//! Why: prost reads a `DecodeBuf` a varint at a time through `Buf::chunk`/`advance` on the
//! `BytesMut` behind it, ~150 instructions per field, and a mesh batch is a repeated field of
//! a few hundred encoded ops, each read as a key, a length and a slice. Taken as `Bytes` first
//! (one `split_to` of tonic's buffer, no copy), the message decodes on prost's slice fast
//! path, and every `bytes` field is still a slice of the received frame (docs/benchmarks.md,
//! "Sixth pass"). Prost's repeated-`bytes` decoding still cost ~280 instructions per op of a
//! batch (a call per varint through `Buf`, a `Vec` grown as it goes); `decode_batch` reads a
//! batch in prost's canonical form with `reader::Reader`, leaving its ops as one slice of the
//! frame (`batch::FramedOps`), and leaves anything else to prost (which calls
//! `EncodedBatch`'s own field-by-field decoding).
//!
//! Sending, tonic writes each message into its buffer, which grew (a copy each time) while a
//! batch of tens of KiB went in; `FlatEncoder` reserves the message's length first.

use std::any::{Any, TypeId};
use std::marker::PhantomData;

use prost::bytes::{Buf, Bytes};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

use crate::batch::{EncodedBatch, FramedOps, OPS_TAG};
use crate::origin_message::Body;
use crate::reader::Reader;
use crate::OriginMessage;

/// `tonic_prost::ProstCodec`'s wire format, with an encoder that reserves each message's room
/// first and a decoder that reads one contiguous buffer (see the module).
#[derive(Debug, Clone, Copy)]
pub struct FlatCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for FlatCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for FlatCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = FlatEncoder<T>;
    type Decoder = FlatDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        FlatEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        FlatDecoder(PhantomData)
    }
}

/// Encodes `T` as prost does, into room reserved for the whole message first: tonic's buffer
/// would otherwise grow (a copy each time) while a mesh batch of tens of KiB is written into it.
#[derive(Debug, Clone, Copy)]
pub struct FlatEncoder<T>(PhantomData<T>);

impl<T: Message> Encoder for FlatEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.reserve(item.encoded_len());
        item.encode(buf).map_err(|e| Status::internal(e.to_string()))
    }
}

/// Decodes `U` from the whole received message taken as one `Bytes`.
#[derive(Debug, Clone, Copy)]
pub struct FlatDecoder<U>(PhantomData<U>);

impl<U: Message + Default + 'static> Decoder for FlatDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let whole = buf.copy_to_bytes(buf.remaining());
        // `U` is known when this is compiled: only the mesh stream's decoder has this branch.
        if TypeId::of::<U>() == TypeId::of::<OriginMessage>() {
            if let Some(batch) = decode_batch(&whole) {
                let mut message = Some(OriginMessage { body: Some(Body::Batch(batch)) });
                return Ok((&mut message as &mut dyn Any).downcast_mut::<Option<U>>().and_then(Option::take));
            }
        }
        // As tonic_prost's decoder maps it: a message that does not parse is INTERNAL.
        U::decode(whole).map(Some).map_err(|e| Status::internal(e.to_string()))
    }
}

/// An `OriginMessage` that is one `EncodedBatch` as prost writes it (the batch's fields in
/// order, `first_seq` and `hlc` absent when zero, nothing else), decoded with its ops as
/// slices of `whole`; `None` for anything else (another body, fields out of order, repeated
/// or unknown, a field cut short), which prost then decodes or refuses.
/// `decode_batch_reads_what_prost_reads` checks it against prost.
pub fn decode_batch(whole: &Bytes) -> Option<EncodedBatch> {
    const OPS: u64 = OPS_TAG as u64;
    let mut r = Reader::new(whole);
    if r.tag()? != 2 << 3 | 2 || r.field_end()? != whole.len() {
        return None;
    }
    let next_tag = |r: &mut Reader<'_>| if r.at() < whole.len() { r.tag() } else { Some(0) };
    let mut batch = EncodedBatch::default();
    let mut tag_at = r.at();
    let mut tag = next_tag(&mut r)?;
    if tag == 1 << 3 {
        batch.first_seq = r.varint()?;
        tag_at = r.at();
        tag = next_tag(&mut r)?;
    }
    // The ops stay as they are, a slice of `whole`: only their frames are checked and counted.
    let (ops_start, mut ops_end, mut count) = (tag_at, tag_at, 0);
    while tag == OPS {
        let end = r.field_end()?;
        r.skip_to(end);
        (ops_end, count) = (end, count + 1);
        tag = next_tag(&mut r)?;
    }
    if tag == 3 << 3 {
        batch.hlc = r.varint()?;
        tag = next_tag(&mut r)?;
    }
    batch.ops = FramedOps::framed(whole.slice(ops_start..ops_end), count);
    (tag == 0).then_some(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{op, EncodedBatch, FramedOps, Op, OriginMessage, StringSet, Version};

    /// A batch as an origin sends it decodes to the same message through prost from one
    /// `Bytes`, from a non-contiguous `Buf` (what prost did through tonic's buffer) and by the
    /// fast path (`decode_batch`, what `FlatDecoder` does), whose ops are slices of the frame.
    #[test]
    fn a_batch_decodes_the_same_from_one_buffer_a_chunked_one_and_the_fast_path() {
        let ops: Vec<Bytes> = (0..300u64)
            .map(|i| {
                let set = StringSet { value: Bytes::from(vec![b'v'; (i % 7) as usize * 40]), version: Some(Version { hlc: 1 << 40 | i, node: 3 }) };
                Bytes::from(Op { db: 0, key: Bytes::from(format!("key:{i}")), effect: Some(op::Effect::StringSet(set)) }.encode_to_vec())
            })
            .collect();
        let ops = FramedOps::from_ops(ops.iter().map(|op| &op[..]));
        let sent = OriginMessage { body: Some(crate::origin_message::Body::Batch(EncodedBatch { first_seq: 17, hlc: 99, ops })) };
        let wire = Bytes::from(sent.encode_to_vec());

        let flat = OriginMessage::decode(wire.clone()).unwrap();
        let (head, tail) = wire.split_at(wire.len() / 3);
        let chunked = OriginMessage::decode(head.chain(tail)).unwrap();
        assert_eq!(flat, sent);
        assert_eq!(chunked, sent);

        let batch = decode_batch(&wire).expect("the fast path reads it");
        assert_eq!(Some(&Body::Batch(batch.clone())), sent.body.as_ref());
        let frame = wire.as_ptr_range();
        assert!(batch.ops.iter().all(|op| frame.contains(&op.as_ptr())), "a decoded op is a slice of the frame, not a copy");
    }

    use proptest::prelude::*;

    fn batch() -> impl Strategy<Value = EncodedBatch> {
        let number = prop_oneof![Just(0u64), any::<u64>(), 0u64..300];
        let op = prop::collection::vec(any::<u8>(), 0..300).prop_map(Bytes::from);
        (number.clone(), prop::collection::vec(op, 0..40), number).prop_map(|(first_seq, ops, hlc)| EncodedBatch {
            first_seq,
            ops: FramedOps::from_ops(ops.iter().map(|op| &op[..])),
            hlc,
        })
    }

    fn prost_decode(bytes: &[u8]) -> Option<OriginMessage> {
        OriginMessage::decode(bytes).ok()
    }

    /// A batch as prost's derive decodes it, its ops a list (the oracle for both of
    /// `EncodedBatch`'s decoders, which are written by hand).
    #[derive(Clone, PartialEq, prost::Message)]
    struct ListBatch {
        #[prost(uint64, tag = "1")]
        first_seq: u64,
        #[prost(bytes = "bytes", repeated, tag = "2")]
        ops: Vec<Bytes>,
        #[prost(uint64, tag = "3")]
        hlc: u64,
    }

    /// An `OriginMessage` that can hold only a batch (all `decode_batch` reads).
    #[derive(Clone, PartialEq, prost::Message)]
    struct ListMessage {
        #[prost(message, optional, tag = "2")]
        batch: Option<ListBatch>,
    }

    fn as_list(batch: &EncodedBatch) -> ListBatch {
        ListBatch { first_seq: batch.first_seq, ops: batch.ops.iter().collect(), hlc: batch.hlc }
    }

    proptest! {
        /// Every batch prost writes is read by the fast path, as prost reads it, its ops
        /// slices of the received bytes.
        #[test]
        fn decode_batch_reads_every_batch_prost_writes(batch in batch()) {
            let message = OriginMessage { body: Some(Body::Batch(batch.clone())) };
            let wire = Bytes::from(message.encode_to_vec());
            let decoded = decode_batch(&wire).expect("the fast path reads a batch prost wrote");
            prop_assert_eq!(&decoded, &batch);
            let frame = wire.as_ptr_range();
            prop_assert!(decoded.ops.iter().filter(|op| !op.is_empty()).all(|op| frame.contains(&op.as_ptr())));
        }

        /// On anything else (cut short, with bytes appended, changed at a byte, arbitrary),
        /// the fast path either declines or reads what prost reads.
        #[test]
        fn decode_batch_reads_what_prost_reads(batch in batch(), cut in any::<prop::sample::Index>(), extra in prop::collection::vec(any::<u8>(), 0..12), flip in any::<(prop::sample::Index, u8)>(), noise in prop::collection::vec(any::<u8>(), 0..64)) {
            let wire = OriginMessage { body: Some(Body::Batch(batch)) }.encode_to_vec();
            let cut_short = wire[..cut.index(wire.len() + 1)].to_vec();
            let appended = [&wire[..], &extra[..]].concat();
            let mut changed = wire.clone();
            let at = flip.0.index(changed.len());
            changed[at] ^= flip.1.max(1);
            for bytes in [cut_short, appended, changed, noise] {
                if let Some(fast) = decode_batch(&Bytes::from(bytes.clone())) {
                    prop_assert_eq!(Some(as_list(&fast)), ListMessage::decode(&bytes[..]).ok().and_then(|m| m.batch), "{:02x?}", bytes);
                    prop_assert_eq!(Some(OriginMessage { body: Some(Body::Batch(fast)) }), prost_decode(&bytes), "{:02x?}", bytes);
                }
                // `EncodedBatch`'s own field-by-field decoding (prost's path for a batch not in
                // canonical form) reads what the derive reads.
                if let Ok(ListMessage { batch: Some(list) }) = ListMessage::decode(&bytes[..]) {
                    if let Ok(OriginMessage { body: Some(Body::Batch(ours)) }) = OriginMessage::decode(&bytes[..]) {
                        prop_assert_eq!(as_list(&ours), list, "{:02x?}", bytes);
                    }
                }
            }
        }
    }

    /// Other bodies and an empty message are left to prost.
    #[test]
    fn decode_batch_declines_other_messages() {
        let heartbeat = OriginMessage { body: Some(Body::Heartbeat(crate::Heartbeat { last_seq: 5, hlc: 9, ..Default::default() })) };
        assert!(decode_batch(&Bytes::from(heartbeat.encode_to_vec())).is_none());
        assert!(decode_batch(&Bytes::new()).is_none());
        // Two batch bodies: prost merges them into one; the fast path declines.
        let one = OriginMessage { body: Some(Body::Batch(EncodedBatch { first_seq: 1, ops: FramedOps::from_ops([&b"a"[..]]), hlc: 2 })) }.encode_to_vec();
        assert!(decode_batch(&Bytes::from([&one[..], &one[..]].concat())).is_none());
    }
}
