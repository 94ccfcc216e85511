//! The gRPC codec of both services (`build.rs` names it): prost's, except that a received
//! message is decoded from one contiguous `Bytes` instead of from tonic's `DecodeBuf`. The
//! bytes on the wire are prost's.
//!
//! Why: prost reads a `DecodeBuf` a varint at a time through `Buf::chunk`/`advance` on the
//! `BytesMut` behind it, ~150 instructions per field, and a mesh batch is a repeated field of
//! a few hundred encoded ops, each read as a key, a length and a slice. Taken as `Bytes` first
//! (one `split_to` of tonic's buffer, no copy), the message decodes on prost's slice fast
//! path, and every `bytes` field is still a slice of the received frame (docs/benchmarks.md,
//! "Sixth pass").

use std::marker::PhantomData;

use prost::bytes::Buf;
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::ProstEncoder;

/// `tonic_prost::ProstCodec` with a decoder that reads one contiguous buffer (see the module).
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
    type Encoder = ProstEncoder<T>;
    type Decoder = FlatDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        FlatDecoder(PhantomData)
    }
}

/// Decodes `U` from the whole received message taken as one `Bytes`.
#[derive(Debug, Clone, Copy)]
pub struct FlatDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for FlatDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let whole = buf.copy_to_bytes(buf.remaining());
        // As tonic_prost's decoder maps it: a message that does not parse is INTERNAL.
        U::decode(whole).map(Some).map_err(|e| Status::internal(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{op, EncodedBatch, Op, OriginMessage, StringSet, Version};
    use prost::bytes::Bytes;

    /// A batch as an origin sends it, decoded through `Message::decode` from a `Bytes` (what
    /// `FlatDecoder` does) and from a non-contiguous `Buf` (what prost did through tonic's
    /// buffer): the same message, and its ops are slices of the received bytes.
    #[test]
    fn a_batch_decodes_from_one_buffer_as_from_a_chunked_one_and_its_ops_are_slices_of_it() {
        let ops: Vec<Bytes> = (0..300u64)
            .map(|i| {
                let set = StringSet { value: Bytes::from(vec![b'v'; (i % 7) as usize * 40]), version: Some(Version { hlc: 1 << 40 | i, node: 3 }) };
                Bytes::from(Op { db: 0, key: Bytes::from(format!("key:{i}")), effect: Some(op::Effect::StringSet(set)) }.encode_to_vec())
            })
            .collect();
        let sent = OriginMessage { body: Some(crate::origin_message::Body::Batch(EncodedBatch { first_seq: 17, hlc: 99, ops })) };
        let wire = Bytes::from(sent.encode_to_vec());

        let flat = OriginMessage::decode(wire.clone()).unwrap();
        let (head, tail) = wire.split_at(wire.len() / 3);
        let chunked = OriginMessage::decode(head.chain(tail)).unwrap();
        assert_eq!(flat, sent);
        assert_eq!(chunked, sent);

        let Some(crate::origin_message::Body::Batch(batch)) = flat.body else { unreachable!() };
        let frame = wire.as_ptr_range();
        assert!(batch.ops.iter().all(|op| frame.contains(&op.as_ptr())), "a decoded op is a slice of the frame, not a copy");
    }
}
