//! Stable frontiers: how far every node is known to hold every write, which decides when a
//! tombstone may go (DESIGN.md: tombstones "are kept until every peer has acknowledged past
//! them").
//!
//! An origin's heartbeat `(hlc, last_seq)` claims: every op it stamped at or below `hlc` has a
//! sequence at or below `last_seq`, so every op it sends later carries a higher version. That
//! holds up to the time between a write's stamp and its append to the backlog, which happen in
//! one synchronous command run (`cmd::run_command`: no `.await` in between, and commands hold
//! their shard locks for at most milliseconds); the claim is therefore weakened by
//! `FRONTIER_MARGIN_MS` of wall-clock time.
//!
//! A subscriber that has merged an origin's stream through `last_seq` holds every write of
//! that origin stamped at or below `weaken(hlc)`: its frontier for that origin. A node's own
//! stable frontier is the minimum of its own weakened clock and its frontier for each peer; it
//! sends it in every Ack. A node drops a tombstone once the tombstone's version is at or below
//! its own stable frontier and the one each configured peer last reported: then every node
//! holds every write older than the tombstone, so nothing is left in flight that the tombstone
//! must still beat (a full sync sends merged state, which already absorbed it).

use std::collections::VecDeque;

use crate::hlc::{physical_ms, timestamp, Timestamp};

/// How much a heartbeat's claim is weakened (see the module docs).
pub const FRONTIER_MARGIN_MS: u64 = 5_000;

/// Heartbeats waiting to be covered are capped; past it the newest one is replaced, which only
/// delays the frontier (the oldest ones are the next to be covered).
const MAX_PENDING: usize = 64;

/// `hlc` moved back by the margin.
pub fn weaken(hlc: Timestamp) -> Timestamp {
    timestamp(physical_ms(hlc).saturating_sub(FRONTIER_MARGIN_MS), 0)
}

/// A subscriber's frontier for one origin, advanced by heartbeats once the stream is merged
/// through their `last_seq`.
#[derive(Debug, Default)]
pub struct OriginFrontier {
    pending: VecDeque<(u64, Timestamp)>,
}

impl OriginFrontier {
    /// Records a heartbeat; returns the frontier reached if `applied_seq` already covers it.
    pub fn heartbeat(&mut self, last_seq: u64, hlc: Timestamp, applied_seq: u64) -> Option<Timestamp> {
        if self.pending.len() >= MAX_PENDING {
            self.pending.pop_back();
        }
        self.pending.push_back((last_seq, hlc));
        self.applied(applied_seq)
    }

    /// The stream is merged through `applied_seq`: returns the newest frontier now covered.
    pub fn applied(&mut self, applied_seq: u64) -> Option<Timestamp> {
        let mut reached = None;
        while let Some(&(seq, hlc)) = self.pending.front() {
            if seq > applied_seq {
                break;
            }
            reached = Some(weaken(hlc));
            self.pending.pop_front();
        }
        reached
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A heartbeat counts only once everything it announced has been merged, and then as its
    /// clock minus the margin.
    #[test]
    fn heartbeats_count_once_covered() {
        let mut f = OriginFrontier::default();
        let t = |ms| timestamp(ms, 0);
        assert_eq!(f.heartbeat(10, t(100_000), 5), None);
        assert_eq!(f.heartbeat(20, t(101_000), 5), None);
        assert_eq!(f.applied(15), Some(t(100_000 - FRONTIER_MARGIN_MS)));
        assert_eq!(f.applied(20), Some(t(101_000 - FRONTIER_MARGIN_MS)));
        assert_eq!(f.heartbeat(20, t(102_000), 20), Some(t(102_000 - FRONTIER_MARGIN_MS)));
        assert_eq!(weaken(t(1_000)), 0);
    }

    /// Under a stream that never catches up with the newest heartbeat, older heartbeats still
    /// advance the frontier, and the pending list stays bounded.
    #[test]
    fn bounded_under_sustained_load() {
        let mut f = OriginFrontier::default();
        for i in 1..1000u64 {
            f.heartbeat(i * 10, timestamp(100_000 + i, 0), (i * 10).saturating_sub(15));
            assert!(f.pending.len() <= MAX_PENDING);
        }
        assert!(f.applied(u64::MAX).is_some());
    }
}
