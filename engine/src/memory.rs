//! Memory accounting from the allocator (jemalloc), for `INFO memory`, `maxmemory` and
//! `/metrics`. Reading jemalloc's statistics needs an epoch advance, so the value is
//! refreshed by a background task every `REFRESH` and read lock-free in between.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub const REFRESH: Duration = Duration::from_millis(10);

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

pub async fn run_refresher() {
    let mut tick = tokio::time::interval(REFRESH);
    loop {
        tick.tick().await;
        refresh();
    }
}
