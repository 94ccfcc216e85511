//! The engine pods' NetworkPolicy `<name>` (ingress only): the client port from the sources
//! `spec.service.allowedClients` names (any source when empty: a load balancer's clients come
//! from anywhere), the mesh and admin port only from the cluster's own pods and the operator's
//! pods, and the metrics port from anywhere (Prometheus may run in any namespace; `/metrics`
//! holds no data). Built only when `spec.networkPolicy.enabled` (the default).
//!
//! The operator's pods are selected by the chart's `app.kubernetes.io/name: keymesh-operator`
//! label in the operator's namespace, matched by the `kubernetes.io/metadata.name` label that
//! Kubernetes 1.21+ puts on every namespace (the chart's own Namespace carries it for 1.20).
//! An operator that does not know its namespace (run outside a pod) admits operator pods of
//! every namespace instead.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ApiResource, DynamicObject, TypeMeta};

use super::{child_metadata, selector_labels, to_dynamic, BuildError, BuildInput};
use crate::names::{CLIENT_PORT, MESH_PORT, METRICS_PORT, TLS_PORT};

/// The label, and its value, of the operator's pods (the chart's `selectorLabels`).
pub const OPERATOR_POD_LABEL: (&str, &str) = ("app.kubernetes.io/name", "keymesh-operator");

/// The label Kubernetes 1.21+ sets on every namespace to its own name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

pub fn network_policy_resource() -> ApiResource {
    ApiResource {
        group: "networking.k8s.io".to_string(),
        version: "v1".to_string(),
        api_version: "networking.k8s.io/v1".to_string(),
        kind: "NetworkPolicy".to_string(),
        plural: "networkpolicies".to_string(),
    }
}

/// `None` when `spec.networkPolicy.enabled` is false.
pub fn build_network_policy(input: &BuildInput) -> Result<Option<DynamicObject>, BuildError> {
    if !input.spec.network_policy {
        return Ok(None);
    }
    let name = input.names.statefulset();
    let clients = &input.spec.service.allowed_clients;
    let policy = NetworkPolicy {
        metadata: child_metadata(input, name.clone())?,
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(match_labels(selector_labels(input.names))),
            policy_types: Some(vec!["Ingress".to_string()]),
            ingress: Some(
                [
                    Some(rule(CLIENT_PORT, (!clients.is_empty()).then(|| clients.clone()))),
                    input.mounted_tls().map(|_| rule(TLS_PORT, (!clients.is_empty()).then(|| clients.clone()))),
                    Some(rule(MESH_PORT, Some(vec![own_pods(input), operator_pods(input.operator_namespace)]))),
                    Some(rule(METRICS_PORT, None)),
                ]
                .into_iter()
                .flatten()
                .collect(),
            ),
            egress: None,
        }),
    };
    let mut object = to_dynamic(&policy, "NetworkPolicy", &name)?;
    let resource = network_policy_resource();
    object.types = Some(TypeMeta { api_version: resource.api_version, kind: resource.kind });
    Ok(Some(object))
}

/// Ingress to `port`; `from: None` admits every source.
fn rule(port: i32, from: Option<Vec<NetworkPolicyPeer>>) -> NetworkPolicyIngressRule {
    NetworkPolicyIngressRule {
        from,
        ports: Some(vec![NetworkPolicyPort { port: Some(IntOrString::Int(port)), protocol: Some("TCP".to_string()), end_port: None }]),
    }
}

fn own_pods(input: &BuildInput) -> NetworkPolicyPeer {
    NetworkPolicyPeer { pod_selector: Some(match_labels(selector_labels(input.names))), ..NetworkPolicyPeer::default() }
}

fn operator_pods(namespace: Option<&str>) -> NetworkPolicyPeer {
    let namespaces = match namespace {
        Some(ns) => match_labels(BTreeMap::from([(NAMESPACE_NAME_LABEL.to_string(), ns.to_string())])),
        None => LabelSelector::default(),
    };
    let (key, value) = OPERATOR_POD_LABEL;
    NetworkPolicyPeer {
        namespace_selector: Some(namespaces),
        pod_selector: Some(match_labels(BTreeMap::from([(key.to_string(), value.to_string())]))),
        ip_block: None,
    }
}

fn match_labels(labels: BTreeMap<String, String>) -> LabelSelector {
    LabelSelector { match_labels: Some(labels), match_expressions: None }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::build::fixture::{build, yaml, Fixture};

    #[test]
    fn the_mesh_port_admits_only_the_clusters_pods_and_the_operator() {
        let mut fixture = Fixture::new("{}");
        fixture.operator_namespace = Some("keymesh-system".to_string());
        let policy = fixture.build().network_policy.expect("on by default");
        let spec = &policy.data["spec"];
        assert_eq!(policy.types.as_ref().map(|t| t.api_version.as_str()), Some("networking.k8s.io/v1"), "{}", yaml(&policy));
        assert_eq!(spec["podSelector"]["matchLabels"]["app.kubernetes.io/instance"], "demo", "{}", yaml(&policy));
        assert_eq!(spec["policyTypes"], json!(["Ingress"]), "{}", yaml(&policy));
        let rules = spec["ingress"].as_array().expect("ingress rules");
        let port = |r: &serde_json::Value| r["ports"][0]["port"].as_i64();
        let mesh = rules.iter().find(|r| port(r) == Some(16379)).unwrap_or_else(|| panic!("no mesh rule: {}", yaml(&policy)));
        assert_eq!(
            mesh["from"],
            json!([
                {"podSelector": {"matchLabels": {"app.kubernetes.io/instance": "demo", "app.kubernetes.io/name": "keymesh"}}},
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keymesh-system"}},
                 "podSelector": {"matchLabels": {"app.kubernetes.io/name": "keymesh-operator"}}}
            ]),
            "{}",
            yaml(&policy)
        );
        let client = rules.iter().find(|r| port(r) == Some(6379)).unwrap_or_else(|| panic!("no client rule: {}", yaml(&policy)));
        assert!(client.get("from").is_none(), "no allowedClients: any source may connect: {}", yaml(&policy));
        let metrics = rules.iter().find(|r| port(r) == Some(9121)).unwrap_or_else(|| panic!("no metrics rule: {}", yaml(&policy)));
        assert!(metrics.get("from").is_none(), "{}", yaml(&policy));
        assert_eq!(rules.len(), 3, "{}", yaml(&policy));
        assert!(policy.metadata.owner_references.is_some(), "{}", yaml(&policy));
    }

    #[test]
    fn allowed_clients_limit_the_client_port() {
        let policy = build("service: {allowedClients: [{ipBlock: {cidr: 10.0.0.0/16}}, {namespaceSelector: {matchLabels: {team: web}}}]}")
            .network_policy
            .expect("on by default");
        let client = &policy.data["spec"]["ingress"][0];
        assert_eq!(client["ports"][0]["port"], 6379, "{}", yaml(&policy));
        assert_eq!(client["from"], json!([{"ipBlock": {"cidr": "10.0.0.0/16"}}, {"namespaceSelector": {"matchLabels": {"team": "web"}}}]), "{}", yaml(&policy));
    }

    #[test]
    fn without_its_namespace_the_operator_is_matched_in_every_namespace() {
        let policy = build("{}").network_policy.expect("on by default");
        assert_eq!(policy.data["spec"]["ingress"][1]["from"][1]["namespaceSelector"], json!({}), "{}", yaml(&policy));
    }

    #[test]
    fn not_built_when_disabled() {
        assert!(build("networkPolicy: {enabled: false}").network_policy.is_none());
    }
}
