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
//! batch of tens of KiB went in; `FlatEncoder` reserves the message's length first. The
//! origin's side of the mesh stream does not go through an encoder: it frames each message
//! itself (`frame_origin_message`), a batch's ops as the shared bytes they are.

use std::any::{Any, TypeId};
use std::marker::PhantomData;

use prost::bytes::{Buf, Bytes, BytesMut};
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
            let mut message = Some(decode_origin_message(vec![whole])?);
            return Ok((&mut message as &mut dyn Any).downcast_mut::<Option<U>>().and_then(Option::take));
        }
        // As tonic_prost's decoder maps it: a message that does not parse is INTERNAL.
        U::decode(whole).map(Some).map_err(|e| Status::internal(e.to_string()))
    }
}

/// The key of `OriginMessage.batch` (field 2, length-delimited).
const BATCH_TAG: u8 = 2 << 3 | 2;

/// An `OriginMessage` that is one `EncodedBatch` as prost writes it (the batch's fields in
/// order, `first_seq` and `hlc` absent when zero, nothing else) or as an origin's stream
/// frames a large one (`frame_origin_message`: `hlc` before the ops), decoded with its ops as
/// slices of `whole`; `None` for anything else (another body, fields out of order, repeated
/// or unknown, a field cut short), which prost then decodes or refuses.
/// `decode_batch_reads_what_prost_reads` checks it against prost.
pub fn decode_batch(whole: &Bytes) -> Option<EncodedBatch> {
    const OPS: u64 = OPS_TAG as u64;
    const FIRST_SEQ: u64 = 1 << 3;
    const HLC: u64 = 3 << 3;
    let mut r = Reader::new(whole);
    if r.tag()? != u64::from(BATCH_TAG) || r.field_end()? != whole.len() {
        return None;
    }
    let next_tag = |r: &mut Reader<'_>| if r.at() < whole.len() { r.tag() } else { Some(0) };
    let mut batch = EncodedBatch::default();
    let mut tag_at = r.at();
    let mut tag = next_tag(&mut r)?;
    if tag == FIRST_SEQ {
        batch.first_seq = r.varint()?;
        tag_at = r.at();
        tag = next_tag(&mut r)?;
    }
    let hlc_first = tag == HLC;
    if hlc_first {
        batch.hlc = r.varint()?;
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
    // A second `hlc` (prost keeps the last) is left to prost.
    if tag == HLC && !hlc_first {
        batch.hlc = r.varint()?;
        tag = next_tag(&mut r)?;
    }
    batch.ops = FramedOps::framed(whole.slice(ops_start..ops_end), count);
    (tag == 0).then_some(batch)
}

/// An `OriginMessage` received as the pieces of the chunks it arrived in
/// (`deframe::Deframer`): a batch whose head and ops came as two pieces, as an origin sends a
/// large one (`frame_origin_message`), keeps the second piece as its ops without a copy
/// (`decode_split_batch`); any other message is read from one piece, or from a copy of its
/// pieces joined, as `FlatDecoder` reads a message.
pub fn decode_origin_message(pieces: Vec<Bytes>) -> Result<OriginMessage, Status> {
    if let [head, ops] = &pieces[..] {
        if let Some(batch) = decode_split_batch(head, ops) {
            return Ok(OriginMessage { body: Some(Body::Batch(batch)) });
        }
    }
    let whole = crate::deframe::joined(pieces);
    if let Some(batch) = decode_batch(&whole) {
        return Ok(OriginMessage { body: Some(Body::Batch(batch)) });
    }
    // As tonic_prost's decoder maps it: a message that does not parse is INTERNAL.
    OriginMessage::decode(whole).map_err(|e| Status::internal(e.to_string()))
}

/// A batch whose message is `head` followed by `ops`, where `head` holds the batch's key and
/// length and its `first_seq` and `hlc` (each absent when zero) and nothing else, and `ops` is
/// nothing but whole elements of the batch's `ops` field: the batch with `ops` as its ops, not
/// a copy. `None` for any other split, which the caller joins and reads whole.
/// `a_batch_in_pieces_decodes_as_prost_decodes_it_whole` checks it against prost.
pub fn decode_split_batch(head: &Bytes, ops: &Bytes) -> Option<EncodedBatch> {
    const FIRST_SEQ: u64 = 1 << 3;
    const HLC: u64 = 3 << 3;
    let mut r = Reader::new(head);
    if r.tag()? != u64::from(BATCH_TAG) || usize::try_from(r.varint()?).ok()? != head.len() - r.at() + ops.len() {
        return None;
    }
    let mut batch = EncodedBatch::default();
    let next_tag = |r: &mut Reader<'_>| if r.at() < head.len() { r.tag() } else { Some(0) };
    let mut tag = next_tag(&mut r)?;
    if tag == FIRST_SEQ {
        batch.first_seq = r.varint()?;
        tag = next_tag(&mut r)?;
    }
    if tag == HLC {
        batch.hlc = r.varint()?;
        tag = next_tag(&mut r)?;
    }
    if tag != 0 {
        return None;
    }
    batch.ops = FramedOps::parse(ops.clone())?;
    Some(batch)
}

/// The size of gRPC's prefix before each message on a stream: a compression flag, then the
/// message's length (4 bytes, big-endian).
pub const GRPC_PREFIX: usize = 5;

/// A batch with at least this many bytes of ops goes out as two chunks, its head and its ops
/// (`frame_origin_message`); a smaller one is copied whole into one (h2 copies a chunk under
/// 256 bytes into its write buffer anyway, and one chunk is one HTTP/2 frame).
pub const SHARED_OPS_MIN: usize = 1024;

/// One `OriginMessage` framed for the `Subscribe` stream as tonic's encoder frames it (the
/// gRPC prefix, uncompressed, then the message), in one chunk or, for a batch of at least
/// `SHARED_OPS_MIN` bytes of ops, two: the head (the prefix, the batch's key and length,
/// `first_seq` and `hlc`) and the ops, which are the batch's own `Bytes`, not a copy. An
/// origin's live batch is a slice of its backlog (`FramedOps`); h2 writes a chunk that large
/// with `writev` from where it lies, so no subscriber's stream copies the ops. Through tonic's
/// encoder each stream copied every batch into its buffer: one copy of every write per
/// subscriber (docs/benchmarks.md, "Twenty-ninth pass").
///
/// The head carries `hlc` before the ops so that the ops end the message: prost reads the
/// fields in any order, as every protobuf reader does, and `decode_batch` reads this order on
/// its fast path too. An error only for a message over gRPC's 4 GiB limit.
pub fn frame_origin_message(message: &OriginMessage) -> Result<(Bytes, Option<Bytes>), Status> {
    use prost::bytes::BufMut;
    use prost::encoding::{encode_varint, encoded_len_varint, uint64};

    if let Some(Body::Batch(batch)) = &message.body {
        let ops = batch.ops.as_bytes();
        if ops.len() >= SHARED_OPS_MIN {
            // The same fields as prost writes, in another order: the same length.
            let batch_len = batch.encoded_len();
            let message_len = 1 + encoded_len_varint(batch_len as u64) + batch_len;
            let mut head = BytesMut::with_capacity(GRPC_PREFIX + message_len - ops.len());
            put_prefix(&mut head, message_len)?;
            head.put_u8(BATCH_TAG);
            encode_varint(batch_len as u64, &mut head);
            if batch.first_seq != 0 {
                uint64::encode(1, &batch.first_seq, &mut head);
            }
            if batch.hlc != 0 {
                uint64::encode(3, &batch.hlc, &mut head);
            }
            return Ok((head.freeze(), Some(ops.clone())));
        }
    }
    Ok((frame_message(message)?, None))
}

/// A message framed as tonic's encoder frames one on a stream: gRPC's prefix (uncompressed),
/// then the message. The mesh's hand-made stream ends use it (`frame_origin_message`, a link's
/// Hello and Acks); an error only for a message over gRPC's 4 GiB limit.
pub fn frame_message(message: &impl Message) -> Result<Bytes, Status> {
    let len = message.encoded_len();
    let mut out = BytesMut::with_capacity(GRPC_PREFIX + len);
    put_prefix(&mut out, len)?;
    message.encode_raw(&mut out);
    Ok(out.freeze())
}

/// gRPC's prefix for a message of `len` bytes: not compressed, then the length.
fn put_prefix(out: &mut BytesMut, len: usize) -> Result<(), Status> {
    use prost::bytes::BufMut;
    let len = u32::try_from(len).map_err(|_| Status::resource_exhausted(format!("a mesh message of {len} bytes is over gRPC's 4 GiB limit")))?;
    out.put_u8(0);
    out.put_u32(len);
    Ok(())
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
            // As prost writes it, and with `hlc` before the ops (as an origin frames a large batch).
            let message = OriginMessage { body: Some(Body::Batch(batch)) };
            let prost_order = message.encode_to_vec();
            let (head, ops) = frame_origin_message(&message).unwrap();
            let hlc_first = [&head[GRPC_PREFIX..], ops.as_ref().map_or(&[][..], |ops| &ops[..])].concat();
            let mut inputs = vec![noise];
            for wire in [prost_order, hlc_first] {
                let cut_short = wire[..cut.index(wire.len() + 1)].to_vec();
                let appended = [&wire[..], &extra[..]].concat();
                let mut changed = wire.clone();
                let at = flip.0.index(changed.len());
                changed[at] ^= flip.1.max(1);
                inputs.extend([cut_short, appended, changed]);
            }
            for bytes in inputs {
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

    /// `bytes` cut at `cuts` (indexes into it, sorted, deduplicated, empty pieces dropped).
    fn pieces_of(bytes: &[u8], cuts: &[prop::sample::Index]) -> Vec<Bytes> {
        let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        at.extend([0, bytes.len()]);
        at.sort_unstable();
        at.dedup();
        at.windows(2).map(|w| Bytes::copy_from_slice(&bytes[w[0]..w[1]])).filter(|p| !p.is_empty()).collect()
    }

    proptest! {
        /// A batch's message received in pieces cut anywhere (as HTTP/2 may deliver it) decodes
        /// as prost decodes it whole, as prost writes it and as an origin frames it, and with a
        /// byte changed; cut where an origin cuts it (its head, then its ops), its ops are the
        /// ops piece itself, not a copy.
        #[test]
        fn a_batch_in_pieces_decodes_as_prost_decodes_it_whole(batch in batch(), cuts in prop::collection::vec(any::<prop::sample::Index>(), 1..3), flip in any::<(prop::sample::Index, u8)>()) {
            let message = OriginMessage { body: Some(Body::Batch(batch)) };
            let (head, ops) = frame_origin_message(&message).unwrap();
            let hlc_first = [&head[GRPC_PREFIX..], ops.as_ref().map_or(&[][..], |ops| &ops[..])].concat();
            for wire in [message.encode_to_vec(), hlc_first] {
                let mut changed = wire.clone();
                if !changed.is_empty() {
                    let at = flip.0.index(changed.len());
                    changed[at] ^= flip.1.max(1);
                }
                for bytes in [wire, changed] {
                    prop_assert_eq!(decode_origin_message(pieces_of(&bytes, &cuts)).ok(), prost_decode(&bytes), "{:02x?}", bytes);
                }
            }
            if let Some(ops) = ops {
                let decoded = decode_origin_message(vec![head.slice(GRPC_PREFIX..), ops.clone()]).unwrap();
                prop_assert_eq!(&decoded, &message);
                let Some(Body::Batch(batch)) = decoded.body else { panic!("a batch") };
                prop_assert_eq!(batch.ops.as_bytes().as_ptr(), ops.as_ptr(), "the ops piece itself");
                // The head's batch length one off either way: read as prost reads the whole.
                let mut r = Reader::new(&head[GRPC_PREFIX..]);
                r.tag().unwrap();
                let (len_at, len) = (GRPC_PREFIX + r.at(), r.varint().unwrap());
                let after = GRPC_PREFIX + r.at();
                for wrong in [len + 1, len - 1] {
                    let mut changed = head[GRPC_PREFIX..len_at].to_vec();
                    prost::encoding::encode_varint(wrong, &mut changed);
                    changed.extend_from_slice(&head[after..]);
                    let whole = [&changed[..], &ops[..]].concat();
                    prop_assert_eq!(decode_origin_message(vec![Bytes::from(changed), ops.clone()]).ok(), prost_decode(&whole));
                }
            }
        }
    }

    /// A message's chunks, joined: the gRPC prefix checked and taken off.
    fn unframed(head: &Bytes, ops: Option<&Bytes>) -> Bytes {
        let whole = [&head[..], ops.map_or(&[][..], |ops| &ops[..])].concat();
        assert_eq!(whole[0], 0, "not compressed");
        let len = u32::from_be_bytes(whole[1..GRPC_PREFIX].try_into().unwrap()) as usize;
        assert_eq!(len, whole.len() - GRPC_PREFIX, "the prefix gives the message's length");
        Bytes::copy_from_slice(&whole[GRPC_PREFIX..])
    }

    proptest! {
        /// An origin's framing of a batch reads back as the batch, through prost and through
        /// the fast path; a large batch's ops go out as the batch's own bytes, not a copy.
        #[test]
        fn a_framed_batch_reads_back_and_shares_its_ops(batch in batch(), filler in 0usize..3) {
            // Some batches past `SHARED_OPS_MIN`, for the two-chunk form.
            let ops: Vec<Bytes> = batch.ops.iter().chain((0..filler * 40).map(|i| Bytes::from(vec![i as u8; 100]))).collect();
            let batch = EncodedBatch { ops: FramedOps::from_ops(ops.iter().map(|op| &op[..])), ..batch };
            let message = OriginMessage { body: Some(Body::Batch(batch.clone())) };
            let (head, ops) = frame_origin_message(&message).unwrap();
            let shared = batch.ops.as_bytes();
            match &ops {
                Some(ops) => {
                    prop_assert!(shared.len() >= SHARED_OPS_MIN);
                    prop_assert_eq!((ops.as_ptr(), ops.len()), (shared.as_ptr(), shared.len()), "the ops chunk is the batch's bytes");
                }
                None => prop_assert!(shared.len() < SHARED_OPS_MIN),
            }
            let wire = unframed(&head, ops.as_ref());
            prop_assert_eq!(prost_decode(&wire), Some(message.clone()));
            prop_assert_eq!(ListMessage::decode(&wire[..]).ok().and_then(|m| m.batch), Some(as_list(&batch)));
            prop_assert_eq!(decode_batch(&wire), Some(batch), "the fast path reads it");
        }
    }

    /// Other messages are framed as tonic's encoder frames them: the prefix, then prost's bytes.
    #[test]
    fn other_messages_are_framed_as_prost_writes_them() {
        let heartbeat = OriginMessage { body: Some(Body::Heartbeat(crate::Heartbeat { last_seq: 5, hlc: 9, wall_ms: 3, ack_now: true })) };
        let welcome =
            OriginMessage { body: Some(Body::Welcome(crate::Welcome { run_id: "r".into(), node_name: "n".into(), start_seq: 7, ..Default::default() })) };
        for message in [heartbeat, welcome, OriginMessage::default()] {
            let (head, ops) = frame_origin_message(&message).unwrap();
            assert!(ops.is_none());
            assert_eq!(unframed(&head, None), Bytes::from(message.encode_to_vec()));
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
