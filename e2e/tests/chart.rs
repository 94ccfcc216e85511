//! The Helm chart without a cluster: `helm lint`, the values schema (bad values fail with a
//! message naming the value), the README's values table (generated from values.yaml's
//! comments), versions, the CRD as a kept, switchable template, RBAC in both modes, monitoring
//! objects only where their API exists, and the operator pods against the `restricted` profile.
//! Regenerate the README table with `KEYMESH_UPDATE_MANIFESTS=1 cargo test -p keymesh-e2e --test chart`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use keymesh_e2e::chart::{documented_values, leaf_paths, of_kind, read, repo_root, values_table, with_values_table, OfflineHelm, CHART_DIR};
use keymesh_e2e::pod_security::{hardening_violations, restricted_violations};
use serde_json::Value;

const MONITORING_APIS: [&str; 4] = ["--api-versions", "monitoring.coreos.com/v1/ServiceMonitor", "--api-versions", "monitoring.coreos.com/v1/PrometheusRule"];

fn helm() -> OfflineHelm {
    OfflineHelm::new().expect("helm (scripts/install-deps.sh installs it)")
}

#[test]
fn helm_lint_passes_for_every_install_mode() {
    let helm = helm();
    let eks_values = repo_root().join("manifests/examples/eks/values.yaml").display().to_string();
    for extra in [
        vec![],
        vec!["--set", "watchNamespace=cache"],
        vec!["--set", "watchNamespace=cache,rbac.readNodes=false,crds.install=false"],
        vec!["--set", "serviceMonitor.enabled=false,prometheusRule.enabled=false,grafanaDashboard.enabled=false,metrics.service.enabled=false"],
        vec!["-f", eks_values.as_str()],
    ] {
        let mut args = vec!["lint", "--strict", CHART_DIR];
        args.extend(extra.iter().copied());
        let out = helm.run(&args).unwrap_or_else(|e| panic!("helm lint {extra:?}: {e}"));
        assert!(out.contains("0 chart(s) failed"), "helm lint {extra:?}:\n{out}");
    }
}

#[test]
fn bad_values_fail_with_a_message_naming_the_value() {
    let helm = helm();
    for (args, named) in [
        (vec!["--set", "replicaCount=0"], "/replicaCount"),
        (vec!["--set-string", "replicaCount=two"], "/replicaCount"),
        (vec!["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
        (vec!["--set", "watchNamespce=cache"], "watchNamespce"),
        (vec!["--set", "watchNamespace=Not_A_Namespace"], "/watchNamespace"),
        (vec!["--set", "metrics.port=70000"], "/metrics/port"),
        (vec!["--set", "serviceMonitor.interval=soon"], "/serviceMonitor/interval"),
        (vec!["--set-string", "crds.install=yes"], "/crds/install"),
        (vec!["--set", "rbac.readNodes=1"], "/rbac/readNodes"),
    ] {
        let err = helm.render(&args).expect_err(&format!("{args:?} must be rejected"));
        let message = err.to_string();
        assert!(message.contains("values don't meet the specifications of the schema"), "{args:?}: {message}");
        assert!(message.contains(named), "{args:?}: the message should name {named}: {message}");
    }
}

/// The schema node for a dotted values path, following `properties` and `$ref`s.
fn schema_node<'a>(schema: &'a Value, path: &str) -> Option<&'a Value> {
    let resolve = |node: &'a Value| -> &'a Value {
        match node["$ref"].as_str().and_then(|r| r.strip_prefix("#/definitions/")) {
            Some(name) => &schema["definitions"][name],
            None => node,
        }
    };
    path.split('.').try_fold(schema, |node, key| {
        let node = resolve(node);
        let free_form = node["type"] == "object" && node.get("properties").is_none() && node.get("additionalProperties").is_none();
        if free_form {
            // A pass-through object (securityContext, affinity): any key is the API's business.
            return Some(node);
        }
        node["properties"].get(key).or_else(|| node["additionalProperties"].is_object().then(|| &node["additionalProperties"]))
    })
}

#[test]
fn the_schema_covers_every_value_and_rejects_unknown_keys() {
    let values: Value = serde_yaml::from_str(&read(&format!("{CHART_DIR}/values.yaml")).unwrap()).unwrap();
    let schema: Value = serde_json::from_str(&read(&format!("{CHART_DIR}/values.schema.json")).unwrap()).unwrap();
    for path in leaf_paths(&values) {
        assert!(schema_node(&schema, &path).is_some(), "values.yaml has {path} but values.schema.json does not");
    }
    assert_eq!(schema["additionalProperties"], false, "unknown top-level keys (typos) must fail");
    // Every section with fixed keys refuses unknown ones.
    for (key, node) in schema["properties"].as_object().unwrap() {
        if node["properties"].is_object() {
            assert_eq!(node["additionalProperties"], false, "{key} accepts unknown keys");
        }
    }
}

#[test]
fn the_readme_values_table_is_generated_from_values_yaml() {
    let docs = documented_values(&read(&format!("{CHART_DIR}/values.yaml")).unwrap()).unwrap_or_else(|e| panic!("values.yaml: {e}"));
    let path = repo_root().join(CHART_DIR).join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let expected = with_values_table(&readme, &values_table(&docs)).unwrap();
    if std::env::var_os("KEYMESH_UPDATE_MANIFESTS").is_some() {
        std::fs::write(&path, &expected).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap();
    assert!(
        committed == expected,
        "the values table in {CHART_DIR}/README.md differs from values.yaml; regenerate with KEYMESH_UPDATE_MANIFESTS=1 cargo test -p keymesh-e2e --test chart"
    );
}

#[test]
fn chart_version_and_app_version_are_the_release_version() {
    let chart: Value = serde_yaml::from_str(&read(&format!("{CHART_DIR}/Chart.yaml")).unwrap()).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(chart["version"], version, "the chart's version is the workspace version");
    assert_eq!(chart["appVersion"], version, "appVersion is the engine's and the operator's version");
}

#[test]
fn the_crd_is_a_template_kept_on_uninstall_and_switched_by_crds_install() {
    assert!(!repo_root().join(CHART_DIR).join("crds").exists(), "Helm never upgrades a chart's crds/ directory: the CRD belongs in templates/");
    let helm = helm();
    let objects = helm.render(&[]).unwrap();
    let crds = of_kind(&objects, "CustomResourceDefinition");
    let crd = crds.get("cacheclusters.keymesh.io").expect("the CRD is rendered by default");
    assert_eq!(crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep", "{crd}");
    assert_eq!(crd["metadata"]["labels"]["app.kubernetes.io/managed-by"], "Helm", "{crd}");
    let plain: Value = serde_yaml::from_str(&read("crds/cachecluster.yaml").unwrap()).unwrap();
    assert_eq!(crd["spec"], plain["spec"], "the chart's CRD and crds/cachecluster.yaml must be the same CRD");
    let objects = helm.render(&["--set", "crds.install=false"]).unwrap();
    assert!(of_kind(&objects, "CustomResourceDefinition").is_empty(), "crds.install=false renders no CRD");
}

fn rules_of(role: &Value) -> Vec<(String, String)> {
    role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            let groups: Vec<String> = r["apiGroups"].as_array().unwrap().iter().map(|g| g.as_str().unwrap().to_owned()).collect();
            let resources: Vec<String> = r["resources"].as_array().unwrap().iter().map(|g| g.as_str().unwrap().to_owned()).collect();
            groups.into_iter().flat_map(move |g| resources.clone().into_iter().map(move |res| (g.clone(), res)))
        })
        .collect()
}

#[test]
fn a_namespaced_install_uses_a_role_and_reads_only_nodes_cluster_wide() {
    let helm = helm();
    let all = helm.render(&[]).unwrap();
    let cluster_roles = of_kind(&all, "ClusterRole");
    let cluster_role = cluster_roles.get("keymesh-operator").expect("a ClusterRole when watching every namespace");
    let rules = rules_of(cluster_role);
    for needed in [("keymesh.io", "cacheclusters"), ("networking.k8s.io", "networkpolicies"), ("", "nodes"), ("apps", "statefulsets")] {
        assert!(rules.contains(&(needed.0.to_owned(), needed.1.to_owned())), "ClusterRole lacks {needed:?}: {rules:?}");
    }

    let namespaced = helm.render(&["--set", "watchNamespace=cache"]).unwrap();
    let roles = of_kind(&namespaced, "Role");
    let role = roles.get("keymesh-operator").expect("a Role for the watched namespace");
    assert_eq!(role["metadata"]["namespace"], "cache");
    let role_rules = rules_of(role);
    let mut expected: Vec<_> = rules.iter().filter(|r| r.1 != "nodes").cloned().collect();
    expected.sort();
    let mut got = role_rules.clone();
    got.sort();
    assert_eq!(got, expected, "the Role holds the ClusterRole's namespaced rules");
    let bindings = of_kind(&namespaced, "RoleBinding");
    assert_eq!(bindings["keymesh-operator"]["metadata"]["namespace"], "cache");
    let cluster_roles = of_kind(&namespaced, "ClusterRole");
    assert_eq!(cluster_roles.keys().collect::<Vec<_>>(), ["keymesh-operator-nodes"], "only the node reader is cluster-wide");
    assert_eq!(rules_of(cluster_roles["keymesh-operator-nodes"]), [("".to_owned(), "nodes".to_owned())]);
    for rule in cluster_roles["keymesh-operator-nodes"]["rules"].as_array().unwrap() {
        assert_eq!(rule["verbs"], serde_json::json!(["get", "list", "watch"]), "read-only");
    }
    let deployment = &of_kind(&namespaced, "Deployment")["keymesh-operator"];
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--namespace=cache"), "the operator watches only that namespace: {args}");

    let strict = helm.render(&["--set", "watchNamespace=cache,rbac.readNodes=false"]).unwrap();
    assert!(of_kind(&strict, "ClusterRole").is_empty() && of_kind(&strict, "ClusterRoleBinding").is_empty(), "nothing cluster-wide");
}

#[test]
fn monitoring_objects_render_only_where_their_api_exists() {
    let helm = helm();
    let plain = helm.render(&[]).unwrap();
    assert!(of_kind(&plain, "ServiceMonitor").is_empty() && of_kind(&plain, "PrometheusRule").is_empty(), "no monitoring.coreos.com/v1: nothing rendered");

    let with_api = helm.render(&MONITORING_APIS).unwrap();
    let monitors = of_kind(&with_api, "ServiceMonitor");
    let monitor = monitors.get("keymesh-operator").expect("the operator's ServiceMonitor");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics", "{monitor}");
    assert_eq!(monitor["spec"]["endpoints"][0]["honorLabels"], true, "{monitor}");
    let service = &of_kind(&with_api, "Service")["keymesh-operator-metrics"];
    for (key, value) in monitor["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&service["metadata"]["labels"][key], value, "the ServiceMonitor must select the metrics Service: {monitor}");
    }
    let rules = of_kind(&with_api, "PrometheusRule");
    let rule = rules.get("keymesh-operator").expect("the PrometheusRule");
    let file: Value = serde_yaml::from_str(&read(&format!("{CHART_DIR}/files/prometheus-rules.yaml")).unwrap()).unwrap();
    assert_eq!(rule["spec"], file, "the PrometheusRule carries files/prometheus-rules.yaml verbatim");

    let mut off = MONITORING_APIS.to_vec();
    off.extend(["--set", "serviceMonitor.enabled=false,prometheusRule.enabled=false"]);
    let off = helm.render(&off).unwrap();
    assert!(of_kind(&off, "ServiceMonitor").is_empty() && of_kind(&off, "PrometheusRule").is_empty(), "switched off by values");
}

#[test]
fn the_dashboard_config_map_carries_the_dashboard_for_the_grafana_sidecar() {
    let helm = helm();
    let objects = helm.render(&["--set", "grafanaDashboard.namespace=monitoring"]).unwrap();
    let maps = of_kind(&objects, "ConfigMap");
    let map = maps.get("keymesh-operator-dashboard").expect("the dashboard ConfigMap");
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1", "{}", map["metadata"]);
    assert_eq!(map["metadata"]["namespace"], "monitoring");
    let embedded: Value = serde_json::from_str(map["data"]["keymesh.json"].as_str().unwrap()).expect("the embedded dashboard is JSON");
    let file: Value = serde_json::from_str(&read(&format!("{CHART_DIR}/files/dashboards/keymesh.json")).unwrap()).unwrap();
    assert_eq!(embedded, file);
    let off = helm.render(&["--set", "grafanaDashboard.enabled=false"]).unwrap();
    assert!(!of_kind(&off, "ConfigMap").contains_key("keymesh-operator-dashboard"));
}

#[test]
fn the_operator_pods_are_restricted_and_carry_the_label_engine_policies_admit() {
    let objects = helm().render(&[]).unwrap();
    let deployment = &of_kind(&objects, "Deployment")["keymesh-operator"];
    let pod = &deployment["spec"]["template"];
    // operator/src/build/networkpolicy.rs admits the operator's pods by this label.
    assert_eq!(pod["metadata"]["labels"]["app.kubernetes.io/name"], "keymesh-operator", "{pod}");
    assert_eq!(restricted_violations(&pod["spec"]), Vec::<String>::new());
    assert_eq!(hardening_violations(&pod["spec"]), Vec::<String>::new());
}

#[test]
fn the_plain_namespace_carries_the_name_label_network_policies_select() {
    let objects = helm().render(&["--set", "namespace.create=true"]).unwrap();
    let namespace = &of_kind(&objects, "Namespace")["keymesh-system"];
    assert_eq!(namespace["metadata"]["labels"]["kubernetes.io/metadata.name"], "keymesh-system", "{namespace}");
}
