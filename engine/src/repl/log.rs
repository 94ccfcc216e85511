//! The origin's replication backlog: this node's writes as encoded ops, numbered by sequence,
//! bounded by `repl-backlog-size` bytes. Subscribers that present this run's id and a
//! sequence still held resume from it (partial resync); anyone else takes a full sync.
//!
//! Each op is encoded once, by the write that makes it (`repl::wire::OpBuffer`, outside the
//! backlog's lock), already framed as an element of a batch's `ops` field. The backlog keeps
//! the frames back to back, as the wire carries them: a subscriber's live batch is one slice
//! of them (`FramedOps`, a `Bytes` handle: no copy, and no work per op per subscriber; h2
//! writes the slice from where it lies: `mesh::origin::OriginBody`). Appends go into an open
//! buffer; a read freezes what was appended so far into a chunk (`Bytes`) that every
//! subscriber's slices share. An op costs its frame plus `ENTRY_OVERHEAD` (where it ends).
//! The memory held can exceed the bytes accounted by the chunk the oldest held op is in (a
//! chunk is freed when no op of it is held and no stream still sends it).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::{Bytes, BytesMut};
use keymesh_proto::FramedOps;
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::wire::OpBuffer;

/// Where a subscriber can start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// Stream from this sequence on; everything before it was already sent.
    From(u64),
    /// The backlog no longer holds what the subscriber needs (or it never synced from this
    /// run): it needs a full sync, after which the live stream starts at this sequence.
    FullSync(u64),
}

/// What an op costs besides its frame: where it ends.
pub const ENTRY_OVERHEAD: usize = std::mem::size_of::<u64>();

/// Appends go into buffers of this size (a larger op gets one of its own size).
const OPEN_BUFFER: usize = 64 << 10;

/// How far ahead of its end an append starts loading the open buffer's lines
/// (`Inner::prefetch_ahead`): a few appends' worth, issued microseconds before they are written.
const PREFETCH_AHEAD: usize = 512;

/// How many ops ahead of its oldest and of its newest an append starts loading the `ends`
/// ring's lines (`Inner::prefetch_ends`): two lines of eight ends, a few dozen microseconds
/// before they are read or written under load.
const ENDS_AHEAD: usize = 16;

/// Offsets are positions in the stream of every frame this backlog was given, from 0.
struct Inner {
    /// Frozen frames, oldest first: (offset of the first byte, the bytes). Each chunk holds
    /// whole frames; the first may start before `start` (ops already dropped).
    chunks: VecDeque<(u64, Bytes)>,
    /// Frames appended since the last freeze; its first byte is at `open_at`.
    open: BytesMut,
    open_at: u64,
    /// Where each held op's frame ends: op `first_seq + i` ends at `ends[i]`.
    ends: VecDeque<u64>,
    first_seq: u64,
    /// Where the oldest held op's frame starts.
    start: u64,
}

impl Inner {
    /// The offset after the last frame.
    fn end(&self) -> u64 {
        self.open_at + self.open.len() as u64
    }

    fn held_bytes(&self) -> usize {
        (self.end() - self.start) as usize + self.ends.len() * ENTRY_OVERHEAD
    }

    /// Starts loading the cache lines of the open buffer that the next appends will write,
    /// `len` bytes' worth (what one append wrote) from `PREFETCH_AHEAD` past its end. The
    /// buffer is memory the backlog let go of long ago (its evicted chunks, a backlog's length
    /// back), so every line of it is a cache miss; stores hide a miss only until the next
    /// locked instruction, and one comes at once (the sequence's store, the unlock), so
    /// without this an append waited for the lines it wrote (docs/benchmarks.md, "Settings
    /// reads per command; the backlog's cold lines").
    fn prefetch_ahead(&self, len: usize) {
        let from = (self.open.len() + PREFETCH_AHEAD) & !63;
        let to = (self.open.len() + PREFETCH_AHEAD + len).min(self.open.capacity());
        for line in (from..to).step_by(64) {
            crate::db::node::prefetch(self.open.as_ptr().wrapping_add(line));
        }
    }

    /// Starts loading the lines of the `ends` ring that the appends after this one touch: the
    /// oldest ends, which a full backlog's appends drop, and the free slots after the newest,
    /// which they fill. Under the default 64 MB the ring holds ~460,000 ends (3.7 MB), so both
    /// are lines no one has touched for a fraction of a second, a cache miss each per eight
    /// appends: `perf annotate` put a quarter of `ReplLog::append`'s samples on reading the
    /// oldest end, and the new end's store waited as the backlog's bytes once did
    /// (`prefetch_ahead`; docs/benchmarks.md, "The backlog's ring of ends"). `VecDeque` keeps
    /// its ends in one buffer, the free slots right after the newest unless the ring wraps
    /// there; then the hint points past the buffer, which a prefetch allows (it never faults).
    fn prefetch_ends(&self) {
        if let Some(oldest) = self.ends.get(ENDS_AHEAD) {
            crate::db::node::prefetch((oldest as *const u64).cast());
        }
        if let Some(newest) = self.ends.back() {
            crate::db::node::prefetch((newest as *const u64).wrapping_add(ENDS_AHEAD).cast());
        }
    }

    /// Makes the open buffer's frames a chunk.
    fn freeze(&mut self) {
        if !self.open.is_empty() {
            let frozen = self.open.split().freeze();
            let len = frozen.len() as u64;
            self.chunks.push_back((self.open_at, frozen));
            self.open_at += len;
        }
    }

    /// Drops the oldest op, and a chunk once it holds no op.
    fn drop_oldest(&mut self) {
        let Some(end) = self.ends.pop_front() else { return };
        self.first_seq += 1;
        self.start = end;
        while self.chunks.front().is_some_and(|(at, bytes)| at + bytes.len() as u64 <= end) {
            self.chunks.pop_front();
        }
    }
}

/// A stream counted in `ReplLog::waiting` while it waits (dropped when the wait ends or is
/// abandoned).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The bounded backlog of this node's own writes.
pub struct ReplLog {
    inner: Mutex<Inner>,
    /// The next sequence to assign (sequences start at 1). Written under `inner`'s lock.
    next_seq: AtomicU64,
    capacity_bytes: AtomicU64,
    /// Wakes the streams waiting in `appended`.
    appended: Notify,
    /// How many streams wait in `appended`. An append notifies only while one does:
    /// under load streams are busy sending or lingering, and `Notify::notify_waiters` takes
    /// its waiter list's lock every time (a second lock per write, ~45 instructions, its cache
    /// line shared by every worker that appends).
    waiting: AtomicUsize,
}

impl ReplLog {
    pub fn new(capacity_bytes: u64) -> ReplLog {
        let inner = Inner { chunks: VecDeque::new(), open: BytesMut::new(), open_at: 0, ends: VecDeque::new(), first_seq: 1, start: 0 };
        ReplLog {
            inner: Mutex::new(inner),
            next_seq: AtomicU64::new(1),
            capacity_bytes: AtomicU64::new(capacity_bytes),
            appended: Notify::new(),
            waiting: AtomicUsize::new(0),
        }
    }

    pub fn set_capacity(&self, bytes: u64) {
        self.capacity_bytes.store(bytes, Ordering::Relaxed);
    }

    /// The sequence the next appended op will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq.load(Ordering::Acquire)
    }

    /// Appends a command's ops (in order, one copy of their frames); returns the last sequence
    /// assigned.
    pub fn append(&self, ops: &OpBuffer) -> u64 {
        let capacity = self.capacity_bytes.load(Ordering::Relaxed) as usize;
        let mut inner = self.inner.lock();
        let framed = ops.bytes();
        if inner.open.capacity() - inner.open.len() < framed.len() {
            inner.freeze();
            inner.open = BytesMut::with_capacity(OPEN_BUFFER.max(framed.len()));
        }
        let base = inner.end();
        inner.open.extend_from_slice(framed);
        inner.prefetch_ahead(framed.len());
        // One op per write, mostly: `push_back` in a loop, not `extend`'s general path.
        for &end in ops.ends() {
            inner.ends.push_back(base + u64::from(end));
        }
        inner.prefetch_ends();
        let next = self.next_seq.load(Ordering::Acquire) + ops.len() as u64;
        // SeqCst, as `waiting` below and in `appended`: either this append sees a
        // stream waiting, or that stream sees this append's sequence.
        self.next_seq.store(next, Ordering::SeqCst);
        while inner.held_bytes() > capacity && inner.ends.len() > 1 {
            inner.drop_oldest();
        }
        drop(inner);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.appended.notify_waiters();
        }
        next - 1
    }

    /// Returns once op `seq` was appended (at once if it was).
    pub async fn appended(&self, seq: u64) {
        let mut notified = std::pin::pin!(self.appended.notified());
        // Registered first, then counted, then the check: an append after the check sees the
        // count and wakes this registration.
        notified.as_mut().enable();
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _counted = Waiting(&self.waiting);
        if self.next_seq.load(Ordering::SeqCst) > seq {
            return;
        }
        notified.await;
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

    /// Up to `max` ops from sequence `from` on, as one slice of the held frames (the shared
    /// bytes, not a copy): at least one op when `from` was appended, none when it is the next.
    /// `None` if `from` fell out of the backlog.
    pub fn read(&self, from: u64, max: usize) -> Option<FramedOps> {
        let mut inner = self.inner.lock();
        if from < inner.first_seq {
            return None;
        }
        let first = (from - inner.first_seq) as usize;
        if first >= inner.ends.len() || max == 0 {
            return Some(FramedOps::default());
        }
        let start = if first == 0 { inner.start } else { inner.ends[first - 1] };
        if start >= inner.open_at {
            inner.freeze();
        }
        // The chunk `start` is in: the last that starts at or before it (each read freezes a
        // chunk, so a backlog of a few seconds holds thousands of them).
        let index = inner.chunks.partition_point(|(at, _)| *at <= start).checked_sub(1).expect("a held op is in a chunk");
        let (at, chunk) = &inner.chunks[index];
        let chunk_end = at + chunk.len() as u64;
        let last = (first + max).min(inner.ends.len());
        let count = inner.ends.range(first..last).take_while(|&&end| end <= chunk_end).count();
        let end = inner.ends[first + count - 1];
        Some(FramedOps::framed(chunk.slice((start - at) as usize..(end - at) as usize), count))
    }

    pub fn held_bytes(&self) -> usize {
        self.inner.lock().held_bytes()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::time::timeout;

    use super::*;
    use crate::db::effect::{Effect, EffectKind};
    use crate::hlc::Version;
    use crate::repl::wire;

    fn op(key: &str) -> Effect {
        Effect::delete(0, key.as_bytes(), Version::ZERO)
    }

    fn set(key: &str, value: &str) -> Effect {
        Effect::new(0, key.as_bytes(), EffectKind::StringSet { value: Bytes::copy_from_slice(value.as_bytes()), version: Version { hlc: 7, node: 1 } })
    }

    fn ops(effects: impl IntoIterator<Item = Effect>) -> OpBuffer {
        let mut ops = OpBuffer::default();
        effects.into_iter().for_each(|e| ops.push(e));
        ops
    }

    fn decoded(ops: &FramedOps) -> Vec<Effect> {
        ops.iter().map(|op| wire::decode(op).unwrap()).collect()
    }

    #[test]
    fn resumes_inside_the_backlog_and_full_syncs_outside() {
        let log = ReplLog::new(10_000);
        log.append(&ops((0..10).map(|i| op(&format!("k{i}")))));
        assert_eq!(log.resume(5), Resume::From(5));
        assert_eq!(log.resume(11), Resume::From(11));
        assert_eq!(log.read(9, 100).unwrap().len(), 2);
        assert_eq!(log.read(11, 100).unwrap().len(), 0);
        let small = ReplLog::new(100);
        small.append(&ops((0..50).map(|i| op(&format!("key-{i}")))));
        assert_eq!(small.resume(1), Resume::FullSync(51));
        assert!(small.read(1, 10).is_none());
        // What is left is the newest ops, and they still read from where they are.
        let first = 51 - small.inner.lock().ends.len() as u64;
        assert_eq!(small.resume(first), Resume::From(first));
        assert_eq!(small.resume(first - 1), Resume::FullSync(51));
        let tail = small.read(first, 100).unwrap();
        assert_eq!(decoded(&tail).last(), Some(&op("key-49")));
    }

    /// A stream waiting for an op wakes when it is appended, and returns at once for one
    /// already there; appends notify only while a stream waits (an abandoned wait uncounts
    /// itself).
    #[tokio::test]
    async fn a_waiting_stream_wakes_on_the_append_it_waits_for() {
        let log = Arc::new(ReplLog::new(1 << 20));
        log.append(&ops([op("a")]));
        timeout(Duration::from_secs(5), log.appended(1)).await.expect("op 1 is already there");
        let waiter = tokio::spawn({
            let log = log.clone();
            async move { log.appended(2).await }
        });
        while log.waiting.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        log.append(&ops([op("b")]));
        timeout(Duration::from_secs(5), waiter).await.expect("woken by the append").unwrap();
        assert_eq!(log.waiting.load(Ordering::SeqCst), 0);
        // A wait abandoned before its op came (a heartbeat won the select) is uncounted.
        assert!(timeout(Duration::from_millis(20), log.appended(3)).await.is_err());
        assert_eq!(log.waiting.load(Ordering::SeqCst), 0);
    }

    /// Each op is appended from another thread only once the stream has started to wait for
    /// it (at a moment that varies from op to op), and the next only after that wait ended: a
    /// lost notification leaves the stream waiting for an op that is there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_append_is_missed_by_a_stream_waiting_for_it() {
        const OPS: u64 = 5_000;
        let log = Arc::new(ReplLog::new(1 << 30));
        let (wanted, done) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let appender = std::thread::spawn({
            let (log, wanted, done) = (log.clone(), wanted.clone(), done.clone());
            move || {
                for seq in 1..=OPS {
                    while wanted.load(Ordering::SeqCst) < seq {
                        std::thread::yield_now();
                    }
                    for _ in 0..seq % 50 {
                        std::hint::spin_loop();
                    }
                    log.append(&ops([op(&format!("k{seq}"))]));
                    while done.load(Ordering::SeqCst) < seq {
                        std::thread::yield_now();
                    }
                }
            }
        });
        for seq in 1..=OPS {
            wanted.store(seq, Ordering::SeqCst);
            timeout(Duration::from_secs(5), log.appended(seq)).await.unwrap_or_else(|_| panic!("op {seq} was appended but the wait for it never ended"));
            done.store(seq, Ordering::SeqCst);
        }
        appender.join().unwrap();
    }

    /// Every subscriber's stream gets the very bytes the backlog holds (the same memory, not a
    /// copy or an encoding of its own), and a batch of them is the `Batch` of those ops.
    #[test]
    fn subscribers_share_the_ops_encoded_once_at_append() {
        let log = ReplLog::new(1 << 20);
        let effects: Vec<Effect> = (0..20).map(|i| set(&format!("key:{i}"), &"v".repeat(i * 10))).collect();
        assert_eq!(log.append(&ops(effects.clone())), 20);
        let first = log.read(1, 512).unwrap();
        let second = log.read(1, 512).unwrap();
        assert_eq!(first.len(), 20);
        assert_eq!(first.as_bytes().as_ptr(), second.as_bytes().as_ptr(), "two reads share the held frames");
        assert_eq!(decoded(&first), effects);
        for (op, e) in first.iter().zip(&effects) {
            assert_eq!(op, wire::encode(e.clone()), "the op's own encoding");
        }
        // A batch of them is the same bytes on the wire as the Batch of ops nodes always sent.
        use prost::Message;
        let list: Vec<keymesh_proto::Op> = effects.iter().cloned().map(keymesh_proto::Op::from).collect();
        let old = keymesh_proto::Batch { first_seq: 1, ops: list, hlc: 99 }.encode_to_vec();
        let new = keymesh_proto::EncodedBatch { first_seq: 1, ops: first, hlc: 99 }.encode_to_vec();
        assert_eq!(old, new);
    }

    /// A partial resync reads the ops encoded when they were written (nothing is encoded
    /// again), from any sequence still held, and the backlog accounts each op's frame.
    #[test]
    fn a_partial_resync_streams_the_ops_encoded_at_append() {
        let log = ReplLog::new(1 << 20);
        let effects: Vec<Effect> = (0..100).map(|i| set(&format!("k{i}"), "value")).collect();
        for e in &effects {
            log.append(&ops([e.clone()]));
        }
        let live = log.read(1, 512).unwrap();
        assert_eq!(decoded(&live), effects);
        let expected: usize = live.as_bytes().len() + effects.len() * ENTRY_OVERHEAD;
        assert_eq!(log.held_bytes(), expected);
        // A subscriber that got the first 40 ops reconnects.
        assert_eq!(log.resume(41), Resume::From(41));
        let resumed = log.read(41, 512).unwrap();
        assert_eq!(decoded(&resumed), effects[40..]);
        assert!(live.as_bytes().as_ptr_range().contains(&resumed.as_bytes().as_ptr()), "the same bytes");
        // The backlog shrinks to a new capacity at the next append, oldest first.
        log.set_capacity((expected / 2) as u64);
        log.append(&ops([set("last", "value")]));
        assert!(log.held_bytes() <= expected / 2);
        assert_eq!(log.resume(41), Resume::FullSync(102));
        let held = log.inner.lock().ends.len() as u64;
        let oldest = 102 - held;
        assert_eq!(decoded(&log.read(oldest, 1).unwrap()), [effects[oldest as usize - 1].clone()]);
    }

    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        /// A command's ops: this many, each with a value of this size.
        Append(Vec<usize>),
        /// A read from this far behind the next sequence, of at most this many ops.
        Read(u64, usize),
        Capacity(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => prop::collection::vec(prop_oneof![0usize..40, 0usize..70_000], 1..4).prop_map(Step::Append),
            3 => (0u64..300, 0usize..600).prop_map(|(back, max)| Step::Read(back, max)),
            1 => prop_oneof![100u64..2_000, 2_000u64..300_000].prop_map(Step::Capacity),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Against a list of every op appended: a read from a held sequence gives the next ops in
        /// order (at least one, at most `max`), one from a dropped one gives `None`; the
        /// backlog holds the newest ops that fit its capacity (at least one), and accounts
        /// their frames; whatever the op sizes, the chunks and the reads' interleaving.
        #[test]
        fn the_backlog_reads_what_was_appended(steps in prop::collection::vec(step(), 1..80)) {
            let log = ReplLog::new(50_000);
            let mut capacity = 50_000u64;
            let mut all: Vec<Effect> = Vec::new();
            for step in steps {
                match step {
                    Step::Append(sizes) => {
                        let effects: Vec<Effect> = sizes.iter().map(|&n| set(&format!("k{}", all.len()), &"v".repeat(n))).collect();
                        prop_assert_eq!(log.append(&ops(effects.clone())), (all.len() + effects.len()) as u64);
                        all.extend(effects);
                        let held = log.inner.lock().ends.len();
                        prop_assert!(held >= 1);
                        prop_assert!(log.held_bytes() <= capacity as usize || held == 1);
                    }
                    Step::Read(back, max) => {
                        let from = (all.len() as u64 + 1).saturating_sub(back).max(1);
                        let first_held = log.inner.lock().first_seq;
                        match log.read(from, max) {
                            None => prop_assert!(from < first_held),
                            Some(read) => {
                                prop_assert!(from >= first_held);
                                let left = all.len() + 1 - from as usize;
                                prop_assert!(read.len() <= max.min(left));
                                prop_assert!(!read.is_empty() || left == 0 || max == 0);
                                let want = &all[from as usize - 1..from as usize - 1 + read.len()];
                                prop_assert_eq!(decoded(&read), want);
                            }
                        }
                    }
                    Step::Capacity(c) => {
                        capacity = c;
                        log.set_capacity(c);
                    }
                }
                let inner = log.inner.lock();
                let frames: usize = all[inner.first_seq as usize - 1..].iter().map(|e| wire::encoded_len(e) + keymesh_proto::batch::frame_len(wire::encoded_len(e))).sum();
                prop_assert_eq!(inner.held_bytes(), frames + inner.ends.len() * ENTRY_OVERHEAD);
                prop_assert_eq!(inner.first_seq as usize + inner.ends.len(), all.len() + 1);
            }
        }
    }
}
