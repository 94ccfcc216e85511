//! Helpers for unit tests: `CacheCluster` objects from inline YAML.

use crate::api::CacheCluster;

/// A `CacheCluster` named `demo` in namespace `cache` (with a uid, so owner references can be
/// built) whose `spec` is the given YAML mapping.
pub fn cluster(spec_yaml: &str) -> CacheCluster {
    let indented: String = spec_yaml.lines().map(|l| format!("  {l}\n")).collect();
    let yaml = format!(
        "apiVersion: keymesh.io/v1alpha1\nkind: CacheCluster\nmetadata:\n  name: demo\n  namespace: cache\n  uid: 6f1c2a3e-0000-4000-8000-000000000001\n  generation: 1\nspec:\n{indented}"
    );
    serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("test CacheCluster does not parse: {e}\n{yaml}"))
}
