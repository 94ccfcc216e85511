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
///
/// `took` hears how long the pass has run so far after each shard it deleted keys from,
/// while that shard is still locked (the latency monitor's `expire-cycle` event): a client
/// that sees a key gone (`DBSIZE`) also sees the pass's sample, as in Redis, whose pass runs
/// before any command can look.
pub fn expire_cycle(store: &Store, now_ms: u64, took: &dyn Fn(Duration)) -> usize {
    let started = std::time::Instant::now();
    let mut deleted = 0;
    for db in 0..store.databases() {
        if store.volatile_keys(db) == 0 {
            continue;
        }
        let dbref = store.db(db);
        let notify = store.notify.wants(crate::notify::class::EXPIRED);
        for s in 0..SHARDS_PER_DB {
            let mut expired = Vec::new();
            let before = deleted;
            let mut shard = store.lock_shard(db, s);
            for key in shard.due_keys(now_ms, PER_SHARD_LIMIT) {
                if shard.raw(&key).is_some_and(|e| e.is_expired(now_ms)) {
                    shard.remove(dbref, &key);
                    shard.touch(&key);
                    store.note_removed(&key);
                    deleted += 1;
                    if notify {
                        expired.push(key);
                    }
                }
            }
            if deleted > before {
                took(started.elapsed());
            }
            drop(shard);
            for key in expired {
                store.notify.fire(crate::notify::class::EXPIRED, "expired", db, &key);
            }
        }
    }
    store.stats.expired_keys.fetch_add(deleted as u64, Ordering::Relaxed);
    deleted
}

/// How many tombstone passes one walk of every key's field tombstones is spread over.
pub const FIELD_TOMBSTONE_PASSES: usize = 8;

/// Drops the replication tombstones that are no longer needed: ghosts of deleted keys, the
/// field/member tombstones inside live hashes, sets and sorted sets, and pending expiry
/// registers. One goes when every peer is past it (its version is at or below `horizon`, see
/// `mesh::frontier`) or when it is older than `tombstone-gc-seconds` by its HLC's wall-clock
/// part, whichever comes first (a node cut off longer than the cap wipes and resyncs instead
/// of merging: `Mesh::wipe_for_resync`). Returns how many were dropped.
///
/// Key ghosts and orphan expiry registers sit in small per-shard tables and are checked on
/// every pass. Field/member tombstones live inside the collections, so finding them means
/// walking every key: each pass walks only the shards of one `FIELD_TOMBSTONE_PASSES`-th of the
/// shard range (`field_pass`, rotated by the caller), so a full walk takes that many passes.
/// Walking every key every second cost 8% of a 3-node mesh's CPU under a SET load (perf,
/// issue 16) and held each shard's lock for a walk of its keys. While no collection in the
/// process holds a tombstone (`field_tombstones::any_held`), there is no walk at all.
pub fn collect_tombstones(store: &Store, now_ms: u64, horizon: crate::hlc::Timestamp, field_pass: usize) -> usize {
    let cap = now_ms.saturating_sub(store.tombstone_gc_ms.load(Ordering::Relaxed));
    let keep = |v: &crate::hlc::Version| v.hlc > horizon && crate::hlc::physical_ms(v.hlc) >= cap;
    let mut dropped = 0;
    // Read once, before the walk: a tombstone made after this read waits for the next pass.
    let walk_fields = super::field_tombstones::any_held();
    for db in store.dbs_in_use() {
        for s in 0..SHARDS_PER_DB {
            let mut shard = store.lock_shard(db, s);
            let before = shard.tombstones.len();
            shard.tombstones.retain(|_, g| keep(&g.newest()));
            dropped += before - shard.tombstones.len();
            shard.orphan_expiry.retain(|_, e| keep(&e.version));
            // A burst of deletes grows the tables; give the memory back once it is collected.
            if shard.tombstones.capacity() > 4 * shard.tombstones.len().max(8) {
                shard.tombstones.shrink_to_fit();
            }
            if shard.orphan_expiry.capacity() > 4 * shard.orphan_expiry.len().max(8) {
                shard.orphan_expiry.shrink_to_fit();
            }
            if walk_fields && s % FIELD_TOMBSTONE_PASSES == field_pass % FIELD_TOMBSTONE_PASSES {
                dropped += shard.retain_field_tombstones(&keep);
            }
        }
    }
    dropped
}

/// Runs `expire_cycle` every `CYCLE`; `took` hears how long each pass has run, as the pass
/// goes (see `expire_cycle`) and when it ends; `after` runs after each pass.
pub async fn run_active_expiry(store: Arc<Store>, took: impl Fn(Duration) + Send + Sync + 'static, after: impl Fn() + Send + 'static) {
    let took = Arc::new(took);
    let mut tick = tokio::time::interval(CYCLE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = store.hlc.wall_ms();
        let (s, during) = (store.clone(), took.clone());
        // The cycle takes locks and does O(due keys) work: keep it off the I/O workers.
        let started = std::time::Instant::now();
        let _ = tokio::task::spawn_blocking(move || expire_cycle(&s, now, &*during)).await;
        took(started.elapsed());
        after();
    }
}
