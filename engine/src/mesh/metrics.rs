//! The mesh's Prometheus metrics, registered on the server's registry and refreshed from the
//! links' and subscribers' state when `/metrics` is scraped (nothing on the hot path).

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use super::{LinkPhase, Mesh};

pub struct MeshMetrics {
    lag: IntGaugeVec,
    link_state: IntGaugeVec,
    last_ack_age: IntGaugeVec,
    skew: IntGaugeVec,
    resyncs: IntCounterVec,
    received_bytes: IntCounterVec,
    skewed_receives: IntCounter,
    subscribers: IntGauge,
    backlog_bytes: IntGauge,
    ready: IntGauge,
    merges: IntCounterVec,
    gc_horizon_age: IntGauge,
    /// Tombstones dropped because every peer was past them or they outlived the cap.
    pub tombstones_collected: IntCounter,
    /// Times this node wiped its data to resync after being cut off too long.
    pub wipes: IntCounter,
    /// Subscribers refused, by reason (`auth`, `protocol`).
    pub refused_subscribers: IntCounterVec,
    /// Live batches sent to subscribers, and the ops in them: their ratio is how well the
    /// streams batch (`origin::LINGER`), which decides most of the mesh's CPU per write.
    pub sent_batches: IntCounter,
    pub sent_ops: IntCounter,
}

fn register<T: prometheus::core::Collector + Clone + 'static>(registry: &Registry, metric: T) -> T {
    registry.register(Box::new(metric.clone())).expect("mesh metric names are unique");
    metric
}

fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    register(registry, IntGaugeVec::new(Opts::new(name, help), labels).expect("static metric"))
}

fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(registry, IntCounterVec::new(Opts::new(name, help), labels).expect("static metric"))
}

impl MeshMetrics {
    pub fn new(registry: &Registry) -> MeshMetrics {
        MeshMetrics {
            lag: gauge_vec(registry, "keymesh_mesh_peer_lag_ops", "Ops the peer originated that this node has not merged yet.", &["peer"]),
            link_state: gauge_vec(
                registry,
                "keymesh_mesh_peer_link_state",
                "1 for the link's current state (connecting, syncing, connected, down).",
                &["peer", "state"],
            ),
            last_ack_age: gauge_vec(
                registry,
                "keymesh_mesh_peer_last_ack_age_ms",
                "Milliseconds since this node last acknowledged the peer's writes.",
                &["peer"],
            ),
            skew: gauge_vec(registry, "keymesh_mesh_peer_clock_skew_ms", "The peer's wall clock minus this node's, from its last heartbeat.", &["peer"]),
            resyncs: counter_vec(
                registry,
                "keymesh_mesh_resyncs_total",
                "Streams established with a peer, by kind (partial: resumed from the backlog; full: snapshot).",
                &["peer", "kind"],
            ),
            received_bytes: counter_vec(
                registry,
                "keymesh_mesh_received_bytes_total",
                "Bytes received from a peer, by kind (full: snapshot; stream: live and partial-resync batches).",
                &["peer", "kind"],
            ),
            skewed_receives: register(
                registry,
                IntCounter::new(
                    "keymesh_clock_skewed_receives_total",
                    "Remote HLC timestamps too far ahead of this node's wall clock to move its clock (max-clock-skew-ms).",
                )
                .expect("static metric"),
            ),
            subscribers: register(registry, IntGauge::new("keymesh_mesh_subscribers", "Peers streaming this node's writes.").expect("static metric")),
            backlog_bytes: register(registry, IntGauge::new("keymesh_mesh_backlog_bytes", "Bytes held in the replication backlog.").expect("static metric")),
            ready: register(registry, IntGauge::new("keymesh_ready", "1 when the node is ready for client traffic (see /readyz).").expect("static metric")),
            refused_subscribers: counter_vec(
                registry,
                "keymesh_mesh_refused_subscribers_total",
                "Peers this node refused to stream to, by reason (auth: wrong masterauth; protocol: incompatible mesh protocol version; tls: a failed TLS handshake, or plain text or no client certificate under tls-replication yes).",
                &["reason"],
            ),
            merges: counter_vec(
                registry,
                "keymesh_mesh_merges_total",
                "Replicated ops merged from peers, by outcome (applied: changed this node's state; superseded: this node already held newer).",
                &["outcome"],
            ),
            gc_horizon_age: register(
                registry,
                IntGauge::new(
                    "keymesh_tombstone_gc_horizon_age_ms",
                    "How far behind this node's clock the tombstone GC horizon is (every peer holds every write older than it); grows while a peer is unreachable.",
                )
                .expect("static metric"),
            ),
            tombstones_collected: register(
                registry,
                IntCounter::new("keymesh_tombstones_collected_total", "Tombstones dropped: every peer was past them, or they outlived tombstone-gc-seconds.")
                    .expect("static metric"),
            ),
            sent_batches: register(
                registry,
                IntCounter::new("keymesh_mesh_sent_batches_total", "Batches of live ops this node sent to its subscribers (all peers).").expect("static metric"),
            ),
            sent_ops: register(
                registry,
                IntCounter::new("keymesh_mesh_sent_ops_total", "Live ops this node sent to its subscribers (all peers), in keymesh_mesh_sent_batches_total batches.")
                    .expect("static metric"),
            ),
            wipes: register(
                registry,
                IntCounter::new(
                    "keymesh_mesh_wipes_total",
                    "Times this node wiped its data and resynced because it heard from no peer for longer than tombstone-gc-seconds.",
                )
                .expect("static metric"),
            ),
        }
    }

    pub fn refresh(&self, mesh: &Mesh) {
        let (mut applied, mut superseded) = (0, 0);
        for (peer, s) in mesh.link_statuses() {
            applied += s.ops_applied;
            superseded += s.ops_superseded;
            let label = peer.label();
            let l = label.as_str();
            self.lag.with_label_values(&[l]).set(s.lag() as i64);
            self.last_ack_age.with_label_values(&[l]).set(s.last_ack_age_ms() as i64);
            self.skew.with_label_values(&[l]).set(s.skew_ms);
            for phase in LinkPhase::ALL {
                self.link_state.with_label_values(&[l, phase.as_str()]).set((phase == s.phase) as i64);
            }
            sync(&self.resyncs.with_label_values(&[l, "partial"]), s.partial_resyncs);
            sync(&self.resyncs.with_label_values(&[l, "full"]), s.full_resyncs);
            sync(&self.received_bytes.with_label_values(&[l, "full"]), s.full_sync_bytes);
            sync(&self.received_bytes.with_label_values(&[l, "stream"]), s.stream_bytes);
        }
        sync(&self.merges.with_label_values(&["applied"]), applied);
        sync(&self.merges.with_label_values(&["superseded"]), superseded);
        let horizon_ms = crate::hlc::physical_ms(mesh.gc_horizon());
        self.gc_horizon_age.set(mesh.store.hlc.wall_ms().saturating_sub(horizon_ms) as i64);
        sync(&self.skewed_receives, mesh.store.hlc.skewed_receives());
        self.subscribers.set(mesh.subscriber_infos().len() as i64);
        self.backlog_bytes.set(mesh.log.held_bytes() as i64);
        self.ready.set(mesh.readiness().is_ok() as i64);
    }

    /// Drops a removed peer's gauges. Its counters stay: a re-added peer continues them
    /// (the mesh keeps a removed link's totals).
    pub fn forget_peer(&self, label: &str) {
        let _ = self.lag.remove_label_values(&[label]);
        let _ = self.last_ack_age.remove_label_values(&[label]);
        let _ = self.skew.remove_label_values(&[label]);
        for phase in LinkPhase::ALL {
            let _ = self.link_state.remove_label_values(&[label, phase.as_str()]);
        }
    }
}

fn sync(counter: &IntCounter, total: u64) {
    let current = counter.get();
    if total > current {
        counter.inc_by(total - current);
    }
}
