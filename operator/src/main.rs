//! `keymesh-operator`: serves `/metrics` and `/healthz`, waits to become leader (a Lease), then
//! runs the CacheCluster controller until SIGTERM/SIGINT (graceful: in-flight reconciles finish,
//! the Lease is released) or until it stops acting as leader (exits non-zero, so the pod
//! restarts as a follower). Every mutating call goes through the leader gate (`leader::gate`):
//! a replica that cannot renew its lease stops writing before another replica may start.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use keymesh_operator::controller::{self, Context};
use keymesh_operator::discovery::{self, DiscoveryError};
use keymesh_operator::http::{self, HttpError};
use keymesh_operator::leader::{GatedMeshClient, LeaderError, LeaderGate, Leadership};
use keymesh_operator::mesh::GrpcMeshClient;
use keymesh_operator::metrics::Metrics;
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::watch;
use tracing::{error, info};

#[derive(Debug, Parser)]
#[command(name = "keymesh-operator", version, about = "Runs KeyMesh CacheClusters on Kubernetes")]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Watch CacheClusters in this namespace only (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    namespace: Option<String>,
    /// Address of the /metrics and /healthz endpoint.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Namespace of the leader Lease (default: the operator's own namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// Name of the leader Lease.
    #[arg(long, default_value = "keymesh-operator")]
    lease_name: String,
    /// Reconcile without leader election (a single replica, or local development).
    #[arg(long)]
    disable_leader_election: bool,
    /// The cluster's DNS domain, for the pods' stable peer names.
    #[arg(long, default_value = "cluster.local")]
    cluster_domain: String,
    /// This replica's identity in the Lease (default: the pod name, else the host name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// The image the node-tuning DaemonSets run (this operator's own image).
    #[arg(long, env = "KEYMESH_TUNER_IMAGE", default_value = concat!("keymesh/keymesh-operator:", env!("CARGO_PKG_VERSION")))]
    tuner_image: String,
    /// The namespace the operator's pods run in; the engines' NetworkPolicies admit the
    /// operator's pods from it (unknown: from any namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    operator_namespace: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Runs the node tuner (what a CacheCluster's node-tuning DaemonSet runs on each node).
    Tune(TuneArgs),
}

#[derive(Debug, clap::Args)]
struct TuneArgs {
    /// The CacheCluster this tuner works for, `<namespace>/<name>`.
    #[arg(long)]
    owner: String,
    /// The node it runs on (for its status).
    #[arg(long, env = "NODE_NAME", default_value = "")]
    node: String,
    /// Transparent huge pages: always, madvise, never, or unchanged.
    #[arg(long, default_value = "never")]
    transparent_hugepages: String,
    /// vm.overcommit_memory: 0, 1, 2, or unchanged.
    #[arg(long, default_value = "1")]
    overcommit_memory: String,
    /// Where the host's /sys is mounted.
    #[arg(long, default_value = "/mnt/host/sys")]
    sys: std::path::PathBuf,
    /// Where the host's /proc/sys is mounted.
    #[arg(long, default_value = "/mnt/host/proc/sys")]
    proc_sys: std::path::PathBuf,
    /// The node's tuning state directory (a hostPath shared by every tuner on the node).
    #[arg(long, default_value = "/var/lib/keymesh/node-tuning")]
    state_dir: std::path::PathBuf,
    /// Seconds between checks.
    #[arg(long, default_value_t = 5)]
    interval_seconds: u64,
    /// Seconds an outside change is reported before the tuner reapplies the value.
    #[arg(long, default_value_t = 20)]
    drift_hold_seconds: u64,
    /// Address of /readyz and /status.
    #[arg(long, default_value = "0.0.0.0:8081")]
    listen: SocketAddr,
}

#[derive(Debug, thiserror::Error)]
enum MainError {
    #[error("failed to create a Kubernetes client: {0}")]
    Client(#[from] kube::Error),
    #[error("failed to register metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error(transparent)]
    Leader(#[from] LeaderError),
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error(transparent)]
    Tuner(#[from] keymesh_operator::tuner::TunerError),
    #[error("stopped acting as leader (the lease could not be renewed in time); exiting so that only the new leader reconciles")]
    LostLeadership,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")))
        .init();
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!(error = %e, "keymesh-operator stopped");
            ExitCode::FAILURE
        }
    }
}

async fn run_tuner(args: TuneArgs) -> Result<(), MainError> {
    use keymesh_operator::tuner::{self, Roots, Setting, StateDir, TunerConfig};
    let wanted = [(Setting::TransparentHugePages, args.transparent_hugepages), (Setting::OvercommitMemory, args.overcommit_memory)]
        .into_iter()
        .filter(|(_, value)| value != "unchanged")
        .collect();
    let config = TunerConfig {
        owner: args.owner,
        node: args.node,
        wanted,
        roots: Roots { sys: args.sys, proc_sys: args.proc_sys },
        state: StateDir(args.state_dir),
        interval: std::time::Duration::from_secs(args.interval_seconds.max(1)),
        drift_hold: std::time::Duration::from_secs(args.drift_hold_seconds),
        listen: args.listen,
    };
    Ok(tuner::run(config).await?)
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn signals(stop: watch::Sender<bool>) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                error!(error = %e, "failed to listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = terminate => info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => info!("SIGINT: shutting down"),
    }
    let _ = stop.send(true);
}

async fn run(args: Args) -> Result<(), MainError> {
    if let Some(Command::Tune(tune)) = args.command {
        return run_tuner(tune).await;
    }
    let config = kube::Config::infer().await.map_err(|e| MainError::Client(kube::Error::InferConfig(e)))?;
    // The election's own client is not gated (it must renew); everything else is.
    let election_client = kube::Client::try_from(config.clone())?;
    let metrics = Metrics::new()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(signals(stop_tx.clone()));
    let server = tokio::spawn(http::serve(args.metrics_addr, metrics.clone(), stopped(stop_rx.clone())));

    let identity = args.identity.clone().or_else(|| std::env::var("HOSTNAME").ok()).unwrap_or_else(|| "keymesh-operator".to_string());
    let mut leadership = None;
    let gate = if args.disable_leader_election {
        LeaderGate::always(metrics.clone())
    } else {
        let gate = LeaderGate::new(metrics.clone());
        let namespace = args.leader_election_namespace.clone().unwrap_or_else(|| election_client.default_namespace().to_string());
        info!(lease = %format!("{namespace}/{}", args.lease_name), %identity, "waiting to become leader");
        let mut election = Leadership::start(election_client.clone(), &namespace, &args.lease_name, &identity, gate.clone());
        tokio::select! {
            acquired = election.acquired() => acquired?,
            _ = stopped(stop_rx.clone()) => {
                election.release().await;
                return Ok(());
            }
        }
        metrics.leader.set(1);
        leadership = Some(election);
        gate
    };
    let client = kube::client::ClientBuilder::try_from(config)?.with_layer(&gate.layer()).build();

    let capabilities = discovery::capabilities(&client).await?;
    info!(?capabilities, namespace = args.namespace.as_deref().unwrap_or("<all>"), "starting the CacheCluster controller");
    let recorder = Recorder::new(client.clone(), Reporter { controller: "keymesh-operator".to_string(), instance: Some(identity) });
    let mesh = Arc::new(GatedMeshClient { inner: GrpcMeshClient::default(), gate: gate.clone() });
    let ctx = Arc::new(
        Context::new(client, mesh, recorder, metrics.clone(), &args.cluster_domain, &args.tuner_image).with_operator_namespace(args.operator_namespace.clone()),
    );
    let controller = controller::run(ctx, args.namespace.as_deref(), capabilities, stopped(stop_rx.clone()));
    let outcome = tokio::select! {
        _ = controller => Ok(()),
        _ = async {
            match leadership.as_mut() {
                Some(l) => l.lost().await,
                None => std::future::pending().await,
            }
        } => Err(MainError::LostLeadership),
    };
    let _ = stop_tx.send(true);
    metrics.leader.set(0);
    if let Some(election) = leadership {
        election.release().await;
    }
    match server.await {
        Ok(result) => result?,
        Err(e) => error!(error = %e, "HTTP server task failed"),
    }
    outcome
}
