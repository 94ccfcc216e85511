//! `keymesh-operator` run as a process of the test, against a [`ControlPlane`] with a given
//! kubeconfig (e.g. a ServiceAccount's, so every call is checked by RBAC); killed on drop, its
//! log's tail printed when the test panicked.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::control_plane::ControlPlane;
use crate::local_cluster::repo_root;

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("failed to start {binary}: {source} (build it with cargo build --release -p keymesh-operator)")]
    Start { binary: PathBuf, source: std::io::Error },
}

/// The release build of `keymesh-operator` (`$KEYMESH_OPERATOR` overrides it).
pub fn operator_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("KEYMESH_OPERATOR") {
        return PathBuf::from(path);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo_root().join("target"), PathBuf::from);
    target.join("release/keymesh-operator")
}

pub struct OperatorProcess {
    child: Child,
    log: PathBuf,
}

impl OperatorProcess {
    /// Starts the operator with `kubeconfig` and `args` (leader election, namespace, ...); its
    /// log goes to `<control plane dir>/operator.log`.
    pub fn start(cp: &ControlPlane, kubeconfig: &Path, args: &[&str]) -> Result<OperatorProcess, OperatorError> {
        let log = cp.dir().join("operator.log");
        let binary = operator_binary();
        let file = std::fs::File::create(&log).map_err(|source| OperatorError::Start { binary: binary.clone(), source })?;
        let stderr = file.try_clone().map_err(|source| OperatorError::Start { binary: binary.clone(), source })?;
        let child = Command::new(&binary)
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,keymesh_operator=debug")
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(stderr)
            .spawn()
            .map_err(|source| OperatorError::Start { binary, source })?;
        Ok(OperatorProcess { child, log })
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("--- operator log (last 60 lines) ---\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
    }
}
