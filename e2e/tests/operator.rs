//! The operator against a real API server (issue 4, "integration tests"; DESIGN.md testing
//! ladder, level 4): a local etcd + kube-apiserver 1.20.2 (RBAC) + controller manager +
//! scheduler; the chart installed with the real `helm`; the operator running as a process with
//! the chart's ServiceAccount token, so a missing RBAC rule fails the test; `CacheCluster`s
//! applied with `kubectl`. No node runs pods here (that is the node agent's job, issue 5), so
//! pods stay Pending: this checks the API objects, not the engines.
//!
//! Needs the cached control plane (`scripts/install-control-plane.sh`, run by
//! `scripts/install-deps.sh`) and a release build of `keymesh-operator`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use keymesh_e2e::operator_process::OperatorProcess;
use keymesh_e2e::{eventually, ControlPlane};

const OPERATOR_NS: &str = "keymesh-system";
const NS: &str = "cache";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The children of CacheCluster `name`, by kind, as JSON objects.
fn children(cp: &ControlPlane, name: &str) -> Result<Vec<serde_json::Value>, String> {
    let selector = format!("app.kubernetes.io/instance={name}");
    let list = cp.get_json(&["configmaps,secrets,services,statefulsets,poddisruptionbudgets", "-n", NS, "-l", &selector])?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

fn of_kind<'a>(objects: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

const CLUSTER: &str = r#"
apiVersion: keymesh.io/v1alpha1
kind: CacheCluster
metadata:
  name: demo
  namespace: cache
spec:
  replicas: 3
  resources:
    requests: {cpu: 100m, memory: 256Mi}
    limits: {memory: 512Mi}
  service:
    type: LoadBalancer
    annotations:
      service.beta.kubernetes.io/aws-load-balancer-type: nlb
  topology:
    zoneSpread: Required
  metrics:
    serviceMonitor:
      enabled: true
"#;

/// The Prometheus operator's ServiceMonitor CRD, reduced to what a cluster needs to serve the
/// kind (the operator creates a ServiceMonitor only where this CRD exists).
const SERVICE_MONITOR_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#;

#[test]
fn the_chart_installs_and_the_operator_reconciles_a_cachecluster_under_rbac() {
    // Proves issue 4's control-plane scenario end to end on a real API server: helm installs
    // the chart (CRD, RBAC, Deployment); the operator, running with only the chart's
    // ServiceAccount permissions, creates every child of a CacheCluster as specified with owner
    // references (a ServiceMonitor too, once its CRD exists), the StatefulSet controller creates
    // the pods, status and Events are written, a
    // spec change is reconciled, invalid specs are rejected by the schema or reported in
    // status, and deleting the CacheCluster garbage-collects its children.
    let cp = ControlPlane::start().expect("start the local control plane (run scripts/install-control-plane.sh first)");
    cp.kubectl(["create", "namespace", OPERATOR_NS]).unwrap();
    cp.kubectl(["create", "namespace", NS]).unwrap();
    let chart = repo_root().join("charts/keymesh-operator");
    cp.helm(["install", "keymesh", &chart.to_string_lossy(), "--namespace", OPERATOR_NS, "--wait=false"]).expect("helm install the chart");
    eventually("the CRD to be established", Duration::from_secs(30), || {
        let crd = cp.get_json(&["crd", "cacheclusters.keymesh.io"])?;
        let established = crd["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Established" && c["status"] == "True");
        if established {
            Ok(())
        } else {
            Err(crd["status"].to_string())
        }
    });
    cp.apply(SERVICE_MONITOR_CRD).expect("the ServiceMonitor CRD");
    eventually("the ServiceMonitor kind to be served", Duration::from_secs(30), || {
        cp.kubectl(["get", "servicemonitors", "-A"]).map(drop).map_err(|e| e.to_string())
    });
    let deployment = cp.get_json(&["deployments", "-n", OPERATOR_NS]).unwrap();
    let service_account =
        deployment["items"][0]["spec"]["template"]["spec"]["serviceAccountName"].as_str().expect("the chart's Deployment names its ServiceAccount").to_string();
    let kubeconfig = cp.service_account_kubeconfig(OPERATOR_NS, &service_account).unwrap();
    let operator = OperatorProcess::start(
        &cp,
        &kubeconfig,
        &["--leader-election-namespace", OPERATOR_NS, "--identity", "operator-under-test", "--metrics-addr", "127.0.0.1:0"],
    )
    .unwrap_or_else(|e| panic!("{e}"));

    // Create.
    cp.apply(CLUSTER).expect("kubectl apply the CacheCluster");
    let uid = cp.get_json(&["cachecluster", "demo", "-n", NS]).unwrap()["metadata"]["uid"].as_str().unwrap().to_string();
    eventually("every child of demo", Duration::from_secs(60), || {
        let objects = children(&cp, "demo")?;
        let count = |k| of_kind(&objects, k).len();
        let seen = format!(
            "configmaps {} secrets {} services {} statefulsets {} pdbs {}",
            count("ConfigMap"),
            count("Secret"),
            count("Service"),
            count("StatefulSet"),
            count("PodDisruptionBudget")
        );
        if count("ConfigMap") >= 1 && count("Secret") == 1 && count("Service") == 2 && count("StatefulSet") == 1 && count("PodDisruptionBudget") == 1 {
            Ok(())
        } else {
            Err(seen)
        }
    });
    let objects = children(&cp, "demo").unwrap();
    for object in &objects {
        let owners = object["metadata"]["ownerReferences"].as_array().cloned().unwrap_or_default();
        assert!(
            owners.iter().any(|o| o["uid"] == uid.as_str() && o["kind"] == "CacheCluster" && o["controller"] == true),
            "{} {} is not owned by the CacheCluster: {}",
            object["kind"],
            object["metadata"]["name"],
            object["metadata"]
        );
    }
    let services = of_kind(&objects, "Service");
    let headless = services.iter().find(|s| s["spec"]["clusterIP"] == "None").expect("a headless Service");
    assert_eq!(headless["spec"]["publishNotReadyAddresses"], true, "headless Service: {headless}");
    let client = services.iter().find(|s| s["spec"]["clusterIP"] != "None").expect("a client Service");
    assert_eq!(client["spec"]["type"], "LoadBalancer", "client Service: {client}");
    assert_eq!(client["metadata"]["annotations"]["service.beta.kubernetes.io/aws-load-balancer-type"], "nlb", "client Service: {client}");
    let sts = of_kind(&objects, "StatefulSet")[0];
    assert_eq!(sts["spec"]["replicas"], 3, "StatefulSet: {sts}");
    assert_eq!(sts["spec"]["updateStrategy"]["type"], "RollingUpdate", "StatefulSet: {sts}");
    assert_eq!(sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"], 0, "a new cluster's pods all come from the template: {sts}");
    assert_eq!(sts["spec"]["template"]["spec"]["readinessGates"][0]["conditionType"], "keymesh.io/serving", "StatefulSet: {sts}");
    assert_eq!(sts["spec"]["serviceName"], headless["metadata"]["name"], "StatefulSet: {sts}");
    let pod = &sts["spec"]["template"]["spec"];
    let spread = pod["topologySpreadConstraints"].as_array().cloned().unwrap_or_default();
    assert!(
        spread.iter().any(|c| c["topologyKey"] == "topology.kubernetes.io/zone" && c["whenUnsatisfiable"] == "DoNotSchedule"),
        "zoneSpread Required must be a hard zone spread: {spread:?}"
    );
    let container = &pod["containers"][0];
    assert_eq!(container["resources"]["limits"]["memory"], "512Mi", "container: {container}");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz", "container: {container}");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz", "container: {container}");
    eventually("a ServiceMonitor owned by the CacheCluster", Duration::from_secs(60), || {
        let monitors = cp.get_json(&["servicemonitors", "-n", NS])?;
        let owned = monitors["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| m["metadata"]["ownerReferences"].as_array().into_iter().flatten().any(|o| o["uid"] == uid.as_str()));
        if owned {
            Ok(())
        } else {
            Err(monitors.to_string())
        }
    });
    let pdb = of_kind(&objects, "PodDisruptionBudget")[0];
    assert_eq!(pdb["apiVersion"], "policy/v1beta1", "1.20 serves only policy/v1beta1: {pdb}");

    eventually("the StatefulSet controller to create 3 pods", Duration::from_secs(60), || {
        let pods = cp.get_json(&["pods", "-n", NS, "-l", "app.kubernetes.io/instance=demo"])?;
        let n = pods["items"].as_array().map_or(0, Vec::len);
        if n == 3 {
            Ok(())
        } else {
            Err(format!("{n} pods"))
        }
    });
    eventually("status and Events written", Duration::from_secs(60), || {
        let cc = cp.get_json(&["cachecluster", "demo", "-n", NS])?;
        let status = &cc["status"];
        let types: Vec<&str> = status["conditions"].as_array().into_iter().flatten().filter_map(|c| c["type"].as_str()).collect();
        let events = cp.get_json(&["events", "-n", NS, "--field-selector", "involvedObject.name=demo"])?;
        let n_events = events["items"].as_array().map_or(0, Vec::len);
        if status["phase"].is_string() && status["observedGeneration"] == cc["metadata"]["generation"] && types.contains(&"Ready") && n_events > 0 {
            Ok(())
        } else {
            Err(format!("status {status}, {n_events} events"))
        }
    });
    let cc = cp.get_json(&["cachecluster", "demo", "-n", NS]).unwrap();
    let ready = cc["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap().clone();
    assert_eq!(ready["status"], "False", "no pod runs, so the cluster cannot be Ready: {ready}");

    // A spec change: more replicas, other resources.
    cp.kubectl(["patch", "cachecluster", "demo", "-n", NS, "--type", "merge", "-p", r#"{"spec":{"replicas":4,"resources":{"limits":{"memory":"1Gi"}}}}"#])
        .unwrap();
    eventually("the StatefulSet to follow the spec change", Duration::from_secs(60), || {
        let sts = cp.get_json(&["statefulset", "-n", NS, "-l", "app.kubernetes.io/instance=demo"])?;
        let sts = &sts["items"][0];
        let memory = &sts["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"];
        if sts["spec"]["replicas"] == 4 && memory == "1Gi" {
            Ok(())
        } else {
            Err(format!("replicas {} memory {memory}", sts["spec"]["replicas"]))
        }
    });

    // Invalid specs: the schema rejects what it can express; the rest is reported in status.
    let zero = CLUSTER.replace("name: demo", "name: zero").replace("replicas: 3", "replicas: 0");
    let rejected = cp.apply(&zero).expect_err("replicas 0 must be rejected by the schema");
    assert!(rejected.to_string().contains("replicas"), "the rejection should name the field: {rejected}");
    let tls = CLUSTER.replace("name: demo", "name: with-tls").replace("  replicas: 3", "  replicas: 3\n  tls:\n    enabled: true\n    authClients: maybe");
    cp.apply(&tls).expect("a spec the schema accepts");
    eventually("the invalid TLS spec reported in status", Duration::from_secs(60), || {
        let cc = cp.get_json(&["cachecluster", "with-tls", "-n", NS])?;
        let text = cc["status"].to_string();
        if text.contains("spec.tls.authClients") {
            Ok(())
        } else {
            Err(text)
        }
    });
    assert!(children(&cp, "with-tls").unwrap().iter().all(|o| o["kind"] != "StatefulSet"), "an invalid spec must not create a StatefulSet");

    // Delete: the garbage collector removes every child.
    cp.kubectl(["delete", "cachecluster", "demo", "-n", NS, "--wait=false"]).unwrap();
    eventually("the children garbage-collected", Duration::from_secs(90), || {
        let left = children(&cp, "demo")?;
        if left.is_empty() {
            Ok(())
        } else {
            Err(left.iter().map(|o| format!("{} {}", o["kind"], o["metadata"]["name"])).collect::<Vec<_>>().join(", "))
        }
    });
    let log = operator.log();
    assert!(!log.to_lowercase().contains("forbidden"), "the operator hit an RBAC denial:\n{log}");
}
