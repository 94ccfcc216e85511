//! Active expiry: a background task that deletes keys whose deadline passed, so memory is
//! reclaimed even for keys nobody reads again (lazy expiry handles the ones that are read).
//!
//! Each shard keeps its volatile keys ordered by deadline, so a cycle finds due keys without
//! sampling; it takes one shard lock at a time and deletes at most `PER_SHARD_LIMIT` keys per
//! shard per cycle, so a mass expiry never holds a lock for long.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::{Store, SHARDS_PER_DB};

const CYCLE: Duration = Duration::from_millis(100);
const PER_SHARD_LIMIT: usize = 200;

/// Runs one expiry cycle over every database that has volatile keys. Returns keys deleted.
pub fn expire_cycle(store: &Store, now_ms: u64) -> usize {
    let mut deleted = 0;
    for db in 0..store.databases() {
        if store.volatile_keys(db) == 0 {
            continue;
        }
        let dbref = store.db(db);
        for s in 0..SHARDS_PER_DB {
            let mut shard = store.lock_shard(db, s);
            for key in shard.due_keys(now_ms, PER_SHARD_LIMIT) {
                if shard.raw(&key).is_some_and(|e| e.is_expired(now_ms)) {
                    shard.remove(dbref, &key);
                    shard.touch(&key);
                    deleted += 1;
                }
            }
        }
    }
    store.stats.expired_keys.fetch_add(deleted as u64, Ordering::Relaxed);
    deleted
}

/// Drops ghosts (and pending expiry registers) older than `tombstone-gc-seconds` by their HLC's
/// wall-clock part. Returns how many ghosts were dropped.
///
/// This is the time cap of DESIGN.md's rule; collecting earlier, once every peer has
/// acknowledged past a tombstone, and the wipe-and-resync rule for a node cut off longer than
/// the cap are not implemented yet.
pub fn collect_tombstones(store: &Store, now_ms: u64) -> usize {
    let horizon = now_ms.saturating_sub(store.tombstone_gc_ms.load(Ordering::Relaxed));
    let old = |v: crate::hlc::Version| crate::hlc::physical_ms(v.hlc) < horizon;
    let mut dropped = 0;
    for db in 0..store.databases() {
        for s in 0..SHARDS_PER_DB {
            let mut shard = store.lock_shard(db, s);
            if shard.tombstones.is_empty() && shard.orphan_expiry.is_empty() {
                continue;
            }
            let before = shard.tombstones.len();
            shard.tombstones.retain(|_, g| !old(g.newest()));
            dropped += before - shard.tombstones.len();
            shard.orphan_expiry.retain(|_, e| !old(e.version));
        }
    }
    dropped
}

pub async fn run_active_expiry(store: Arc<Store>) {
    let mut tick = tokio::time::interval(CYCLE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut cycles: u64 = 0;
    loop {
        tick.tick().await;
        cycles += 1;
        let now = store.hlc.wall_ms();
        let s = store.clone();
        // The cycle takes locks and does O(due keys) work: keep it off the I/O workers.
        let _ = tokio::task::spawn_blocking(move || {
            expire_cycle(&s, now);
            // Tombstones are collected once a second.
            if cycles % 10 == 0 && s.replicating() {
                collect_tombstones(&s, now);
            }
        })
        .await;
    }
}
