//! Proves the committed CRD files (`crds/` and the Helm chart's copy) are exactly what the Rust
//! types generate, so the API server validates what the operator reads.

use std::path::Path;

use keymesh_operator::crd::{crd_yaml, CRD_PATHS};

#[test]
fn committed_crds_match_the_rust_types() {
    let generated = crd_yaml().expect("the CRD serializes");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for path in CRD_PATHS {
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
    let columns: Vec<&str> = version["additionalPrinterColumns"].as_sequence().expect("columns").iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(columns, ["Ready", "Replicas", "Version", "Phase", "Age"], "{generated}");
    let replicas = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["replicas"];
    assert_eq!(replicas["minimum"].as_f64(), Some(1.0), "{generated}");
    assert_eq!(replicas["default"].as_i64(), Some(3), "{generated}");
}
