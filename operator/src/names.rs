//! Names of a cluster's children and the stable DNS names of its pods, in one place so the
//! builders, the mesh wiring and the status agree on them.

/// Ports every engine pod listens on (DESIGN.md, "Engine").
pub const CLIENT_PORT: i32 = 6379;
pub const MESH_PORT: i32 = 16379;
pub const METRICS_PORT: i32 = 9121;
/// The TLS client port when `spec.tls` is on (the plain port stays open beside it, so turning
/// TLS on or off rolls without splitting the mesh).
pub const TLS_PORT: i32 = 6380;

/// The names derived from one `CacheCluster`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNames {
    pub name: String,
    pub namespace: String,
    pub cluster_domain: String,
}

impl ClusterNames {
    pub fn new(name: &str, namespace: &str, cluster_domain: &str) -> Self {
        ClusterNames { name: name.to_string(), namespace: namespace.to_string(), cluster_domain: cluster_domain.to_string() }
    }

    /// The StatefulSet, the client Service and the PodDisruptionBudget.
    pub fn statefulset(&self) -> String {
        self.name.clone()
    }

    pub fn client_service(&self) -> String {
        self.name.clone()
    }

    pub fn headless_service(&self) -> String {
        format!("{}-headless", self.name)
    }

    /// The settings ConfigMap of one revision (`build::configmap`).
    pub fn config_map(&self, settings_hash: &str) -> String {
        format!("{}-config-{settings_hash}", self.name)
    }

    /// The prefix of every settings ConfigMap (old revisions' are collected by it).
    pub fn config_map_prefix(&self) -> String {
        format!("{}-config", self.name)
    }

    /// The node-tuning DaemonSet.
    pub fn node_tuning(&self) -> String {
        format!("{}-node-tuning", self.name)
    }

    pub fn peers_config_map(&self) -> String {
        format!("{}-peers", self.name)
    }

    /// The Secret the pods' certificate lives in (`tls.crt`, `tls.key`, `ca.crt`) when the
    /// operator or cert-manager issues it, and the cert-manager `Certificate`.
    pub fn tls_secret(&self) -> String {
        format!("{}-tls", self.name)
    }

    /// The operator's own CA for this cluster (`tls.crt`, `tls.key`).
    pub fn tls_ca_secret(&self) -> String {
        format!("{}-tls-ca", self.name)
    }

    /// Every name the pods answer to: each pod's stable name (a wildcard), the headless and the
    /// client Service, short and long.
    pub fn tls_dns_names(&self) -> Vec<String> {
        let (ns, domain) = (&self.namespace, &self.cluster_domain);
        let (headless, client) = (self.headless_service(), self.client_service());
        vec![
            self.pod_dns_wildcard(),
            format!("*.{headless}.{ns}.svc"),
            format!("{headless}.{ns}.svc.{domain}"),
            format!("{client}.{ns}.svc.{domain}"),
            format!("{client}.{ns}.svc"),
            format!("{client}.{ns}"),
            client,
            "localhost".to_string(),
        ]
    }

    /// `*.<name>-headless.<ns>.svc.<domain>`: every pod's stable name.
    pub fn pod_dns_wildcard(&self) -> String {
        format!("*.{}.{}.svc.{}", self.headless_service(), self.namespace, self.cluster_domain)
    }

    pub fn generated_secret(&self) -> String {
        format!("{}-auth", self.name)
    }

    pub fn pod(&self, ordinal: u32) -> String {
        format!("{}-{ordinal}", self.name)
    }

    /// The ordinal of one of this cluster's pods, from its name.
    pub fn ordinal_of(&self, pod: &str) -> Option<u32> {
        pod.strip_prefix(&self.name)?.strip_prefix('-')?.parse().ok()
    }

    /// `<pod>.<name>-headless.<ns>.svc.<domain>`: resolves to the pod's current IP, ready or not
    /// (the headless Service publishes not-ready addresses), so peers survive pod restarts.
    pub fn pod_dns(&self, ordinal: u32) -> String {
        format!("{}.{}.{}.svc.{}", self.pod(ordinal), self.headless_service(), self.namespace, self.cluster_domain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_names_and_dns() {
        let names = ClusterNames::new("demo", "cache", "cluster.local");
        assert_eq!(names.pod_dns(2), "demo-2.demo-headless.cache.svc.cluster.local");
        assert_eq!(names.ordinal_of("demo-12"), Some(12));
        assert_eq!(names.ordinal_of("demo-x"), None);
        assert_eq!(names.ordinal_of("demox-1"), None);
        assert_eq!(names.ordinal_of("other-1"), None);
    }
}
