//! The cluster network: one "switch" namespace holding bridge `br0`, and one network namespace
//! per pod joined to it by a veth pair.
//!
//! ```text
//!   pod ns <prefix>-p<seq>: eth0 10.244.<node>.<k>/16, default via 10.244.0.1
//!        | veth
//!   switch ns <prefix>-sw: br0 10.244.0.1/16, 10.244.<node>.1/32 (node addresses),
//!                          10.96.0.1/32 (the `kubernetes` Service, forwarded to the apiserver)
//! ```
//!
//! Each node owns `10.244.<node>.0/24` (its `podCIDR`), so cutting a node (a zone) off is a
//! blackhole route to its /24 inside every pod of the other nodes, and back. Built with the
//! toolkit in `crate::netns`, whose rules it follows: nothing is created in the caller's own
//! network namespace (all addresses live inside namespaces made here), and namespaces are named
//! `km-<pid>-a<seq>-...`, so the sweep of namespaces left by dead test processes removes these.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use crate::netns::{self, add_bridge, add_namespace, add_veth_async, ip, ip_async, namespaces_named, remove_namespace, unique_name, NetnsError};

/// The gateway every pod routes through: the bridge's address in the switch namespace.
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);
const BRIDGE: &str = "br0";
/// The bridge's own MAC address, set once (locally administered). A bridge without one takes
/// the lowest MAC of its ports, so it changed whenever a pod's veth with a lower MAC joined: the
/// pods that had cached the gateway's old MAC then lost every packet to the gateway (the
/// apiserver, the node addresses) for 20-40 s, until their ARP entry went stale — an operator
/// replica that could not reach the apiserver at random.
const BRIDGE_MAC: &str = "02:4b:4d:00:00:01";
const POD_IF: &str = "eth0";

/// A failure to run `ip` or to set up the network.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error(transparent)]
    Netns(#[from] NetnsError),
    #[error("node {node} has no free pod address left in 10.244.{node}.0/24")]
    Exhausted { node: usize },
    #[error("failed to listen on {addr} inside namespace {ns}: {source}")]
    Listen { ns: String, addr: SocketAddr, source: std::io::Error },
}

/// A pod's network: its namespace, address and the node subnet it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodNet {
    pub ns: String,
    pub ip: Ipv4Addr,
    pub node: usize,
}

/// The switch namespace, the address pools and the cuts in force; see the module docs.
pub struct ClusterNetwork {
    prefix: String,
    switch: String,
    next_seq: AtomicU32,
    /// Addresses in use, as (node, last octet).
    used: Mutex<BTreeSet<(usize, u8)>>,
    /// Cuts in force: pods on `.0` cannot reach node `.1`'s subnet.
    cuts: Mutex<BTreeSet<(usize, usize)>>,
}

impl ClusterNetwork {
    /// Creates the switch namespace with its bridge, the gateway, one address per node
    /// (`10.244.<node>.1`, the node's InternalIP) and `service_ip`.
    pub fn create(nodes: usize, service_ip: Ipv4Addr) -> Result<Self, NetError> {
        let prefix = unique_name("a");
        let net = ClusterNetwork {
            switch: format!("{prefix}-sw"),
            prefix,
            next_seq: AtomicU32::new(0),
            used: Mutex::new(BTreeSet::new()),
            cuts: Mutex::new(BTreeSet::new()),
        };
        let sw = net.switch.clone();
        add_namespace(&sw)?;
        add_bridge(&sw, BRIDGE, Some(BRIDGE_MAC))?;
        ip(&["-n", &sw, "addr", "add", &format!("{GATEWAY}/16"), "dev", BRIDGE])?;
        ip(&["-n", &sw, "addr", "add", &format!("{service_ip}/32"), "dev", BRIDGE])?;
        for node in 1..=nodes {
            ip(&["-n", &sw, "addr", "add", &format!("{}/32", node_ip(node)), "dev", BRIDGE])?;
        }
        Ok(net)
    }

    /// The switch namespace's name.
    pub fn switch(&self) -> &str {
        &self.switch
    }

    /// Creates a pod namespace on `node` (1-based), with an address from the node's subnet, its
    /// veth on the bridge, a default route, and the routes of every cut in force.
    pub async fn add_pod(&self, node: usize) -> Result<PodNet, NetError> {
        let host = {
            let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
            let host = (2..=254u8).find(|k| !used.contains(&(node, *k))).ok_or(NetError::Exhausted { node })?;
            used.insert((node, host));
            host
        };
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let net = PodNet { ns: format!("{}-p{seq}", self.prefix), ip: Ipv4Addr::new(10, 244, node as u8, host), node };
        let port = format!("v{seq}");
        let (ns, sw) = (net.ns.as_str(), self.switch.as_str());
        let result = async {
            ip_async(&["netns", "add", ns]).await?;
            ip_async(&["-n", ns, "link", "set", "lo", "up"]).await?;
            add_veth_async(ns, POD_IF, sw, &port, BRIDGE).await?;
            ip_async(&["-n", ns, "addr", "add", &format!("{}/16", net.ip), "dev", POD_IF]).await?;
            ip_async(&["-n", ns, "route", "add", "default", "via", &GATEWAY.to_string()]).await?;
            let cuts: Vec<usize> = self.cuts.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|(from, _)| *from == node).map(|(_, to)| *to).collect();
            for to in cuts {
                ip_async(&["-n", ns, "route", "replace", "blackhole", &node_subnet(to)]).await?;
            }
            Ok::<(), NetError>(())
        }
        .await;
        if let Err(e) = result {
            self.remove_pod(&net);
            return Err(e);
        }
        Ok(net)
    }

    /// Kills whatever still runs in the pod's namespace, deletes the namespace (and with it the
    /// veth pair) and frees the address.
    pub fn remove_pod(&self, net: &PodNet) {
        if let Err(e) = remove_namespace(&net.ns) {
            tracing::warn!(ns = %net.ns, error = %e, "failed to remove a pod network namespace");
        }
        let last = net.ip.octets()[3];
        self.used.lock().unwrap_or_else(|e| e.into_inner()).remove(&(net.node, last));
    }

    /// Records that pods on `from` cannot reach node `to`, and adds the route in `pods` (the
    /// namespaces of the pods on `from` now).
    pub fn cut(&self, from: usize, to: usize, pods: &[String]) -> Result<(), NetError> {
        self.cuts.lock().unwrap_or_else(|e| e.into_inner()).insert((from, to));
        for ns in pods {
            ip(&["-n", ns, "route", "replace", "blackhole", &node_subnet(to)])?;
        }
        Ok(())
    }

    /// Removes every cut; `pods_on(node)` lists the namespaces of that node's pods.
    pub fn heal(&self, pods_on: impl Fn(usize) -> Vec<String>) -> Result<(), NetError> {
        let cuts = std::mem::take(&mut *self.cuts.lock().unwrap_or_else(|e| e.into_inner()));
        for (from, to) in cuts {
            for ns in pods_on(from) {
                // A pod that went away meanwhile took its route with it.
                let _ = ip(&["-n", &ns, "route", "del", "blackhole", &node_subnet(to)]);
            }
        }
        Ok(())
    }

    /// Deletes the switch namespace and any pod namespace of this network still present.
    pub fn teardown(&self) {
        for ns in namespaces_named(&format!("{}-", self.prefix)).unwrap_or_default() {
            if let Err(e) = remove_namespace(&ns) {
                tracing::warn!(ns, error = %e, "failed to remove a network namespace");
            }
        }
    }
}

/// Node `node`'s address (1-based), on the bridge: the Node's InternalIP and its pods' hostIP.
pub fn node_ip(node: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 244, node as u8, 1)
}

/// Node `node`'s pod subnet, `10.244.<node>.0/24`.
pub fn node_subnet(node: usize) -> String {
    format!("10.244.{node}.0/24")
}

/// Binds a TCP listener inside namespace `ns` (`netns::listen_in`).
pub fn listen_in(ns: &str, addr: SocketAddr) -> Result<std::net::TcpListener, NetError> {
    netns::listen_in(ns, addr).map_err(|source| NetError::Listen { ns: ns.to_owned(), addr, source })
}

/// Accepts on `listener` (inside the cluster network) and pipes each connection to `target` (on
/// the host's loopback), until the task is dropped.
pub async fn forward(listener: std::net::TcpListener, target: SocketAddr) {
    let listener = match listener.set_nonblocking(true).and_then(|()| tokio::net::TcpListener::from_std(listener)) {
        Ok(l) => l,
        Err(e) => return tracing::warn!(error = %e, "apiserver forwarder failed to start"),
    };
    loop {
        let mut inbound = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, say: wait instead of spinning.
                tracing::warn!(error = %e, "apiserver forwarder failed to accept");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bridge_mac(net: &ClusterNetwork) -> String {
        let link = ip(&["-n", net.switch(), "-br", "link", "show", BRIDGE]).expect("ip link show br0");
        link.split_whitespace().nth(2).unwrap_or_default().to_string()
    }

    /// The regression behind an operator replica that lost the apiserver for 20-40 s at random:
    /// the gateway's MAC must not follow the ports that join the bridge.
    #[tokio::test]
    async fn the_gateway_keeps_its_mac_while_pods_join_and_leave() {
        crate::require_netns!();
        let net = ClusterNetwork::create(2, Ipv4Addr::new(10, 96, 0, 1)).expect("the cluster network");
        let mut pods = Vec::new();
        for node in [1, 2, 1, 2, 1, 2] {
            pods.push(net.add_pod(node).await.expect("a pod network"));
            assert_eq!(bridge_mac(&net), BRIDGE_MAC, "after {} pods joined", pods.len());
        }
        for pod in pods.drain(..3) {
            net.remove_pod(&pod);
            assert_eq!(bridge_mac(&net), BRIDGE_MAC, "after a pod left");
        }
        net.teardown();
    }
}
