//! Where this node's snapshots stand: the last save's outcome, a save or load in progress, and
//! the Prometheus metrics and `INFO persistence` fields that show it.

use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use keymesh_proto as pb;
use parking_lot::Mutex;
use prometheus::{Gauge, IntCounterVec, IntGauge, Opts, Registry};

use super::unix_ms;

/// Where the node stood when a save began: its change counter, the last sequence it
/// originated, whether it was handing off (writes refused), and its stable frontier.
#[derive(Debug, Clone, Copy, Default)]
pub struct SaveStart {
    pub dirty: u64,
    pub seq: u64,
    pub draining: bool,
    pub frontier: u64,
}

/// What one finished save wrote.
#[derive(Debug, Clone, Default)]
pub struct SaveReport {
    pub keys: u64,
    pub ops: u64,
    pub bytes: u64,
    pub duration_ms: u64,
}

#[derive(Debug)]
struct SaveState {
    /// `LASTSAVE`: when the last successful save finished (the start time before the first).
    last_save_unix_ms: u64,
    /// When the last successful save of this run finished; 0 before the first.
    last_success_unix_ms: u64,
    last_ok: bool,
    last_error: String,
    last_attempt: Option<Instant>,
    last: Option<SaveReport>,
    saves: u64,
    /// The keyspace's change counter when the last successful save began.
    dirty_at_last_save: u64,
    last_save_seq: u64,
    last_save_after_handoff: bool,
    current: Option<Instant>,
    loaded_keys: u64,
    /// Keys an RDB import left out because their expiry had passed (Redis's
    /// `rdb_last_load_keys_expired`) or their type is one KeyMesh has not
    /// (`rdb-import-unsupported skip`).
    loaded_expired: u64,
    loaded_skipped: u64,
    /// The stable frontier of the snapshot a restart would load (the last saved or loaded).
    frontier: Option<u64>,
}

pub struct Persistence {
    saving: AtomicBool,
    loading: AtomicBool,
    /// `BGSAVE SCHEDULE` while a save was running: start one when it ends.
    pub(super) scheduled: AtomicBool,
    /// `SHUTDOWN NOSAVE`: skip the save a scheduled node makes when it stops.
    pub skip_final_save: AtomicBool,
    pub(super) load_bytes: AtomicU64,
    pub(super) load_total: AtomicU64,
    state: Mutex<SaveState>,
    metrics: SnapshotMetrics,
}

struct SnapshotMetrics {
    in_progress: IntGauge,
    loading: IntGauge,
    duration: Gauge,
    bytes: IntGauge,
    keys: IntGauge,
    last_ok: IntGauge,
    last_success: IntGauge,
    saves: IntCounterVec,
}

impl SnapshotMetrics {
    fn new(registry: &Registry) -> SnapshotMetrics {
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("static metric");
            registry.register(Box::new(g.clone())).expect("unique metric");
            g
        };
        let duration = Gauge::new("keymesh_snapshot_last_duration_seconds", "How long the last snapshot took to write.").expect("static metric");
        registry.register(Box::new(duration.clone())).expect("unique metric");
        let saves = IntCounterVec::new(Opts::new("keymesh_snapshots_total", "Snapshots written, by result (ok, failed)."), &["result"]).expect("static metric");
        registry.register(Box::new(saves.clone())).expect("unique metric");
        for result in ["ok", "failed"] {
            saves.with_label_values(&[result]);
        }
        SnapshotMetrics {
            in_progress: gauge("keymesh_snapshot_in_progress", "1 while a snapshot is being written."),
            loading: gauge("keymesh_snapshot_loading", "1 while the snapshot is loaded at start."),
            duration,
            bytes: gauge("keymesh_snapshot_last_bytes", "Size of the last snapshot written, in bytes."),
            keys: gauge("keymesh_snapshot_last_keys", "Keys in the last snapshot written."),
            last_ok: gauge("keymesh_snapshot_last_status", "1 when the last snapshot succeeded (or none was tried), 0 when it failed."),
            last_success: gauge("keymesh_snapshot_last_success_timestamp_seconds", "When the last successful snapshot finished (Unix seconds)."),
            saves,
        }
    }
}

impl Persistence {
    pub fn new(registry: &Registry) -> Persistence {
        let metrics = SnapshotMetrics::new(registry);
        metrics.last_ok.set(1);
        Persistence {
            saving: AtomicBool::new(false),
            loading: AtomicBool::new(false),
            scheduled: AtomicBool::new(false),
            skip_final_save: AtomicBool::new(false),
            load_bytes: AtomicU64::new(0),
            load_total: AtomicU64::new(0),
            state: Mutex::new(SaveState {
                last_save_unix_ms: unix_ms(),
                last_success_unix_ms: 0,
                last_ok: true,
                last_error: String::new(),
                last_attempt: None,
                last: None,
                saves: 0,
                dirty_at_last_save: 0,
                last_save_seq: 0,
                last_save_after_handoff: false,
                current: None,
                loaded_keys: 0,
                loaded_expired: 0,
                loaded_skipped: 0,
                frontier: None,
            }),
            metrics,
        }
    }

    /// `BGSAVE SCHEDULE` while a save runs: the schedule starts one when it ends.
    pub fn schedule_bgsave(&self) {
        self.scheduled.store(true, Ordering::Relaxed);
    }

    pub fn saving(&self) -> bool {
        self.saving.load(Ordering::Relaxed)
    }

    pub fn loading(&self) -> bool {
        self.loading.load(Ordering::Relaxed)
    }

    /// Set before the client listeners and `/readyz` start, so that no command runs on a
    /// half-loaded keyspace and no probe sees the node ready before it loaded; `persist::load`
    /// ends it.
    pub fn begin_loading(&self) {
        self.loading.store(true, Ordering::Relaxed);
        self.metrics.loading.set(1);
    }

    pub(super) fn end_loading(&self) {
        self.loading.store(false, Ordering::Relaxed);
        self.metrics.loading.set(0);
    }

    /// Claims the one save slot; `false` when a save is running.
    pub(super) fn begin_save(&self) -> bool {
        if self.saving.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.state.lock().current = Some(Instant::now());
        self.metrics.in_progress.set(1);
        true
    }

    /// Records a save's outcome and frees the slot. `dirty`, `seq` and `draining` are the
    /// change counter, last originated sequence and handoff state when the save began.
    pub(super) fn end_save(&self, outcome: &Result<SaveReport, super::PersistError>, start: SaveStart) {
        let SaveStart { dirty, seq, draining, frontier } = start;
        let mut s = self.state.lock();
        s.current = None;
        s.last_attempt = Some(Instant::now());
        match outcome {
            Ok(report) => {
                let now = unix_ms();
                s.last_ok = true;
                s.last_error.clear();
                s.last_save_unix_ms = now;
                s.last_success_unix_ms = now;
                s.dirty_at_last_save = dirty;
                s.last_save_seq = seq;
                s.last_save_after_handoff = draining;
                s.frontier = Some(frontier);
                s.saves += 1;
                s.last = Some(report.clone());
                self.metrics.duration.set(report.duration_ms as f64 / 1000.0);
                self.metrics.bytes.set(report.bytes as i64);
                self.metrics.keys.set(report.keys as i64);
                self.metrics.last_success.set((now / 1000) as i64);
                self.metrics.saves.with_label_values(&["ok"]).inc();
            }
            Err(e) => {
                s.last_ok = false;
                s.last_error = e.to_string();
                self.metrics.saves.with_label_values(&["failed"]).inc();
            }
        }
        self.metrics.last_ok.set(s.last_ok as i64);
        self.metrics.in_progress.set(0);
        drop(s);
        self.saving.store(false, Ordering::Release);
    }

    /// Records a load: what it merged does not count as changes to save, and the file is the
    /// one a restart would load again.
    pub(super) fn set_loaded(&self, keys: u64, dirty: u64, frontier: u64) {
        let mut s = self.state.lock();
        s.loaded_keys = keys;
        s.loaded_expired = 0;
        s.loaded_skipped = 0;
        s.dirty_at_last_save = dirty;
        s.frontier = Some(frontier);
    }

    /// Records what an RDB import left out: keys already expired, keys of types KeyMesh has not.
    pub(super) fn set_import_counts(&self, expired: u64, skipped: u64) {
        let mut s = self.state.lock();
        s.loaded_expired = expired;
        s.loaded_skipped = skipped;
    }

    /// How far this node may acknowledge (`Mesh::durable_frontier`): the frontier of the
    /// snapshot a restart would load; nothing yet (0) when a schedule is set but no snapshot
    /// exists; no cap for a node that keeps no snapshots.
    pub fn frontier_cap(&self, scheduled: bool) -> u64 {
        match self.state.lock().frontier {
            Some(f) => f,
            None if scheduled => 0,
            None => u64::MAX,
        }
    }

    /// `LASTSAVE`, in Unix seconds.
    pub fn last_save_secs(&self) -> u64 {
        self.state.lock().last_save_unix_ms / 1000
    }

    /// Changes since the last successful save began, given the keyspace's change counter.
    pub fn changes_since_save(&self, dirty: u64) -> u64 {
        dirty.saturating_sub(self.state.lock().dirty_at_last_save)
    }

    /// (seconds since the last successful save or start, the last save failed, seconds since
    /// the last attempt) for the schedule.
    pub(super) fn schedule_view(&self) -> (u64, bool, Option<u64>) {
        let s = self.state.lock();
        let since = unix_ms().saturating_sub(s.last_save_unix_ms) / 1000;
        (since, !s.last_ok, s.last_attempt.map(|a| a.elapsed().as_secs()))
    }

    /// The admin API's view (`NodeStatus.snapshot`). `enabled`: a save schedule is configured.
    pub fn status(&self, enabled: bool) -> pb::SnapshotStatus {
        let s = self.state.lock();
        pb::SnapshotStatus {
            enabled,
            in_progress: self.saving(),
            last_ok: s.last_ok,
            last_save_unix_ms: s.last_success_unix_ms,
            last_save_seq: s.last_save_seq,
            last_save_after_handoff: s.last_save_after_handoff,
            last_error: s.last_error.clone(),
        }
    }

    /// The `# Persistence` section of `INFO`, with Redis's field names (no fork: the
    /// copy-on-write fields are 0), and KeyMesh's own `rdb_last_save_bytes` /
    /// `rdb_last_save_keys`.
    pub fn info(&self, dirty: u64) -> String {
        let s = self.state.lock();
        let loading = self.loading();
        let mut out = String::from("# Persistence\r\n");
        let _ = write!(out, "loading:{}\r\nasync_loading:0\r\n", loading as u8);
        if loading {
            let (done, total) = (self.load_bytes.load(Ordering::Relaxed), self.load_total.load(Ordering::Relaxed));
            let perc = if total > 0 { done as f64 * 100.0 / total as f64 } else { 0.0 };
            let _ = write!(out, "loading_total_bytes:{total}\r\nloading_loaded_bytes:{done}\r\nloading_loaded_perc:{perc:.2}\r\n");
        }
        let current_secs = s.current.map_or(-1, |started| started.elapsed().as_secs() as i64);
        let last = s.last.clone().unwrap_or_default();
        let _ = write!(
            out,
            "current_cow_peak:0\r\ncurrent_cow_size:0\r\ncurrent_fork_perc:0.00\r\nrdb_changes_since_last_save:{}\r\nrdb_bgsave_in_progress:{}\r\nrdb_last_save_time:{}\r\nrdb_last_bgsave_status:{}\r\nrdb_last_bgsave_time_sec:{}\r\nrdb_current_bgsave_time_sec:{current_secs}\r\nrdb_saves:{}\r\nrdb_last_cow_size:0\r\nrdb_last_load_keys_expired:{}\r\nrdb_last_load_keys_loaded:{}\r\nrdb_last_load_keys_skipped:{}\r\nrdb_last_save_bytes:{}\r\nrdb_last_save_keys:{}\r\naof_enabled:0\r\naof_rewrite_in_progress:0\r\n\r\n",
            dirty.saturating_sub(s.dirty_at_last_save),
            self.saving() as u8,
            s.last_save_unix_ms / 1000,
            if s.last_ok { "ok" } else { "err" },
            s.last.as_ref().map_or(-1, |r| (r.duration_ms / 1000) as i64),
            s.saves,
            s.loaded_expired,
            s.loaded_keys,
            s.loaded_skipped,
            last.bytes,
            last.keys,
        );
        out
    }
}
