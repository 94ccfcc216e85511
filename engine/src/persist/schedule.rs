//! The `save <seconds> <changes> [<seconds> <changes> ...]` schedule, as Redis's: a background
//! save starts once at least `changes` writes happened and `seconds` passed since the last
//! successful save (or the start). `save ""` turns it off. After a failed save the next try
//! waits `RETRY_AFTER`, as Redis's `CONFIG_BGSAVE_RETRY_DELAY`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use crate::server::Server;

/// How long after a failed save the schedule tries again.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

/// How often the schedule is checked (Redis checks at `hz` 10).
const TICK: Duration = Duration::from_millis(100);

/// One `<seconds> <changes>` pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavePoint {
    pub seconds: u64,
    pub changes: u64,
}

/// Parses a `save` value; empty (or `""`) is no schedule. The error is Redis's wording.
pub fn parse(value: &str) -> Result<Vec<SavePoint>, String> {
    let words: Vec<&str> = value.split_whitespace().filter(|w| *w != "\"\"").collect();
    if !words.len().is_multiple_of(2) {
        return Err("Invalid save parameters".into());
    }
    words
        .chunks(2)
        .map(|pair| match (pair[0].parse::<u64>(), pair[1].parse::<u64>()) {
            (Ok(seconds), Ok(changes)) => Ok(SavePoint { seconds, changes }),
            _ => Err("Invalid save parameters".into()),
        })
        .collect()
}

/// Whether a point is due, given the changes since and the seconds since the last save
/// (Redis's test: at least `changes`, more than `seconds`).
pub fn due(points: &[SavePoint], changes: u64, since_secs: u64) -> Option<SavePoint> {
    points.iter().copied().find(|p| changes >= p.changes && since_secs > p.seconds)
}

/// Runs the schedule until shutdown; also starts the save a `BGSAVE SCHEDULE` asked for.
pub async fn run(server: Arc<Server>) {
    let mut stop = server.shutdown_signal();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = stop.changed() => return,
        }
        let persist = &server.persist;
        if persist.saving() || persist.loading() {
            continue;
        }
        if persist.scheduled.swap(false, Ordering::Relaxed) {
            let _ = super::bgsave(server.clone());
            continue;
        }
        let points = server.settings().save.clone();
        let changes = persist.changes_since_save(server.store.stats.dirty.value());
        let (since, failed, attempted) = persist.schedule_view();
        if failed && attempted.is_some_and(|a| a < RETRY_AFTER.as_secs()) {
            continue;
        }
        if let Some(point) = due(&points, changes, since) {
            info!(changes, seconds = since, "{} changes in {} seconds: saving", point.changes, point.seconds);
            let _ = super::bgsave(server.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_redis_schedules() {
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(parse("\"\"").unwrap(), vec![]);
        assert_eq!(parse("3600 1 300 100").unwrap(), vec![SavePoint { seconds: 3600, changes: 1 }, SavePoint { seconds: 300, changes: 100 }]);
        assert!(parse("3600").is_err());
        assert!(parse("60 x").is_err());
        assert!(parse("-1 1").is_err());
    }

    #[test]
    fn a_point_is_due_when_both_its_time_and_its_changes_are_reached() {
        let points = parse("3600 1 60 100").unwrap();
        assert_eq!(due(&points, 0, 100_000), None, "nothing changed: no save");
        assert_eq!(due(&points, 5, 100), None);
        assert_eq!(due(&points, 100, 60), None, "more than the seconds must have passed");
        assert_eq!(due(&points, 100, 61), Some(SavePoint { seconds: 60, changes: 100 }));
        assert_eq!(due(&points, 1, 3601), Some(SavePoint { seconds: 3600, changes: 1 }));
    }
}
