//! The two Services: `<name>-headless` gives every pod a stable DNS name (published before the
//! pod is ready, so peers can sync a starting pod) and carries the metrics port for scraping;
//! `<name>` is what clients connect to (ready pods only), with the spec's type and annotations.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{child_metadata, selector_labels, BuildError, BuildInput, SERVICE_LABEL};
use crate::names::{CLIENT_PORT, MESH_PORT, METRICS_PORT, TLS_PORT};

/// Port names, shared with the container's ports.
pub const CLIENT_PORT_NAME: &str = "client";
/// The TLS client port, when TLS is on.
pub const TLS_PORT_NAME: &str = "client-tls";
pub const MESH_PORT_NAME: &str = "mesh";
pub const METRICS_PORT_NAME: &str = "metrics";

fn port(name: &str, port: i32, target: &str) -> ServicePort {
    ServicePort {
        name: Some(name.to_string()),
        port,
        target_port: Some(IntOrString::String(target.to_string())),
        protocol: Some("TCP".to_string()),
        ..ServicePort::default()
    }
}

pub fn build_headless_service(input: &BuildInput) -> Result<Service, BuildError> {
    let mut metadata = child_metadata(input, input.names.headless_service())?;
    metadata.labels.get_or_insert_default().insert(SERVICE_LABEL.to_string(), "headless".to_string());
    Ok(Service {
        metadata,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector_labels(input.names)),
            ports: Some(
                [
                    Some(port(CLIENT_PORT_NAME, CLIENT_PORT, CLIENT_PORT_NAME)),
                    Some(port(MESH_PORT_NAME, MESH_PORT, MESH_PORT_NAME)),
                    Some(port(METRICS_PORT_NAME, METRICS_PORT, METRICS_PORT_NAME)),
                    input.mounted_tls().map(|_| port(TLS_PORT_NAME, TLS_PORT, TLS_PORT_NAME)),
                ]
                .into_iter()
                .flatten()
                .collect(),
            ),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

pub fn build_client_service(input: &BuildInput) -> Result<Service, BuildError> {
    let service = &input.spec.service;
    let mut metadata = child_metadata(input, input.names.client_service())?;
    metadata.labels.get_or_insert_default().insert(SERVICE_LABEL.to_string(), "client".to_string());
    if !service.annotations.is_empty() {
        metadata.annotations = Some(service.annotations.clone());
    }
    Ok(Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some(service.type_.as_str().to_string()),
            selector: Some(selector_labels(input.names)),
            ports: Some(
                [Some(port(CLIENT_PORT_NAME, service.port, CLIENT_PORT_NAME)), input.mounted_tls().map(|_| port(TLS_PORT_NAME, TLS_PORT, TLS_PORT_NAME))]
                    .into_iter()
                    .flatten()
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

#[cfg(test)]
mod tests {
    use crate::build::fixture::{build, yaml};

    #[test]
    fn headless_service_publishes_not_ready_pods_on_all_three_ports() {
        let svc = build("{}").headless_service;
        let spec = svc.spec.as_ref().expect("spec");
        assert_eq!(svc.metadata.name.as_deref(), Some("demo-headless"), "{}", yaml(&svc));
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"), "{}", yaml(&svc));
        assert_eq!(spec.publish_not_ready_addresses, Some(true), "{}", yaml(&svc));
        let ports: Vec<(Option<&str>, i32)> = spec.ports.iter().flatten().map(|p| (p.name.as_deref(), p.port)).collect();
        assert_eq!(ports, [(Some("client"), 6379), (Some("mesh"), 16379), (Some("metrics"), 9121)], "{}", yaml(&svc));
        let selector = spec.selector.as_ref().expect("selector");
        assert_eq!(selector.get("app.kubernetes.io/instance").map(String::as_str), Some("demo"), "{}", yaml(&svc));
    }

    #[test]
    fn client_service_defaults_to_cluster_ip_on_6379() {
        let svc = build("{}").client_service;
        let spec = svc.spec.as_ref().expect("spec");
        assert_eq!(svc.metadata.name.as_deref(), Some("demo"), "{}", yaml(&svc));
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"), "{}", yaml(&svc));
        assert_eq!(spec.ports.as_ref().map(|p| p[0].port), Some(6379), "{}", yaml(&svc));
        assert!(svc.metadata.annotations.is_none(), "{}", yaml(&svc));
        assert_eq!(spec.publish_not_ready_addresses, None, "clients only reach ready pods: {}", yaml(&svc));
    }

    #[test]
    fn client_service_carries_type_port_and_nlb_annotations() {
        let svc = build(
            "service:\n  type: LoadBalancer\n  port: 7000\n  annotations:\n    service.beta.kubernetes.io/aws-load-balancer-type: nlb\n    service.beta.kubernetes.io/aws-load-balancer-internal: 'true'",
        )
        .client_service;
        let spec = svc.spec.as_ref().expect("spec");
        assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"), "{}", yaml(&svc));
        let port = &spec.ports.as_ref().expect("ports")[0];
        assert_eq!(port.port, 7000, "{}", yaml(&svc));
        assert_eq!(port.target_port, Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("client".into())), "{}", yaml(&svc));
        let annotations = svc.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(annotations.get("service.beta.kubernetes.io/aws-load-balancer-type").map(String::as_str), Some("nlb"), "{}", yaml(&svc));
    }
}
