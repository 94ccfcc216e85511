//! Every example YAML the repository ships is checked with the tool it targets:
//!
//! - Kubernetes objects: a server-side dry-run apply against the local 1.20.2 API server, with
//!   KeyMesh's CRD (from `manifests/keymesh-operator.yaml`, applied for real) and the pinned CRDs
//!   of Flux, Argo CD and the Prometheus operator (`e2e/fixtures/`) installed; and since a 1.20
//!   server prunes unknown fields of custom resources instead of refusing them, every field of
//!   the example must come back in the dry-run's answer (a typo is a failure, not a silent drop);
//! - the eksctl `ClusterConfig`: eksctl v0.230.0's JSON schema (Debian's python3-jsonschema),
//!   and its nodes' `NodeConfig` must allow `net.core.somaxconn`;
//! - Helm values files: `helm template` with the chart's values.schema.json.
//!
//! A YAML file under the example directories that none of these covers fails the test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use keymesh_e2e::chart::{parse_documents, repo_root, run, OfflineHelm, CHART_DIR};
use keymesh_e2e::{eventually, ControlPlane};
use serde_json::Value;

/// Where the examples live (recursively), relative to the repository root.
const EXAMPLE_DIRS: [&str; 3] = ["manifests/examples", "manifests/flux", "manifests/argocd"];
/// Not examples: the Argo CD health check's own test data (checked by argocd_health.rs).
const NOT_EXAMPLES: &str = "manifests/argocd/resource_customizations";
const PINNED_CRDS: [(&str, &str); 5] = [
    ("flux-source-controller-v1.9.1-ocirepositories.yaml", "ocirepositories.source.toolkit.fluxcd.io"),
    ("flux-helm-controller-v1.6.3-helmreleases.yaml", "helmreleases.helm.toolkit.fluxcd.io"),
    ("prometheus-operator-v0.73.2-servicemonitors.yaml", "servicemonitors.monitoring.coreos.com"),
    ("prometheus-operator-v0.73.2-prometheusrules.yaml", "prometheusrules.monitoring.coreos.com"),
    ("argo-cd-v3.5.1-applications.yaml", "applications.argoproj.io"),
];
const EKSCTL_SCHEMA: &str = "e2e/fixtures/schemas/eksctl-v0.230.0-clusterconfig.schema.json";
/// The namespace an example without one is applied in.
const DEFAULT_NS: &str = "cache";

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.starts_with(repo_root().join(NOT_EXAMPLES)) {
            continue;
        }
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

/// Checks a ClusterConfig against eksctl's schema; the schema's error messages, if any.
fn eksctl_schema_errors(file: &Path) -> Result<(), String> {
    let check = r#"
import json, sys, yaml, jsonschema
schema = json.load(open(sys.argv[1]))
doc = yaml.safe_load(open(sys.argv[2]))
errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=lambda e: list(map(str, e.path)))
for e in errors:
    print("/".join(map(str, e.path)) + ": " + e.message)
sys.exit(1 if errors else 0)
"#;
    // Debian's python3 with Debian's python3-jsonschema (scripts/install-deps.sh), not whatever
    // python3 comes first on the PATH.
    let schema = repo_root().join(EKSCTL_SCHEMA);
    run(Command::new("/usr/bin/python3"), ["-c", check, &schema.display().to_string(), &file.display().to_string()]).map(drop).map_err(|e| e.to_string())
}

fn check_eksctl(file: &Path, doc: &Value) {
    eksctl_schema_errors(file).unwrap_or_else(|e| panic!("{} does not match eksctl's schema: {e}", file.display()));
    let groups = doc["managedNodeGroups"].as_array().expect("managed node groups");
    let zones: Vec<&Value> = groups.iter().map(|g| &g["availabilityZones"]).collect();
    assert_eq!(groups.len(), 3, "one node group per zone");
    assert!(zones.iter().all(|z| z.as_array().is_some_and(|z| z.len() == 1)), "each node group in one zone: {zones:?}");
    for group in groups {
        let node_config: Value = serde_yaml::from_str(group["overrideBootstrapCommand"].as_str().expect("a NodeConfig")).unwrap();
        assert_eq!(node_config["kind"], "NodeConfig", "{}", group["name"]);
        let sysctls = &node_config["spec"]["kubelet"]["config"]["allowedUnsafeSysctls"];
        assert!(sysctls.as_array().is_some_and(|s| s.iter().any(|v| v == "net.core.somaxconn")), "{}: {sysctls}", group["name"]);
    }
}

/// Server-side dry-run of one object; every field of it must come back.
fn dry_run(cp: &ControlPlane, file: &Path, object: &Value) -> Result<(), String> {
    let path = cp.dir().join("example.json");
    std::fs::write(&path, serde_json::to_vec(object).unwrap()).unwrap();
    let what = format!("{} {} in {}", object["kind"], object["metadata"]["name"], file.display());
    let mut args = vec!["apply", "--server-side", "--dry-run=server", "--field-manager=examples", "-o", "json", "-f"];
    let path = path.display().to_string();
    args.push(&path);
    if object["metadata"]["namespace"].is_null() {
        args.extend(["-n", DEFAULT_NS]);
    }
    let answer = cp.kubectl(args).map_err(|e| format!("{what} is refused: {e}"))?;
    let answer: Value = serde_json::from_str(&answer).map_err(|e| format!("{what}: {e}"))?;
    for leaf in leaves(object) {
        // Secrets' stringData comes back as data.
        if leaf[0] == "stringData" {
            continue;
        }
        if leaf.iter().try_fold(&answer, |v, k| v.get(k)).is_none() {
            return Err(format!("{what}: the API server dropped {} (a field its schema does not know)", leaf.join(".")));
        }
    }
    Ok(())
}

/// The key paths to every leaf of an object (keys may hold dots: labels, annotations).
fn leaves(value: &Value) -> Vec<Vec<String>> {
    match value {
        Value::Object(map) if !map.is_empty() => map
            .iter()
            .flat_map(|(k, v)| {
                leaves(v).into_iter().map(move |mut path| {
                    path.insert(0, k.clone());
                    path
                })
            })
            .collect(),
        _ => vec![Vec::new()],
    }
}

fn wait_established(cp: &ControlPlane, crd: &str) {
    eventually(&format!("CRD {crd} established"), Duration::from_secs(30), || {
        let out = cp.kubectl(["get", "crd", crd, "-o", "jsonpath={.status.conditions[?(@.type==\"Established\")].status}"]).map_err(|e| e.to_string())?;
        if out == "True" {
            Ok(())
        } else {
            Err(out)
        }
    });
}

#[test]
fn every_example_yaml_is_valid_for_the_tool_it_targets() {
    let cp = ControlPlane::start().expect("start the local control plane (scripts/install-deps.sh)");
    // The plain manifest, for real: CRD, RBAC, operator Deployment, on 1.20.
    let plain = repo_root().join("manifests/keymesh-operator.yaml");
    cp.kubectl(["apply", "--server-side", "-f", &plain.display().to_string()]).expect("manifests/keymesh-operator.yaml applies");
    for (file, _) in PINNED_CRDS {
        let path = repo_root().join("e2e/fixtures/crds").join(file);
        cp.kubectl(["create", "--validate=false", "-f", &path.display().to_string()]).unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    wait_established(&cp, "cacheclusters.keymesh.io");
    for (_, crd) in PINNED_CRDS {
        wait_established(&cp, crd);
    }
    for ns in [DEFAULT_NS, "argocd", "flux-system"] {
        cp.kubectl(["create", "namespace", ns]).unwrap();
    }

    let helm = OfflineHelm::new().unwrap();
    let mut files = Vec::new();
    for dir in EXAMPLE_DIRS {
        yaml_files(&repo_root().join(dir), &mut files);
    }
    files.sort();
    let mut checked = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let docs = parse_documents(&text, &file.display().to_string()).unwrap();
        if docs.iter().all(|d| d.get("kind").is_none()) {
            // A Helm values file.
            helm.run(["template", "keymesh-operator", CHART_DIR, "-f", &file.display().to_string()])
                .unwrap_or_else(|e| panic!("{} does not pass the chart's values schema: {e}", file.display()));
        } else {
            for doc in &docs {
                match (doc["apiVersion"].as_str(), doc["kind"].as_str()) {
                    (Some("eksctl.io/v1alpha5"), Some("ClusterConfig")) => check_eksctl(file, doc),
                    (Some(_), Some(_)) => dry_run(&cp, file, doc).unwrap_or_else(|e| panic!("{e}")),
                    _ => panic!("{}: a document without apiVersion and kind", file.display()),
                }
            }
        }
        checked.push(file.strip_prefix(repo_root()).unwrap().display().to_string());
    }
    eprintln!("checked {} example files: {}", checked.len(), checked.join(", "));
    // The check can fail: a misspelt field, pruned by the server, is caught.
    let typo = serde_json::json!({"apiVersion": "keymesh.io/v1alpha1", "kind": "CacheCluster", "metadata": {"name": "typo"}, "spec": {"replica": 3}});
    let err = dry_run(&cp, Path::new("typo.yaml"), &typo).expect_err("spec.replica is not a field");
    assert!(err.contains("replica"), "{err}");
    for expected in ["manifests/examples/eks/cluster.yaml", "manifests/flux/keymesh-operator.yaml", "manifests/argocd/application.yaml"] {
        assert!(checked.iter().any(|c| c == expected), "{expected} was not checked");
    }
}

#[test]
fn the_checks_can_fail() {
    // A typo in a ClusterConfig fails the schema check.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("cluster.yaml");
    std::fs::write(&bad, "apiVersion: eksctl.io/v1alpha5\nkind: ClusterConfig\nmetadata: {name: x, region: eu-west-1}\nmanagedNodeGroup: []\n").unwrap();
    let err = eksctl_schema_errors(&bad).expect_err("managedNodeGroup is not a ClusterConfig field");
    assert!(err.contains("managedNodeGroup"), "{err}");
    // A values file with a typo fails the chart's schema.
    let values = dir.path().join("values.yaml");
    std::fs::write(&values, "replicaCont: 2\n").unwrap();
    let err = OfflineHelm::new().unwrap().run(["template", "x", CHART_DIR, "-f", &values.display().to_string()]).expect_err("a typo");
    assert!(err.to_string().contains("replicaCont"), "{err}");
}
