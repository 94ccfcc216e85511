//! `keymesh-local-cluster`: KeyMesh's main job on one machine. Starts a Kubernetes 1.20 control
//! plane on loopback and three zoned nodes that run pods (the test node agent), installs the
//! operator with `helm install` of `charts/keymesh-operator`, applies
//! `manifests/examples/cachecluster.yaml` (a 3-replica CacheCluster `demo`), waits until it is
//! Ready, and prints how to reach it. Runs until SIGINT (Ctrl-C) or SIGTERM, then tears
//! everything down. Needs root; `scripts/run-local-cluster.sh` builds and runs it.
//!
//! ```text
//! keymesh-local-cluster [--namespace NS] [--no-example] [--server-tag TAG=BINARY]... [--set KEY=VALUE]...
//! ```

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keymesh_e2e::local_cluster::{LocalCluster, Options, EXAMPLE, EXAMPLE_NAME};

const USAGE: &str = "usage: keymesh-local-cluster [--namespace NS] [--no-example] [--server-tag TAG=BINARY]... [--set KEY=VALUE]...\n\
    --namespace NS          where the example CacheCluster goes (default: default)\n\
    --no-example            start the cluster and the operator only\n\
    --server-tag TAG=PATH   also map image keymesh/keymesh-server:TAG to another build (upgrades)\n\
    --set KEY=VALUE         a value for `helm install` of charts/keymesh-operator\n\
    binaries: target/release (or $KEYMESH_SERVER, $KEYMESH_OPERATOR); tools: $KEYMESH_CACHE";
const READY_LIMIT: Duration = Duration::from_secs(300);

struct Args {
    namespace: String,
    example: bool,
    options: Options,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn,kube=error".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = match parse(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("keymesh-local-cluster: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let cancel = Arc::new(AtomicBool::new(false));
    let signalled = match watch_signals(cancel.clone()) {
        Ok(rx) => rx,
        Err(e) => {
            eprintln!("keymesh-local-cluster: failed to listen for signals: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut options = args.options;
    options.cancel = Some(cancel);
    let started = Instant::now();
    let cluster = match LocalCluster::start(options) {
        Ok(cluster) => cluster,
        Err(e) => {
            eprintln!("keymesh-local-cluster: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = match serve(&cluster, &args.namespace, args.example, started, &signalled) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keymesh-local-cluster: {e}");
            ExitCode::FAILURE
        }
    };
    eprintln!("keymesh-local-cluster: tearing down (pods, node agent, control plane)");
    let teardown = Instant::now();
    drop(cluster);
    eprintln!("keymesh-local-cluster: torn down in {:.1?}", teardown.elapsed());
    code
}

/// Creates the example, prints how to reach it, and waits for a signal.
fn serve(cluster: &LocalCluster, namespace: &str, example: bool, started: Instant, signalled: &mpsc::Receiver<()>) -> Result<(), String> {
    if example {
        cluster.create_example(namespace, READY_LIMIT).map_err(|e| e.to_string())?;
    }
    println!("\nKeyMesh local cluster up in {:.1?}:", started.elapsed());
    for phase in cluster.phases() {
        println!("  {:>7.1?}  {}", phase.took, phase.name);
    }
    println!();
    if example {
        let view = cluster.cache_view(namespace, EXAMPLE_NAME)?;
        println!("CacheCluster {namespace}/{EXAMPLE_NAME} ({EXAMPLE}): {}", view.summary());
        for pod in &view.pods {
            println!("  pod {} on {} ({}), IP {}, ready {}", pod.name, pod.node, pod.zone, pod.ip, pod.ready);
        }
        println!();
        println!("{}", cluster.how_to_reach(namespace, EXAMPLE_NAME).map_err(|e| e.to_string())?);
    } else {
        println!("kubectl --kubeconfig {} get nodes", cluster.control_plane().admin_kubeconfig().display());
    }
    println!("Ctrl-C (SIGINT) or SIGTERM stops everything.");
    let _ = signalled.recv();
    Ok(())
}

/// Sets `cancel` and sends on the returned channel at the first SIGINT or SIGTERM.
fn watch_signals(cancel: Arc<AtomicBool>) -> std::io::Result<mpsc::Receiver<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // Registered here, before any child starts, so a signal never takes the default action.
    let (mut term, mut int) = rt.block_on(async { Ok::<_, std::io::Error>((signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?)) })?;
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        rt.block_on(async {
            tokio::select! {
                _ = term.recv() => eprintln!("\nkeymesh-local-cluster: SIGTERM"),
                _ = int.recv() => eprintln!("\nkeymesh-local-cluster: SIGINT"),
            }
        });
        cancel.store(true, Ordering::Relaxed);
        let _ = tx.send(());
    })?;
    Ok(rx)
}

fn parse(mut argv: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut args = Args { namespace: "default".into(), example: true, options: Options::release_build() };
    while let Some(flag) = argv.next() {
        let mut value = || argv.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--namespace" => args.namespace = value()?,
            "--no-example" => args.example = false,
            "--server-tag" => {
                let v = value()?;
                let (tag, path) = v.split_once('=').ok_or_else(|| format!("--server-tag {v}: expected TAG=BINARY"))?;
                args.options.extra_server_tags.push((tag.to_owned(), path.into()));
            }
            "--set" => args.options.helm_set.push(value()?),
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Some(args))
}
