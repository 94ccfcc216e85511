//! The first reconcile step: checks a `CacheCluster` beyond what its schema can express and
//! resolves every default, giving the builders a `ValidatedSpec` they can trust.
//!
//! Pure (no client, no clock). Guarantees: it reports every problem at once, each message
//! naming the field (`spec.engine.extraConfig.port: ...`), and a `ValidatedSpec` only exists
//! for a spec the operator can run: unsupported features (TLS) are errors that say why, not
//! silently ignored.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::ResourceExt;

use crate::api::{CacheCluster, PodOverrides, ServiceMonitorSpec, ServiceSpec, TopologySpec, UpgradeSpec};
use crate::build::{RESERVED_LABELS, SELECTOR_LABELS};
use crate::quantity::{engine_bytes, quantity_bytes};
use crate::tls::{tls_settings, TlsSettings};

/// The longest `metadata.name`: pod names (`<name>-<ordinal>`) and the StatefulSet's
/// `controller-revision-hash` label (`<name>-<hash>`) must stay within 63 characters.
pub const MAX_NAME_LEN: usize = 52;

/// `maxmemory` as a percentage of the memory limit when neither size is given.
pub const DEFAULT_MAXMEMORY_PERCENT: u64 = 75;

/// The engine's `max-clock-skew-ms` default.
pub const DEFAULT_MAX_CLOCK_SKEW_MS: i64 = 500;

/// Every problem found in a spec, each naming its field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSpec {
    pub errors: Vec<String>,
}

impl fmt::Display for InvalidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.errors.join("; "))
    }
}

impl std::error::Error for InvalidSpec {}

/// Where the engines' password comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthSource {
    /// The operator's Secret `<name>-auth`, key `password`.
    Generated { secret_name: String },
    /// The user's Secret.
    Referenced { secret_name: String, key: String },
}

impl AuthSource {
    pub fn secret_name(&self) -> &str {
        match self {
            AuthSource::Generated { secret_name } | AuthSource::Referenced { secret_name, .. } => secret_name,
        }
    }

    pub fn key(&self) -> &str {
        match self {
            AuthSource::Generated { .. } => GENERATED_SECRET_KEY,
            AuthSource::Referenced { key, .. } => key,
        }
    }
}

/// The key of the generated Secret that holds the password.
pub const GENERATED_SECRET_KEY: &str = "password";

/// A spec with every default resolved and every value checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedSpec {
    pub replicas: i32,
    pub image: String,
    pub image_pull_policy: Option<String>,
    pub target_version: String,
    pub resources: Option<ResourceRequirements>,
    /// Engine directives the spec decides, in config-file order (`maxmemory`, ...).
    pub engine_directives: Vec<(String, String)>,
    pub max_clock_skew_ms: i64,
    pub auth: AuthSource,
    pub service: ServiceSpec,
    pub topology: TopologySpec,
    /// `maxUnavailable` of the PodDisruptionBudget; `None` when disabled.
    pub pdb_max_unavailable: Option<i32>,
    /// `None` when disabled.
    pub service_monitor: Option<ServiceMonitorSpec>,
    /// Whether the engine pods get a NetworkPolicy.
    pub network_policy: bool,
    pub pod: PodOverrides,
    pub upgrade: UpgradeSpec,
    /// The engine pods' `securityContext.sysctls`.
    pub sysctls: BTreeMap<String, String>,
    /// `None` when node tuning is off.
    pub node_tuning: Option<NodeTuning>,
    /// `None` when TLS is off.
    pub tls: Option<TlsSettings>,
    /// `None` when persistence is off.
    pub persistence: Option<crate::persistence::Persistence>,
    /// Things the spec should change (deprecated fields), for the `SpecWarnings` condition.
    pub warnings: Vec<String>,
}

/// Node tuning with its values resolved: `None` leaves a setting unchanged.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeTuning {
    pub transparent_huge_pages: Option<&'static str>,
    pub overcommit_memory: Option<String>,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<k8s_openapi::api::core::v1::Toleration>,
}

/// Checks `cluster` and resolves its defaults.
pub fn validate(cluster: &CacheCluster) -> Result<ValidatedSpec, InvalidSpec> {
    let spec = &cluster.spec;
    let mut errors = Vec::new();
    let name = cluster.name_any();
    if name.len() > MAX_NAME_LEN {
        errors.push(format!("metadata.name: '{name}' is longer than {MAX_NAME_LEN} characters (pod names and StatefulSet revision labels derive from it)"));
    }
    if spec.replicas < 1 {
        errors.push(format!("spec.replicas: must be at least 1, got {}", spec.replicas));
    }
    if spec.image.as_deref().is_some_and(|i| i.trim().is_empty()) {
        errors.push("spec.image: must not be empty (leave it out for the default image)".to_string());
    }
    if spec.resources.as_ref().is_some_and(|r| r.claims.as_ref().is_some_and(|c| !c.is_empty())) {
        errors.push("spec.resources.claims: dynamic resource claims are not supported".to_string());
    }
    let mut warnings = Vec::new();
    let tls = tls_settings(&spec.tls, &mut errors, &mut warnings);
    let persistence = crate::persistence::validate(&spec.persistence, &mut errors);
    let sysctls = sysctls(spec, &mut errors, &mut warnings);
    let node_tuning = node_tuning(&spec.node_tuning, &mut errors);
    let memory_limit = memory_limit(spec.resources.as_ref(), &mut errors);
    let mut engine_directives = engine_directives(cluster, memory_limit, &mut errors);
    engine_directives.extend(extra_config(&spec.engine.extra_config, &mut errors));
    check_labels(&spec.pod.labels, &mut errors);
    check_service(&spec.service, &mut errors);
    if let Some(interval) = &spec.metrics.service_monitor.interval {
        if !is_duration(interval) {
            errors.push(format!("spec.metrics.serviceMonitor.interval: '{interval}' is not a duration like 30s, 1m or 500ms"));
        }
    }
    let auth = match &spec.auth.secret_ref {
        None => AuthSource::Generated { secret_name: format!("{name}-auth") },
        Some(r) => {
            if r.name.is_empty() || r.key.is_empty() {
                errors.push("spec.auth.secretRef: name and key must not be empty".to_string());
            }
            AuthSource::Referenced { secret_name: r.name.clone(), key: r.key.clone() }
        }
    };
    if spec.upgrade.ready_timeout_seconds < 1 {
        errors.push(format!("spec.upgrade.readyTimeoutSeconds: must be at least 1, got {}", spec.upgrade.ready_timeout_seconds));
    }
    if !(0..=300).contains(&spec.upgrade.handoff_grace_seconds) {
        errors.push(format!("spec.upgrade.handoffGraceSeconds: must be between 0 and 300, got {}", spec.upgrade.handoff_grace_seconds));
    }
    if spec.pod_disruption_budget.max_unavailable < 1 {
        errors.push("spec.podDisruptionBudget.maxUnavailable: must be at least 1 (0 would block every node drain)".to_string());
    }
    if !errors.is_empty() {
        return Err(InvalidSpec { errors });
    }
    Ok(ValidatedSpec {
        replicas: spec.replicas,
        image: spec.resolved_image(),
        image_pull_policy: spec.image_pull_policy.map(|p| p.as_str().to_string()),
        target_version: spec.target_version().to_string(),
        resources: spec.resources.clone(),
        engine_directives,
        max_clock_skew_ms: spec.engine.max_clock_skew_ms.unwrap_or(DEFAULT_MAX_CLOCK_SKEW_MS),
        auth,
        service: spec.service.clone(),
        topology: spec.topology.clone(),
        pdb_max_unavailable: spec.pod_disruption_budget.enabled.then_some(spec.pod_disruption_budget.max_unavailable),
        service_monitor: spec.metrics.service_monitor.enabled.then(|| spec.metrics.service_monitor.clone()),
        network_policy: spec.network_policy.enabled,
        pod: spec.pod.clone(),
        upgrade: spec.upgrade.clone(),
        sysctls,
        node_tuning,
        tls,
        persistence,
        warnings,
    })
}

/// Sysctls Kubernetes sets per pod (they live in the pod's own namespaces): the `net.*` tree and
/// IPC's. Everything else is node-wide.
fn per_pod_sysctl(name: &str) -> bool {
    name.starts_with("net.") || name.starts_with("kernel.shm") || name.starts_with("kernel.msg") || name == "kernel.sem" || name.starts_with("fs.mqueue.")
}

/// `spec.sysctls`, with the deprecated `nodeTuning.somaxconn` copied in.
fn sysctls(spec: &crate::api::CacheClusterSpec, errors: &mut Vec<String>, warnings: &mut Vec<String>) -> BTreeMap<String, String> {
    let mut sysctls = BTreeMap::new();
    for (name, value) in &spec.sysctls {
        let field = format!("spec.sysctls.{name}");
        let well_formed =
            !name.is_empty() && name.split('.').all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
        if !well_formed {
            errors.push(format!("{field}: not a sysctl name (dot-separated words, like net.core.somaxconn)"));
        } else if !per_pod_sysctl(name) {
            let hint = match name.as_str() {
                "vm.overcommit_memory" => " (spec.nodeTuning.vmOvercommitMemory)",
                _ => "",
            };
            errors.push(format!(
                "{field}: a node-wide sysctl cannot be set per pod (only net.*, kernel.shm*, kernel.msg*, kernel.sem and fs.mqueue.* are); node-wide settings belong in spec.nodeTuning{hint}"
            ));
        } else if value.trim().is_empty() || value.contains(['\n', '\r']) {
            errors.push(format!("{field}: needs a value on one line"));
        } else {
            sysctls.insert(name.clone(), value.trim().to_string());
        }
    }
    if let Some(somaxconn) = spec.node_tuning.somaxconn {
        warnings.push("spec.nodeTuning.somaxconn is deprecated (a pod setting under the node section): use spec.sysctls.net.core.somaxconn".to_string());
        sysctls.entry("net.core.somaxconn".to_string()).or_insert_with(|| somaxconn.to_string());
    }
    sysctls
}

fn node_tuning(tuning: &crate::api::NodeTuningSpec, errors: &mut Vec<String>) -> Option<NodeTuning> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    if !tuning.enabled {
        return None;
    }
    let overcommit = match &tuning.vm_overcommit_memory {
        IntOrString::Int(n) if (0..=2).contains(n) => Some(n.to_string()),
        IntOrString::String(s) if s == "unchanged" => None,
        IntOrString::String(s) if matches!(s.as_str(), "0" | "1" | "2") => Some(s.clone()),
        other => {
            let shown = match other {
                IntOrString::Int(n) => n.to_string(),
                IntOrString::String(s) => s.clone(),
            };
            errors.push(format!("spec.nodeTuning.vmOvercommitMemory: '{shown}' is not 0, 1, 2 or unchanged"));
            None
        }
    };
    let thp = match tuning.transparent_huge_pages {
        crate::api::ThpMode::Unchanged => None,
        mode => Some(mode.as_str()),
    };
    Some(NodeTuning {
        transparent_huge_pages: thp,
        overcommit_memory: overcommit,
        node_selector: tuning.node_selector.clone(),
        tolerations: tuning.tolerations.clone(),
    })
}

fn memory_limit(resources: Option<&ResourceRequirements>, errors: &mut Vec<String>) -> Option<u64> {
    let limit = resources?.limits.as_ref()?.get("memory")?;
    let bytes = quantity_bytes(&limit.0);
    if bytes.is_none() {
        errors.push(format!("spec.resources.limits.memory: '{}' is not a valid quantity", limit.0));
    }
    bytes
}

/// The directives that first-class spec fields decide.
fn engine_directives(cluster: &CacheCluster, memory_limit: Option<u64>, errors: &mut Vec<String>) -> Vec<(String, String)> {
    let engine = &cluster.spec.engine;
    let mut directives = Vec::new();
    let maxmemory = match (&engine.maxmemory, engine.maxmemory_percent, memory_limit) {
        (Some(_), Some(_), _) => {
            errors.push("spec.engine: set either maxmemory or maxmemoryPercent, not both".to_string());
            None
        }
        (Some(size), None, limit) => match engine_bytes(size) {
            None => {
                errors.push(format!("spec.engine.maxmemory: '{size}' is not a size the engine reads (bytes, or a number with k, kb, m, mb, g or gb)"));
                None
            }
            Some(bytes) if limit.is_some_and(|l| bytes > l) => {
                errors.push(format!("spec.engine.maxmemory: {bytes} bytes is more than the container memory limit ({} bytes)", limit.unwrap_or(0)));
                None
            }
            Some(bytes) => Some(bytes),
        },
        (None, Some(_), None) => {
            errors.push("spec.engine.maxmemoryPercent: needs a memory limit in spec.resources.limits.memory".to_string());
            None
        }
        (None, Some(percent), Some(limit)) if (1..=100).contains(&percent) => Some(percent_of(limit, percent.unsigned_abs().into())),
        (None, Some(percent), Some(_)) => {
            errors.push(format!("spec.engine.maxmemoryPercent: must be between 1 and 100, got {percent}"));
            None
        }
        (None, None, Some(limit)) => Some(percent_of(limit, DEFAULT_MAXMEMORY_PERCENT)),
        (None, None, None) => None,
    };
    if let Some(bytes) = maxmemory {
        directives.push(("maxmemory".to_string(), bytes.to_string()));
    }
    directives.push(("maxmemory-policy".to_string(), engine.eviction_policy.as_str().to_string()));
    if let Some(threads) = engine.threads {
        if (1..=256).contains(&threads) {
            directives.push(("server-threads".to_string(), threads.to_string()));
        } else {
            errors.push(format!("spec.engine.threads: must be between 1 and 256, got {threads}"));
        }
    }
    match engine.max_clock_skew_ms {
        Some(ms) if ms < 0 || ms > i64::from(i32::MAX) => errors.push(format!("spec.engine.maxClockSkewMs: must be between 0 and {}, got {ms}", i32::MAX)),
        Some(ms) => directives.push(("max-clock-skew-ms".to_string(), ms.to_string())),
        None => {}
    }
    match engine.tombstone_gc_seconds {
        Some(s) if s < 1 || s > i64::from(i32::MAX) => errors.push(format!("spec.engine.tombstoneGcSeconds: must be between 1 and {}, got {s}", i32::MAX)),
        Some(s) => directives.push(("tombstone-gc-seconds".to_string(), s.to_string())),
        None => {}
    }
    directives
}

fn percent_of(bytes: u64, percent: u64) -> u64 {
    u64::try_from(u128::from(bytes) * u128::from(percent) / 100).unwrap_or(u64::MAX)
}

/// How an allow-listed directive's value is checked (the engine's own bounds).
#[derive(Clone, Copy)]
enum Check {
    Int(i64, i64),
    Bytes,
    OneOf(&'static [&'static str]),
}

const INT32: i64 = i32::MAX as i64;

/// Directives a user may set through `spec.engine.extraConfig`.
const ALLOWED: &[(&str, Check)] = &[
    ("databases", Check::Int(1, 1024)),
    ("maxmemory-samples", Check::Int(1, 64)),
    ("maxclients", Check::Int(1, 1_000_000)),
    ("timeout", Check::Int(0, INT32)),
    ("tcp-keepalive", Check::Int(0, INT32)),
    ("repl-timeout", Check::Int(1, INT32)),
    ("repl-backlog-size", Check::Bytes),
    ("tcp-backlog", Check::Int(1, 65535)),
    ("loglevel", Check::OneOf(&["debug", "verbose", "notice", "warning", "nothing"])),
    ("proto-max-bulk-len", Check::Bytes),
    ("client-query-buffer-limit", Check::Bytes),
    ("hash-max-listpack-entries", Check::Int(0, i64::MAX)),
    ("hash-max-listpack-value", Check::Int(0, i64::MAX)),
    ("hash-max-ziplist-entries", Check::Int(0, i64::MAX)),
    ("hash-max-ziplist-value", Check::Int(0, i64::MAX)),
    ("set-max-intset-entries", Check::Int(0, i64::MAX)),
    ("zset-max-listpack-entries", Check::Int(0, i64::MAX)),
    ("zset-max-listpack-value", Check::Int(0, i64::MAX)),
    ("zset-max-ziplist-entries", Check::Int(0, i64::MAX)),
    ("zset-max-ziplist-value", Check::Int(0, i64::MAX)),
    ("list-max-listpack-size", Check::Int(-5, i64::MAX)),
    ("list-max-ziplist-size", Check::Int(-5, i64::MAX)),
    ("list-compress-depth", Check::Int(0, i64::MAX)),
];

/// Directives the operator owns, with what to do instead.
const OWNED: &[(&str, &str)] = &[
    ("port", "the operator sets the client port (6379); change spec.service.port for the Service"),
    ("bind", "the operator binds all addresses inside the pod"),
    ("protected-mode", "the operator turns it off and protects the pods with a password"),
    ("mesh-port", "the operator sets the mesh port (16379)"),
    ("metrics-port", "the operator sets the metrics port (9121)"),
    ("requirepass", "the password comes from spec.auth.secretRef or the generated Secret"),
    ("masterauth", "the password comes from spec.auth.secretRef or the generated Secret"),
    ("replicaof", "the operator manages the peer list"),
    ("node-name", "the operator names each node after its pod"),
    ("active-replica", "the operator always runs a multi-master mesh"),
    ("multi-master", "the operator always runs a multi-master mesh"),
    ("maxmemory", "use spec.engine.maxmemory or spec.engine.maxmemoryPercent"),
    ("maxmemory-policy", "use spec.engine.evictionPolicy"),
    ("server-threads", "use spec.engine.threads"),
    ("max-clock-skew-ms", "use spec.engine.maxClockSkewMs"),
    ("tombstone-gc-seconds", "use spec.engine.tombstoneGcSeconds"),
    ("include", "the operator writes the whole config file"),
    ("dir", "with spec.persistence the snapshots go to the pod's volume"),
    ("dbfilename", "with spec.persistence the snapshots go to the pod's volume"),
    ("logfile", "the engine logs to stdout, for kubectl logs"),
    ("save", "use spec.persistence.snapshotIntervalSeconds"),
    ("appendonly", "KeyMesh snapshots (spec.persistence) and replicates; it has no append-only file"),
    ("clock-offset-ms", "it is a test hook"),
    ("kernel-sys-dir", "it is a test hook"),
    ("kernel-proc-sys-dir", "it is a test hook"),
];

fn extra_config(extra: &BTreeMap<String, String>, errors: &mut Vec<String>) -> Vec<(String, String)> {
    let mut directives = Vec::new();
    for (key, value) in extra {
        let field = format!("spec.engine.extraConfig.{key}");
        let name = key.to_ascii_lowercase();
        if let Some((_, instead)) = OWNED.iter().find(|(owned, _)| *owned == name) {
            errors.push(format!("{field}: the operator manages '{name}' ({instead})"));
            continue;
        }
        let Some((_, check)) = ALLOWED.iter().find(|(allowed, _)| *allowed == name) else {
            let allowed: Vec<&str> = ALLOWED.iter().map(|(n, _)| *n).collect();
            errors.push(format!("{field}: '{name}' is not an engine directive that extraConfig may set (allowed: {})", allowed.join(", ")));
            continue;
        };
        // Normalised as the engine reports it (CONFIG GET), so the operator can tell whether
        // a live engine already has the value.
        let normalised = match *check {
            Check::Int(min, max) => value.trim().parse::<i64>().ok().filter(|n| (min..=max).contains(n)).map(|n| n.to_string()),
            Check::Bytes => engine_bytes(value).map(|b| b.to_string()),
            Check::OneOf(options) => Some(value.to_ascii_lowercase()).filter(|v| options.contains(&v.as_str())),
        };
        let Some(normalised) = normalised else {
            let expected = match *check {
                Check::Int(min, max) => format!("an integer from {min} to {max}"),
                Check::Bytes => "a size such as 64mb or 1gb".to_string(),
                Check::OneOf(options) => format!("one of {}", options.join(", ")),
            };
            errors.push(format!("{field}: '{value}' is not valid, expected {expected}"));
            continue;
        };
        directives.push((name, normalised));
    }
    directives
}

fn check_labels(labels: &BTreeMap<String, String>, errors: &mut Vec<String>) {
    for key in labels.keys() {
        if RESERVED_LABELS.contains(&key.as_str()) || SELECTOR_LABELS.contains(&key.as_str()) {
            errors.push(format!("spec.pod.labels.{key}: the operator sets this label (it selects the cluster's pods)"));
        }
    }
}

fn check_service(service: &ServiceSpec, errors: &mut Vec<String>) {
    if !(1..=65535).contains(&service.port) {
        errors.push(format!("spec.service.port: must be between 1 and 65535, got {}", service.port));
    }
}

/// A Prometheus duration: digits and a unit, possibly repeated (`1m30s`).
fn is_duration(s: &str) -> bool {
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let Some(unit) = ["ms", "s", "m", "h", "d", "w", "y"].into_iter().find(|u| rest.starts_with(u)) else {
            return false;
        };
        rest = &rest[unit.len()..];
    }
    true
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
