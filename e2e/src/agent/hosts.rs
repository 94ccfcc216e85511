//! The cluster's names, as each pod's `/etc/hosts` (there is no DNS server).
//!
//! - A pod with `spec.subdomain` (StatefulSet pods) is `<hostname>.<subdomain>.<ns>.svc.cluster.local`
//!   (hostname: `spec.hostname`, else the pod's name), from the moment it has an address, ready
//!   or not (the mesh resolves peers before they are ready).
//! - A headless Service is `<svc>.<ns>.svc.cluster.local`, one line per ready endpoint address
//!   (and not-ready ones with `publishNotReadyAddresses`).
//! - A ClusterIP Service is the same name for its first ready endpoint address (there is no
//!   kube-proxy, so ports are not remapped); `default/kubernetes` is its ClusterIP, where the
//!   agent forwards to the apiserver.
//!
//! Names in the pod's own namespace also get their short forms (`<svc>`, `<svc>.<ns>`,
//! `<svc>.<ns>.svc`, and `<host>.<sub>` for pods), since the `files` resolver ignores search
//! domains. Each file is rewritten in place, so the bind mounts over `/etc/hosts` see changes.

use std::io::Write;
use std::path::Path;

use k8s_openapi::api::core::v1::{Endpoints, Service};

pub const CLUSTER_DOMAIN: &str = "svc.cluster.local";

/// What the hosts files need to know about one running pod.
#[derive(Debug, Clone)]
pub struct PodName {
    pub namespace: String,
    pub name: String,
    pub hostname: Option<String>,
    pub subdomain: Option<String>,
    pub ip: String,
}

impl PodName {
    fn hostname(&self) -> &str {
        self.hostname.as_deref().unwrap_or(&self.name)
    }

    /// The pod's own fully qualified name, when it has one.
    pub fn fqdn(&self) -> Option<String> {
        self.subdomain.as_ref().map(|sub| format!("{}.{sub}.{}.{CLUSTER_DOMAIN}", self.hostname(), self.namespace))
    }
}

/// One name → address record, with the namespace it belongs to and its in-namespace short forms.
#[derive(Debug, Clone)]
pub struct Record {
    ip: String,
    namespace: String,
    fqdn: String,
    short: Vec<String>,
}

/// Every record in the cluster, pods first, then Services, in a stable order.
pub fn records(pods: &[PodName], services: &[std::sync::Arc<Service>], endpoints: &[std::sync::Arc<Endpoints>]) -> Vec<Record> {
    let mut out = Vec::new();
    let mut pods: Vec<&PodName> = pods.iter().collect();
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    for pod in pods {
        if let (Some(sub), Some(fqdn)) = (&pod.subdomain, pod.fqdn()) {
            let host = pod.hostname();
            let ns = &pod.namespace;
            let short = vec![format!("{host}.{sub}"), format!("{host}.{sub}.{ns}"), format!("{host}.{sub}.{ns}.svc")];
            out.push(Record { ip: pod.ip.clone(), namespace: ns.clone(), fqdn, short });
        }
    }
    let mut services: Vec<&Service> = services.iter().map(|s| s.as_ref()).collect();
    services.sort_by(|a, b| (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name)));
    for svc in services {
        let (Some(ns), Some(name)) = (&svc.metadata.namespace, &svc.metadata.name) else { continue };
        let spec = svc.spec.clone().unwrap_or_default();
        let fqdn = format!("{name}.{ns}.{CLUSTER_DOMAIN}");
        let short = vec![name.clone(), format!("{name}.{ns}"), format!("{name}.{ns}.svc")];
        let record = |ip: String| Record { ip, namespace: ns.clone(), fqdn: fqdn.clone(), short: short.clone() };
        if ns == "default" && name == "kubernetes" {
            out.extend(spec.cluster_ip.map(record));
            continue;
        }
        let ep = endpoints.iter().find(|e| e.metadata.namespace.as_ref() == Some(ns) && e.metadata.name.as_ref() == Some(name));
        let mut ips: Vec<String> = Vec::new();
        for subset in ep.and_then(|e| e.subsets.clone()).unwrap_or_default() {
            let not_ready = if spec.publish_not_ready_addresses == Some(true) { subset.not_ready_addresses.unwrap_or_default() } else { Vec::new() };
            for addr in subset.addresses.unwrap_or_default().into_iter().chain(not_ready) {
                if !ips.contains(&addr.ip) {
                    ips.push(addr.ip);
                }
            }
        }
        ips.sort();
        if spec.cluster_ip.as_deref() != Some("None") {
            ips.truncate(1);
        }
        out.extend(ips.into_iter().map(record));
    }
    out
}

/// The hosts file of `pod`, in the kubelet's layout followed by the cluster's records.
pub fn render(pod: &PodName, records: &[Record]) -> String {
    let mut text = String::from("# Kubernetes-managed hosts file (keymesh node agent).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
    match pod.fqdn() {
        Some(fqdn) => text.push_str(&format!("{}\t{fqdn}\t{}\n", pod.ip, pod.hostname())),
        None => text.push_str(&format!("{}\t{}\n", pod.ip, pod.hostname())),
    }
    for r in records {
        text.push_str(&r.ip);
        text.push('\t');
        text.push_str(&r.fqdn);
        if r.namespace == pod.namespace {
            for s in &r.short {
                text.push(' ');
                text.push_str(s);
            }
        }
        text.push('\n');
    }
    text
}

/// Rewrites `path` with `content` in place (same inode, so bind mounts of it see the change),
/// creating it if missing; does nothing when the content is already there.
pub fn write_in_place(path: &Path, content: &str) -> std::io::Result<()> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(content) {
        return Ok(());
    }
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(path)?;
    file.write_all(content.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ip: &str) -> PodName {
        PodName { namespace: "ns1".into(), name: name.into(), hostname: Some(name.into()), subdomain: Some("svc".into()), ip: ip.into() }
    }

    #[test]
    fn statefulset_pods_resolve_each_other_with_short_forms_in_their_namespace() {
        let pods = [pod("db-0", "10.244.1.2"), pod("db-1", "10.244.2.2")];
        let text = render(&pods[0], &records(&pods, &[], &[]));
        assert!(text.contains("10.244.1.2\tdb-0.svc.ns1.svc.cluster.local\tdb-0\n"), "{text}");
        assert!(text.contains("10.244.2.2\tdb-1.svc.ns1.svc.cluster.local db-1.svc db-1.svc.ns1 db-1.svc.ns1.svc\n"), "{text}");
        let other = PodName { namespace: "ns2".into(), ..pod("x", "10.244.3.2") };
        let text = render(&other, &records(&pods, &[], &[]));
        assert!(text.contains("10.244.2.2\tdb-1.svc.ns1.svc.cluster.local\n"), "{text}");
    }
}
