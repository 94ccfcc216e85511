//! `keymesh-node-agent`: runs the test node agent (`keymesh_e2e::agent`) against a cluster until
//! SIGINT or SIGTERM, then stops its pods and removes everything it made.
//!
//! ```text
//! KEYMESH_IMAGE_MAP="keymesh/keymesh-server:dev=target/release/keymesh-server,..." \
//!   keymesh-node-agent --kubeconfig admin.kubeconfig [--dir DIR] [--node-root DIR]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use keymesh_e2e::agent::{AgentOptions, ImageMap, NodeAgent};

const USAGE: &str = "usage: keymesh-node-agent --kubeconfig PATH [--dir DIR] [--node-root DIR]\n\
    images: KEYMESH_IMAGE_MAP=\"image=/path/to/binary,...\"";

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,kube=warn".into()))
        .with_writer(std::io::stderr)
        .init();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keymesh-node-agent: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mut kubeconfig = None;
    let mut options = AgentOptions::new(ImageMap::from_env()?);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().map(PathBuf::from).ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--kubeconfig" => kubeconfig = Some(value()?),
            "--dir" => options.dir = Some(value()?),
            "--node-root" => options.node_root = Some(value()?),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    let kubeconfig = kubeconfig.ok_or_else(|| format!("--kubeconfig is required\n{USAGE}"))?;
    let agent = NodeAgent::start_with_kubeconfig(&kubeconfig, options).map_err(|e| e.to_string())?;
    let names: Vec<&str> = agent.nodes().iter().map(|n| n.name.as_str()).collect();
    eprintln!("keymesh-node-agent: nodes {} ready; files and logs in {}", names.join(", "), agent.dir().display());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let (mut term, mut int) = (signal(SignalKind::terminate()).map_err(|e| e.to_string())?, signal(SignalKind::interrupt()).map_err(|e| e.to_string())?);
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        Ok::<(), String>(())
    })?;
    eprintln!("keymesh-node-agent: stopping pods");
    drop(agent);
    Ok(())
}
