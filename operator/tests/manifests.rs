//! Proves `manifests/keymesh-operator.yaml` is exactly what the Helm chart renders, and that the
//! example CacheClusters are valid specs. Rendering needs `helm` (`$KEYMESH_HELM`,
//! `$KEYMESH_CACHE/bin/helm`, `/var/cache/keymesh/bin/helm` or `helm` on the PATH); without it
//! the drift check is skipped with a message.
//!
//! Regenerate the manifest with `KEYMESH_UPDATE_MANIFESTS=1 cargo test -p keymesh-operator --test manifests`.

use std::path::{Path, PathBuf};
use std::process::Command;

use keymesh_operator::api::CacheCluster;
use keymesh_operator::validate::validate;

/// The release name, namespace and flags the plain manifest is rendered with.
const HELM_ARGS: [&str; 6] = ["template", "keymesh-operator", "charts/keymesh-operator", "--namespace", "keymesh-system", "--set=namespace.create=true"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn helm() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    candidates.extend(std::env::var_os("KEYMESH_HELM").map(PathBuf::from));
    candidates.extend(std::env::var_os("KEYMESH_CACHE").map(|c| Path::new(&c).join("bin/helm")));
    candidates.push(PathBuf::from("/var/cache/keymesh/bin/helm"));
    candidates.push(PathBuf::from("helm"));
    candidates.into_iter().find(|h| Command::new(h).arg("version").output().is_ok_and(|o| o.status.success()))
}

fn header() -> String {
    format!(
        "# Generated from charts/keymesh-operator; do not edit. Regenerate with\n#   KEYMESH_UPDATE_MANIFESTS=1 cargo test -p keymesh-operator --test manifests\n# (helm {})\n",
        HELM_ARGS.join(" ")
    )
}

#[test]
fn the_plain_manifest_is_the_rendered_chart() {
    let Some(helm) = helm() else {
        eprintln!("skipped: helm not found (set KEYMESH_HELM)");
        return;
    };
    let output = Command::new(&helm).args(HELM_ARGS).current_dir(root()).output().expect("helm runs");
    assert!(output.status.success(), "helm template failed: {}", String::from_utf8_lossy(&output.stderr));
    let rendered = format!("{}{}", header(), String::from_utf8_lossy(&output.stdout));
    let path = root().join("manifests/keymesh-operator.yaml");
    if std::env::var_os("KEYMESH_UPDATE_MANIFESTS").is_some() {
        std::fs::write(&path, &rendered).expect("writes the manifest");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(committed == rendered, "manifests/keymesh-operator.yaml differs from the rendered chart; regenerate with KEYMESH_UPDATE_MANIFESTS=1 cargo test -p keymesh-operator --test manifests");
    for kind in ["CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service"]
    {
        assert!(rendered.contains(&format!("\nkind: {kind}\n")), "no {kind} in the rendered chart");
    }
}

#[test]
fn the_example_cacheclusters_are_valid() {
    for file in ["cachecluster.yaml", "cachecluster-aws-nlb.yaml", "eks/cachecluster.yaml"] {
        let text = std::fs::read_to_string(root().join("manifests/examples").join(file)).expect("the example exists");
        let mut cluster: CacheCluster = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{file} is not a CacheCluster: {e}"));
        cluster.metadata.namespace.get_or_insert_with(|| "default".into());
        validate(&cluster).unwrap_or_else(|e| panic!("{file} is invalid: {e}"));
        assert_eq!(cluster.spec.replicas, 3, "{file}");
    }
}
