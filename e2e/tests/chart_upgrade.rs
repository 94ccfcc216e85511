//! The chart on a real Kubernetes 1.20.2 API server (the local control plane; no node runs pods
//! here, so the operator runs as a process of the test with the chart's ServiceAccount token):
//!
//! - release N installed, then upgraded with `helm upgrade` to a chart whose CRD has one more
//!   field: the API server prunes the field before and keeps it after; `helm uninstall` leaves
//!   the CRD and the CacheClusters;
//! - bad values fail `helm install` with the schema's message and leave no release;
//! - with `watchNamespace` the operator, under exactly the chart's RBAC (a Role in that
//!   namespace), reconciles a CacheCluster there (NetworkPolicy included, engine pods that pass
//!   the `restricted` profile) and may not read another namespace; the PrometheusRule and the
//!   operator's ServiceMonitor appear because their CRDs (pinned, `e2e/fixtures/`) exist.
//!
//! Needs the cached control plane and tools (`scripts/install-deps.sh`) and a release build of
//! `keymesh-operator`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use keymesh_e2e::chart::{repo_root, CHART_DIR};
use keymesh_e2e::operator_process::OperatorProcess;
use keymesh_e2e::pod_security::{hardening_violations, restricted_violations};
use keymesh_e2e::{eventually, ControlPlane};
use serde_json::Value;

const OPERATOR_NS: &str = "keymesh-system";
const RELEASE: &str = "keymesh-operator";
const CRD: &str = "cacheclusters.keymesh.io";
const NEW_FIELD: &str = "aFieldOfTheNextRelease";

fn chart() -> String {
    repo_root().join(CHART_DIR).display().to_string()
}

fn wait_established(cp: &ControlPlane, crd: &str) {
    eventually(&format!("CRD {crd} established"), Duration::from_secs(30), || {
        let crd = cp.get_json(&["crd", crd])?;
        let established = crd["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Established" && c["status"] == "True");
        if established {
            Ok(())
        } else {
            Err(crd["status"].to_string())
        }
    });
}

/// A CacheCluster manifest, with the next release's field when `with_new_field`.
fn cache(name: &str, with_new_field: bool) -> String {
    let extra = if with_new_field { format!("\n  {NEW_FIELD}: kept") } else { String::new() };
    format!("apiVersion: keymesh.io/v1alpha1\nkind: CacheCluster\nmetadata:\n  name: {name}\n  namespace: cache\nspec:\n  replicas: 3{extra}\n")
}

/// `kubectl apply --server-side` of `manifest`. The API server's handling is what these steps
/// check (it prunes a field its CRD does not know), so kubectl's own check is off: kubectl
/// validates against the server's OpenAPI document, which takes up a new CRD's schema some
/// time after the CRD is established, so the release-N apply of the unknown field was refused
/// by kubectl or not depending on timing.
fn apply_server_side(cp: &ControlPlane, manifest: &str) -> Result<String, String> {
    let file = cp.dir().join("apply.yaml");
    std::fs::write(&file, manifest).unwrap();
    cp.kubectl(["apply", "--server-side", "--validate=false", "--field-manager=test", "-f", &file.display().to_string()]).map_err(|e| e.to_string())
}

/// A copy of the chart as the next release: version bumped, one more field in the CRD's spec.
fn next_release(dir: &Path) -> String {
    let copy = dir.join("keymesh-operator");
    let status = std::process::Command::new("cp").args(["-r", &chart(), &copy.display().to_string()]).status().unwrap();
    assert!(status.success());
    let template = copy.join("templates/crd-cachecluster.yaml");
    let text = std::fs::read_to_string(&template).unwrap();
    let spec_at = text.find("\n          spec:\n").expect("the schema's spec");
    let props_at = text[spec_at..].find("\n            properties:\n").expect("the spec's properties") + spec_at + "\n            properties:\n".len();
    let field = format!("              {NEW_FIELD}:\n                description: A field only the next release knows.\n                type: string\n");
    std::fs::write(&template, format!("{}{field}{}", &text[..props_at], &text[props_at..])).unwrap();
    let chart_yaml = copy.join("Chart.yaml");
    let text = std::fs::read_to_string(&chart_yaml).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    std::fs::write(&chart_yaml, text.replace(&format!("version: {version}"), &format!("version: {version}-next.1"))).unwrap();
    copy.display().to_string()
}

#[test]
fn helm_upgrade_upgrades_the_crd_and_uninstall_keeps_it_and_the_caches() {
    let cp = ControlPlane::start().expect("start the local control plane (scripts/install-deps.sh)");
    // Release N.
    cp.helm(["install", RELEASE, &chart(), "--namespace", OPERATOR_NS, "--create-namespace", "--wait=false"]).expect("helm install release N");
    wait_established(&cp, CRD);
    cp.kubectl(["create", "namespace", "cache"]).unwrap();
    apply_server_side(&cp, &cache("before", false)).expect("a CacheCluster of release N");
    // Release N's CRD does not know the field: the API server prunes it (silently, as the
    // structural schema of a CRD demands).
    apply_server_side(&cp, &cache("early", true)).expect("a CacheCluster with the next release's field");
    let early = cp.get_json(&["cachecluster", "early", "-n", "cache"]).unwrap();
    assert!(early["spec"].get(NEW_FIELD).is_none(), "release N's CRD must prune the field: {}", early["spec"]);
    let plain = cp.get_json(&["crd", CRD]).unwrap();
    assert!(plain["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].get(NEW_FIELD).is_none());
    // No monitoring.coreos.com here: the chart rendered neither PrometheusRule nor ServiceMonitor.
    let manifest = cp.helm(["get", "manifest", RELEASE, "--namespace", OPERATOR_NS]).unwrap();
    assert!(!manifest.contains("kind: PrometheusRule") && !manifest.contains("kind: ServiceMonitor"), "{manifest}");
    assert!(manifest.contains("kind: CustomResourceDefinition"), "the CRD is part of the release");

    // Release N+1, with one more field in the CRD.
    let dir = tempfile::tempdir().unwrap();
    let next = next_release(dir.path());
    let out = cp.helm(["upgrade", RELEASE, &next, "--namespace", OPERATOR_NS, "--wait=false"]).expect("helm upgrade to N+1");
    eprintln!("{out}");
    for name in ["early", "after"] {
        eventually(&format!("the upgraded CRD to keep the new field of {name}"), Duration::from_secs(30), || {
            apply_server_side(&cp, &cache(name, true))?;
            let object = cp.get_json(&["cachecluster", name, "-n", "cache"])?;
            if object["spec"][NEW_FIELD] == "kept" {
                Ok(())
            } else {
                Err(format!("spec: {}", object["spec"]))
            }
        });
    }
    let history = cp.helm(["history", RELEASE, "--namespace", OPERATOR_NS]).unwrap();
    assert_eq!(history.lines().filter(|l| l.contains("keymesh-operator-")).count(), 2, "{history}");

    // Uninstall: the release goes, the CRD and every CacheCluster stay.
    cp.helm(["uninstall", RELEASE, "--namespace", OPERATOR_NS]).expect("helm uninstall");
    eventually("the operator's Deployment to be gone", Duration::from_secs(30), || {
        let deployments = cp.get_json(&["deployments", "-n", OPERATOR_NS])?;
        if deployments["items"].as_array().is_some_and(Vec::is_empty) {
            Ok(())
        } else {
            Err("still there".into())
        }
    });
    let crd = cp.get_json(&["crd", CRD]).expect("the CRD survives helm uninstall");
    assert!(crd["metadata"]["deletionTimestamp"].is_null(), "{}", crd["metadata"]);
    let caches = cp.get_json(&["cacheclusters", "-n", "cache"]).unwrap();
    let names: Vec<&str> = caches["items"].as_array().unwrap().iter().filter_map(|c| c["metadata"]["name"].as_str()).collect();
    assert_eq!(names, ["after", "before", "early"], "every CacheCluster survives helm uninstall");
}

#[test]
fn bad_values_fail_helm_install_and_leave_no_release() {
    let cp = ControlPlane::start().expect("start the local control plane (scripts/install-deps.sh)");
    let err = cp
        .helm([
            "install",
            RELEASE,
            &chart(),
            "--namespace",
            OPERATOR_NS,
            "--create-namespace",
            "--set",
            "replicaCount=0",
            "--set",
            "image.pullPolicy=Sometimes",
        ])
        .expect_err("the schema rejects these values");
    let message = err.to_string();
    assert!(message.contains("values don't meet the specifications of the schema"), "{message}");
    assert!(message.contains("/replicaCount") && message.contains("/image/pullPolicy"), "both values named: {message}");
    let releases = cp.helm(["list", "--all-namespaces", "-q"]).unwrap();
    assert!(releases.trim().is_empty(), "no release: {releases}");
    assert!(cp.get_json(&["crd", CRD]).is_err(), "nothing was installed");
}

fn can_i(cp: &ControlPlane, user: &str, verb: &str, resource: &str, namespace: &str) -> bool {
    cp.kubectl(["auth", "can-i", verb, resource, "-n", namespace, &format!("--as={user}")]).is_ok_and(|out| out.trim() == "yes")
}

#[test]
fn a_namespaced_operator_reconciles_with_a_role_only() {
    let cp = ControlPlane::start().expect("start the local control plane (scripts/install-deps.sh)");
    for crd in ["prometheus-operator-v0.73.2-servicemonitors.yaml", "prometheus-operator-v0.73.2-prometheusrules.yaml"] {
        let path = repo_root().join("e2e/fixtures/crds").join(crd);
        cp.kubectl(["create", "--validate=false", "-f", &path.display().to_string()]).unwrap();
    }
    wait_established(&cp, "servicemonitors.monitoring.coreos.com");
    wait_established(&cp, "prometheusrules.monitoring.coreos.com");
    cp.kubectl(["create", "namespace", "cache"]).unwrap();
    cp.kubectl(["create", "namespace", "other"]).unwrap();
    cp.helm(["install", RELEASE, &chart(), "--namespace", OPERATOR_NS, "--create-namespace", "--wait=false", "--set", "watchNamespace=cache"])
        .expect("helm install in watchNamespace mode");
    wait_established(&cp, CRD);
    // With the Prometheus operator's API present, the chart rendered its monitoring objects.
    cp.kubectl(["get", "prometheusrule", RELEASE, "-n", OPERATOR_NS]).expect("the PrometheusRule");
    cp.kubectl(["get", "servicemonitor", RELEASE, "-n", OPERATOR_NS]).expect("the operator's ServiceMonitor");

    let account = format!("system:serviceaccount:{OPERATOR_NS}:{RELEASE}");
    assert!(can_i(&cp, &account, "list", "secrets", "cache"), "the Role grants the watched namespace");
    assert!(!can_i(&cp, &account, "list", "secrets", "other"), "no access outside the watched namespace");
    assert!(!can_i(&cp, &account, "list", "secrets", OPERATOR_NS), "no access to its own namespace's secrets");
    assert!(can_i(&cp, &account, "get", "nodes", "cache"), "nodes are readable (rbac.readNodes)");
    assert!(!can_i(&cp, &account, "delete", "nodes", "cache"));

    let kubeconfig = cp.service_account_kubeconfig(OPERATOR_NS, RELEASE).unwrap();
    let operator = OperatorProcess::start(
        &cp,
        &kubeconfig,
        &[
            "--namespace",
            "cache",
            "--leader-election-namespace",
            OPERATOR_NS,
            "--operator-namespace",
            OPERATOR_NS,
            "--identity",
            "test",
            "--metrics-addr",
            "127.0.0.1:0",
        ],
    )
    .unwrap();
    cp.apply("apiVersion: keymesh.io/v1alpha1\nkind: CacheCluster\nmetadata:\n  name: demo\n  namespace: cache\nspec:\n  replicas: 3\n").unwrap();
    cp.apply("apiVersion: keymesh.io/v1alpha1\nkind: CacheCluster\nmetadata:\n  name: ignored\n  namespace: other\nspec:\n  replicas: 1\n").unwrap();
    let policy = eventually("the NetworkPolicy of demo", Duration::from_secs(60), || cp.get_json(&["networkpolicy", "demo", "-n", "cache"]));
    let mesh_rule = policy["spec"]["ingress"].as_array().unwrap().iter().find(|r| r["ports"][0]["port"] == 16379).cloned().expect("a mesh rule");
    assert_eq!(mesh_rule["from"][1]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"], OPERATOR_NS, "{policy}");
    let pods: Vec<Value> = eventually("the StatefulSet's 3 pods", Duration::from_secs(60), || {
        let pods = cp.get_json(&["pods", "-n", "cache", "-l", "app.kubernetes.io/instance=demo"])?;
        let items = pods["items"].as_array().cloned().unwrap_or_default();
        if items.len() == 3 {
            Ok(items)
        } else {
            Err(format!("{} pods", items.len()))
        }
    });
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().unwrap();
        assert_eq!(restricted_violations(&pod["spec"]), Vec::<String>::new(), "{name} breaks the restricted profile");
        assert_eq!(hardening_violations(&pod["spec"]), Vec::<String>::new(), "{name}");
    }
    eventually("demo's status written", Duration::from_secs(60), || {
        let cc = cp.get_json(&["cachecluster", "demo", "-n", "cache"])?;
        if cc["status"]["observedGeneration"] == 1 {
            Ok(())
        } else {
            Err(cc["status"].to_string())
        }
    });
    let ignored = cp.get_json(&["cachecluster", "ignored", "-n", "other"]).unwrap();
    assert!(ignored["status"].is_null(), "a CacheCluster outside watchNamespace is not touched: {}", ignored["status"]);
    let log = operator.log();
    assert!(!log.to_lowercase().contains("forbidden"), "the operator hit an RBAC denial:\n{log}");
}
