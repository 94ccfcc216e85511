//! Container processes: each runs in its pod's network namespace and a mount and UTS namespace of
//! its own (`ip netns exec <ns> unshare --mount --uts sh -c '<mounts>; exec "$@"' sh <binary>
//! <args>`). `ip netns exec`, `unshare` and the final `exec` all replace the process, so the
//! child's pid is the container program's own: signals go straight to it. Its stdout and stderr
//! are appended to the container's log file.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use super::spec::Launch;
use super::volumes::quote;

/// The PATH the set-up script uses for `mount`, `mkdir` and `hostname`, whatever the
/// container's own PATH is.
const TOOLS_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Absolute paths of the host programs the agent runs.
#[derive(Debug, Clone)]
pub struct Tools {
    pub ip: PathBuf,
    pub unshare: PathBuf,
    pub sh: PathBuf,
    pub nsenter: PathBuf,
}

impl Tools {
    /// Finds every tool on `$PATH` (or the usual system directories).
    pub fn locate() -> Result<Self, String> {
        Ok(Tools { ip: find("ip")?, unshare: find("unshare")?, sh: find("sh")?, nsenter: find("nsenter")? })
    }
}

fn find(name: &str) -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(std::env::split_paths(TOOLS_PATH))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("`{name}` not found on PATH (util-linux and iproute2 are needed)"))
}

/// Everything needed to start one container.
pub struct Start<'a> {
    pub launch: &'a Launch,
    pub netns: &'a str,
    pub hostname: &'a str,
    pub mounts: &'a str,
    pub working_dir: Option<&'a str>,
    pub log: &'a Path,
}

/// The set-up script's variable for the container's PATH, a name used nowhere else: while a
/// process's command line holds it, the process is still the script, not the container's
/// program (`set_up`).
const SET_UP_MARK: &str = "__km_path";

/// How long `start` waits for the set-up script to hand over to the container's program.
const SET_UP_LIMIT: Duration = Duration::from_secs(10);

/// Starts the container (see the module docs) and returns once its program runs: once the
/// set-up script has made its mounts and replaced itself, as a kubelet starts a container only
/// once its volumes are mounted. Returned any earlier, its pid was recorded and reported
/// running while it was still the script, so `nsenter` (an exec in the pod, a probe) could
/// enter a mount namespace without the volumes yet.
pub async fn start(tools: &Tools, s: &Start<'_>) -> std::io::Result<Child> {
    let child = spawn(tools, s)?;
    set_up(&child).await;
    Ok(child)
}

/// Waits until `child` no longer runs the set-up script: its program replaced it, or it exited
/// (a failed mount ends the script; the caller sees the exit), or `SET_UP_LIMIT` passed.
async fn set_up(child: &Child) {
    let Some(pid) = child.id() else { return };
    let cmdline = format!("/proc/{pid}/cmdline");
    let deadline = tokio::time::Instant::now() + SET_UP_LIMIT;
    while tokio::time::Instant::now() < deadline {
        match std::fs::read(&cmdline) {
            // A zombie's command line is empty.
            Ok(args) if args.windows(SET_UP_MARK.len()).any(|w| w == SET_UP_MARK.as_bytes()) => tokio::time::sleep(Duration::from_millis(2)).await,
            _ => return,
        }
    }
}

fn spawn(tools: &Tools, s: &Start<'_>) -> std::io::Result<Child> {
    let mut log = OpenOptions::new().create(true).append(true).open(s.log)?;
    writeln!(log, "--- keymesh node agent: starting {} {}", s.launch.binary.display(), s.launch.args.join(" "))?;
    let cd = s.working_dir.map(|d| format!("cd {}\n", quote(d))).unwrap_or_default();
    let script = format!(
        "set -e\n{SET_UP_MARK}=$PATH\nPATH={TOOLS_PATH}\n{mounts}hostname {host}\nPATH=${SET_UP_MARK}\nunset {SET_UP_MARK}\n{cd}exec \"$@\"\n",
        mounts = s.mounts,
        host = quote(s.hostname),
    );
    let mut cmd = Command::new(&tools.ip);
    cmd.args(["netns", "exec", s.netns])
        .arg(&tools.unshare)
        .args(["--mount", "--uts", "--propagation", "private"])
        .arg(&tools.sh)
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(&s.launch.binary)
        .args(&s.launch.args)
        .env_clear()
        .envs(s.launch.env.iter().map(|(k, v)| (k, v)))
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true);
    cmd.spawn()
}

/// SIGTERM, then SIGKILL after `grace`; returns how the process ended.
pub async fn stop(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    if let Some(pid) = child.id() {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
            return status.ok();
        }
    }
    let _ = child.kill().await;
    child.wait().await.ok()
}
