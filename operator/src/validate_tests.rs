use super::*;
use crate::test_support::cluster;

fn errors_of(spec_yaml: &str) -> Vec<String> {
    match validate(&cluster(spec_yaml)) {
        Ok(valid) => panic!("expected the spec to be rejected, got {valid:#?}\nspec:\n{spec_yaml}"),
        Err(invalid) => invalid.errors,
    }
}

fn valid(spec_yaml: &str) -> ValidatedSpec {
    validate(&cluster(spec_yaml)).unwrap_or_else(|e| panic!("expected a valid spec, got: {e}\nspec:\n{spec_yaml}"))
}

fn directive<'a>(spec: &'a ValidatedSpec, name: &str) -> Option<&'a str> {
    spec.engine_directives.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

#[test]
fn defaults_resolve_to_a_generated_secret_and_no_maxmemory() {
    let spec = valid("{}");
    assert_eq!(spec.replicas, 3, "{spec:#?}");
    assert_eq!(spec.auth, AuthSource::Generated { secret_name: "demo-auth".into() }, "{spec:#?}");
    assert_eq!(spec.pdb_max_unavailable, Some(1), "{spec:#?}");
    assert_eq!(spec.service_monitor, None, "{spec:#?}");
    assert_eq!(directive(&spec, "maxmemory"), None, "{spec:#?}");
    assert_eq!(directive(&spec, "maxmemory-policy"), Some("noeviction"), "{spec:#?}");
    assert_eq!(spec.max_clock_skew_ms, 500, "{spec:#?}");
}

#[test]
fn maxmemory_defaults_to_75_percent_of_the_memory_limit() {
    let spec = valid("resources: {limits: {memory: 1Gi}}");
    assert_eq!(directive(&spec, "maxmemory"), Some("805306368"), "{spec:#?}");
    let spec = valid("resources: {limits: {memory: 2Gi}}\nengine: {maxmemoryPercent: 50}");
    assert_eq!(directive(&spec, "maxmemory"), Some("1073741824"), "{spec:#?}");
    let spec = valid("resources: {limits: {memory: 2Gi}}\nengine: {maxmemory: 1gb, evictionPolicy: allkeys-lru, threads: 4}");
    assert_eq!(directive(&spec, "maxmemory"), Some("1073741824"), "{spec:#?}");
    assert_eq!(directive(&spec, "maxmemory-policy"), Some("allkeys-lru"), "{spec:#?}");
    assert_eq!(directive(&spec, "server-threads"), Some("4"), "{spec:#?}");
}

#[test]
fn maxmemory_errors_name_the_field() {
    let errors = errors_of("resources: {limits: {memory: 1Gi}}\nengine: {maxmemory: 1gb, maxmemoryPercent: 50}");
    assert!(errors.iter().any(|e| e.contains("either maxmemory or maxmemoryPercent")), "{errors:?}");
    let errors = errors_of("engine: {maxmemoryPercent: 50}");
    assert!(errors.iter().any(|e| e.starts_with("spec.engine.maxmemoryPercent: needs a memory limit")), "{errors:?}");
    let errors = errors_of("engine: {maxmemory: 1Gi}");
    assert!(errors.iter().any(|e| e.starts_with("spec.engine.maxmemory: '1Gi'")), "{errors:?}");
    let errors = errors_of("resources: {limits: {memory: 512Mi}}\nengine: {maxmemory: 1gb}");
    assert!(errors.iter().any(|e| e.contains("more than the container memory limit")), "{errors:?}");
}

#[test]
fn unsupported_features_say_why() {
    let errors = errors_of("tls: {enabled: true, secretName: certs, authClients: maybe}");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0], "spec.tls.authClients: must be \"yes\", \"no\" or \"optional\" (quoted), got 'maybe'", "{errors:?}");
}

#[test]
fn persistence_is_validated_and_its_directives_are_the_operators() {
    let spec = valid("persistence: {enabled: true, size: 2Gi, snapshotIntervalSeconds: 60}");
    let p = spec.persistence.as_ref().expect("persistence");
    assert_eq!((p.size_bytes, p.snapshot_interval_seconds), (2 << 30, 60), "{spec:#?}");
    let errors = errors_of("persistence: {enabled: true, size: '0'}\nengine: {extraConfig: {save: '60 1', dir: /tmp}}");
    assert!(errors.iter().any(|e| e.starts_with("spec.persistence.size: '0'")), "{errors:?}");
    assert!(
        errors.iter().any(|e| e.starts_with("spec.engine.extraConfig.save: the operator manages 'save'") && e.contains("snapshotIntervalSeconds")),
        "{errors:?}"
    );
    assert!(errors.iter().any(|e| e.starts_with("spec.engine.extraConfig.dir: the operator manages 'dir'")), "{errors:?}");
}

#[test]
fn per_pod_sysctls_pass_and_node_wide_ones_point_to_node_tuning() {
    let spec = valid("sysctls: {net.core.somaxconn: '8192', net.ipv4.tcp_max_syn_backlog: '8192', kernel.shm_rmid_forced: '1'}");
    assert_eq!(spec.sysctls.get("net.core.somaxconn").map(String::as_str), Some("8192"), "{spec:#?}");
    assert_eq!(spec.sysctls.len(), 3);
    let errors = errors_of("sysctls: {vm.overcommit_memory: '1', kernel.pid_max: '99999', 'net..x': '1', net.core.rmem_max: ''}");
    assert_eq!(errors.len(), 4, "{errors:?}");
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("spec.sysctls.vm.overcommit_memory: a node-wide sysctl")
                && e.contains("spec.nodeTuning (spec.nodeTuning.vmOvercommitMemory)")),
        "{errors:?}"
    );
    assert!(errors.iter().any(|e| e.starts_with("spec.sysctls.kernel.pid_max: a node-wide sysctl")), "{errors:?}");
    assert!(errors.iter().any(|e| e.starts_with("spec.sysctls.net..x: not a sysctl name")), "{errors:?}");
    assert!(errors.iter().any(|e| e.starts_with("spec.sysctls.net.core.rmem_max: needs a value")), "{errors:?}");
}

#[test]
fn the_deprecated_somaxconn_becomes_a_sysctl_with_a_warning() {
    let spec = valid("nodeTuning: {somaxconn: 4096}");
    assert_eq!(spec.sysctls.get("net.core.somaxconn").map(String::as_str), Some("4096"), "{spec:#?}");
    assert!(spec.warnings.iter().any(|w| w.contains("spec.nodeTuning.somaxconn is deprecated") && w.contains("spec.sysctls.net.core.somaxconn")), "{spec:#?}");
    let spec = valid("nodeTuning: {somaxconn: 4096}\nsysctls: {net.core.somaxconn: '8192'}");
    assert_eq!(spec.sysctls.get("net.core.somaxconn").map(String::as_str), Some("8192"), "spec.sysctls wins");
    assert!(valid("{}").warnings.is_empty());
}

#[test]
fn node_tuning_resolves_its_values() {
    assert_eq!(valid("{}").node_tuning, None);
    let tuning = valid("nodeTuning: {enabled: true}").node_tuning.expect("tuning on");
    assert_eq!((tuning.transparent_huge_pages, tuning.overcommit_memory.as_deref()), (Some("never"), Some("1")), "the defaults");
    let tuning = valid("nodeTuning: {enabled: true, transparentHugePages: unchanged, vmOvercommitMemory: unchanged}").node_tuning.expect("on");
    assert_eq!((tuning.transparent_huge_pages, tuning.overcommit_memory), (None, None));
    let tuning = valid("nodeTuning: {enabled: true, transparentHugePages: madvise, vmOvercommitMemory: '2'}").node_tuning.expect("on");
    assert_eq!((tuning.transparent_huge_pages, tuning.overcommit_memory.as_deref()), (Some("madvise"), Some("2")));
    let errors = errors_of("nodeTuning: {enabled: true, vmOvercommitMemory: 3}");
    assert!(errors[0].starts_with("spec.nodeTuning.vmOvercommitMemory: '3' is not 0, 1, 2 or unchanged"), "{errors:?}");
}

#[test]
fn extra_config_is_limited_to_the_allow_list() {
    let spec = valid("engine: {extraConfig: {maxclients: '5000', loglevel: verbose, repl-backlog-size: 128mb}}");
    assert_eq!(directive(&spec, "maxclients"), Some("5000"), "{spec:#?}");
    assert_eq!(directive(&spec, "loglevel"), Some("verbose"), "{spec:#?}");

    let errors = errors_of("engine: {extraConfig: {port: '7000', requirepass: x, replicaof: 'a 6379', mesh-port: '1', maxmemory: 1gb}}");
    assert_eq!(errors.len(), 5, "{errors:?}");
    for (directive, hint) in
        [("port", "6379"), ("requirepass", "secretRef"), ("replicaof", "peer list"), ("mesh-port", "16379"), ("maxmemory", "spec.engine.maxmemory")]
    {
        let field = format!("spec.engine.extraConfig.{directive}: the operator manages '{directive}'");
        assert!(errors.iter().any(|e| e.starts_with(&field) && e.contains(hint)), "no error for {directive} with '{hint}' in {errors:?}");
    }

    let errors = errors_of("engine: {extraConfig: {nosuch: '1', maxclients: lots, loglevel: loud}}");
    assert!(errors.iter().any(|e| e.starts_with("spec.engine.extraConfig.nosuch: 'nosuch' is not an engine directive")), "{errors:?}");
    assert!(errors.iter().any(|e| e.starts_with("spec.engine.extraConfig.maxclients: 'lots' is not valid")), "{errors:?}");
    assert!(errors.iter().any(|e| e.starts_with("spec.engine.extraConfig.loglevel: 'loud' is not valid")), "{errors:?}");
}

#[test]
fn a_value_cannot_inject_config_lines() {
    let errors = errors_of("engine: {extraConfig: {maxclients: \"10\\nreplicaof evil 6379\"}}");
    assert!(errors.iter().any(|e| e.starts_with("spec.engine.extraConfig.maxclients")), "{errors:?}");
}

#[test]
fn referenced_auth_and_other_fields() {
    let spec =
        valid("auth: {secretRef: {name: creds, key: pw}}\nmetrics: {serviceMonitor: {enabled: true, interval: 30s}}\npodDisruptionBudget: {enabled: false}");
    assert_eq!(spec.auth, AuthSource::Referenced { secret_name: "creds".into(), key: "pw".into() }, "{spec:#?}");
    assert_eq!(spec.pdb_max_unavailable, None, "{spec:#?}");
    assert!(spec.service_monitor.is_some(), "{spec:#?}");

    let errors =
        errors_of("replicas: 0\npod: {labels: {app.kubernetes.io/instance: other}}\nmetrics: {serviceMonitor: {interval: soon}}\nservice: {port: 70000}");
    let expected = ["spec.replicas:", "spec.pod.labels.app.kubernetes.io/instance:", "spec.metrics.serviceMonitor.interval:", "spec.service.port:"];
    for prefix in expected {
        assert!(errors.iter().any(|e| e.starts_with(prefix)), "no error starting with {prefix} in {errors:?}");
    }
}

#[test]
fn long_names_are_rejected() {
    let mut c = cluster("{}");
    c.metadata.name = Some("x".repeat(53));
    let errors = validate(&c).expect_err("a 53-character name is too long").errors;
    assert!(errors[0].starts_with("metadata.name:"), "{errors:?}");
}
