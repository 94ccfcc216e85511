//! Per-CacheCluster gauges, read from the controller's cache of CacheCluster objects at scrape
//! time (as kube-state-metrics does), so a deleted cluster's series disappear with it and no
//! reconcile has to remember to update them:
//!
//! - `keymesh_operator_cluster_condition{namespace, cachecluster, type, reason}`: 1 while the
//!   condition is True, else 0;
//! - `keymesh_operator_cluster_phase{namespace, cachecluster, phase}`: 1 for the current phase;
//! - `keymesh_operator_cluster_replicas` / `..._ready_replicas{namespace, cachecluster}`:
//!   `spec.replicas` and `status.readyReplicas`.
//!
//! Only the leader runs the controller, so only the leader exports them; the chart's
//! ServiceMonitor uses `honorLabels` so `namespace` stays the cluster's, not the operator's.

use std::sync::{Arc, Mutex, OnceLock};

use kube::runtime::reflector::Store;
use kube::ResourceExt;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGaugeVec, Opts};

use crate::api::CacheCluster;

#[derive(Clone)]
pub struct ClusterGauges {
    inner: Arc<Inner>,
}

struct Inner {
    store: OnceLock<Store<CacheCluster>>,
    condition: IntGaugeVec,
    phase: IntGaugeVec,
    replicas: IntGaugeVec,
    ready_replicas: IntGaugeVec,
    /// Held while the gauges are rebuilt, so two concurrent scrapes do not interleave.
    collecting: Mutex<()>,
}

impl ClusterGauges {
    pub fn new() -> Result<ClusterGauges, prometheus::Error> {
        let gauge = |name: &str, help: &str, labels: &[&str]| IntGaugeVec::new(Opts::new(name, help), labels);
        Ok(ClusterGauges {
            inner: Arc::new(Inner {
                store: OnceLock::new(),
                condition: gauge(
                    "keymesh_operator_cluster_condition",
                    "1 while the CacheCluster's condition is True, else 0.",
                    &["namespace", "cachecluster", "type", "reason"],
                )?,
                phase: gauge("keymesh_operator_cluster_phase", "1 for the CacheCluster's current phase.", &["namespace", "cachecluster", "phase"])?,
                replicas: gauge("keymesh_operator_cluster_replicas", "spec.replicas of the CacheCluster.", &["namespace", "cachecluster"])?,
                ready_replicas: gauge("keymesh_operator_cluster_ready_replicas", "status.readyReplicas of the CacheCluster.", &["namespace", "cachecluster"])?,
                collecting: Mutex::new(()),
            }),
        })
    }

    /// Exports the clusters in `store` from now on (the controller's reflector cache). Only the
    /// first call counts: a process runs one controller.
    pub fn watch(&self, store: Store<CacheCluster>) {
        let _ = self.inner.store.set(store);
    }

    fn refresh(&self, clusters: &[Arc<CacheCluster>]) {
        let inner = &self.inner;
        for vec in [&inner.condition, &inner.phase, &inner.replicas, &inner.ready_replicas] {
            vec.reset();
        }
        for cluster in clusters {
            let (namespace, name) = (cluster.namespace().unwrap_or_default(), cluster.name_any());
            let (ns, n) = (namespace.as_str(), name.as_str());
            inner.replicas.with_label_values(&[ns, n]).set(i64::from(cluster.spec.replicas));
            let Some(status) = &cluster.status else { continue };
            inner.ready_replicas.with_label_values(&[ns, n]).set(i64::from(status.ready_replicas));
            if let Some(phase) = status.phase {
                inner.phase.with_label_values(&[ns, n, phase.as_str()]).set(1);
            }
            for condition in &status.conditions {
                inner.condition.with_label_values(&[ns, n, &condition.type_, &condition.reason]).set(i64::from(condition.status == "True"));
            }
        }
    }
}

impl Collector for ClusterGauges {
    fn desc(&self) -> Vec<&Desc> {
        let inner = &self.inner;
        [&inner.condition, &inner.phase, &inner.replicas, &inner.ready_replicas].into_iter().flat_map(|v| v.desc()).collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let _guard = self.inner.collecting.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let clusters = self.inner.store.get().map(Store::state).unwrap_or_default();
        self.refresh(&clusters);
        let inner = &self.inner;
        [&inner.condition, &inner.phase, &inner.replicas, &inner.ready_replicas].into_iter().flat_map(|v| v.collect()).collect()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use k8s_openapi::jiff::Timestamp;
    use kube::runtime::{reflector, watcher};
    use prometheus::{Encoder, Registry, TextEncoder};

    use super::*;
    use crate::api::{CacheClusterStatus, Phase};
    use crate::test_support::cluster;

    fn render(registry: &Registry) -> String {
        let mut out = Vec::new();
        TextEncoder::new().encode(&registry.gather(), &mut out).expect("encodes");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn conditions_phase_and_replicas_of_each_cluster() {
        let gauges = ClusterGauges::new().expect("gauges");
        let mut degraded = cluster("{replicas: 5}");
        degraded.status = Some(CacheClusterStatus {
            phase: Some(Phase::Degraded),
            ready_replicas: 4,
            conditions: vec![Condition {
                type_: "Degraded".into(),
                status: "True".into(),
                reason: "MembersUnhealthy".into(),
                message: "demo-1 is not ready".into(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
                observed_generation: None,
            }],
            ..CacheClusterStatus::default()
        });
        let (reader, mut writer) = reflector::store::<CacheCluster>();
        writer.apply_watcher_event(&watcher::Event::Apply(degraded.clone()));
        let registry = Registry::new();
        registry.register(Box::new(gauges.clone())).expect("registers");
        gauges.watch(reader);
        let text = render(&registry);
        for line in [
            r#"keymesh_operator_cluster_condition{cachecluster="demo",namespace="cache",reason="MembersUnhealthy",type="Degraded"} 1"#,
            r#"keymesh_operator_cluster_phase{cachecluster="demo",namespace="cache",phase="Degraded"} 1"#,
            r#"keymesh_operator_cluster_replicas{cachecluster="demo",namespace="cache"} 5"#,
            r#"keymesh_operator_cluster_ready_replicas{cachecluster="demo",namespace="cache"} 4"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        writer.apply_watcher_event(&watcher::Event::Delete(degraded));
        let text = render(&registry);
        assert!(!text.contains("cachecluster=\"demo\""), "a deleted cluster's series must go:\n{text}");
    }
}
