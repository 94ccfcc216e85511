//! Proves the committed CRD files (`crds/` and the Helm chart's template) are exactly what the
//! Rust types generate, so the API server validates what the operator reads.

use std::path::Path;

use keymesh_operator::crd::{crd_yaml, generated_files};

#[test]
fn committed_crds_match_the_rust_types() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (path, generated) in generated_files().expect("the CRD serializes") {
        let committed = std::fs::read_to_string(root.join(path)).unwrap_or_default();
        assert!(
            committed == generated,
            "{path} differs from the CRD generated from operator/src/api; regenerate with \
             `cargo run -p keymesh-operator --bin crdgen` from the repository root"
        );
    }
}

#[test]
fn the_crd_has_the_names_columns_and_status_the_design_asks_for() {
    let generated = crd_yaml().expect("the CRD serializes");
    let crd: serde_yaml::Value = serde_yaml::from_str(&generated).expect("the CRD is YAML");
    let spec = &crd["spec"];
    assert_eq!(spec["group"], "keymesh.io", "{generated}");
    assert_eq!(spec["scope"], "Namespaced", "{generated}");
    assert_eq!(spec["names"]["shortNames"][0], "cache", "{generated}");
    let version = &spec["versions"][0];
    assert_eq!(version["name"], "v1alpha1", "{generated}");
    assert!(version["subresources"]["status"].is_mapping(), "no status subresource: {generated}");
    let columns = version["additionalPrinterColumns"].as_sequence().expect("columns");
    let default: Vec<&str> = columns.iter().filter(|c| c["priority"].as_i64().unwrap_or(0) == 0).filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(default, ["Ready", "Replicas", "Version", "Phase", "Age"], "{generated}");
    let wide: Vec<&str> = columns.iter().filter(|c| c["priority"].as_i64() == Some(1)).filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(wide, ["Target", "Upgrade"], "kubectl get -o wide shows the upgrade: {generated}");
    let replicas = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["replicas"];
    assert_eq!(replicas["minimum"].as_f64(), Some(1.0), "{generated}");
    assert_eq!(replicas["default"].as_i64(), Some(3), "{generated}");
}

/// Kubernetes 1.20 rejects a CRD whose `enum` lists `null`, and needs every schema structural.
#[test]
fn the_schema_is_acceptable_to_kubernetes_1_20() {
    fn walk(value: &serde_yaml::Value, path: &str, problems: &mut Vec<String>) {
        match value {
            serde_yaml::Value::Mapping(map) => {
                for (key, child) in map {
                    let key = key.as_str().unwrap_or("?");
                    if key == "enum" && child.as_sequence().is_some_and(|s| s.iter().any(serde_yaml::Value::is_null)) {
                        problems.push(format!("{path}.enum lists null"));
                    }
                    if ["anyOf", "oneOf", "allOf", "$ref"].contains(&key) && !path.contains("x-kubernetes") {
                        let structural = child.as_sequence().is_some_and(|s| s.iter().all(|b| b.get("type").is_none() && b.get("properties").is_none()));
                        if key == "$ref" || !structural {
                            problems.push(format!("{path}.{key} is not structural"));
                        }
                    }
                    walk(child, &format!("{path}.{key}"), problems);
                }
            }
            serde_yaml::Value::Sequence(items) => items.iter().enumerate().for_each(|(i, item)| walk(item, &format!("{path}[{i}]"), problems)),
            _ => {}
        }
    }
    let generated = crd_yaml().expect("the CRD serializes");
    let crd: serde_yaml::Value = serde_yaml::from_str(&generated).expect("the CRD is YAML");
    let mut problems = Vec::new();
    walk(&crd["spec"]["versions"][0]["schema"], "schema", &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");
}
