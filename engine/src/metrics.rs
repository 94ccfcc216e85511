//! Prometheus metrics, in one struct that registers everything it owns.
//!
//! Commands are counted once, in the command table's own atomics (which `INFO commandstats`
//! also reads); those and the values the keyspace tracks (keys, expired, evicted, memory,
//! clients) are copied into the Prometheus counters when `/metrics` is scraped. Only the
//! latency histogram is observed on the hot path.

use std::sync::atomic::Ordering;

use prometheus::{Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};

use crate::cmd::TABLE;
use crate::server::Server;

pub struct Metrics {
    registry: Registry,
    commands: Vec<IntCounter>,
    failed: Vec<IntCounter>,
    pub latency: Histogram,
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
        let latency = Histogram::with_opts(
            HistogramOpts::new("keymesh_command_duration_seconds", "Command execution time.")
                .buckets(vec![0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.005, 0.025, 0.1, 1.0]),
        )
        .expect("static metric");
        registry.register(Box::new(latency.clone())).expect("unique metric");
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
            latency,
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
