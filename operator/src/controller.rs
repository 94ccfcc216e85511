//! The `CacheCluster` controller: `reconcile` is a short pipeline of steps, each its own module:
//!
//! validate → discover + read auth + observe → mesh observe → plan → build → apply → mesh wire
//! → status (+ Events).
//!
//! `error_policy` tells an invalid spec (already reported in status: wait for the spec to
//! change) from a transient error (requeue with exponential backoff, 5 s doubling to 5 min).
//! A successful reconcile requeues after 5 s while a scale is in flight, 15 s while the cluster
//! is not running with a fully connected mesh, and 10 s otherwise (a partition changes no
//! Kubernetes object: only polling the engines shows it).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::NamespaceResourceScope;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::runtime::{predicates, reflector, watcher, Controller, PredicateConfig, WatchStreamExt};
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, info, warn};

use crate::api::{condition_types, CacheCluster, CacheClusterStatus, Phase};
use crate::apply::{apply_children, ApplyError};
use crate::auth::{self, AuthError, Password};
use crate::build::{build_children, BuildError, BuildInput, Capabilities, FIELD_MANAGER, RESERVED_LABELS};
use crate::discovery::{self, DiscoveryError};
use crate::events;
use crate::mesh::{self, MeshClient, PlanInput, ScalePlan, WiringReport};
use crate::metrics::Metrics;
use crate::names::ClusterNames;
use crate::observe::{self, ObserveError};
use crate::status::{self, StatusError, StatusInput};
use crate::validate::{validate, InvalidSpec};

/// Requeue delays after a successful reconcile.
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
    /// Consecutive failed reconciles per object, for the backoff.
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(client: kube::Client, mesh: Arc<dyn MeshClient>, recorder: Recorder, metrics: Metrics, cluster_domain: &str) -> Context {
        Context { client, mesh, recorder, metrics, cluster_domain: cluster_domain.to_string(), failures: Mutex::new(HashMap::new()) }
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
}

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
    let capabilities = discovery::capabilities(&ctx.client).await?;
    let password = auth::password(&Api::<Secret>::namespaced(ctx.client.clone(), &namespace), &spec.auth).await?;
    let observed = observe::observe(&ctx.client, &names).await?;
    let members = mesh::observe(ctx.mesh.as_ref(), observed.pods, password.value()).await;
    let plan =
        mesh::plan(&PlanInput { names: &names, desired: spec.replicas.unsigned_abs(), statefulset_replicas: observed.statefulset_replicas, members: &members });

    let children = build_children(&BuildInput {
        cluster,
        spec: &spec,
        names: &names,
        statefulset_replicas: i32::try_from(plan.statefulset_replicas).unwrap_or(i32::MAX),
        config_peers: &plan.config_peers,
        generated_password: password.generated(),
        capabilities,
    })?;
    apply_children(&ctx.client, &names, children, capabilities).await?;

    let wiring = match password {
        Password::Missing { .. } => WiringReport::default(),
        _ => mesh::wire(ctx.mesh.as_ref(), &members, &plan, password.value()).await,
    };
    let status = status::compute(&StatusInput {
        cluster,
        names: &names,
        spec: &spec,
        members: &members,
        plan: &plan,
        wiring: &wiring,
        password: &password,
        now: Timestamp::now(),
    });
    status::patch_if_changed(&clusters, cluster, &status).await?;
    events::publish(&ctx.recorder, cluster, events::transitions(&names, cluster.status.as_ref(), &status, &plan, &wiring)).await;
    Ok(Action::requeue(requeue_after(&plan, &wiring, &status)))
}

/// Soon while something is moving; slowly once the cluster runs with a full mesh.
pub fn requeue_after(plan: &ScalePlan, wiring: &WiringReport, status: &CacheClusterStatus) -> Duration {
    let connected = status.condition(condition_types::MESH_CONNECTED).is_some_and(|c| c.status == "True");
    if !plan.settled() || !wiring.failed.is_empty() {
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
    let clusters = watcher(api::<CacheCluster>(client, namespace), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicates::generation, PredicateConfig::default());
    let owned = || watcher::Config::default().labels(&format!("{}={FIELD_MANAGER}", RESERVED_LABELS[0]));
    let mut controller = Controller::for_stream(clusters, reader)
        .owns(api::<StatefulSet>(client, namespace), owned())
        .owns(api::<Service>(client, namespace), owned())
        .owns(api::<ConfigMap>(client, namespace), owned())
        .owns(api::<Secret>(client, namespace), owned());
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
