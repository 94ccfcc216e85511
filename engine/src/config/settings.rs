//! The directives the engine acts on, as typed values: parsed once from a validated
//! [`Config`] when the server starts and again at every `CONFIG SET`, then published whole
//! (`SettingsCell`, an `ArcSwap`), so a reader takes a consistent snapshot with a few atomic
//! operations and no lock, and never looks a value up by name.
//!
//! The text store (`Config`) stays the source for `CONFIG GET`, the admin API's config echo
//! and `replicaof`; everything else reads `Settings`. Each `Server` owns its own cell, so two
//! servers in one process (tests do this) never share a setting.
//!
//! Adding a directive:
//! 1. declare it in `config::DIRECTIVES` (name, default, kind, live) — that alone makes it
//!    loadable, validated, and answered by `CONFIG GET/SET`;
//! 2. if the engine acts on it, add a typed field to `Settings` and one line to
//!    `Settings::from_config` that reads it (`c.int`, `c.flag`, `c.get`);
//! 3. read it where it is used with `server.settings().field`; if a subsystem keeps its own
//!    copy (an atomic inside `Store`, `Scripts`, ...), push it in `Server::apply_settings`.

use std::path::PathBuf;
use std::time::Duration;

use super::Config;
use crate::db::evict::Policy;
use crate::persist::rdb::OnUnsupported;
use crate::persist::schedule::SavePoint;

/// What a snapshot that fails its checks at start does (`snapshot-load-error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotLoadError {
    /// Move the file aside, start empty and full-sync from peers.
    StartEmpty,
    /// Refuse to start.
    RefuseStart,
}

/// Typed, validated directive values. Durations and sizes are in their units; "0 means off"
/// directives are `Option`s.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    // Clients.
    pub bind: String,
    pub protected_mode: bool,
    /// `requirepass`; empty: no password.
    pub requirepass: String,
    pub maxclients: usize,
    /// `timeout`: close an idle client after this long (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// `tcp-keepalive` (`None`: off).
    pub tcp_keepalive: Option<Duration>,
    pub proto_max_bulk_len: usize,
    pub client_query_buffer_limit: usize,
    pub tcp_backlog: u32,
    // Memory.
    /// `maxmemory` in bytes; 0: no limit.
    pub maxmemory: u64,
    pub maxmemory_policy: Policy,
    pub maxmemory_samples: usize,
    pub hll_sparse_max_bytes: usize,
    /// `notify-keyspace-events` as `crate::notify` class bits (validated when set).
    pub notify_keyspace_events: u32,
    /// `tracking-table-max-keys` (0: no limit).
    pub tracking_table_max_keys: usize,
    // The keyspace and replication.
    pub databases: usize,
    /// `active-replica yes`: this node replicates (stamps and logs its writes).
    pub active_replica: bool,
    /// `active-replica yes` and `multi-master yes`: a mesh member, which may have peers.
    pub mesh_mode: bool,
    pub node_name: String,
    pub masterauth: String,
    pub repl_timeout: Duration,
    pub repl_backlog_size: u64,
    pub max_clock_skew_ms: u64,
    pub clock_offset_ms: i64,
    pub tombstone_gc: Duration,
    // Persistence.
    pub dir: PathBuf,
    pub dbfilename: String,
    /// `save` points; empty: no schedule.
    pub save: Vec<SavePoint>,
    pub snapshot_load_error: SnapshotLoadError,
    /// `rdb-import-unsupported`: what an RDB import does with a type KeyMesh has not.
    pub rdb_import_unsupported: OnUnsupported,
    // Scripts and introspection.
    pub busy_reply_threshold_ms: u64,
    pub lua_memory_limit: usize,
    /// µs; negative: off, 0: every command.
    pub slowlog_log_slower_than: i64,
    pub slowlog_max_len: usize,
    /// ms; 0: the latency monitor is off.
    pub latency_monitor_threshold_ms: u64,
    // Process start-up (read before a server exists, in `main`).
    pub server_threads: usize,
    pub loglevel: String,
    pub logfile: String,
    pub kernel_sys_dir: PathBuf,
    pub kernel_proc_sys_dir: PathBuf,
}

impl Settings {
    /// The typed values of `c`. `Config` has validated and normalised every value (an
    /// integer is in its bounds, a size is bytes, an enum is one of its names), so reading
    /// them cannot fail; the fallbacks below are the defaults, never reached.
    pub fn from_config(c: &Config) -> Settings {
        let secs = |name: &str| Duration::from_secs(c.int(name).max(0) as u64);
        let optional_secs = |name: &str| Some(secs(name)).filter(|d| !d.is_zero());
        Settings {
            bind: c.get("bind").to_string(),
            protected_mode: c.flag("protected-mode"),
            requirepass: c.get("requirepass").to_string(),
            maxclients: c.int("maxclients") as usize,
            idle_timeout: optional_secs("timeout"),
            tcp_keepalive: optional_secs("tcp-keepalive"),
            proto_max_bulk_len: c.int("proto-max-bulk-len") as usize,
            client_query_buffer_limit: c.int("client-query-buffer-limit") as usize,
            tcp_backlog: c.int("tcp-backlog") as u32,
            maxmemory: c.int("maxmemory") as u64,
            maxmemory_policy: Policy::from_name(c.get("maxmemory-policy")).unwrap_or(Policy::NoEviction),
            maxmemory_samples: c.int("maxmemory-samples") as usize,
            hll_sparse_max_bytes: c.int("hll-sparse-max-bytes") as usize,
            notify_keyspace_events: crate::notify::parse_classes(c.get("notify-keyspace-events")).unwrap_or(0),
            tracking_table_max_keys: c.int("tracking-table-max-keys") as usize,
            databases: c.int("databases") as usize,
            active_replica: c.flag("active-replica"),
            mesh_mode: c.flag("active-replica") && c.flag("multi-master"),
            node_name: c.get("node-name").to_string(),
            masterauth: c.get("masterauth").to_string(),
            repl_timeout: secs("repl-timeout").max(Duration::from_secs(1)),
            repl_backlog_size: c.int("repl-backlog-size") as u64,
            max_clock_skew_ms: c.int("max-clock-skew-ms") as u64,
            clock_offset_ms: c.int("clock-offset-ms"),
            tombstone_gc: secs("tombstone-gc-seconds"),
            dir: PathBuf::from(c.get("dir")),
            dbfilename: c.get("dbfilename").to_string(),
            save: crate::persist::schedule::parse(c.get("save")).unwrap_or_default(),
            snapshot_load_error: match c.get("snapshot-load-error") {
                "refuse-start" => SnapshotLoadError::RefuseStart,
                _ => SnapshotLoadError::StartEmpty,
            },
            rdb_import_unsupported: match c.get("rdb-import-unsupported") {
                "skip" => OnUnsupported::Skip,
                _ => OnUnsupported::Refuse,
            },
            busy_reply_threshold_ms: c.int("busy-reply-threshold") as u64,
            lua_memory_limit: c.int("lua-memory-limit") as usize,
            slowlog_log_slower_than: c.int("slowlog-log-slower-than"),
            slowlog_max_len: c.int("slowlog-max-len") as usize,
            latency_monitor_threshold_ms: c.int("latency-monitor-threshold") as u64,
            server_threads: c.int("server-threads") as usize,
            loglevel: c.get("loglevel").to_string(),
            logfile: c.get("logfile").to_string(),
            kernel_sys_dir: PathBuf::from(c.get("kernel-sys-dir")),
            kernel_proc_sys_dir: PathBuf::from(c.get("kernel-proc-sys-dir")),
        }
    }

    /// Whether clients must authenticate.
    pub fn has_password(&self) -> bool {
        !self.requirepass.is_empty()
    }

    /// Protected mode refuses non-loopback clients: on, no password, and `bind` left at its
    /// default (Redis's rule).
    pub fn protected(&self) -> bool {
        self.protected_mode && !self.has_password() && self.bind == "* -::*"
    }

    /// Where the snapshot lives: `dir`/`dbfilename` (a relative `dir` is relative to the
    /// working directory, as Redis's).
    pub fn snapshot_path(&self) -> PathBuf {
        self.dir.join(&self.dbfilename)
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings::from_config(&Config::default())
    }
}

/// One server's current `Settings`, replaced whole on change. `load` is lock-free (a reader
/// never waits for `CONFIG SET`, and a `CONFIG SET` never waits for readers).
#[derive(Debug)]
pub struct SettingsCell(arc_swap::ArcSwap<Settings>);

/// A snapshot of the settings, as `SettingsCell::load` hands it out: cheap to take, meant to
/// be dropped soon (hold an `Arc<Settings>` from `load_full` across an `.await` instead).
pub type SettingsGuard = arc_swap::Guard<std::sync::Arc<Settings>>;

impl SettingsCell {
    pub fn new(settings: Settings) -> SettingsCell {
        SettingsCell(arc_swap::ArcSwap::from_pointee(settings))
    }

    pub fn load(&self) -> SettingsGuard {
        self.0.load()
    }

    pub fn store(&self, settings: Settings) {
        self.0.store(std::sync::Arc::new(settings));
    }

    /// A reader's own copy of the current settings (`SettingsCache`), for one that reads
    /// them over and over (a connection, once per read).
    pub fn cache(&self) -> SettingsCache<'_> {
        arc_swap::Cache::new(&self.0)
    }
}

/// The settings as one reader last saw them, brought up to date by each `load`: a relaxed load
/// of the cell's pointer, and a full load only after a change, where `SettingsCell::load` is
/// two atomic read-modify-writes (arc_swap's debt slot, taken and paid back) and ~60
/// instructions. At -P 1 a connection reads them once per request.
pub type SettingsCache<'a> = arc_swap::Cache<&'a arc_swap::ArcSwap<Settings>, std::sync::Arc<Settings>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(flags: &str) -> Settings {
        let args: Vec<String> = flags.split_whitespace().map(String::from).collect();
        Settings::from_config(&Config::from_args(&args).unwrap())
    }

    #[test]
    fn defaults_are_the_directives_defaults() {
        let s = Settings::default();
        assert_eq!(s.maxmemory, 0);
        assert_eq!(s.maxmemory_policy, Policy::NoEviction);
        assert_eq!(s.proto_max_bulk_len, 512 << 20);
        assert_eq!(s.client_query_buffer_limit, 1 << 30);
        assert_eq!(s.idle_timeout, None);
        assert_eq!(s.tcp_keepalive, Some(Duration::from_secs(300)));
        assert_eq!(s.repl_timeout, Duration::from_secs(60));
        assert_eq!(s.tombstone_gc, Duration::from_secs(86_400));
        assert_eq!(s.snapshot_path(), PathBuf::from("./dump.rdb"));
        assert!(s.save.is_empty() && s.protected() && !s.mesh_mode);
        assert_eq!(s.rdb_import_unsupported, OnUnsupported::Refuse);
    }

    #[test]
    fn values_are_typed_once() {
        let s = settings(
            "--maxmemory 1mb --maxmemory-policy allkeys-lfu --timeout 7 --tcp-keepalive 0 --save 900 1 --requirepass pw \
             --active-replica yes --multi-master yes --snapshot-load-error refuse-start --dir /data --rdb-import-unsupported skip",
        );
        assert_eq!(s.maxmemory, 1 << 20);
        assert_eq!(s.maxmemory_policy, Policy::AllKeysLfu);
        assert_eq!(s.idle_timeout, Some(Duration::from_secs(7)));
        assert_eq!(s.tcp_keepalive, None);
        assert_eq!(s.save, vec![SavePoint { seconds: 900, changes: 1 }]);
        assert!(s.has_password() && !s.protected(), "a password turns protected mode's refusal off");
        assert!(s.mesh_mode);
        assert_eq!(s.snapshot_load_error, SnapshotLoadError::RefuseStart);
        assert_eq!(s.rdb_import_unsupported, OnUnsupported::Skip);
        assert_eq!(s.snapshot_path(), PathBuf::from("/data/dump.rdb"));
    }

    #[test]
    fn a_cell_publishes_a_new_snapshot_and_old_snapshots_stay_whole() {
        let cell = SettingsCell::new(Settings::default());
        let before = cell.load_full_for_test();
        cell.store(settings("--maxmemory 100"));
        assert_eq!(cell.load().maxmemory, 100);
        assert_eq!(before.maxmemory, 0, "a reader's snapshot does not change under it");
    }

    impl SettingsCell {
        fn load_full_for_test(&self) -> std::sync::Arc<Settings> {
            self.0.load_full()
        }
    }
}
