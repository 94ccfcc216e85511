//! The chart as a user gets it, on the local cluster whose pods really run: `helm package`,
//! `helm push` to a real OCI registry on loopback (Debian's `docker-registry`), then the local
//! cluster installs the operator with `helm install oci://...`; a CacheCluster is applied and
//! followed until Ready, measuring install-to-Ready. On the running cluster:
//!
//! - Argo CD's health check (`health.lua`) on the live object at every poll: Progressing while
//!   it is created, then Healthy, never Degraded;
//! - every engine pod satisfies the Pod Security Standards' `restricted` profile and has a
//!   read-only root filesystem; the CacheCluster's NetworkPolicy exists, owned by it;
//! - every metric name the chart's dashboard and alerts use is in a live `/metrics` scrape of an
//!   engine or of the leading operator.
//!
//! Root only (network namespaces; skipped otherwise); one cluster at a time (the lock file of
//! `cluster_e2e.rs`); needs `scripts/install-deps.sh` and the release builds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use keymesh_e2e::argocd::{evaluate, health_script};
use keymesh_e2e::chart::{repo_root, used_metric_names, OfflineHelm, CHART_DIR};
use keymesh_e2e::local_cluster::cache::{pod_selector, ready};
use keymesh_e2e::local_cluster::{LocalCluster, Options, EXAMPLE, EXAMPLE_NAME, OPERATOR_NAMESPACE, RELEASE, VERSION};
use keymesh_e2e::pod_security::{hardening_violations, restricted_violations};
use keymesh_e2e::promql::exposed_names;
use keymesh_e2e::registry::OciRegistry;
use keymesh_e2e::require_netns;
use serde_json::Value;

const NS: &str = "default";
const SETTLE: Duration = Duration::from_secs(120);

/// The machine-wide lock of the cluster tests (see cluster_e2e.rs).
fn serial() -> File {
    let file = File::create(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("keymesh-cluster-e2e.lock")).expect("create the lock file");
    file.lock().expect("lock the lock file");
    file
}

/// `GET path` on `ip:port` from inside pod `namespace/pod`'s network namespace; the body.
fn http_get(cluster: &LocalCluster, namespace: &str, pod: &str, port: u16, path: &str) -> Result<String, String> {
    let ip = cluster.pod_ip(namespace, pod)?;
    let timeout = Duration::from_secs(5);
    let mut stream = cluster.agent().connect(namespace, pod, SocketAddr::from((ip, port)), timeout).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes()).map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(|e| e.to_string())?;
    let (head, body) = response.split_once("\r\n\r\n").ok_or_else(|| format!("no HTTP answer from {pod}:{port}{path}: {response:?}"))?;
    if head.split_whitespace().nth(1) == Some("200") {
        Ok(body.to_owned())
    } else {
        Err(format!("{pod}:{port}{path}: {head}"))
    }
}

/// Packages the chart and pushes it; the `oci://` reference to install from.
fn publish(registry: &OciRegistry) -> String {
    let helm = OfflineHelm::new().unwrap();
    let dist = tempfile::tempdir().unwrap();
    let out = helm.run(["package", CHART_DIR, "--destination", &dist.path().display().to_string()]).expect("helm package");
    let package = dist.path().join(format!("keymesh-operator-{VERSION}.tgz"));
    assert!(package.is_file(), "helm package wrote no {}: {out}", package.display());
    let repository = format!("oci://{}/charts", registry.host());
    let pushed = helm.run(["push", &package.display().to_string(), &repository, "--plain-http"]).expect("helm push");
    eprintln!("helm push: {}", pushed.trim());
    let (status, tags) = registry.get("/v2/charts/keymesh-operator/tags/list").expect("the registry answers");
    assert_eq!(status, 200, "{tags}");
    let tags: Value = serde_json::from_str(&tags).unwrap();
    assert_eq!(tags["tags"], serde_json::json!([VERSION]), "the registry holds the chart at its version");
    let reference = format!("{repository}/keymesh-operator");
    let shown = helm.run(["show", "chart", &reference, "--version", VERSION, "--plain-http"]).expect("helm show chart from the registry");
    assert!(shown.contains(&format!("appVersion: {VERSION}")), "{shown}");
    reference
}

#[test]
fn the_chart_from_an_oci_registry_installs_a_cluster_that_passes_every_day_2_check() {
    require_netns!();
    let _serial = serial();
    let registry = OciRegistry::start().unwrap_or_else(|e| panic!("{e}"));
    let reference = publish(&registry);

    let mut options = Options::release_build();
    options.chart_ref = Some(reference.clone());
    options.helm_args = ["--version", VERSION, "--plain-http"].iter().map(|s| s.to_string()).collect();
    let cluster = LocalCluster::start(options).unwrap_or_else(|e| panic!("local cluster with the chart from {reference}: {e}"));
    let install = cluster.phases().last().map(|p| p.took).expect("the install phase");
    let release = cluster.control_plane().helm(["list", "-n", OPERATOR_NAMESPACE, "-o", "json"]).unwrap();
    assert!(release.contains(&format!("\"chart\":\"keymesh-operator-{VERSION}\"")), "{release}");

    // Apply the example and follow it, judging it as Argo CD would at every poll.
    let applied = Instant::now();
    cluster.control_plane().kubectl(["apply", "-n", NS, "-f", &repo_root().join(EXAMPLE).display().to_string()]).unwrap();
    let mut seen: Vec<String> = Vec::new();
    let object = cluster
        .wait_for("the example CacheCluster to be Ready", SETTLE, || {
            let object = cluster.get_json(&["cachecluster", EXAMPLE_NAME, "-n", NS])?;
            let health = evaluate(&health_script(), &object).map_err(|e| e.to_string())?;
            let line = format!("{}: {}", health.status, health.message);
            if seen.last() != Some(&line) {
                eprintln!("argo health after {:.1?}: {line}", applied.elapsed());
                seen.push(line);
            }
            ready(&object).map(|()| object)
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let to_ready = applied.elapsed();
    let health = evaluate(&health_script(), &object).unwrap();
    assert_eq!(health.status, "Healthy", "a Ready cluster is Healthy: {health:?}");
    assert!(seen.iter().any(|s| s.starts_with("Progressing")), "the cluster was Progressing while created: {seen:?}");
    assert!(!seen.iter().any(|s| s.starts_with("Degraded")), "a cluster being created is never Degraded: {seen:?}");
    eprintln!(
        "install-to-Ready from {reference}: helm install until an operator pod leads {install:.1?}, CacheCluster applied until Ready {to_ready:.1?}, {:.1?} in all",
        install + to_ready
    );

    // Pod security of every engine pod, as the API server holds them.
    let pods = cluster.get_json(&["pods", "-n", NS, "-l", &pod_selector(EXAMPLE_NAME)]).unwrap();
    let pods = pods["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().unwrap();
        assert_eq!(restricted_violations(&pod["spec"]), Vec::<String>::new(), "{name} breaks the restricted profile");
        assert_eq!(hardening_violations(&pod["spec"]), Vec::<String>::new(), "{name}");
    }
    let policy = cluster.get_json(&["networkpolicy", EXAMPLE_NAME, "-n", NS]).expect("the CacheCluster's NetworkPolicy");
    assert_eq!(policy["metadata"]["ownerReferences"][0]["kind"], "CacheCluster", "{policy}");
    assert_eq!(
        policy["spec"]["ingress"][1]["from"][1]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"], OPERATOR_NAMESPACE,
        "the operator's pods know their namespace: {policy}"
    );

    // Live scrapes: an engine, and the operator replica that leads.
    let engine = http_get(&cluster, NS, &format!("{EXAMPLE_NAME}-0"), 9121, "/metrics").unwrap();
    let lease = cluster.get_json(&["lease", "-n", OPERATOR_NAMESPACE]).unwrap();
    let leader =
        lease["items"].as_array().unwrap().iter().find_map(|l| l["spec"]["holderIdentity"].as_str().filter(|h| !h.is_empty())).expect("a leader").to_owned();
    let operator = http_get(&cluster, OPERATOR_NAMESPACE, &leader, 8080, "/metrics").unwrap();
    assert!(
        operator.contains(&format!("keymesh_operator_cluster_phase{{cachecluster=\"{EXAMPLE_NAME}\",namespace=\"{NS}\",phase=\"Running\"}} 1")),
        "{operator}"
    );
    let exposed: BTreeSet<String> = exposed_names(&engine).into_iter().chain(exposed_names(&operator)).collect();
    let used = used_metric_names().unwrap();
    let missing: Vec<&String> = used.iter().filter(|m| !exposed.contains(*m)).collect();
    assert!(missing.is_empty(), "the dashboard or the alerts use metrics no live scrape has: {missing:?}\nexposed: {exposed:?}");
    eprintln!("{} metric names of the dashboard and alerts all found in live scrapes of {EXAMPLE_NAME}-0 and {leader} ({RELEASE})", used.len());
    drop(registry);
}
