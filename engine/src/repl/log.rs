//! The origin's replication backlog: this node's writes as encoded ops (`repl::wire::encode`,
//! one `Op`'s protobuf bytes each), numbered by sequence, bounded by `repl-backlog-size`
//! bytes. Subscribers that present this run's id and a sequence still held resume from it
//! (partial resync); anyone else takes a full sync.
//!
//! Each op is encoded once, by the write that appends it (outside the backlog's lock), and
//! every subscriber's stream sends those same bytes (`Bytes` handles, no copy and no encoding
//! per subscriber): the stream task's batch is a list of them (`EncodedBatch`, the same bytes
//! on the wire as the `Batch` of ops it replaces). An entry costs its encoding plus
//! `ENTRY_OVERHEAD` (its slot and handle); the encodings are cut from per-thread chunks
//! (`repl::wire::encode`), so the memory held can exceed the bytes accounted by the chunks
//! partly outside the backlog's window (at most two chunks per writing thread).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;
use smallvec::SmallVec;
use tokio::sync::Notify;

use crate::db::effect::Effect;

/// Where a subscriber can start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// Stream from this sequence on; everything before it was already sent.
    From(u64),
    /// The backlog no longer holds what the subscriber needs (or it never synced from this
    /// run): it needs a full sync, after which the live stream starts at this sequence.
    FullSync(u64),
}

/// What an entry costs besides its encoding: its slot in the deque (a `Bytes` handle).
pub const ENTRY_OVERHEAD: usize = std::mem::size_of::<Bytes>();

struct Inner {
    /// Encoded ops; the front one has sequence `first_seq`, the rest follow without gaps.
    entries: VecDeque<Bytes>,
    first_seq: u64,
    bytes: usize,
}

/// The bounded backlog of this node's own writes.
pub struct ReplLog {
    inner: Mutex<Inner>,
    /// The next sequence to assign (sequences start at 1). Written under `inner`'s lock.
    next_seq: AtomicU64,
    capacity_bytes: AtomicU64,
    /// Woken whenever ops are appended.
    pub appended: Notify,
}

impl ReplLog {
    pub fn new(capacity_bytes: u64) -> ReplLog {
        ReplLog {
            inner: Mutex::new(Inner { entries: VecDeque::new(), first_seq: 1, bytes: 0 }),
            next_seq: AtomicU64::new(1),
            capacity_bytes: AtomicU64::new(capacity_bytes),
            appended: Notify::new(),
        }
    }

    pub fn set_capacity(&self, bytes: u64) {
        self.capacity_bytes.store(bytes, Ordering::Relaxed);
    }

    /// The sequence the next appended op will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq.load(Ordering::Acquire)
    }

    /// Appends ops (in order), each encoded once here; returns the last sequence assigned.
    pub fn append(&self, ops: impl IntoIterator<Item = Effect>) -> u64 {
        // Encoded before the lock is taken: concurrent writers encode in parallel.
        let encoded: SmallVec<[Bytes; 4]> = ops.into_iter().map(super::wire::encode).collect();
        self.append_encoded(encoded)
    }

    /// Appends already encoded ops (each one `Op`'s encoding); returns the last sequence.
    pub fn append_encoded(&self, ops: impl IntoIterator<Item = Bytes>) -> u64 {
        let capacity = self.capacity_bytes.load(Ordering::Relaxed) as usize;
        let mut inner = self.inner.lock();
        let mut next = self.next_seq.load(Ordering::Acquire);
        for op in ops {
            inner.bytes += ENTRY_OVERHEAD + op.len();
            inner.entries.push_back(op);
            next += 1;
        }
        self.next_seq.store(next, Ordering::Release);
        while inner.bytes > capacity && inner.entries.len() > 1 {
            if let Some(old) = inner.entries.pop_front() {
                inner.bytes -= ENTRY_OVERHEAD + old.len();
                inner.first_seq += 1;
            }
        }
        drop(inner);
        self.appended.notify_waiters();
        next - 1
    }

    /// Where a subscriber asking for `next_seq` can start.
    pub fn resume(&self, next_seq: u64) -> Resume {
        let inner = self.inner.lock();
        if next_seq >= inner.first_seq && next_seq <= self.next_seq() {
            Resume::From(next_seq)
        } else {
            Resume::FullSync(self.next_seq())
        }
    }

    /// Up to `max` encoded ops starting at sequence `from` (the shared bytes, not copies).
    /// `None` if `from` fell out of the backlog.
    pub fn read(&self, from: u64, max: usize) -> Option<Vec<Bytes>> {
        let inner = self.inner.lock();
        if from < inner.first_seq {
            return None;
        }
        let skip = ((from - inner.first_seq) as usize).min(inner.entries.len());
        Some(inner.entries.range(skip..).take(max).cloned().collect())
    }

    pub fn held_bytes(&self) -> usize {
        self.inner.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::effect::EffectKind;
    use crate::repl::wire;

    fn op(key: &str) -> Effect {
        Effect::delete(0, key.as_bytes(), crate::hlc::Version::ZERO)
    }

    fn set(key: &str, value: &str) -> Effect {
        Effect::new(
            0,
            key.as_bytes(),
            EffectKind::StringSet { value: Bytes::copy_from_slice(value.as_bytes()), version: crate::hlc::Version { hlc: 7, node: 1 } },
        )
    }

    #[test]
    fn resumes_inside_the_backlog_and_full_syncs_outside() {
        let log = ReplLog::new(10_000);
        log.append((0..10).map(|i| op(&format!("k{i}"))));
        assert_eq!(log.resume(5), Resume::From(5));
        assert_eq!(log.resume(11), Resume::From(11));
        assert_eq!(log.read(9, 100).unwrap().len(), 2);
        assert_eq!(log.read(11, 100).unwrap().len(), 0);
        let small = ReplLog::new(100);
        small.append((0..50).map(|i| op(&format!("key-{i}"))));
        assert_eq!(small.resume(1), Resume::FullSync(51));
        assert!(small.read(1, 10).is_none());
        // What is left is the newest ops, and they still read from where they are.
        let first = 51 - small.inner.lock().entries.len() as u64;
        assert_eq!(small.resume(first), Resume::From(first));
        assert_eq!(small.resume(first - 1), Resume::FullSync(51));
        let tail = small.read(first, 100).unwrap();
        assert_eq!(wire::decode(tail.last().unwrap().clone()).unwrap(), op("key-49"));
    }

    /// Every subscriber's stream gets the very bytes the write encoded when it appended (the
    /// same memory, not a copy or an encoding of its own), and they decode to the effect.
    #[test]
    fn subscribers_share_the_ops_encoded_once_at_append() {
        let log = ReplLog::new(1 << 20);
        let effects: Vec<Effect> = (0..20).map(|i| set(&format!("key:{i}"), &"v".repeat(i * 10))).collect();
        assert_eq!(log.append(effects.clone()), 20);
        let first = log.read(1, 512).unwrap();
        let second = log.read(1, 512).unwrap();
        assert_eq!(first.len(), 20);
        for ((a, b), e) in first.iter().zip(&second).zip(&effects) {
            assert_eq!(a.as_ptr(), b.as_ptr(), "two reads share the encoded op");
            assert_eq!(a, &Bytes::from(prost::Message::encode_to_vec(&keymesh_proto::Op::from(e.clone()))), "the op's own encoding");
            assert_eq!(&wire::decode(a.clone()).unwrap(), e);
        }
        // A batch of them is the same bytes on the wire as the Batch of ops nodes always sent.
        use prost::Message;
        let ops: Vec<keymesh_proto::Op> = effects.iter().cloned().map(keymesh_proto::Op::from).collect();
        let old = keymesh_proto::Batch { first_seq: 1, ops, hlc: 99 }.encode_to_vec();
        let new = keymesh_proto::EncodedBatch { first_seq: 1, ops: first, hlc: 99 }.encode_to_vec();
        assert_eq!(old, new);
        assert_eq!(keymesh_proto::Batch::decode(&new[..]).unwrap().ops.len(), 20);
    }

    /// A partial resync reads the ops encoded when they were written (nothing is encoded
    /// again), from any sequence still held, and the backlog accounts each op's encoding.
    #[test]
    fn a_partial_resync_streams_the_ops_encoded_at_append() {
        let log = ReplLog::new(1 << 20);
        let effects: Vec<Effect> = (0..100).map(|i| set(&format!("k{i}"), "value")).collect();
        for e in &effects {
            log.append([e.clone()]);
        }
        let live = log.read(1, 512).unwrap();
        let expected: usize = effects.iter().map(|e| ENTRY_OVERHEAD + wire::encoded_len(e)).sum();
        assert_eq!(log.held_bytes(), expected);
        // A subscriber that got the first 40 ops reconnects.
        assert_eq!(log.resume(41), Resume::From(41));
        let resumed = log.read(41, 512).unwrap();
        assert_eq!(resumed.len(), 60);
        for (i, op) in resumed.iter().enumerate() {
            assert_eq!(op.as_ptr(), live[40 + i].as_ptr());
            assert_eq!(wire::decode(op.clone()).unwrap(), effects[40 + i]);
        }
        // The backlog shrinks to a new capacity at the next append, oldest first.
        log.set_capacity((expected / 2) as u64);
        log.append([set("last", "value")]);
        assert!(log.held_bytes() <= expected / 2);
        assert_eq!(log.resume(41), Resume::FullSync(102));
        let held = log.inner.lock().entries.len() as u64;
        let oldest = 102 - held;
        assert_eq!(wire::decode(log.read(oldest, 1).unwrap()[0].clone()).unwrap(), effects[oldest as usize - 1]);
    }
}
