//! The `CacheCluster` controller: `reconcile` is a short pipeline of steps, each its own module:
//!
//! validate → discover + read auth + TLS (`crate::tls`) + observe → mesh observe → plan (upgrade intent, scale,
//! upgrade) → build → apply → handoff → mesh wire → status (+ Events).
//!
//! `error_policy` tells an invalid spec (already reported in status: wait for the spec to
//! change) from a transient error (requeue with exponential backoff, 5 s doubling to 5 min).
//! A successful reconcile requeues after 2 s while a pod is handed off or an upgrade moves, 5 s
//! while a scale is in flight, 15 s while the cluster is not running with a fully connected
//! mesh, and 10 s otherwise (a partition changes no Kubernetes object: only polling the engines
//! shows it). Changes of the cluster's pods trigger a reconcile too (a new pod's readiness gate
//! is opened at once).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::NamespaceResourceScope;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{predicates, reflector, watcher, Controller, PredicateConfig, WatchStreamExt};
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, info, warn};

use crate::api::{condition_types, CacheCluster, CacheClusterStatus, Phase};
use crate::apply::{self, apply_children, ApplyError};
use crate::auth::{self, AuthError, Password};
use crate::build::{
    build_children, engine_settings, mounted_tls, pod_template, BuildError, BuildInput, Capabilities, FIELD_MANAGER, RESERVED_LABELS, SELECTOR_LABELS,
};
use crate::discovery::{self, DiscoveryError};
use crate::events;
use crate::handoff::{self, HandoffReport};
use crate::mesh::{self, MeshClient, PlanInput, ScalePlan, WiringReport};
use crate::metrics::Metrics;
use crate::names::ClusterNames;
use crate::node_tuning::{self, NodeTuningError, Tuners};
use crate::observe::{self, ObserveError};
use crate::persistence::{self, claims, claims::ClaimsError};
use crate::status::{self, StatusError, StatusInput, TLS_REPLICATION};
use crate::tls::{self, TlsError};
use crate::upgrade::{self, HistoryError, Intent, UpgradeInput, UpgradePlan};
use crate::validate::{validate, InvalidSpec};

/// Requeue delays after a successful reconcile.
pub const REQUEUE_HANDOFF: Duration = Duration::from_secs(2);
pub const REQUEUE_SCALING: Duration = Duration::from_secs(5);
pub const REQUEUE_NOT_WIRED: Duration = Duration::from_secs(15);
/// A running cluster is rechecked this often: a partition leaves every pod ready and changes
/// no Kubernetes object, so only polling the engines shows it (MeshConnected, Degraded).
pub const REQUEUE_STEADY: Duration = Duration::from_secs(10);

/// Backoff after failed reconciles: 5 s, doubling, at most 5 min.
pub const BACKOFF_BASE: Duration = Duration::from_secs(5);
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// What every reconcile shares.
pub struct Context {
    pub client: kube::Client,
    /// The engines' admin API; a fake in tests.
    pub mesh: Arc<dyn MeshClient>,
    pub recorder: Recorder,
    pub metrics: Metrics,
    /// The cluster's DNS domain (`cluster.local`), for the pods' stable names.
    pub cluster_domain: String,
    /// The image node-tuning DaemonSets run (the operator's own).
    pub tuner_image: String,
    /// The operator's own namespace, which the engines' NetworkPolicies admit; see
    /// [`Context::with_operator_namespace`].
    pub operator_namespace: Option<String>,
    /// Consecutive failed reconciles per object, for the backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// Whether the API server honours `persistentVolumeClaimRetentionPolicy`: asked once, the
    /// first time a cluster wants persistence.
    pvc_retention_policy: tokio::sync::OnceCell<bool>,
}

impl Context {
    pub fn new(client: kube::Client, mesh: Arc<dyn MeshClient>, recorder: Recorder, metrics: Metrics, cluster_domain: &str, tuner_image: &str) -> Context {
        Context {
            client,
            mesh,
            recorder,
            metrics,
            cluster_domain: cluster_domain.to_string(),
            tuner_image: tuner_image.to_string(),
            operator_namespace: None,
            failures: Mutex::new(HashMap::new()),
            pvc_retention_policy: tokio::sync::OnceCell::new(),
        }
    }

    /// Sets the namespace the operator's pods run in (the engines' NetworkPolicies admit them).
    pub fn with_operator_namespace(mut self, namespace: Option<String>) -> Context {
        self.operator_namespace = namespace;
        self
    }

    async fn pvc_retention_policy(&self) -> Result<bool, DiscoveryError> {
        self.pvc_retention_policy.get_or_try_init(|| discovery::pvc_retention_policy(&self.client)).await.copied()
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid spec: {0}")]
    InvalidSpec(InvalidSpec),
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error(transparent)]
    Observe(#[from] ObserveError),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error(transparent)]
    Status(#[from] StatusError),
    #[error(transparent)]
    History(#[from] HistoryError),
    #[error(transparent)]
    NodeTuning(#[from] NodeTuningError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Claims(#[from] ClaimsError),
}

/// Every `kind` of `Error::kind`, exported at 0 from the start (`crate::metrics`): a new
/// variant's kind goes here too (kept next to `kind` for that reason).
pub const ERROR_KINDS: [&str; 11] = ["invalid_spec", "discovery", "auth", "observe", "build", "apply", "status", "history", "node_tuning", "tls", "claims"];

impl Error {
    /// The `kind` label of the errors metric.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidSpec(_) => "invalid_spec",
            Error::Discovery(_) => "discovery",
            Error::Auth(_) => "auth",
            Error::Observe(_) => "observe",
            Error::Build(_) => "build",
            Error::Apply(_) => "apply",
            Error::Status(_) => "status",
            Error::History(_) => "history",
            Error::NodeTuning(_) => "node_tuning",
            Error::Tls(_) => "tls",
            Error::Claims(_) => "claims",
        }
    }
}

fn key(cluster: &CacheCluster) -> String {
    format!("{}/{}", cluster.namespace().unwrap_or_default(), cluster.name_any())
}

pub async fn reconcile(cluster: Arc<CacheCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile();
    let result = reconcile_cluster(&cluster, &ctx).await;
    match &result {
        Ok(_) => {
            ctx.failures().remove(&key(&cluster));
        }
        Err(e) => ctx.metrics.error(e.kind()),
    }
    result
}

pub fn error_policy(cluster: Arc<CacheCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    if let Error::InvalidSpec(invalid) = error {
        info!(cluster = %key(&cluster), %invalid, "invalid spec reported in status; waiting for it to change");
        return Action::await_change();
    }
    let failures = {
        let mut failures = ctx.failures();
        let count = failures.entry(key(&cluster)).or_insert(0);
        *count = count.saturating_add(1);
        *count
    };
    let delay = backoff(failures);
    warn!(cluster = %key(&cluster), %error, failures, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// 5 s after the first failure, doubling, at most 5 min.
pub fn backoff(failures: u32) -> Duration {
    let factor = 1u32.checked_shl(failures.saturating_sub(1)).unwrap_or(u32::MAX);
    BACKOFF_BASE.saturating_mul(factor).min(BACKOFF_MAX)
}

async fn reconcile_cluster(cluster: &CacheCluster, ctx: &Context) -> Result<Action, Error> {
    let namespace = cluster.namespace().unwrap_or_else(|| ctx.client.default_namespace().to_string());
    let names = ClusterNames::new(&cluster.name_any(), &namespace, &ctx.cluster_domain);
    let clusters: Api<CacheCluster> = Api::namespaced(ctx.client.clone(), &namespace);

    let spec = match validate(cluster) {
        Ok(spec) => spec,
        Err(invalid) => {
            let status = status::invalid(cluster, &invalid, Timestamp::now());
            status::patch_if_changed(&clusters, cluster, &status).await?;
            let event = events::invalid_spec(cluster.status.as_ref(), &status);
            events::publish(&ctx.recorder, cluster, event.into_iter().collect()).await;
            return Err(Error::InvalidSpec(invalid));
        }
    };
    let mut capabilities = discovery::capabilities(&ctx.client).await?;
    if spec.persistence.is_some() {
        capabilities.pvc_retention_policy = ctx.pvc_retention_policy().await?;
    }
    let secrets = Api::<Secret>::namespaced(ctx.client.clone(), &namespace);
    let password = auth::password(&secrets, &spec.auth).await?;
    let observed = observe::observe(&ctx.client, &names).await?;
    let still_mounted = observed.pods.iter().find_map(|p| p.facts.tls_secret.clone());
    let tls = tls::prepare(&secrets, &names, spec.tls.as_ref(), capabilities.cert_manager, still_mounted.as_deref(), Timestamp::now()).await?;
    let tuners = node_tuning::observe(&ctx.client, &names, spec.node_tuning.is_some()).await?;
    let mounted_tls = mounted_tls(&spec, &tls.state);
    let mut settings = engine_settings(&spec, &names, mounted_tls);
    let built = pod_template(&spec, &names, &settings, mounted_tls);
    if let Some(wanted) = mounted_tls {
        // Mutual TLS between the engines once every pod has a certificate to answer with.
        let everyone = observed.pods.len() >= spec.replicas.unsigned_abs() as usize && observed.pods.iter().all(|p| p.facts.tls);
        let value = if wanted.replication && everyone { "yes" } else { "no" };
        settings.live.insert(TLS_REPLICATION.to_string(), value.to_string());
    } else if still_mounted.is_some() {
        // TLS is being turned off (or waits for a certificate): pods that still mount one
        // stream in plain text, so the pods that replace them can join.
        settings.live.insert(TLS_REPLICATION.to_string(), "no".to_string());
    }
    let config_keys: Vec<String> = settings.live.keys().cloned().collect();
    let pods = observed.pods.iter().cloned().map(|mut pod| {
        if let Some(material) = tls.admin.as_ref().filter(|_| pod.facts.tls) {
            pod.member = pod.member.with_tls(material.clone());
        }
        pod
    });
    let members = mesh::observe(ctx.mesh.as_ref(), pods.collect(), password.value(), &config_keys).await;

    let previous = cluster.status.as_ref();
    let now = Timestamp::now();
    let upgrade_input = UpgradeInput {
        names: &names,
        settings: &spec.upgrade,
        replicas: spec.replicas.unsigned_abs(),
        target_version: &spec.target_version,
        built: &built.hash,
        statefulset: observed.statefulset.as_ref(),
        members: &members,
        endpoints: &observed.endpoints,
        previous: previous.and_then(|s| s.upgrade.as_ref()),
        current_version: previous.and_then(|s| s.current_version.as_deref()),
        persistence: spec.persistence.is_some(),
        now,
    };
    let mut intent = upgrade::intent(&upgrade_input);
    let plan_scale = |intent: &Intent| {
        mesh::plan(&PlanInput {
            names: &names,
            desired: spec.replicas.unsigned_abs() + u32::from(intent.surge),
            statefulset_replicas: observed.statefulset_replicas(),
            members: &members,
            endpoints: &observed.endpoints,
            now,
        })
    };
    let mut plan = plan_scale(&intent);
    let mut upgrade = upgrade::plan(&upgrade_input, &intent, &plan);
    let template = match rollback_template(ctx, &names, &upgrade).await? {
        Ok(template) => template.unwrap_or_else(|| built.clone()),
        Err(missing) => {
            // The revision to return to is gone from the history: hold on the failed spec.
            intent = Intent { target: built.hash.clone(), rollback: false, hold_failed: true, surge: intent.surge };
            plan = plan_scale(&intent);
            upgrade = upgrade::plan(&upgrade_input, &intent, &plan);
            if let Some(status) = upgrade.status.as_mut() {
                status.message = format!("{}; cannot roll back: {missing}", status.message);
            }
            built.clone()
        }
    };

    let mut children = build_children(&BuildInput {
        cluster,
        spec: &spec,
        names: &names,
        statefulset_replicas: i32::try_from(plan.statefulset_replicas).unwrap_or(i32::MAX),
        config_peers: &plan.config_peers,
        generated_password: password.generated(),
        capabilities,
        template: &template,
        partition: upgrade.partition,
        tuner_image: &ctx.tuner_image,
        operator_namespace: ctx.operator_namespace.as_deref(),
        tls: &tls,
    })?;
    if node_tuning::holds_creation(spec.node_tuning.is_some(), &plan.step, &tuners) {
        children.statefulset = None;
    }
    let mut persistence_events = Vec::new();
    if let Some(statefulset) = children.statefulset.as_mut().filter(|_| observed.statefulset_exists) {
        persistence::keep_live_claim_size(&observed.claim_templates, statefulset);
        if let Some(reason) = persistence::recreate_reason(&observed.claim_templates, statefulset) {
            info!(cluster = %key(cluster), %reason, "recreating the StatefulSet (its pods keep running) to change its claim templates");
            apply::orphan_statefulset(&ctx.client, &names).await?;
            children.statefulset = None;
            persistence_events.push(events::Transition {
                warning: false,
                reason: "RecreatingStatefulSet",
                action: "Persist",
                note: format!("{reason}: the StatefulSet is created again with its new volume claims; its pods keep running and are replaced one at a time"),
                pod: None,
            });
        }
    }
    apply_children(&ctx.client, &names, children, capabilities, tuners.daemonset).await?;
    if let Some(p) = &spec.persistence {
        let found = claims::observe(&ctx.client, &names).await?;
        let pods: std::collections::BTreeSet<u32> = observed.pods.iter().map(|p| p.member.ordinal).collect();
        let actions = claims::plan(&claims::ClaimsInput {
            names: &names,
            persistence: p,
            claims: &found,
            pods: &pods,
            statefulset_replicas: observed.statefulset_exists.then(|| observed.statefulset_replicas()).flatten(),
            replicas: spec.replicas.unsigned_abs(),
            retention_policy: capabilities.pvc_retention_policy,
            cluster_uid: &cluster.uid().unwrap_or_default(),
        });
        persistence_events.extend(claims::apply(&ctx.client, &names, cluster, &found, &actions).await);
    }
    events::publish(&ctx.recorder, cluster, persistence_events).await;

    let (handoffs, wiring) = match password {
        Password::Missing { .. } => (HandoffReport::default(), WiringReport::default()),
        _ => {
            let mut leaving = plan.handoffs.clone();
            leaving.extend(upgrade.handoff.clone());
            let actions = handoff::actions(&members, &leaving);
            let grace_ms = u64::try_from(spec.upgrade.handoff_grace_seconds).unwrap_or(0) * 1000;
            let handoffs = handoff::apply(&ctx.client, ctx.mesh.as_ref(), &names, &members, &actions, grace_ms, password.value()).await;
            (handoffs, mesh::wire(ctx.mesh.as_ref(), &members, &plan, &settings.live, password.value()).await)
        }
    };
    let status = status::compute(&StatusInput {
        cluster,
        names: &names,
        spec: &spec,
        members: &members,
        plan: &plan,
        upgrade: &upgrade,
        tuners: &tuners,
        wiring: &wiring,
        password: &password,
        tls: &tls,
        now,
    });
    status::patch_if_changed(&clusters, cluster, &status).await?;
    let transitions = events::transitions(&names, cluster.status.as_ref(), &status, &plan, &wiring, &handoffs);
    events::publish(&ctx.recorder, cluster, transitions).await;
    if status.upgrade.is_none() {
        apply::collect_old_config_maps(&ctx.client, &names, &names.config_map(&settings.hash)).await?;
    }
    Ok(Action::requeue(requeue_after(&plan, &upgrade, &tuners, spec.node_tuning.is_some(), &wiring, &status)))
}

/// The template of the revision a failed upgrade rolls back to: `Ok(None)` when not rolling
/// back, `Ok(Err(why))` when the history no longer holds it.
async fn rollback_template(ctx: &Context, names: &ClusterNames, upgrade: &UpgradePlan) -> Result<Result<Option<crate::build::PodTemplate>, String>, Error> {
    if !upgrade.rollback {
        return Ok(Ok(None));
    }
    Ok(match upgrade::find_template(&ctx.client, names, &upgrade.target).await? {
        Some(template) => Ok(Some(template)),
        None => Err(format!("revision {} is no longer in the StatefulSet's history", upgrade.target)),
    })
}

/// Soon while something is moving; slowly once the cluster runs with a full mesh.
pub fn requeue_after(plan: &ScalePlan, upgrade: &UpgradePlan, tuners: &Tuners, tuning: bool, wiring: &WiringReport, status: &CacheClusterStatus) -> Duration {
    let connected = status.condition(condition_types::MESH_CONNECTED).is_some_and(|c| c.status == "True");
    let handing_off = upgrade.handoff.is_some() || plan.handoffs.values().any(|step| !step.complete());
    if handing_off || upgrade.in_flight() {
        REQUEUE_HANDOFF
    } else if !plan.settled() || !wiring.failed.is_empty() || (tuning && !tuners.all_ready()) {
        REQUEUE_SCALING
    } else if status.phase != Some(Phase::Running) || !connected {
        REQUEUE_NOT_WIRED
    } else {
        REQUEUE_STEADY
    }
}

/// Watches CacheClusters (reconciling on spec changes only: the operator's own status writes
/// must not trigger reconciles) and the children the operator owns, until `shutdown` resolves.
pub async fn run(ctx: Arc<Context>, namespace: Option<&str>, capabilities: Capabilities, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    fn api<K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>>(client: &kube::Client, namespace: Option<&str>) -> Api<K> {
        match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
    let client = &ctx.client;
    let (reader, writer) = reflector::store();
    ctx.metrics.clusters.watch(reader.clone());
    let clusters = watcher(api::<CacheCluster>(client, namespace), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicates::generation, PredicateConfig::default());
    let owned = || watcher::Config::default().labels(&format!("{}={FIELD_MANAGER}", RESERVED_LABELS[0]));
    // The pods belong to the StatefulSet, not to the CacheCluster: map them back by label.
    let pod_owner = |pod: Pod| {
        let name = pod.labels().get(SELECTOR_LABELS[1])?.clone();
        Some(ObjectRef::<CacheCluster>::new(&name).within(&pod.namespace()?))
    };
    let mut controller = Controller::for_stream(clusters, reader)
        .owns(api::<StatefulSet>(client, namespace), owned())
        .owns(api::<Service>(client, namespace), owned())
        .owns(api::<ConfigMap>(client, namespace), owned())
        .owns(api::<Secret>(client, namespace), owned())
        .owns(api::<DaemonSet>(client, namespace), owned())
        .watches(api::<Pod>(client, namespace), owned(), pod_owner)
        .owns(api::<NetworkPolicy>(client, namespace), owned());
    if let Some(version) = capabilities.pdb {
        let resource = version.api_resource();
        let pdbs: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        controller = controller.owns_with(pdbs, resource, owned());
    }
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => debug!(cluster = %object, "reconciled"),
                Err(kube::runtime::controller::Error::ReconcilerFailed(_, _)) => {}
                Err(e) => warn!(error = %e, "controller error"),
            }
        })
        .await;
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod reconcile_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_five_minutes() {
        let delays: Vec<u64> = [1, 2, 3, 4, 7, 40].into_iter().map(|n| backoff(n).as_secs()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 300, 300]);
    }
}
