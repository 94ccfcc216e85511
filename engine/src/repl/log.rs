//! The origin's replication backlog: effects of local writes, numbered by sequence, bounded
//! by `repl-backlog-size` bytes of memory. Subscribers that present this run's id and a sequence still
//! held resume from it (partial resync); anyone else takes a full sync.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
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

struct Entry {
    seq: u64,
    op: Effect,
    size: usize,
}

struct Inner {
    entries: VecDeque<Entry>,
    bytes: usize,
}

/// The bounded backlog of this node's own writes.
pub struct ReplLog {
    inner: Mutex<Inner>,
    /// The next sequence to assign (sequences start at 1).
    next_seq: AtomicU64,
    capacity_bytes: AtomicU64,
    /// Woken whenever ops are appended.
    pub appended: Notify,
}

impl ReplLog {
    pub fn new(capacity_bytes: u64) -> ReplLog {
        ReplLog {
            inner: Mutex::new(Inner { entries: VecDeque::new(), bytes: 0 }),
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

    /// Appends ops (in order); returns the last sequence assigned.
    pub fn append(&self, ops: impl IntoIterator<Item = Effect>) -> u64 {
        let capacity = self.capacity_bytes.load(Ordering::Relaxed) as usize;
        let mut inner = self.inner.lock();
        let mut last = 0;
        for op in ops {
            let seq = self.next_seq.fetch_add(1, Ordering::AcqRel);
            // What the entry costs in memory: its slot plus the op's heap data, which its
            // encoding approximates (a small op's slot outweighs its encoding several times).
            let size = std::mem::size_of::<Entry>() + super::wire::encoded_len(&op);
            inner.bytes += size;
            inner.entries.push_back(Entry { seq, op, size });
            last = seq;
        }
        while inner.bytes > capacity && inner.entries.len() > 1 {
            if let Some(old) = inner.entries.pop_front() {
                inner.bytes -= old.size;
            }
        }
        drop(inner);
        self.appended.notify_waiters();
        last
    }

    /// Where a subscriber asking for `next_seq` can start.
    pub fn resume(&self, next_seq: u64) -> Resume {
        let inner = self.inner.lock();
        let first_held = inner.entries.front().map_or(self.next_seq(), |e| e.seq);
        if next_seq >= first_held && next_seq <= self.next_seq() {
            Resume::From(next_seq)
        } else {
            Resume::FullSync(self.next_seq())
        }
    }

    /// Up to `max` ops starting at `from`. `None` if `from` fell out of the backlog.
    pub fn read(&self, from: u64, max: usize) -> Option<Vec<(u64, Effect)>> {
        let inner = self.inner.lock();
        let first_held = inner.entries.front().map_or(self.next_seq(), |e| e.seq);
        if from < first_held {
            return None;
        }
        let skip = (from - first_held) as usize;
        Some(inner.entries.iter().skip(skip).take(max).map(|e| (e.seq, e.op.clone())).collect())
    }

    pub fn held_bytes(&self) -> usize {
        self.inner.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(key: &str) -> Effect {
        Effect::delete(0, key.as_bytes(), crate::hlc::Version::ZERO)
    }

    #[test]
    fn resumes_inside_the_backlog_and_full_syncs_outside() {
        let log = ReplLog::new(10_000);
        log.append((0..10).map(|i| op(&format!("k{i}"))));
        assert_eq!(log.resume(5), Resume::From(5));
        assert_eq!(log.resume(11), Resume::From(11));
        assert_eq!(log.read(9, 100).unwrap().len(), 2);
        let small = ReplLog::new(100);
        small.append((0..50).map(|i| op(&format!("key-{i}"))));
        assert_eq!(small.resume(1), Resume::FullSync(51));
        assert!(small.read(1, 10).is_none());
    }
}
