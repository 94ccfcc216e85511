//! Snapshots on disk: `SAVE`, `BGSAVE`, `LASTSAVE`, the `save <seconds> <changes>` schedule,
//! loading at start, `INFO persistence`, the admin `Save` and the snapshot metrics.
//!
//! A snapshot is the mesh's full sync written to a file (`format`): every key's value with its
//! version, every tombstone, per-field and per-member version, counter contribution and expiry
//! register, and every database flush. It is taken the way a full sync is, one shard lock at a
//! time, without fork and without stopping writes: each shard is copied at its own consistent
//! point. For a merge-based keyspace that is enough. Every element carries its version and
//! loading is a merge (`repl::merge`), so a restored node holds, for every key, a state some
//! node really held at or after the moment the save began; the writes that raced the scan are
//! either in it or not, never half-applied to one key; and the mesh's resync after the restart
//! merges every newer write from the peers (duplicates and reordering are harmless). What a
//! per-shard point does not give is a point-in-time image across keys: a `MULTI` or `MSET`
//! that spans shards and raced the scan may be restored in part on a node that has no peers
//! to resync from. Every write acknowledged before the save began is in it.
//!
//! The file is written to a temporary name, fsynced, renamed over `dir`/`dbfilename`, and the
//! directory fsynced, so a crash leaves the old snapshot or the new one, never a torn file.

pub mod format;
pub mod load;
pub mod rdb;
pub mod schedule;
mod state;
mod write;

pub use state::{Persistence, SaveReport, SaveStart};
pub use write::{bgsave, save};

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("Background save already in progress")]
    InProgress,
    #[error("failed to write snapshot {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("failed to replace {path} with the new snapshot: {source}")]
    Rename { path: PathBuf, source: std::io::Error },
    #[error("failed to open snapshot {path}: {source}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error("refused snapshot {path}: {source}")]
    Refused { path: PathBuf, source: format::FormatError },
    #[error("refused RDB file {path}: {source}")]
    Rdb { path: PathBuf, source: rdb::RdbError },
    #[error("the server is shutting down")]
    Stopped,
}

/// Where the snapshot lives (`Settings::snapshot_path`).
pub fn snapshot_path(settings: &crate::config::settings::Settings) -> PathBuf {
    settings.snapshot_path()
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
