//! Memory accounting from the allocator (jemalloc), for `INFO memory`, `maxmemory` and
//! `/metrics`. Reading jemalloc's statistics needs an epoch advance, so the value is
//! refreshed by a background task every `REFRESH` and read lock-free in between.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub const REFRESH: Duration = Duration::from_millis(10);

static USED: AtomicU64 = AtomicU64::new(0);

/// Bytes allocated, as of the last refresh.
pub fn used_memory() -> u64 {
    USED.load(Ordering::Relaxed)
}

/// Reads the allocator's statistics now.
pub fn refresh() -> u64 {
    let _ = tikv_jemalloc_ctl::epoch::advance();
    let allocated = tikv_jemalloc_ctl::stats::allocated::read().unwrap_or(0) as u64;
    USED.store(allocated, Ordering::Relaxed);
    allocated
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
