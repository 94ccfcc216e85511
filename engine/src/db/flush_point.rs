//! `FlushPoint`: a database's flush version (`Db::flushed`), the version of its last
//! `FLUSHDB`/`FLUSHALL`, which dominates every older entry and write in the database.
//!
//! Every merged op reads it (after locking its key's shard: `repl::merge::lock_for_merge` says
//! why there), and so does every local write that creates a key; a flush raises it, rarely. As a
//! `Mutex<Version>` each read was a lock and an unlock, two `lock`-prefixed instructions per
//! merged op on a peer (docs/benchmarks.md, "Atomic operations per request"). It is a sequence
//! lock instead: a reader loads the two halves between two loads of a sequence number and tries
//! again if a writer was in between (the number odd, or changed), so reading writes nothing; the
//! writers take a mutex among themselves.
//!
//! A read made after a lock that a flush took after raising the point sees the raised point:
//! the writer's stores happen before its later unlock, which the reader's lock synchronizes with.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;

use super::lattice::Merge;
use crate::hlc::Version;

#[derive(Default)]
pub struct FlushPoint {
    /// Odd while a writer is storing the halves.
    seq: AtomicU64,
    hlc: AtomicU64,
    node: AtomicU32,
    /// Held by a writer for the length of its change.
    writing: Mutex<()>,
}

impl FlushPoint {
    pub fn get(&self) -> Version {
        loop {
            let before = self.seq.load(Ordering::Acquire);
            let version = Version { hlc: self.hlc.load(Ordering::Relaxed), node: self.node.load(Ordering::Relaxed) };
            // The halves' loads complete before the sequence is read again.
            fence(Ordering::Acquire);
            if before.is_multiple_of(2) && self.seq.load(Ordering::Relaxed) == before {
                return version;
            }
            std::hint::spin_loop();
        }
    }

    /// Raises the point to `v` if `v` is newer (a peer's flush: `Merge for Version`); whether
    /// it did.
    pub fn raise(&self, v: Version) -> bool {
        let mut raised = false;
        self.update(|mut current| {
            raised = current.merge(&v);
            current
        });
        raised
    }

    /// Sets the point to what `next` makes of the current one, with no other change to it in
    /// between (a local flush stamps a version newer than the current point); returns it.
    pub fn update(&self, next: impl FnOnce(Version) -> Version) -> Version {
        let _writing = self.writing.lock();
        let current = Version { hlc: self.hlc.load(Ordering::Relaxed), node: self.node.load(Ordering::Relaxed) };
        let new = next(current);
        if new != current {
            let seq = self.seq.load(Ordering::Relaxed);
            self.seq.store(seq + 1, Ordering::Relaxed);
            // The odd sequence is visible before either half changes.
            fence(Ordering::Release);
            self.hlc.store(new.hlc, Ordering::Relaxed);
            self.node.store(new.node, Ordering::Relaxed);
            self.seq.store(seq + 2, Ordering::Release);
        }
        new
    }

    /// Back to no flush at all (`Store::wipe`).
    pub fn reset(&self) {
        self.update(|_| Version::ZERO);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    /// Readers racing a writer never see a torn point (each version written has `node` equal
    /// to its `hlc`'s low bits) and never see it go back.
    #[test]
    fn readers_see_whole_versions_in_order_while_a_writer_raises_them() {
        let point = FlushPoint::default();
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    let mut last = Version::ZERO;
                    let mut reads = 0u64;
                    while !done.load(Ordering::Relaxed) || reads < 1000 {
                        let v = point.get();
                        assert_eq!(v.node, v.hlc as u32, "a torn read: {v:?}");
                        assert!(v >= last, "{v:?} after {last:?}");
                        last = v;
                        reads += 1;
                    }
                });
            }
            for i in 1..=200_000u64 {
                let hlc = i << 33 | i;
                assert!(point.raise(Version { hlc, node: hlc as u32 }));
            }
            done.store(true, Ordering::Relaxed);
        });
        assert!(!point.raise(Version { hlc: 1, node: 1 }), "an older version raises nothing");
        assert_eq!(point.update(|v| Version { hlc: v.hlc + 1, node: v.node }).hlc, (200_000u64 << 33 | 200_000) + 1);
        point.reset();
        assert_eq!(point.get(), Version::ZERO);
    }
}
