//! A Prometheus-operator `ServiceMonitor` scraping every engine's `/metrics` through the
//! headless Service (so not-ready pods are scraped too). Built only when enabled and when the
//! `monitoring.coreos.com/v1` CRD exists. Every series gets a `cachecluster` label (the pods'
//! `app.kubernetes.io/instance`), which the chart's alerts and dashboard group by.

use std::collections::BTreeMap;

use kube::api::{ApiResource, DynamicObject};
use serde_json::json;

use super::services::METRICS_PORT_NAME;
use super::{child_metadata, selector_labels, BuildError, BuildInput, SERVICE_LABEL};

/// The label naming a series' CacheCluster.
pub const CLUSTER_LABEL: &str = "cachecluster";

pub fn service_monitor_resource() -> ApiResource {
    ApiResource {
        group: "monitoring.coreos.com".to_string(),
        version: "v1".to_string(),
        api_version: "monitoring.coreos.com/v1".to_string(),
        kind: "ServiceMonitor".to_string(),
        plural: "servicemonitors".to_string(),
    }
}

pub fn build_service_monitor(input: &BuildInput) -> Result<Option<DynamicObject>, BuildError> {
    let (Some(monitor), true) = (&input.spec.service_monitor, input.capabilities.service_monitor) else {
        return Ok(None);
    };
    let name = input.names.statefulset();
    let mut metadata = child_metadata(input, name.clone())?;
    metadata.labels.get_or_insert_default().extend(monitor.labels.clone());
    let mut selector: BTreeMap<String, String> = selector_labels(input.names);
    selector.insert(SERVICE_LABEL.to_string(), "headless".to_string());
    let mut endpoint = json!({
        "port": METRICS_PORT_NAME,
        "path": "/metrics",
        "relabelings": [{
            "sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"],
            "targetLabel": CLUSTER_LABEL,
        }],
    });
    if let Some(interval) = &monitor.interval {
        endpoint["interval"] = json!(interval);
    }
    let mut object = DynamicObject::new(&name, &service_monitor_resource()).within(&input.names.namespace);
    object.metadata = metadata;
    object.data = json!({ "spec": { "selector": { "matchLabels": selector }, "endpoints": [endpoint] } });
    Ok(Some(object))
}

#[cfg(test)]
mod tests {
    use crate::build::fixture::{build, yaml, Fixture};

    #[test]
    fn scrapes_the_headless_service_metrics_port() {
        let monitor =
            build("metrics: {serviceMonitor: {enabled: true, interval: 15s, labels: {release: prom}}}").service_monitor.expect("enabled with its CRD");
        assert_eq!(monitor.types.as_ref().map(|t| t.kind.as_str()), Some("ServiceMonitor"), "{}", yaml(&monitor));
        assert_eq!(monitor.metadata.labels.as_ref().and_then(|l| l.get("release")).map(String::as_str), Some("prom"), "{}", yaml(&monitor));
        let spec = &monitor.data["spec"];
        assert_eq!(spec["selector"]["matchLabels"]["keymesh.io/service"], "headless", "{}", yaml(&monitor));
        assert_eq!(spec["endpoints"][0]["port"], "metrics", "{}", yaml(&monitor));
        assert_eq!(spec["endpoints"][0]["interval"], "15s", "{}", yaml(&monitor));
        assert_eq!(spec["endpoints"][0]["relabelings"][0]["targetLabel"], "cachecluster", "{}", yaml(&monitor));
        assert!(monitor.metadata.owner_references.is_some(), "{}", yaml(&monitor));
    }

    #[test]
    fn not_built_when_disabled_or_without_its_crd() {
        assert!(build("{}").service_monitor.is_none());
        let mut fixture = Fixture::new("metrics: {serviceMonitor: {enabled: true}}");
        fixture.capabilities.service_monitor = false;
        assert!(fixture.build().service_monitor.is_none());
    }
}
