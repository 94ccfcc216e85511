//! Prometheus metrics, in one struct that registers everything it owns.
//!
//! Commands are counted once, in the command table's own atomics (which `INFO commandstats`
//! also reads); those and the values the keyspace tracks (keys, expired, evicted, memory,
//! clients) are copied into the Prometheus counters when `/metrics` is scraped. The command
//! duration histogram is read, when scraped, from the same table's per-command duration
//! histograms (`LATENCY HISTOGRAM`, `INFO latencystats`): nothing is observed on the hot path.

use std::sync::atomic::Ordering;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Bucket, Histogram, Metric, MetricFamily, MetricType};
use prometheus::{Encoder, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};

use crate::cmd::TABLE;
use crate::server::Server;

pub struct Metrics {
    registry: Registry,
    commands: Vec<IntCounter>,
    failed: Vec<IntCounter>,
    clients: IntGauge,
    blocked_clients: IntGauge,
    keys: IntGauge,
    tombstones: IntGauge,
    expired: IntCounter,
    evicted: IntCounter,
    memory_used: IntGauge,
    maxmemory: IntGauge,
    memory_rss: IntGauge,
    connections: IntCounter,
    rejected_connections: IntCounter,
    kernel_warnings: prometheus::IntGaugeVec,
}

fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("metric definitions are static and valid");
    registry.register(Box::new(c.clone())).expect("metric names are unique");
    c
}

fn gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("metric definitions are static and valid");
    registry.register(Box::new(g.clone())).expect("metric names are unique");
    g
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let by_command = |name: &str, help: &str| {
            let vec = IntCounterVec::new(Opts::new(name, help), &["command"]).expect("static metric");
            registry.register(Box::new(vec.clone())).expect("unique metric");
            TABLE.specs.iter().map(|s| vec.with_label_values(&[s.name])).collect::<Vec<_>>()
        };
        let commands = by_command("keymesh_commands_total", "Commands processed, by command.");
        let failed = by_command("keymesh_command_errors_total", "Commands that replied with an error, by command.");
        registry.register(Box::new(CommandDurations::new())).expect("unique metric");
        let kernel_warnings = prometheus::IntGaugeVec::new(
            Opts::new("keymesh_kernel_warning", "1 while a kernel setting hurts the engine (see INFO kernel), by setting."),
            &["setting"],
        )
        .expect("static metric");
        registry.register(Box::new(kernel_warnings.clone())).expect("unique metric");
        Metrics {
            kernel_warnings,
            commands,
            failed,
            clients: gauge(&registry, "keymesh_connected_clients", "Connected clients."),
            blocked_clients: gauge(&registry, "keymesh_blocked_clients", "Clients blocked in BLPOP-style commands."),
            keys: gauge(&registry, "keymesh_keys", "Live keys in all databases."),
            tombstones: gauge(&registry, "keymesh_tombstones", "Tombstones of deleted keys held for replication."),
            expired: counter(&registry, "keymesh_expired_keys_total", "Keys deleted because their TTL passed."),
            evicted: counter(&registry, "keymesh_evicted_keys_total", "Keys evicted by the maxmemory policy."),
            memory_used: gauge(&registry, "keymesh_memory_used_bytes", "Bytes allocated by the engine."),
            maxmemory: gauge(&registry, "keymesh_maxmemory_bytes", "The maxmemory setting in bytes (0: no limit)."),
            memory_rss: gauge(&registry, "keymesh_memory_rss_bytes", "Resident set size of the process."),
            connections: counter(&registry, "keymesh_connections_received_total", "Client connections accepted."),
            rejected_connections: counter(&registry, "keymesh_rejected_connections_total", "Connections refused by maxclients."),
            registry,
        }
    }

    /// The registry, for subsystems that register their own metrics (the mesh).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn connection_accepted(&self) {
        self.connections.inc();
    }

    pub fn connection_rejected(&self) {
        self.rejected_connections.inc();
    }

    /// Renders the Prometheus text format, refreshing the copied values first.
    pub fn render(&self, server: &Server) -> String {
        let store = &server.store;
        self.clients.set(server.clients.count() as i64);
        self.blocked_clients.set(server.blocking.blocked_clients() as i64);
        self.keys.set((0..store.databases()).map(|db| store.dbsize(db)).sum::<usize>() as i64);
        for i in 0..TABLE.stats.len() {
            let (calls, failed) = TABLE.total_calls(i);
            sync_counter(&self.commands[i], calls);
            sync_counter(&self.failed[i], failed);
        }
        self.tombstones.set(store.tombstones_held() as i64);
        sync_counter(&self.expired, store.stats.expired_keys.load(Ordering::Relaxed));
        sync_counter(&self.evicted, store.stats.evicted_keys.load(Ordering::Relaxed));
        self.memory_used.set(crate::memory::refresh() as i64);
        self.maxmemory.set(server.settings().maxmemory as i64);
        self.memory_rss.set(crate::memory::rss_bytes() as i64);
        server.mesh.refresh_metrics();
        let kernel = server.kernel.get();
        for setting in crate::kernel::SETTINGS {
            self.kernel_warnings.with_label_values(&[setting]).set(i64::from(kernel.warnings.iter().any(|(s, _)| *s == setting)));
        }
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

fn sync_counter(counter: &IntCounter, total: u64) {
    let current = counter.get();
    if total > current {
        counter.inc_by(total - current);
    }
}

/// `keymesh_command_duration_seconds`: how long commands ran, all commands together, from the
/// command table's power-of-two µs histograms (`crate::latency::bucket_of`) when scraped. The
/// bounds are 1 µs, 2 µs, 4 µs, ... about 1 s (2^20 µs); `CONFIG RESETSTAT` zeroes it as it
/// zeroes `INFO commandstats` (Prometheus reads the drop as a counter reset).
struct CommandDurations {
    desc: Desc,
}

/// The last bucket exported with its own bound (2^20 µs); longer durations count in `+Inf`.
const LAST_DURATION_BUCKET: usize = 20;

impl CommandDurations {
    fn new() -> CommandDurations {
        let desc =
            Desc::new("keymesh_command_duration_seconds".into(), "Command execution time.".into(), Vec::new(), Default::default()).expect("static metric");
        CommandDurations { desc }
    }
}

impl Collector for CommandDurations {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut counts = [0u64; crate::latency::BUCKETS];
        let mut sum_us = 0u64;
        for (_, stats) in TABLE.named_stats() {
            sum_us += stats.usec();
            for (count, bucket) in counts.iter_mut().zip(stats.histogram()) {
                *count += bucket;
            }
        }
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(LAST_DURATION_BUCKET + 1);
        for (i, count) in counts.iter().enumerate().take(LAST_DURATION_BUCKET + 1) {
            cumulative += count;
            let mut bucket = Bucket::default();
            bucket.set_cumulative_count(cumulative);
            bucket.set_upper_bound((1u64 << i) as f64 / 1e6);
            buckets.push(bucket);
        }
        let mut histogram = Histogram::default();
        // The count is the buckets' sum (not `calls`, which another thread may have counted
        // a moment earlier), so `+Inf` and `_count` agree.
        histogram.set_sample_count(counts.iter().sum());
        histogram.set_sample_sum(sum_us as f64 / 1e6);
        histogram.set_bucket(buckets);
        let mut metric = Metric::default();
        metric.set_histogram(histogram);
        let mut family = MetricFamily::default();
        family.set_name(self.desc.fq_name.clone());
        family.set_help(self.desc.help.clone());
        family.set_field_type(MetricType::HISTOGRAM);
        family.set_metric(vec![metric]);
        vec![family]
    }
}
