//! The operator's Prometheus metrics, in one struct that registers itself: reconciles, errors
//! by kind (every kind exported at 0 from the start, so alerts and dashboards see the series
//! before the first error), reconcile duration, timed by a drop guard so every exit path is
//! measured, and the per-CacheCluster gauges of `cluster_metrics`.

use std::time::Instant;

use prometheus::{Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};

use crate::cluster_metrics::ClusterGauges;

/// The `kind` label values of `keymesh_operator_reconcile_errors_total` (`controller::Error::kind`).
pub use crate::controller::ERROR_KINDS;

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub reconciles: IntCounter,
    pub errors: IntCounterVec,
    pub duration: Histogram,
    /// 1 while this replica holds the leader Lease.
    pub leader: IntGauge,
    /// Mutating calls this replica made (Kubernetes writes and engine admin calls), by target.
    pub mutating_calls: IntCounterVec,
    /// Mutating calls refused because this replica was not (or no longer) acting as leader.
    pub refused_calls: IntCounter,
    /// Unix time of this replica's last mutating call.
    pub last_mutating_call: prometheus::Gauge,
    /// Per-CacheCluster conditions, phase and replicas, from the controller's cache.
    pub clusters: ClusterGauges,
}

impl Metrics {
    /// Creates the metrics and registers them in a registry of their own.
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let reconciles = IntCounter::new("keymesh_operator_reconciles_total", "Reconciles started.")?;
        let errors = IntCounterVec::new(Opts::new("keymesh_operator_reconcile_errors_total", "Reconciles that failed, by kind of error."), &["kind"])?;
        let duration = Histogram::with_opts(
            HistogramOpts::new("keymesh_operator_reconcile_duration_seconds", "Time a reconcile took.")
                .buckets(vec![0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
        )?;
        let leader = IntGauge::new("keymesh_operator_leader", "1 while this replica is the leader.")?;
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(errors.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        let mutating_calls = IntCounterVec::new(
            Opts::new("keymesh_operator_mutating_calls_total", "Mutating calls made while acting as leader, by target (kubernetes, engine)."),
            &["target"],
        )?;
        let refused_calls = IntCounter::new("keymesh_operator_refused_calls_total", "Mutating calls refused because this replica was not acting as leader.")?;
        let last_mutating_call = prometheus::Gauge::new("keymesh_operator_last_mutating_call_timestamp_seconds", "Unix time of the last mutating call.")?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(mutating_calls.clone()))?;
        registry.register(Box::new(refused_calls.clone()))?;
        registry.register(Box::new(last_mutating_call.clone()))?;
        for kind in ERROR_KINDS {
            errors.with_label_values(&[kind]);
        }
        let clusters = ClusterGauges::new()?;
        registry.register(Box::new(clusters.clone()))?;
        Ok(Metrics { registry, reconciles, errors, duration, leader, mutating_calls, refused_calls, last_mutating_call, clusters })
    }

    /// Counts a reconcile and times it until the guard drops.
    pub fn reconcile(&self) -> ReconcileTimer {
        self.reconciles.inc();
        ReconcileTimer { start: Instant::now(), histogram: self.duration.clone() }
    }

    pub fn error(&self, kind: &str) {
        self.errors.with_label_values(&[kind]).inc();
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Result<String, prometheus::Error> {
        let mut buffer = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buffer)?;
        Ok(String::from_utf8_lossy(&buffer).into_owned())
    }
}

/// Observes the reconcile's duration when dropped.
pub struct ReconcileTimer {
    start: Instant,
    histogram: Histogram,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reconcile_is_counted_and_timed() {
        let metrics = Metrics::new().expect("metrics register");
        drop(metrics.reconcile());
        metrics.error("apply");
        let text = metrics.render().expect("renders");
        assert!(text.contains("keymesh_operator_reconciles_total 1"), "{text}");
        assert!(text.contains("keymesh_operator_reconcile_duration_seconds_count 1"), "{text}");
        assert!(text.contains("keymesh_operator_reconcile_errors_total{kind=\"apply\"} 1"), "{text}");
        assert!(text.contains("keymesh_operator_reconcile_errors_total{kind=\"observe\"} 0"), "every kind starts at 0: {text}");
    }
}
