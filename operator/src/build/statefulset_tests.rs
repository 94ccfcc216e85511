use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::*;
use crate::build::fixture::{build, yaml, Fixture};

fn sts(spec_yaml: &str) -> StatefulSet {
    build(spec_yaml).statefulset.expect("a StatefulSet")
}

fn pod_spec(sts: &StatefulSet) -> &PodSpec {
    sts.spec.as_ref().and_then(|s| s.template.spec.as_ref()).unwrap_or_else(|| panic!("no pod spec in {}", yaml(sts)))
}

fn container(sts: &StatefulSet) -> &Container {
    &pod_spec(sts).containers[0]
}

#[test]
fn defaults_parallel_rolling_with_the_plans_partition_headless_and_three_replicas() {
    let sts = sts("{}");
    let spec = sts.spec.as_ref().expect("spec");
    assert_eq!(sts.metadata.name.as_deref(), Some("demo"), "{}", yaml(&sts));
    assert_eq!(spec.replicas, Some(3), "{}", yaml(&sts));
    assert_eq!(spec.service_name.as_deref(), Some("demo-headless"), "{}", yaml(&sts));
    assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"), "{}", yaml(&sts));
    let strategy = spec.update_strategy.as_ref().expect("update strategy");
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"), "{}", yaml(&sts));
    assert_eq!(strategy.rolling_update.as_ref().and_then(|r| r.partition), Some(0), "{}", yaml(&sts));
    assert!(strategy.rolling_update.as_ref().is_some_and(|r| r.max_unavailable.is_none()), "maxUnavailable is newer than 1.20: {}", yaml(&sts));
    let gates: Vec<&str> = pod_spec(&sts).readiness_gates.iter().flatten().map(|g| g.condition_type.as_str()).collect();
    assert_eq!(gates, ["keymesh.io/serving"], "the operator gates readiness: {}", yaml(&sts));
    assert_eq!(pod_spec(&sts).termination_grace_period_seconds, Some(30), "{}", yaml(&sts));
    let labels = spec.template.metadata.as_ref().and_then(|m| m.labels.as_ref()).expect("pod labels");
    for (k, v) in spec.selector.match_labels.as_ref().expect("selector") {
        assert_eq!(labels.get(k), Some(v), "pod template must match the selector: {}", yaml(&sts));
    }
}

#[test]
fn the_engine_runs_the_mounted_config_with_its_pod_name_and_password() {
    let sts = sts("{}");
    let c = container(&sts);
    assert_eq!(c.image.as_deref(), Some(format!("keymesh/keymesh-server:{}", crate::api::DEFAULT_VERSION).as_str()), "{}", yaml(&sts));
    assert_eq!(c.command.as_deref(), Some(&["keymesh-server".to_string()][..]), "{}", yaml(&sts));
    let args = c.args.as_ref().expect("args").join(" ");
    assert_eq!(
        args,
        "/etc/keymesh/config/keymesh.conf --node-name $(POD_NAME) --requirepass $(KEYMESH_PASSWORD) --masterauth $(KEYMESH_PASSWORD)",
        "{}",
        yaml(&sts)
    );
    let env = c.env.as_ref().expect("env");
    let pod_name = env.iter().find(|e| e.name == "POD_NAME").and_then(|e| e.value_from.as_ref()?.field_ref.as_ref()).expect("POD_NAME from the downward API");
    assert_eq!(pod_name.field_path, "metadata.name", "{}", yaml(&sts));
    let password =
        env.iter().find(|e| e.name == "KEYMESH_PASSWORD").and_then(|e| e.value_from.as_ref()?.secret_key_ref.as_ref()).expect("password from a Secret");
    assert_eq!((password.name.as_str(), password.key.as_str()), ("demo-auth", "password"), "{}", yaml(&sts));
    let mounts: Vec<(&str, &str)> = c.volume_mounts.iter().flatten().map(|m| (m.name.as_str(), m.mount_path.as_str())).collect();
    assert_eq!(mounts, [("config", "/etc/keymesh/config"), ("peers", "/etc/keymesh/peers")], "{}", yaml(&sts));
    let volumes: Vec<(&str, Option<&str>)> =
        pod_spec(&sts).volumes.iter().flatten().map(|v| (v.name.as_str(), v.config_map.as_ref().map(|c| c.name.as_str()))).collect();
    let settings = Fixture::new("{}").settings();
    assert_eq!(volumes, [("config", Some(format!("demo-config-{}", settings.hash).as_str())), ("peers", Some("demo-peers"))], "{}", yaml(&sts));
}

#[test]
fn a_referenced_secret_feeds_the_password() {
    let sts = sts("auth: {secretRef: {name: creds, key: redis-password}}");
    let env = container(&sts).env.as_ref().expect("env");
    let password =
        env.iter().find(|e| e.name == "KEYMESH_PASSWORD").and_then(|e| e.value_from.as_ref()?.secret_key_ref.as_ref()).expect("password from a Secret");
    assert_eq!((password.name.as_str(), password.key.as_str()), ("creds", "redis-password"), "{}", yaml(&sts));
}

#[test]
fn ports_and_probes() {
    let sts = sts("{}");
    let c = container(&sts);
    let ports: Vec<(Option<&str>, i32)> = c.ports.iter().flatten().map(|p| (p.name.as_deref(), p.container_port)).collect();
    assert_eq!(ports, [(Some("client"), 6379), (Some("mesh"), 16379), (Some("metrics"), 9121)], "{}", yaml(&sts));
    let readiness = c.readiness_probe.as_ref().and_then(|p| p.http_get.as_ref()).expect("readiness probe");
    assert_eq!((readiness.path.as_deref(), &readiness.port), (Some("/readyz"), &IntOrString::String("metrics".into())), "{}", yaml(&sts));
    let liveness = c.liveness_probe.as_ref().and_then(|p| p.http_get.as_ref()).expect("liveness probe");
    assert_eq!(liveness.path.as_deref(), Some("/healthz"), "{}", yaml(&sts));
}

#[test]
fn topology_spread_in_all_three_modes() {
    let cases = [
        ("{}", vec![(ZONE_TOPOLOGY_KEY, "ScheduleAnyway"), (HOST_TOPOLOGY_KEY, "ScheduleAnyway")]),
        ("topology: {zoneSpread: Required, hostSpread: Preferred}", vec![(ZONE_TOPOLOGY_KEY, "DoNotSchedule"), (HOST_TOPOLOGY_KEY, "ScheduleAnyway")]),
        ("topology: {zoneSpread: Disabled, hostSpread: Required}", vec![(HOST_TOPOLOGY_KEY, "DoNotSchedule")]),
        ("topology: {zoneSpread: Disabled, hostSpread: Disabled}", vec![]),
    ];
    for (spec_yaml, expected) in cases {
        let sts = sts(spec_yaml);
        let constraints = pod_spec(&sts).topology_spread_constraints.clone().unwrap_or_default();
        let got: Vec<(&str, &str)> = constraints.iter().map(|c| (c.topology_key.as_str(), c.when_unsatisfiable.as_str())).collect();
        assert_eq!(got, expected, "spec {spec_yaml}:\n{}", yaml(&sts));
        assert!(constraints.iter().all(|c| c.max_skew == 1 && c.label_selector.is_some()), "{}", yaml(&sts));
    }
}

#[test]
fn resources_and_pod_passthrough() {
    let sts = sts(r#"
image: registry.local/keymesh:dev
imagePullPolicy: Always
resources: {requests: {cpu: 500m, memory: 1Gi}, limits: {memory: 1Gi}}
pod:
  nodeSelector: {pool: cache}
  tolerations: [{key: dedicated, operator: Equal, value: cache, effect: NoSchedule}]
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: arch, operator: In, values: [amd64]}]}]}}}
  priorityClassName: high
  labels: {team: payments}
  annotations: {example.com/owner: payments}
"#);
    let pod = pod_spec(&sts);
    let c = container(&sts);
    assert_eq!(c.image.as_deref(), Some("registry.local/keymesh:dev"), "{}", yaml(&sts));
    assert_eq!(c.image_pull_policy.as_deref(), Some("Always"), "{}", yaml(&sts));
    let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref()).expect("limits");
    assert_eq!(limits.get("memory").map(|q| q.0.as_str()), Some("1Gi"), "{}", yaml(&sts));
    assert_eq!(pod.node_selector.as_ref().and_then(|n| n.get("pool")).map(String::as_str), Some("cache"), "{}", yaml(&sts));
    assert_eq!(pod.tolerations.as_ref().map(|t| t[0].key.as_deref()), Some(Some("dedicated")), "{}", yaml(&sts));
    assert!(pod.affinity.as_ref().and_then(|a| a.node_affinity.as_ref()).is_some(), "{}", yaml(&sts));
    assert_eq!(pod.priority_class_name.as_deref(), Some("high"), "{}", yaml(&sts));
    let meta = sts.spec.as_ref().and_then(|s| s.template.metadata.as_ref()).expect("template metadata");
    assert_eq!(meta.labels.as_ref().and_then(|l| l.get("team")).map(String::as_str), Some("payments"), "{}", yaml(&sts));
    let annotations = meta.annotations.as_ref().expect("annotations");
    assert_eq!(annotations.get("example.com/owner").map(String::as_str), Some("payments"), "{}", yaml(&sts));
    assert!(annotations.contains_key(TEMPLATE_HASH_ANNOTATION), "{}", yaml(&sts));
}

#[test]
fn restart_settings_and_versions_change_the_revision_live_settings_and_scaling_do_not() {
    let hash = |f: &Fixture| {
        let sts = f.build().statefulset.expect("a StatefulSet");
        let stamped = sts.spec.and_then(|s| s.template.metadata).and_then(|m| m.annotations).and_then(|a| a.get(TEMPLATE_HASH_ANNOTATION).cloned());
        assert_eq!(stamped.as_deref(), Some(f.template.hash.as_str()), "the template carries its own hash");
        f.template.hash.clone()
    };
    let base = Fixture::new("{}");
    let mut scaled = Fixture::new("replicas: 5");
    scaled.config_peers = vec![0, 1, 2];
    assert_eq!(hash(&base), hash(&scaled), "scaling must not change the pod template");
    assert_eq!(hash(&base), hash(&Fixture::new("engine: {evictionPolicy: allkeys-lru}")), "a live setting rolls no pod");
    assert_ne!(hash(&base), hash(&Fixture::new("engine: {threads: 2}")), "a restart-only setting rolls");
    assert_ne!(hash(&base), hash(&Fixture::new("version: 9.9.9")), "a version rolls");
    assert_ne!(hash(&base), hash(&Fixture::new("resources: {requests: {cpu: 100m}}")), "resources roll");
}

#[test]
fn the_partition_and_a_rolled_back_template_come_from_the_upgrade() {
    let mut fixture = Fixture::new("{}");
    let old = Fixture::new("version: 0.0.9").template;
    fixture.template = old.clone();
    fixture.partition = 2;
    let sts = fixture.build().statefulset.expect("a StatefulSet");
    let spec = sts.spec.as_ref().expect("spec");
    assert_eq!(spec.update_strategy.as_ref().and_then(|u| u.rolling_update.as_ref()).and_then(|r| r.partition), Some(2), "{}", yaml(&sts));
    assert_eq!(spec.template, old.template, "{}", yaml(&sts));
    assert_eq!(PodTemplate::from_history(spec.template.clone()).map(|t| t.hash), Some(old.hash));
}

#[test]
fn replicas_come_from_the_scale_plan() {
    let mut fixture = Fixture::new("replicas: 2");
    fixture.statefulset_replicas = 4;
    let sts = fixture.build().statefulset.expect("a StatefulSet");
    assert_eq!(sts.spec.as_ref().and_then(|s| s.replicas), Some(4), "{}", yaml(&sts));
}

/// A Kubernetes 1.20 API server rejects fields it does not know in a server-side apply.
#[test]
fn no_field_newer_than_kubernetes_1_20() {
    let newer = [
        "minReadySeconds",
        "persistentVolumeClaimRetentionPolicy",
        "ordinals",
        "minDomains",
        "matchLabelKeys",
        "nodeAffinityPolicy",
        "nodeTaintsPolicy",
        "hostUsers",
        "os",
        "resourceClaims",
        "schedulingGates",
        "unhealthyPodEvictionPolicy",
        "internalTrafficPolicy",
        "ipFamilyPolicy",
    ];
    let children = build("pod: {labels: {team: a}}\nservice: {type: LoadBalancer}");
    let objects = [
        serde_json::to_string(&children.statefulset),
        serde_json::to_string(&children.node_tuning),
        serde_json::to_string(&children.client_service),
        serde_json::to_string(&children.headless_service),
        serde_json::to_string(&children.pdb),
    ];
    for json in objects {
        let json = json.expect("serializes");
        for field in newer {
            assert!(!json.contains(&format!("\"{field}\"")), "{field} is newer than Kubernetes 1.20: {json}");
        }
    }
}

#[test]
fn spec_sysctls_become_the_pods_sysctls_and_roll() {
    let sts = sts("sysctls: {net.core.somaxconn: '8192', net.ipv4.tcp_max_syn_backlog: '8192'}");
    let sysctls: Vec<(String, String)> =
        pod_spec(&sts).security_context.iter().flat_map(|c| c.sysctls.iter().flatten()).map(|s| (s.name.clone(), s.value.clone())).collect();
    assert_eq!(
        sysctls,
        [("net.core.somaxconn".to_string(), "8192".to_string()), ("net.ipv4.tcp_max_syn_backlog".to_string(), "8192".to_string())],
        "{}",
        yaml(&sts)
    );
    assert!(pod_spec(&self::sts("{}")).security_context.as_ref().is_none_or(|c| c.sysctls.is_none()), "none without spec.sysctls");
    assert_ne!(Fixture::new("{}").template.hash, Fixture::new("sysctls: {net.core.somaxconn: '8192'}").template.hash, "a sysctl change rolls");
}
