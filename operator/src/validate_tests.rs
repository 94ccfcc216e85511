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
    let errors = errors_of("tls: {enabled: true, secretName: certs}\npersistence: {enabled: true}\nnodeTuning: {enabled: true}");
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(errors[0].starts_with("spec.tls.enabled: TLS is not supported yet") && errors[0].contains("engine has no TLS"), "{errors:?}");
    assert!(errors[1].starts_with("spec.persistence.enabled: persistence is not supported") && errors[1].contains("in memory"), "{errors:?}");
    assert!(errors[2].starts_with("spec.nodeTuning.enabled: node tuning is not supported yet"), "{errors:?}");
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
