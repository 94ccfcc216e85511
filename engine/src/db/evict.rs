//! `maxmemory` eviction, approximated by sampling as Redis does: pick a random shard, look
//! at `maxmemory-samples` of its keys, evict the best candidate under the policy, repeat
//! until memory is below the limit.
//!
//! Every entry carries a 32-bit access word: under LRU policies the LRU clock in seconds;
//! under LFU policies Redis's layout, 16 bits of decay time in minutes and an 8-bit
//! logarithmic counter.

use std::sync::atomic::Ordering;

use rand::Rng;

use super::{Entry, EntryRef, Key, Store, SHARDS_PER_DB};
use crate::memory;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Policy {
    NoEviction,
    AllKeysLru,
    AllKeysLfu,
    AllKeysRandom,
    VolatileLru,
    VolatileLfu,
    VolatileTtl,
    VolatileRandom,
}

impl Policy {
    const ALL: [Policy; 8] = [
        Policy::NoEviction,
        Policy::AllKeysLru,
        Policy::AllKeysLfu,
        Policy::AllKeysRandom,
        Policy::VolatileLru,
        Policy::VolatileLfu,
        Policy::VolatileTtl,
        Policy::VolatileRandom,
    ];

    /// The `maxmemory-policy` value that names this policy.
    pub fn name(self) -> &'static str {
        match self {
            Policy::NoEviction => "noeviction",
            Policy::AllKeysLru => "allkeys-lru",
            Policy::AllKeysLfu => "allkeys-lfu",
            Policy::AllKeysRandom => "allkeys-random",
            Policy::VolatileLru => "volatile-lru",
            Policy::VolatileLfu => "volatile-lfu",
            Policy::VolatileTtl => "volatile-ttl",
            Policy::VolatileRandom => "volatile-random",
        }
    }

    pub fn from_name(name: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == name)
    }

    fn volatile_only(self) -> bool {
        matches!(self, Policy::VolatileLru | Policy::VolatileLfu | Policy::VolatileTtl | Policy::VolatileRandom)
    }

    /// Whether accesses are counted as LFU counters.
    pub fn lfu(self) -> bool {
        matches!(self, Policy::AllKeysLfu | Policy::VolatileLfu)
    }
}

const LFU_INIT: u32 = 5;

/// The LFU clock: minutes, in the 16 bits above an entry's 8-bit counter (Redis's
/// `LFUGetTimeInMinutes`).
fn lfu_minutes(now_ms: u64) -> u32 {
    ((now_ms / 60_000) & 0xffff) as u32
}

/// Records a read or write of `entry` for the eviction policy: as an LFU counter when `lfu`
/// (the store's `lfu_access`), else as the access time.
pub fn on_access(entry: &mut Entry, now_ms: u64, lfu: bool) {
    if lfu {
        let minutes = lfu_minutes(now_ms);
        let mut counter = entry.access & 0xff;
        if entry.access == 0 {
            counter = LFU_INIT;
        }
        // Redis's logarithmic increment (lfu-log-factor 10): the higher the counter, the
        // less likely one more access raises it.
        let base = counter.saturating_sub(LFU_INIT) as f64;
        if counter < 255 && rand::rng().random::<f64>() < 1.0 / (base * 10.0 + 1.0) {
            counter += 1;
        }
        entry.access = (minutes << 8) | counter;
    } else {
        entry.access = (now_ms / 1000) as u32;
    }
}

/// What `RESTORE ... IDLETIME | FREQ` sets a key's eviction clock to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessHint {
    IdleSeconds(u64),
    Frequency(u8),
}

/// Sets the eviction clock of a key `RESTORE` wrote, as Redis's `objectSetLRUOrLFU`: a
/// frequency under an LFU policy, an idle time under any other; a hint for the other kind of
/// policy is ignored.
pub fn restore_access(entry: &mut Entry, hint: AccessHint, now_ms: u64, lfu: bool) {
    match hint {
        AccessHint::Frequency(freq) if lfu => entry.access = (lfu_minutes(now_ms) << 8) | u32::from(freq),
        AccessHint::IdleSeconds(idle) if !lfu => entry.access = (now_ms / 1000).saturating_sub(idle) as u32,
        _ => {}
    }
}

/// Lower is evicted first.
fn score(entry: EntryRef<'_>, policy: Policy, now_ms: u64) -> u64 {
    match policy {
        Policy::AllKeysLfu | Policy::VolatileLfu => {
            let minutes = lfu_minutes(now_ms);
            let elapsed = minutes.wrapping_sub(entry.access >> 8) & 0xffff;
            (entry.access & 0xff).saturating_sub(elapsed) as u64
        }
        Policy::VolatileTtl => entry.deadline().unwrap_or(u64::MAX),
        Policy::AllKeysRandom | Policy::VolatileRandom => rand::rng().random(),
        _ => entry.access as u64,
    }
}

/// Evicts keys until used memory is below `maxmemory`. Returns false if it could not (the
/// policy is `noeviction` or nothing is evictable): the caller answers OOM.
pub fn make_room(store: &Store, policy: Policy, maxmemory: u64, samples: usize) -> bool {
    let mut attempts = 0;
    while memory::used_memory() > maxmemory {
        if policy == Policy::NoEviction || attempts > 64 {
            memory::refresh();
            return memory::used_memory() <= maxmemory;
        }
        if evict_one(store, policy, samples) {
            attempts = 0;
        } else {
            attempts += 1;
        }
    }
    true
}

fn evict_one(store: &Store, policy: Policy, samples: usize) -> bool {
    let mut rng = rand::rng();
    let now = store.hlc.wall_ms();
    let candidates: Vec<usize> = store.dbs_in_use().filter(|&db| !policy.volatile_only() || store.volatile_keys(db) > 0).collect();
    if candidates.is_empty() {
        return false;
    }
    // Probe a few random shards for keys: empty shards are common in small keyspaces.
    for _ in 0..16 {
        let db = candidates[rng.random_range(0..candidates.len())];
        let shard_index = rng.random_range(0..SHARDS_PER_DB);
        let mut shard = store.lock_shard(db, shard_index);
        let victim = shard
            .iter()
            .filter(|(_, e)| !policy.volatile_only() || e.deadline().is_some())
            .take(samples)
            .min_by_key(|(_, e)| score(*e, policy, now))
            .map(|(k, e)| (Key::from(k), k.len() + e.value.approx_size() + 64));
        if let Some((key, size)) = victim {
            shard.remove(store.db(db), &key);
            shard.touch(&key);
            store.note_removed(&key);
            drop(shard);
            store.stats.evicted_keys.fetch_add(1, Ordering::Relaxed);
            memory::note_freed(size as u64);
            store.notify.fire(crate::notify::class::EVICTED, "evicted", db, &key);
            return true;
        }
    }
    false
}
