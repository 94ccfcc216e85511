//! Memory accounting from the allocator (jemalloc), for `INFO memory`, `maxmemory` and
//! `/metrics`. Reading jemalloc's statistics needs an epoch advance, which merges every
//! arena's statistics (a few hundred thousand instructions, and a memset of each arena's
//! stats block): so the value is refreshed by a background task and read lock-free in between,
//! and `INFO memory`, `MEMORY STATS` and `/metrics` refresh it when asked.
//!
//! How often the task refreshes follows what needs the value (`refresh_interval`): `maxmemory`
//! near its limit needs it every 10 ms; nothing else does. Refreshing every 10 ms always cost
//! 26% of a 3-node mesh's CPU under a write load (perf, issue 16), three processes each merging
//! eight arenas a hundred times a second.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The refresh interval while `maxmemory` is set and used memory is at least half of it.
pub const REFRESH_NEAR_LIMIT: Duration = Duration::from_millis(10);
/// While `maxmemory` is set and used memory is under half of it: at ~100 MB/s of writes (one
/// node's SET -P 16 rate with 100-byte values), 100 ms grows memory by ~10 MB, far less than
/// half of any limit that the fast interval does not already cover.
pub const REFRESH_FAR_FROM_LIMIT: Duration = Duration::from_millis(100);
/// Without `maxmemory`: `INFO memory`, `MEMORY STATS` and `/metrics` refresh the reading
/// themselves; the admin API's node status and `MEMORY STATS`' peak use a reading up to this
/// old, and a `CONFIG SET maxmemory` is enforced from the next refresh, within this long.
pub const REFRESH_NO_LIMIT: Duration = Duration::from_secs(1);

/// How long until the next background refresh, given `maxmemory` (0 = none) and the last
/// reading.
pub fn refresh_interval(maxmemory: u64, used: u64) -> Duration {
    if maxmemory == 0 {
        REFRESH_NO_LIMIT
    } else if used >= maxmemory / 2 {
        REFRESH_NEAR_LIMIT
    } else {
        REFRESH_FAR_FROM_LIMIT
    }
}

static USED: AtomicU64 = AtomicU64::new(0);
/// The most ever allocated (as of the refreshes), for `MEMORY STATS`' `peak.allocated`.
static PEAK: AtomicU64 = AtomicU64::new(0);
/// Allocated at the first reading (the refresher starts with the server, before the snapshot
/// loads): `MEMORY STATS`' `startup.allocated`.
static STARTUP: AtomicU64 = AtomicU64::new(0);

/// Bytes allocated, as of the last refresh.
pub fn used_memory() -> u64 {
    USED.load(Ordering::Relaxed)
}

/// Reads the allocator's statistics now.
pub fn refresh() -> u64 {
    let _ = tikv_jemalloc_ctl::epoch::advance();
    let allocated = tikv_jemalloc_ctl::stats::allocated::read().unwrap_or(0) as u64;
    USED.store(allocated, Ordering::Relaxed);
    PEAK.fetch_max(allocated, Ordering::Relaxed);
    let _ = STARTUP.compare_exchange(0, allocated, Ordering::Relaxed, Ordering::Relaxed);
    allocated
}

/// The allocator's view, read now (`MEMORY STATS`, `MEMORY DOCTOR`): jemalloc's
/// `stats.allocated`, `stats.active` (whole pages of live allocations), `stats.resident`, and
/// the peak and start-up values this module kept.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllocatorStats {
    pub allocated: u64,
    pub active: u64,
    pub resident: u64,
    pub peak: u64,
    pub startup: u64,
}

pub fn allocator_stats() -> AllocatorStats {
    let allocated = refresh();
    let read = |v: tikv_jemalloc_ctl::Result<usize>| v.unwrap_or(0) as u64;
    AllocatorStats {
        allocated,
        active: read(tikv_jemalloc_ctl::stats::active::read()),
        resident: read(tikv_jemalloc_ctl::stats::resident::read()),
        peak: PEAK.load(Ordering::Relaxed).max(allocated),
        startup: STARTUP.load(Ordering::Relaxed),
    }
}

/// jemalloc's statistics, for `MEMORY MALLOC-STATS`: the `stats.*` totals and the arena
/// count, read through `mallctl` (Redis prints `malloc_stats_print`'s full report, which the
/// bindings offer only with a libc feature this build leaves off).
pub fn malloc_stats() -> String {
    use tikv_jemalloc_ctl::stats;
    let _ = tikv_jemalloc_ctl::epoch::advance();
    let read = |v: tikv_jemalloc_ctl::Result<usize>| v.map_or_else(|e| format!("unavailable ({e})"), |n| n.to_string());
    let version = tikv_jemalloc_ctl::version::read().unwrap_or("unknown");
    let arenas = tikv_jemalloc_ctl::arenas::narenas::read().map_or_else(|e| format!("unavailable ({e})"), |n| n.to_string());
    format!(
        "___ Begin jemalloc statistics ___\nVersion: \"{version}\"\nArenas: {arenas}\nAllocated: {}, active: {}, metadata: {}, resident: {}, mapped: {}, retained: {}\n--- End jemalloc statistics ---\n",
        read(stats::allocated::read()),
        read(stats::active::read()),
        read(stats::metadata::read()),
        read(stats::resident::read()),
        read(stats::mapped::read()),
        read(stats::retained::read()),
    )
}

/// `MEMORY PURGE`: makes jemalloc give its dirty and muzzy pages back to the system now.
/// Redis calls `arena.<all>.purge`; that control takes no value, which the safe bindings
/// cannot send, so each arena's decay time is set to 0 (jemalloc purges at once when it is)
/// and then restored.
pub fn purge() -> Result<(), String> {
    use tikv_jemalloc_ctl::{Access, AsName};
    let arenas = tikv_jemalloc_ctl::arenas::narenas::read().map_err(|e| e.to_string())?;
    for arena in 0..arenas {
        for kind in ["dirty", "muzzy"] {
            let name = format!("arena.{arena}.{kind}_decay_ms\0");
            let key = name.as_bytes().name();
            // An arena jemalloc never created has no decay to set: skip it.
            let Ok(previous) = Access::<isize>::read(key) else { continue };
            Access::<isize>::write(key, 0).map_err(|e| e.to_string())?;
            Access::<isize>::write(key, previous).map_err(|e| e.to_string())?;
        }
    }
    refresh();
    Ok(())
}

/// Lowers the cached value after an eviction freed `bytes`, so the eviction loop can stop
/// without waiting for the next refresh.
pub fn note_freed(bytes: u64) {
    let _ = USED.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(bytes)));
}

/// Resident set size of this process, from /proc (0 where unavailable).
pub fn rss_bytes() -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()).map_or(0, |kb| kb * 1024)
}

/// Refreshes the reading in the background, as often as `refresh_interval` says for the
/// current `maxmemory` (read each time: `CONFIG SET maxmemory` takes effect within a second).
pub async fn run_refresher(maxmemory: impl Fn() -> u64) {
    loop {
        let used = refresh();
        tokio::time::sleep(refresh_interval(maxmemory(), used)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refresh_is_fast_only_near_a_memory_limit() {
        assert_eq!(refresh_interval(0, 5 << 30), REFRESH_NO_LIMIT);
        assert_eq!(refresh_interval(100 << 20, 10 << 20), REFRESH_FAR_FROM_LIMIT);
        assert_eq!(refresh_interval(100 << 20, 50 << 20), REFRESH_NEAR_LIMIT);
        assert_eq!(refresh_interval(100 << 20, 200 << 20), REFRESH_NEAR_LIMIT);
    }
}
