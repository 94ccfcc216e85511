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
//! Guarantees (built with the toolkit in `netns`, whose rules it follows):
//! - Nothing is created in, or changed in, the caller's own network namespace. The
//!   `10.231.R.0/24` addresses exist only inside the network's namespaces, so two networks
//!   (even with the same `R`) can never see each other.
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
//! Reaching a host: [`Host::connect`] opens a TCP socket inside the host's namespace
//! (`netns::connect_in`). [`Network::command`] runs a program inside a namespace with
//! `ip netns exec`.

use std::ffi::OsStr;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use super::{add_bridge, add_namespace, add_veth, connect_in, ip, remove_namespace, sweep_stale, unique_name, NetnsError};

/// The bridge inside the switch namespace.
const BRIDGE: &str = "br0";
/// The host end of each veth pair, inside the host's own namespace.
const HOST_IF: &str = "eth0";

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
        let name = unique_name("");
        // Cosmetic only (networks are isolated), but distinct subnets make logs easier to read.
        let seq: u32 = name.rsplit('-').next().and_then(|s| s.parse().ok()).unwrap_or(0);
        let subnet = ((std::process::id().wrapping_mul(31).wrapping_add(seq)) % 250 + 1) as u8;
        let mut net = Network { switch: format!("{name}-sw"), name, hosts: Vec::new(), created: Vec::new(), blackholes: Mutex::new(Vec::new()) };
        let sw = net.switch.clone();
        net.add_namespace(&sw)?;
        add_bridge(&sw, BRIDGE, None)?;
        for index in 0..n {
            let host = Host { index, ns: format!("{}-h{index}", net.name), ip: Ipv4Addr::new(10, 231, subnet, index as u8 + 1) };
            net.add_namespace(&host.ns)?;
            let port = switch_port(index);
            add_veth(&host.ns, HOST_IF, &sw, &port, BRIDGE)?;
            ip(&["-n", &host.ns, "addr", "add", &format!("{}/24", host.ip), "dev", HOST_IF])?;
            net.hosts.push(host);
        }
        Ok(net)
    }

    fn add_namespace(&mut self, ns: &str) -> Result<(), NetnsError> {
        add_namespace(ns)?;
        self.created.push(ns.to_owned());
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

fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program()).chain(cmd.get_args()).map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
}
