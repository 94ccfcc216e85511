//! A private network of N hosts built from Linux network namespaces, for partition tests.
//!
//! Layout of one [`Network`] named `km-<pid>-<seq>`:
//!
//! ```text
//!   km-<pid>-<seq>-h0          km-<pid>-<seq>-h1          ...
//!   eth0 10.231.R.1/24         eth0 10.231.R.2/24
//!     |  (veth pair)             |
//!   p0 ---------------- br0 --- p1      <- all in km-<pid>-<seq>-sw (the "switch")
//! ```
//!
//! Guarantees:
//! - Nothing is created in, or changed in, the caller's own network namespace: every `ip`
//!   command runs with `-n <ns>` against a namespace this fixture created, and each veth pair is
//!   created from inside its host namespace with its peer placed straight into the switch
//!   namespace. The `10.231.R.0/24` addresses exist only inside those namespaces, so two
//!   networks (even with the same `R`) can never see each other.
//! - Names are unique per process and per network (`<pid>-<seq>`), so tests running in
//!   parallel, in threads or processes, do not collide. Namespaces left by a test process that
//!   was killed (so its `Drop` never ran) are removed by the next [`Network::new`] once that
//!   pid is gone.
//! - [`Drop`] (also during a panic) kills every process still running in the network's
//!   namespaces, then deletes the namespaces, which deletes every veth and the bridge with them.
//!
//! Faults: [`Network::cut`] sets a host's switch port down (its packets are silently dropped,
//! open TCP connections hang as on a real cable cut); [`Network::partition`] adds
//! `blackhole` host routes between two groups inside their namespaces (sends fail at once,
//! which makes non-transitive partitions, A-B cut while both still reach C, possible).
//! Both use only iproute2.
//!
//! Reaching a host: [`Host::connect`] opens a TCP socket from a short-lived thread that has
//! entered the host's namespace with `setns(2)`; the socket stays in that namespace after the
//! thread ends, so ordinary blocking I/O on it works from any thread. [`Network::command`]
//! runs a program inside a namespace with `ip netns exec`.

use std::ffi::OsStr;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sched::CloneFlags;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Every namespace this fixture creates starts with this, followed by `-<pid>-`.
const NAME_PREFIX: &str = "km";
/// The bridge inside the switch namespace.
const BRIDGE: &str = "br0";
/// The host end of each veth pair, inside the host's own namespace.
const HOST_IF: &str = "eth0";

/// A failure to build or change a [`Network`].
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("failed to run `{command}`: {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("`{command}` failed ({status}): {stderr}")]
    Command { command: String, status: String, stderr: String },
    #[error("a network has 1 to 250 hosts, not {0}")]
    HostCount(usize),
}

/// One host of a [`Network`]: a namespace with one interface and one address.
#[derive(Debug, Clone)]
pub struct Host {
    index: usize,
    ns: String,
    ip: Ipv4Addr,
}

impl Host {
    /// The host's address (`10.231.R.<index+1>`), reachable from the other hosts.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// The name of the host's network namespace (for `ip netns exec`).
    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// The host's position in its network.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Opens a TCP connection from inside this host's namespace.
    pub fn connect(&self, addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
        connect_in(&self.ns, addr, timeout)
    }
}

/// Opens a TCP connection from inside the named namespace (see the module docs for how).
pub fn connect_in(ns: &str, addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    let path = format!("/run/netns/{ns}");
    // A fresh thread, so that no thread the caller owns ever changes namespace.
    let entered = std::thread::spawn(move || -> std::io::Result<TcpStream> {
        let handle = File::open(&path)?;
        nix::sched::setns(&handle, CloneFlags::CLONE_NEWNET)?;
        TcpStream::connect_timeout(&addr, timeout)
    });
    entered.join().unwrap_or_else(|_| Err(std::io::Error::other("the namespace-entering thread panicked")))
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
    let probe = format!("{NAME_PREFIX}-{}-probe{}", std::process::id(), NEXT_SEQ.fetch_add(1, Ordering::Relaxed));
    if let Err(e) = ip(&["netns", "add", &probe]) {
        return Some(format!("`ip netns` is unavailable: {e}"));
    }
    let _ = ip(&["netns", "del", &probe]);
    None
}

static NEXT_SEQ: AtomicU32 = AtomicU32::new(0);

/// A private network of hosts joined by one switch; see the module docs.
pub struct Network {
    name: String,
    switch: String,
    hosts: Vec<Host>,
    /// Every namespace created so far, so that a half-built network is also cleaned up.
    created: Vec<String>,
    /// Blackhole routes in place: (host that holds the route, host it cannot reach).
    blackholes: Mutex<Vec<(usize, usize)>>,
}

impl Network {
    /// Builds a network of `n` hosts (1..=250), all reachable from each other.
    pub fn new(n: usize) -> Result<Self, NetnsError> {
        if n == 0 || n > 250 {
            return Err(NetnsError::HostCount(n));
        }
        sweep_stale();
        let pid = std::process::id();
        let seq = NEXT_SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!("{NAME_PREFIX}-{pid}-{seq}");
        // Cosmetic only (networks are isolated), but distinct subnets make logs easier to read.
        let subnet = ((pid.wrapping_mul(31).wrapping_add(seq)) % 250 + 1) as u8;
        let mut net = Network { switch: format!("{name}-sw"), name, hosts: Vec::new(), created: Vec::new(), blackholes: Mutex::new(Vec::new()) };
        let sw = net.switch.clone();
        net.add_namespace(&sw)?;
        ip(&["-n", &sw, "link", "add", BRIDGE, "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", BRIDGE, "up"])?;
        for index in 0..n {
            let host = Host { index, ns: format!("{}-h{index}", net.name), ip: Ipv4Addr::new(10, 231, subnet, index as u8 + 1) };
            net.add_namespace(&host.ns)?;
            let port = switch_port(index);
            ip(&["-n", &host.ns, "link", "add", HOST_IF, "type", "veth", "peer", "name", &port, "netns", &sw])?;
            ip(&["-n", &sw, "link", "set", &port, "master", BRIDGE])?;
            ip(&["-n", &sw, "link", "set", &port, "up"])?;
            ip(&["-n", &host.ns, "addr", "add", &format!("{}/24", host.ip), "dev", HOST_IF])?;
            ip(&["-n", &host.ns, "link", "set", HOST_IF, "up"])?;
            net.hosts.push(host);
        }
        Ok(net)
    }

    fn add_namespace(&mut self, ns: &str) -> Result<(), NetnsError> {
        ip(&["netns", "add", ns])?;
        self.created.push(ns.to_owned());
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        Ok(())
    }

    /// The network's unique name (`km-<pid>-<seq>`), the prefix of all its namespaces.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of hosts.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Whether the network has no hosts (never true for a built network).
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// Host `i`. Panics when `i` is out of range, as indexing does.
    pub fn host(&self, i: usize) -> &Host {
        &self.hosts[i]
    }

    /// All hosts, in order.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// A command that runs `program` inside host `i`'s namespace (`ip netns exec`, which
    /// execs the program, so the child's pid is the program's).
    pub fn command(&self, i: usize, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.hosts[i].ns]).arg(program);
        cmd
    }

    /// Starts `program args...` inside host `i`'s namespace, stdin closed, output inherited.
    /// The network's `Drop` kills it if it is still running then.
    pub fn spawn<I, S>(&self, i: usize, program: impl AsRef<OsStr>, args: I) -> Result<Child, NetnsError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = self.command(i, program);
        cmd.args(args).stdin(Stdio::null());
        cmd.spawn().map_err(|source| NetnsError::Spawn { command: describe(&cmd), source })
    }

    /// Runs `program args...` inside host `i`'s namespace to completion, killed after `limit`
    /// (coreutils `timeout`); returns its output whatever its exit status.
    pub fn output<I, S>(&self, i: usize, limit: Duration, program: impl AsRef<OsStr>, args: I) -> Result<Output, NetnsError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = self.command(i, "timeout");
        cmd.args(["-k", "1", &format!("{:.3}", limit.as_secs_f64())]).arg(program).args(args).stdin(Stdio::null());
        cmd.output().map_err(|source| NetnsError::Spawn { command: describe(&cmd), source })
    }

    /// Cuts host `i` off the switch (its port goes down; its packets are dropped silently).
    pub fn cut(&self, i: usize) -> Result<(), NetnsError> {
        ip(&["-n", &self.switch, "link", "set", &switch_port(self.hosts[i].index), "down"]).map(drop)
    }

    /// Reconnects host `i` to the switch.
    pub fn heal(&self, i: usize) -> Result<(), NetnsError> {
        ip(&["-n", &self.switch, "link", "set", &switch_port(self.hosts[i].index), "up"]).map(drop)
    }

    /// Stops all traffic between every host in `a` and every host in `b` (both directions),
    /// with blackhole routes inside their namespaces; other pairs are untouched.
    pub fn partition(&self, a: &[usize], b: &[usize]) -> Result<(), NetnsError> {
        let mut held = self.blackholes.lock().unwrap_or_else(|e| e.into_inner());
        for &x in a {
            for &y in b {
                if x == y {
                    continue;
                }
                for (from, to) in [(x, y), (y, x)] {
                    ip(&["-n", &self.hosts[from].ns, "route", "replace", "blackhole", &format!("{}/32", self.hosts[to].ip)])?;
                    if !held.contains(&(from, to)) {
                        held.push((from, to));
                    }
                }
            }
        }
        Ok(())
    }

    /// Cuts host `i` off from every other host with routes (see [`Network::partition`]).
    pub fn isolate(&self, i: usize) -> Result<(), NetnsError> {
        let others: Vec<usize> = (0..self.len()).filter(|&j| j != i).collect();
        self.partition(&[i], &others)
    }

    /// Removes every route that [`Network::partition`] added.
    pub fn heal_partitions(&self) -> Result<(), NetnsError> {
        let mut held = self.blackholes.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(&(from, to)) = held.last() {
            ip(&["-n", &self.hosts[from].ns, "route", "del", "blackhole", &format!("{}/32", self.hosts[to].ip)])?;
            held.pop();
        }
        Ok(())
    }

    /// Undoes every fault: all routes removed, every switch port up.
    pub fn heal_all(&self) -> Result<(), NetnsError> {
        self.heal_partitions()?;
        (0..self.len()).try_for_each(|i| self.heal(i))
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for ns in self.created.iter().rev() {
            if let Err(e) = remove_namespace(ns) {
                eprintln!("keymesh-e2e: warning: failed to remove network namespace {ns}: {e}");
            }
        }
    }
}

/// The switch-side end of host `index`'s veth pair.
fn switch_port(index: usize) -> String {
    format!("p{index}")
}

/// Kills every process inside `ns` (they were all started there by this fixture), waits up to
/// five seconds for them to go, then deletes the namespace.
fn remove_namespace(ns: &str) -> Result<(), NetnsError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids = namespace_pids(ns)?;
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

fn namespace_pids(ns: &str) -> Result<Vec<i32>, NetnsError> {
    let out = ip(&["netns", "pids", ns])?;
    Ok(out.split_whitespace().filter_map(|p| p.parse().ok()).collect())
}

/// Removes namespaces named `km-<pid>-...` whose creating process no longer exists (a test
/// process that was killed before its `Drop` ran).
fn sweep_stale() {
    let Ok(list) = ip(&["netns", "list"]) else { return };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let mut parts = name.splitn(3, '-');
        let (Some(NAME_PREFIX), Some(pid), Some(_)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("keymesh-e2e: removing stale network namespace {name} (its test process {pid} is gone)");
            let _ = remove_namespace(name);
        }
    }
}

/// Runs `ip args...` and returns its stdout, or an error carrying its stderr.
fn ip(args: &[&str]) -> Result<String, NetnsError> {
    let mut cmd = Command::new("ip");
    cmd.args(args).stdin(Stdio::null());
    let out = cmd.output().map_err(|source| NetnsError::Spawn { command: describe(&cmd), source })?;
    if !out.status.success() {
        return Err(NetnsError::Command {
            command: describe(&cmd),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program()).chain(cmd.get_args()).map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
}
