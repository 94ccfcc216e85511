//! The network-namespace toolkit: the `ip netns`/veth/bridge plumbing every test network here is
//! built from, and the two networks built from it:
//! - [`Network`] (`network.rs`): N hosts on one switch, for the partition tests;
//! - `agent::network::ClusterNetwork`: pods of the local cluster's nodes on one switch.
//!
//! The rules both follow, which the functions here make the only way to do it:
//! - Nothing is created in, or changed in, the caller's own network namespace: every `ip`
//!   command runs with `-n <ns>` against a namespace made here, and each veth pair is created
//!   from inside its namespace with its peer placed straight into the switch namespace
//!   ([`add_veth`]). Their addresses exist only inside those namespaces.
//! - Namespaces are named `km-<pid>-...`, so that [`sweep_stale`] removes the ones a killed test
//!   process left behind (its `Drop` never ran) once that pid is gone.
//! - A namespace is removed by killing what still runs in it, then deleting it, which deletes its
//!   veths (and a bridge in it) too ([`remove_namespace`]).
//! - A socket in a namespace is made by a short-lived thread that entered it with `setns(2)`
//!   ([`in_namespace`]); the socket stays there after the thread ends, so ordinary I/O on it
//!   works from any thread, and no thread the caller owns ever changes namespace.
//!
//! Only iproute2 and the `setns` system call: no other tool, no daemon.

mod network;

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sched::CloneFlags;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

pub use network::{Host, Network};

/// Every namespace made here starts with this, followed by `-<pid>-`.
pub const NAME_PREFIX: &str = "km";

/// A failure to run `ip` or to build or change a network.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("failed to run `{command}`: {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("`{command}` failed ({status}): {stderr}")]
    Command { command: String, status: String, stderr: String },
    #[error("a network has 1 to 250 hosts, not {0}")]
    HostCount(usize),
}

static NEXT_SEQ: AtomicU32 = AtomicU32::new(0);

/// A name unique to this process and call, `km-<pid>-<tag><seq>`, for a network's namespaces.
pub fn unique_name(tag: &str) -> String {
    format!("{NAME_PREFIX}-{}-{tag}{}", std::process::id(), NEXT_SEQ.fetch_add(1, Ordering::Relaxed))
}

/// Why namespace tests cannot run here (`None` when they can): not root, no `ip`, or the
/// kernel refuses new network namespaces. Checks by creating and deleting one namespace.
pub fn skip_reason() -> Option<String> {
    let euid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(2)).map(str::to_owned));
    if euid.as_deref() != Some("0") {
        return Some(format!("not running as root (effective uid {})", euid.as_deref().unwrap_or("unknown")));
    }
    let probe = unique_name("probe");
    if let Err(e) = ip(&["netns", "add", &probe]) {
        return Some(format!("`ip netns` is unavailable: {e}"));
    }
    let _ = ip(&["netns", "del", &probe]);
    None
}

/// Creates namespace `ns` with its loopback up; on failure, nothing is left behind.
pub fn add_namespace(ns: &str) -> Result<(), NetnsError> {
    ip(&["netns", "add", ns])?;
    ip(&["-n", ns, "link", "set", "lo", "up"]).map(drop).inspect_err(|_| {
        let _ = ip(&["netns", "del", ns]);
    })
}

/// Creates a bridge named `bridge` inside namespace `switch`, up; with `mac`, the bridge keeps
/// that address (without one it takes the lowest of its ports', which changes as ports join).
pub fn add_bridge(switch: &str, bridge: &str, mac: Option<&str>) -> Result<(), NetnsError> {
    match mac {
        Some(mac) => ip(&["-n", switch, "link", "add", bridge, "address", mac, "type", "bridge"])?,
        None => ip(&["-n", switch, "link", "add", bridge, "type", "bridge"])?,
    };
    ip(&["-n", switch, "link", "set", bridge, "up"]).map(drop)
}

/// The commands that plug namespace `ns` into `bridge` in namespace `switch`: a veth pair made
/// inside `ns` (`ns_if` there) whose peer (`port`) goes straight into `switch`, on the bridge,
/// both ends up. Addresses and routes are the caller's.
fn veth_commands<'a>(ns: &'a str, ns_if: &'a str, switch: &'a str, port: &'a str, bridge: &'a str) -> [Vec<&'a str>; 4] {
    [
        vec!["-n", ns, "link", "add", ns_if, "type", "veth", "peer", "name", port, "netns", switch],
        vec!["-n", switch, "link", "set", port, "master", bridge],
        vec!["-n", switch, "link", "set", port, "up"],
        vec!["-n", ns, "link", "set", ns_if, "up"],
    ]
}

/// Plugs namespace `ns` into `bridge` in namespace `switch` (see [`veth_commands`]).
pub fn add_veth(ns: &str, ns_if: &str, switch: &str, port: &str, bridge: &str) -> Result<(), NetnsError> {
    veth_commands(ns, ns_if, switch, port, bridge).iter().try_for_each(|args| ip(args).map(drop))
}

/// [`add_veth`] without blocking an async runtime.
pub async fn add_veth_async(ns: &str, ns_if: &str, switch: &str, port: &str, bridge: &str) -> Result<(), NetnsError> {
    for args in veth_commands(ns, ns_if, switch, port, bridge) {
        ip_async(&args).await?;
    }
    Ok(())
}

/// Runs `f` on a short-lived thread that has entered namespace `ns` (see the module docs).
pub fn in_namespace<T: Send + 'static>(ns: &str, f: impl FnOnce() -> std::io::Result<T> + Send + 'static) -> std::io::Result<T> {
    let path = format!("/run/netns/{ns}");
    let entered = std::thread::spawn(move || -> std::io::Result<T> {
        let handle = File::open(&path)?;
        nix::sched::setns(&handle, CloneFlags::CLONE_NEWNET)?;
        f()
    });
    entered.join().unwrap_or_else(|_| Err(std::io::Error::other("the namespace-entering thread panicked")))
}

/// Opens a TCP connection from inside namespace `ns`.
pub fn connect_in(ns: &str, addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    in_namespace(ns, move || TcpStream::connect_timeout(&addr, timeout))
}

/// Binds a TCP listener inside namespace `ns`; connections made elsewhere stay in the caller's.
pub fn listen_in(ns: &str, addr: SocketAddr) -> std::io::Result<TcpListener> {
    in_namespace(ns, move || TcpListener::bind(addr))
}

/// The namespaces whose names start with `prefix`.
pub fn namespaces_named(prefix: &str) -> Result<Vec<String>, NetnsError> {
    let list = ip(&["netns", "list"])?;
    Ok(list.lines().filter_map(|l| l.split_whitespace().next()).filter(|n| n.starts_with(prefix)).map(str::to_owned).collect())
}

/// Kills every process inside `ns` (they were all started there by a test), waits up to five
/// seconds for them to go, then deletes the namespace.
pub fn remove_namespace(ns: &str) -> Result<(), NetnsError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids: Vec<i32> = ip(&["netns", "pids", ns])?.split_whitespace().filter_map(|p| p.parse().ok()).collect();
        if pids.is_empty() || Instant::now() > deadline {
            break;
        }
        for pid in pids {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    ip(&["netns", "del", ns]).map(drop)
}

/// Removes namespaces named `km-<pid>-...` whose creating process no longer exists (a test
/// process that was killed before its `Drop` ran).
pub fn sweep_stale() {
    let Ok(names) = namespaces_named(&format!("{NAME_PREFIX}-")) else { return };
    for name in names {
        let mut parts = name.splitn(3, '-');
        let (Some(NAME_PREFIX), Some(pid), Some(_)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("keymesh-e2e: removing stale network namespace {name} (its test process {pid} is gone)");
            let _ = remove_namespace(&name);
        }
    }
}

/// Runs `ip args...` and returns its stdout, or an error carrying its stderr.
pub fn ip(args: &[&str]) -> Result<String, NetnsError> {
    let out = Command::new("ip").args(args).stdin(Stdio::null()).output().map_err(|source| NetnsError::Spawn { command: shown(args), source })?;
    checked(args, out)
}

/// [`ip`] without blocking an async runtime.
pub async fn ip_async(args: &[&str]) -> Result<String, NetnsError> {
    let out = tokio::process::Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|source| NetnsError::Spawn { command: shown(args), source })?;
    checked(args, out)
}

fn checked(args: &[&str], out: Output) -> Result<String, NetnsError> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(NetnsError::Command { command: shown(args), status: out.status.to_string(), stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned() })
    }
}

fn shown(args: &[&str]) -> String {
    format!("ip {}", args.join(" "))
}
