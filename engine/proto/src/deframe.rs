//! The messages of a gRPC stream, cut out of the chunks its HTTP/2 body yields without copying
//! them: a peer's link reads its `Subscribe` stream through this (`mesh::subscribe` in the
//! engine), not through tonic's `Streaming`, which copies every chunk it receives into one
//! buffer first (tonic's `decode.rs`: `self.buf.put(data)`), a copy of every replicated write
//! on every peer (a peer merging a SET: 1,827 instructions with it, 1,672 without; callgrind).
//!
//! A message is returned as the pieces of the chunks it spans: one piece when it lies in one
//! chunk; a large batch is two, its head and its ops, as the origin sends them
//! (`codec::frame_origin_message`) and HTTP/2 delivers them, a DATA frame each. What reads a
//! message (`codec::decode_origin_message`) copies only where it cannot use the pieces as they
//! are. Each message starts with gRPC's prefix: a compression flag (never set on the mesh) and
//! the message's length, checked against the largest message the reader accepts.

use std::collections::VecDeque;

use prost::bytes::Bytes;
use tonic::Status;

use crate::codec::GRPC_PREFIX;

/// The chunks received and not yet cut into messages.
#[derive(Debug, Default)]
pub struct Deframer {
    chunks: VecDeque<Bytes>,
    /// The bytes in `chunks`.
    buffered: usize,
    /// The largest message accepted, in bytes.
    max_message: usize,
}

impl Deframer {
    pub fn new(max_message: usize) -> Deframer {
        Deframer { chunks: VecDeque::new(), buffered: 0, max_message }
    }

    /// A chunk of the stream, as the body yielded it.
    pub fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.buffered += chunk.len();
            self.chunks.push_back(chunk);
        }
    }

    /// Whether any received byte is not yet part of a message returned (a stream that ends
    /// now ends inside a message).
    pub fn is_empty(&self) -> bool {
        self.buffered == 0
    }

    /// The next whole message, as the pieces of the chunks it lies in, in order (none empty);
    /// `None` until all of it has been received. An error for a compressed message (the mesh
    /// never compresses, so its stream announces no encoding) or one over the limit, as
    /// tonic's `Streaming` refuses them.
    pub fn next_message(&mut self) -> Result<Option<Vec<Bytes>>, Status> {
        let Some(prefix) = self.peek_prefix() else { return Ok(None) };
        match prefix[0] {
            0 => {}
            1 => return Err(Status::internal("protocol error: received message with compressed-flag but no grpc-encoding was specified")),
            flag => return Err(Status::internal(format!("protocol error: received message with invalid compression flag: {flag} (valid flags are 0 and 1)"))),
        }
        let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
        if len > self.max_message {
            return Err(Status::out_of_range(format!("Error, decoded message length too large: found {len} bytes, the limit is: {} bytes", self.max_message)));
        }
        if self.buffered < GRPC_PREFIX + len {
            return Ok(None);
        }
        self.cut(GRPC_PREFIX, drop);
        let mut pieces = Vec::with_capacity(2);
        self.cut(len, |piece| pieces.push(piece));
        Ok(Some(pieces))
    }

    /// The first `GRPC_PREFIX` bytes, wherever the chunks split them.
    fn peek_prefix(&self) -> Option<[u8; GRPC_PREFIX]> {
        if self.buffered < GRPC_PREFIX {
            return None;
        }
        let mut prefix = [0u8; GRPC_PREFIX];
        let mut filled = 0;
        for chunk in &self.chunks {
            let n = chunk.len().min(GRPC_PREFIX - filled);
            prefix[filled..filled + n].copy_from_slice(&chunk[..n]);
            filled += n;
            if filled == GRPC_PREFIX {
                break;
            }
        }
        Some(prefix)
    }

    /// Cuts the next `len` bytes (all received) off the chunks and gives them to `each` as
    /// pieces: whole chunks where they fit, the last one split (`Bytes::split_to` shares the
    /// chunk's memory).
    fn cut(&mut self, mut len: usize, mut each: impl FnMut(Bytes)) {
        while len > 0 {
            let front = self.chunks.front_mut().expect("the bytes asked for were received");
            let piece = if front.len() <= len { self.chunks.pop_front().expect("a front chunk") } else { front.split_to(len) };
            len -= piece.len();
            self.buffered -= piece.len();
            each(piece);
        }
    }
}

/// The pieces of a message as one `Bytes`: the piece itself when there is one, a copy of
/// them all otherwise.
pub fn joined(pieces: Vec<Bytes>) -> Bytes {
    if pieces.len() == 1 {
        return pieces.into_iter().next().expect("one piece");
    }
    let mut whole = Vec::with_capacity(pieces.iter().map(Bytes::len).sum());
    for piece in &pieces {
        whole.extend_from_slice(piece);
    }
    Bytes::from(whole)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn framed(message: &[u8]) -> Vec<u8> {
        [&[0u8][..], &(message.len() as u32).to_be_bytes(), message].concat()
    }

    /// The stream's bytes cut into chunks at `cuts` (positions, sorted and deduplicated).
    fn chunked(stream: &[u8], cuts: &[usize]) -> Vec<Bytes> {
        let mut at = 0;
        let mut chunks = Vec::new();
        for &cut in cuts.iter().chain([&stream.len()]) {
            chunks.push(Bytes::copy_from_slice(&stream[at..cut]));
            at = cut;
        }
        chunks
    }

    proptest! {
        /// Messages framed back to back and cut into chunks anywhere come out whole and in
        /// order, each as soon as its last byte is pushed, as pieces that are slices of the
        /// chunks received (no copy), none empty.
        #[test]
        fn messages_come_out_whole_however_the_stream_is_chunked(messages in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 0..8), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12)) {
            let stream: Vec<u8> = messages.iter().flat_map(|m| framed(m)).collect();
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
            cuts.sort_unstable();
            cuts.dedup();
            let mut deframer = Deframer::new(1 << 20);
            let mut out = Vec::new();
            // Where each message's last byte is in the stream.
            let ends: Vec<usize> = messages.iter().scan(0, |at, m| { *at += 5 + m.len(); Some(*at) }).collect();
            let mut pushed: Vec<Bytes> = Vec::new();
            for chunk in chunked(&stream, &cuts) {
                pushed.push(chunk.clone());
                deframer.push(chunk);
                while let Some(pieces) = deframer.next_message().unwrap() {
                    for piece in &pieces {
                        prop_assert!(!piece.is_empty());
                        let within = |c: &Bytes| c.as_ptr_range().contains(&piece.as_ptr()) && piece.as_ptr() as usize + piece.len() <= c.as_ptr_range().end as usize;
                        prop_assert!(pushed.iter().any(within), "a piece is a slice of a chunk received, not a copy");
                    }
                    out.push(joined(pieces).to_vec());
                }
                let received: usize = pushed.iter().map(Bytes::len).sum();
                prop_assert_eq!(out.len(), ends.iter().filter(|&&end| end <= received).count());
            }
            prop_assert_eq!(out, messages);
            prop_assert!(deframer.is_empty());
        }
    }

    /// A message that lies in one chunk is returned as a slice of it; a message in two chunks
    /// as the two pieces, each a slice of its chunk.
    #[test]
    fn a_message_is_made_of_slices_of_the_chunks_it_came_in() {
        let mut deframer = Deframer::new(1 << 20);
        let first = Bytes::from([framed(b"one"), framed(b"two-")[..7].to_vec()].concat());
        deframer.push(first.clone());
        let one = deframer.next_message().unwrap().expect("a whole message");
        assert_eq!(one.len(), 1);
        assert_eq!(&one[0][..], b"one");
        assert!(first.as_ptr_range().contains(&one[0].as_ptr()));
        assert_eq!(deframer.next_message().unwrap(), None, "two bytes of `two-` still to come");
        let second = Bytes::from_static(b"o-");
        deframer.push(second.clone());
        let two = deframer.next_message().unwrap().expect("a whole message");
        assert_eq!(two.len(), 2);
        assert!(first.as_ptr_range().contains(&two[0].as_ptr()));
        assert_eq!(two[1].as_ptr(), second.as_ptr());
        assert_eq!(&joined(two)[..], b"two-");
        assert!(deframer.is_empty());
    }

    /// As tonic's `Streaming` refuses them: a compressed message (no encoding was agreed), an
    /// unknown flag, a message over the limit (refused from its prefix, before it arrives).
    #[test]
    fn a_compressed_or_oversized_message_is_refused() {
        let mut compressed = Deframer::new(100);
        compressed.push(Bytes::from_static(&[1, 0, 0, 0, 1, 7]));
        assert_eq!(compressed.next_message().unwrap_err().code(), tonic::Code::Internal);
        let mut flagged = Deframer::new(100);
        flagged.push(Bytes::from_static(&[2, 0, 0, 0, 0]));
        assert_eq!(flagged.next_message().unwrap_err().code(), tonic::Code::Internal);
        let mut big = Deframer::new(100);
        big.push(Bytes::from_static(&[0, 0, 0, 0, 101]));
        assert_eq!(big.next_message().unwrap_err().code(), tonic::Code::OutOfRange);
        let mut at_limit = Deframer::new(100);
        at_limit.push(Bytes::from(framed(&[9; 100])));
        assert_eq!(at_limit.next_message().unwrap().map(joined).map(|m| m.len()), Some(100));
    }
}
