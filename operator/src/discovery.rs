//! What the API server offers, asked once per reconcile with a single `GET /apis`: which
//! PodDisruptionBudget version it serves (Kubernetes 1.20 serves only `policy/v1beta1`, 1.25+
//! only `policy/v1`) and whether the ServiceMonitor CRD is installed. Whether StatefulSets
//! take a `persistentVolumeClaimRetentionPolicy` is a question of the server's version (no
//! group or resource tells), asked once per operator process (`Context`) and only when a
//! cluster wants persistence.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroupList;

use crate::build::{Capabilities, PdbVersion};

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("failed to discover the API server's groups: {0}")]
    Groups(#[source] kube::Error),
    #[error("failed to read the API server's version: {0}")]
    Version(#[source] kube::Error),
}

/// The first Kubernetes minor version whose StatefulSets honour
/// `persistentVolumeClaimRetentionPolicy` by default (the `StatefulSetAutoDeletePVC` gate is
/// alpha, off, from 1.23 and beta, on, from 1.27). On older servers the field is dropped.
pub const PVC_RETENTION_POLICY_MINOR: u32 = 27;

/// Whether the API server applies `persistentVolumeClaimRetentionPolicy`.
pub async fn pvc_retention_policy(client: &kube::Client) -> Result<bool, DiscoveryError> {
    let info = client.apiserver_version().await.map_err(DiscoveryError::Version)?;
    Ok(has_pvc_retention_policy(&info.major, &info.minor))
}

/// From `/version`'s `major` and `minor` (which some providers suffix, e.g. EKS's `27+`).
pub fn has_pvc_retention_policy(major: &str, minor: &str) -> bool {
    let number = |s: &str| s.chars().take_while(char::is_ascii_digit).collect::<String>().parse::<u32>().ok();
    match (number(major), number(minor)) {
        (Some(1), Some(minor)) => minor >= PVC_RETENTION_POLICY_MINOR,
        (Some(major), _) => major > 1,
        _ => false,
    }
}

/// Asks the API server.
pub async fn capabilities(client: &kube::Client) -> Result<Capabilities, DiscoveryError> {
    let groups = client.list_api_groups().await.map_err(DiscoveryError::Groups)?;
    Ok(capabilities_from(&groups))
}

/// Reads the capabilities from an `APIGroupList`.
pub fn capabilities_from(groups: &APIGroupList) -> Capabilities {
    let versions = |name: &str| groups.groups.iter().filter(|g| g.name == name).flat_map(|g| g.versions.iter().map(|v| v.version.as_str())).collect::<Vec<_>>();
    Capabilities {
        pdb: PdbVersion::from_versions(versions("policy").into_iter()),
        service_monitor: versions("monitoring.coreos.com").contains(&"v1"),
        cert_manager: versions("cert-manager.io").contains(&"v1"),
        pvc_retention_policy: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(json: serde_json::Value) -> APIGroupList {
        serde_json::from_value(json).expect("an APIGroupList")
    }

    #[test]
    fn kubernetes_1_20_serves_only_v1beta1_and_no_service_monitors() {
        let list = groups(serde_json::json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}]},
            {"name": "policy", "versions": [{"groupVersion": "policy/v1beta1", "version": "v1beta1"}]}
        ]}));
        assert_eq!(
            capabilities_from(&list),
            Capabilities { pdb: Some(PdbVersion::V1beta1), service_monitor: false, cert_manager: false, pvc_retention_policy: false }
        );
    }

    #[test]
    fn current_kubernetes_with_prometheus_operator() {
        let list = groups(serde_json::json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": "policy", "versions": [{"groupVersion": "policy/v1", "version": "v1"}]},
            {"name": "monitoring.coreos.com", "versions": [{"groupVersion": "monitoring.coreos.com/v1", "version": "v1"}]},
            {"name": "cert-manager.io", "versions": [{"groupVersion": "cert-manager.io/v1", "version": "v1"}]}
        ]}));
        assert_eq!(
            capabilities_from(&list),
            Capabilities { pdb: Some(PdbVersion::V1), service_monitor: true, cert_manager: true, pvc_retention_policy: false }
        );
    }

    #[test]
    fn the_claim_retention_policy_comes_with_kubernetes_1_27() {
        assert!(!has_pvc_retention_policy("1", "20"), "the local cluster's 1.20");
        assert!(!has_pvc_retention_policy("1", "26"));
        assert!(has_pvc_retention_policy("1", "27"));
        assert!(has_pvc_retention_policy("1", "30+"), "EKS suffixes its minor");
        assert!(!has_pvc_retention_policy("", ""));
    }
}
