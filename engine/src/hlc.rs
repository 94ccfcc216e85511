//! The hybrid logical clock (Kulkarni et al., 2014) and the `Version` every write carries.
//!
//! A timestamp is a `u64`: 48 bits of wall-clock milliseconds, 16 bits of logical counter, so
//! timestamps compare as integers. The wall clock is injectable (`WallClock`) so tests can
//! skew a node. A remote timestamp more than `max_skew_ms` ahead of our wall clock is still
//! merged into the data (dropping it would diverge replicas) but does not drag our clock
//! forward; such receives are counted so the operator can report clock skew.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const LOGICAL_BITS: u32 = 16;
const LOGICAL_MASK: u64 = (1 << LOGICAL_BITS) - 1;

/// Where the clock reads physical time. Tests inject a skewed or manual clock.
pub trait WallClock: Send + Sync {
    fn now_ms(&self) -> u64;

    /// This clock's time when the system's real-time clock read `system_ms`: lets a command
    /// take its wall time from the clock read that also starts its timer (`clock::Stopwatch`).
    /// A clock that does not follow the system's (a test's manual clock) reads itself.
    fn at_system_ms(&self, system_ms: u64) -> u64 {
        let _ = system_ms;
        self.now_ms()
    }
}

/// The system's real-time clock.
#[derive(Debug, Default)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now_ms(&self) -> u64 {
        crate::clock::realtime_ms()
    }

    fn at_system_ms(&self, system_ms: u64) -> u64 {
        system_ms
    }
}

/// The system clock shifted by a fixed offset (the `clock-offset-ms` test directive).
#[derive(Debug)]
pub struct OffsetClock(pub i64);

impl WallClock for OffsetClock {
    fn now_ms(&self) -> u64 {
        self.at_system_ms(SystemClock.now_ms())
    }

    fn at_system_ms(&self, system_ms: u64) -> u64 {
        system_ms.saturating_add_signed(self.0)
    }
}

/// An HLC timestamp.
pub type Timestamp = u64;

pub fn physical_ms(ts: Timestamp) -> u64 {
    ts >> LOGICAL_BITS
}

pub fn timestamp(ms: u64, logical: u64) -> Timestamp {
    (ms << LOGICAL_BITS) | (logical & LOGICAL_MASK)
}

/// A totally ordered write version: HLC first, then the originating node's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Version {
    pub hlc: Timestamp,
    pub node: NodeId,
}

/// A node's id: stable for a pod (derived from its name).
pub type NodeId = u32;

impl Version {
    pub const ZERO: Version = Version { hlc: 0, node: 0 };
}

/// The clock. Cheap to share: one atomic word.
pub struct Hlc {
    last: AtomicU64,
    wall: Arc<dyn WallClock>,
    max_skew_ms: AtomicU64,
    skewed_receives: AtomicU64,
}

impl std::fmt::Debug for Hlc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hlc").field("last", &self.last.load(Ordering::Relaxed)).finish()
    }
}

impl Hlc {
    pub fn new(wall: Arc<dyn WallClock>, max_skew_ms: u64) -> Hlc {
        Hlc { last: AtomicU64::new(0), wall, max_skew_ms: AtomicU64::new(max_skew_ms), skewed_receives: AtomicU64::new(0) }
    }

    pub fn wall_ms(&self) -> u64 {
        self.wall.now_ms()
    }

    /// The wall time when the system clock read `system_ms` (`WallClock::at_system_ms`).
    pub fn wall_ms_at(&self, system_ms: u64) -> u64 {
        self.wall.at_system_ms(system_ms)
    }

    pub fn set_max_skew_ms(&self, ms: u64) {
        self.max_skew_ms.store(ms, Ordering::Relaxed);
    }

    pub fn skewed_receives(&self) -> u64 {
        self.skewed_receives.load(Ordering::Relaxed)
    }

    /// A timestamp for a local event, strictly greater than every earlier one.
    pub fn now(&self) -> Timestamp {
        let wall = timestamp(self.wall.now_ms(), 0);
        self.advance(|last| wall.max(last + 1))
    }

    /// A timestamp for a local write that must supersede `stored` (what the writer could
    /// read; 0 for nothing), even when a peer with a fast clock wrote it, at a wall time the
    /// caller read already: a command reads the clock once, when it starts (`Ctx::now_ms`),
    /// and stamps its writes with it (`Store::stamp_at`). Still above `stored` and every
    /// timestamp this clock gave out; only the physical part may be the command's start
    /// rather than the moment of the write.
    pub fn now_after_at(&self, wall_ms: u64, stored: Timestamp) -> Timestamp {
        let wall = timestamp(wall_ms, 0);
        self.advance(|last| wall.max(last + 1).max(stored + 1))
    }

    /// Merges a timestamp received from a peer. Returns false if it was too far ahead of
    /// our wall clock to move our clock (the data is applied anyway).
    pub fn receive(&self, remote: Timestamp) -> bool {
        let wall_ms = self.wall.now_ms();
        let limit = wall_ms.saturating_add(self.max_skew_ms.load(Ordering::Relaxed));
        if physical_ms(remote) > limit {
            self.skewed_receives.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let wall = timestamp(wall_ms, 0);
        self.advance(|last| wall.max(last).max(remote));
        true
    }

    fn advance(&self, next: impl Fn(Timestamp) -> Timestamp) -> Timestamp {
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let candidate = next(last);
            match self.last.compare_exchange_weak(last, candidate, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return candidate,
                Err(actual) => last = actual,
            }
        }
    }
}

/// A node id derived from a stable node name (FNV-1a, folded to 32 bits), so a restarted
/// pod keeps its id. 32 bits keep every entry's version in 12 bytes; two nodes of one mesh
/// colliding is a one-in-four-billion event per pair, and a collision only makes their
/// concurrent writes at the same HLC tie-break arbitrarily but identically everywhere.
pub fn node_id_from_name(name: &str) -> NodeId {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in name.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    (h ^ (h >> 32)) as NodeId
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    struct Manual(AtomicU64);
    impl WallClock for Manual {
        fn now_ms(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn local_events_are_strictly_increasing_when_the_clock_stalls() {
        let clock = Hlc::new(Arc::new(Manual(AtomicU64::new(1000))), 500);
        let a = clock.now();
        let b = clock.now();
        assert!(b > a);
        assert_eq!(physical_ms(b), 1000);
    }

    #[test]
    fn write_after_a_fast_peer_supersedes_it() {
        let clock = Hlc::new(Arc::new(Manual(AtomicU64::new(1000))), 500);
        let future = timestamp(5000, 3);
        assert!(clock.now_after_at(clock.wall_ms(), future) > future);
    }

    #[test]
    fn far_future_receive_does_not_drag_the_clock() {
        let clock = Hlc::new(Arc::new(Manual(AtomicU64::new(1000))), 500);
        assert!(!clock.receive(timestamp(10_000, 0)));
        assert_eq!(physical_ms(clock.now()), 1000);
        assert_eq!(clock.skewed_receives(), 1);
        assert!(clock.receive(timestamp(1400, 7)));
        assert!(clock.now() > timestamp(1400, 7));
    }
}
