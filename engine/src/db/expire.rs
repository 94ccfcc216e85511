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

pub async fn run_active_expiry(store: Arc<Store>) {
    let mut tick = tokio::time::interval(CYCLE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = store.hlc.wall_ms();
        let s = store.clone();
        // The cycle takes locks and does O(due keys) work: keep it off the I/O workers.
        let _ = tokio::task::spawn_blocking(move || expire_cycle(&s, now)).await;
    }
}
