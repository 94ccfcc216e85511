//! Proves the Argo CD health check for CacheClusters (`manifests/argocd/resource_customizations/
//! keymesh.io/CacheCluster/health.lua`) answers as `health_test.yaml` says, run as Argo CD runs
//! it (Lua 5.1, `obj` in, `hs` out, only Argo CD's libraries), on testdata the operator's status
//! code generated (`operator/src/status/health_testdata.rs`); that every testdata file is
//! tested; and that the `argocd-cm` snippet carries exactly this script.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use keymesh_e2e::argocd::{evaluate, health_script, health_tests, CUSTOMIZATION_DIR};
use keymesh_e2e::chart::{parse_documents, read, repo_root};

#[test]
fn health_lua_answers_every_case_of_health_test_yaml() {
    let tests = health_tests().unwrap();
    let mut failures = Vec::new();
    for test in &tests {
        let path = format!("{CUSTOMIZATION_DIR}/{}", test.input_path);
        let object: serde_json::Value = serde_yaml::from_str(&read(&path).unwrap()).unwrap_or_else(|e| panic!("{path}: {e}"));
        let got = evaluate(&health_script(), &object).unwrap_or_else(|e| panic!("{path}: {e}"));
        if got != test.expected {
            failures.push(format!("{}: expected {:?}, got {:?}", test.input_path, test.expected, got));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for status in ["Healthy", "Progressing", "Degraded", "Suspended"] {
        assert!(tests.iter().any(|t| t.expected.status == status), "no case expects {status}");
    }
}

#[test]
fn every_testdata_file_has_a_case() {
    let tests = health_tests().unwrap();
    let dir = repo_root().join(CUSTOMIZATION_DIR).join("testdata");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = format!("testdata/{}", entry.unwrap().file_name().to_string_lossy());
        assert!(tests.iter().any(|t| t.input_path == name), "{name} is not used by health_test.yaml");
    }
}

#[test]
fn a_script_error_is_reported_not_swallowed() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("health.lua");
    std::fs::write(&script, "return os.getenv('HOME')").unwrap();
    let err = evaluate(&script, &serde_json::json!({})).expect_err("os is not among Argo CD's libraries");
    assert!(err.to_string().contains("os"), "{err}");
}

#[test]
fn the_argocd_cm_snippet_carries_health_lua() {
    let snippet = parse_documents(&read("manifests/argocd/argocd-cm.yaml").unwrap(), "argocd-cm.yaml").unwrap();
    let cm = snippet.iter().find(|o| o["kind"] == "ConfigMap").expect("a ConfigMap");
    assert_eq!(cm["metadata"]["name"], "argocd-cm");
    let script = cm["data"]["resource.customizations.health.keymesh.io_CacheCluster"].as_str().expect("the CacheCluster health key");
    assert_eq!(script, std::fs::read_to_string(health_script()).unwrap(), "argocd-cm.yaml must carry health.lua verbatim");
}
