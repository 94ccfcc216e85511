//! A test node agent (testing ladder item 5): it makes a [`ControlPlane`]'s pods really run, each
//! as local processes in a network namespace of its own, so the operator, its StatefulSets and
//! the engines can be tested end to end without Docker. A test fixture, not a kubelet.
//!
//! - [`nodes`]: registers the Nodes (default `km-node-{a,b,c}` in zones `zone-{a,b,c}`) and keeps
//!   them Ready with a heartbeat.
//! - [`sync`]: watches Pods, Services and Endpoints; starts a task per pod bound to its nodes
//!   and rewrites every pod's hosts file when names change.
//! - [`pod`]: one pod's life (network, volumes, init containers, containers, restarts, probes,
//!   deletion) and [`status`], what it reports.
//! - [`network`]: the cluster network (a bridge in a "switch" namespace, a namespace and an
//!   address per pod, `10.244.<node>.0/24` per node), zone partitions, and the forwarder that
//!   makes the `kubernetes` Service (10.96.0.1:443) reach the apiserver.
//! - [`hosts`]: the cluster's names as `/etc/hosts` (there is no DNS).
//! - [`provisioner`]: PersistentVolumeClaims of the default StorageClass `keymesh-local` as
//!   directories on the node of their first pod (local-path style, `WaitForFirstConsumer`).
//! - [`runtime`], [`volumes`], [`spec`], [`probes`]: how a container is started, what it sees,
//!   what it is given, how it is probed. [`images`]: which binary an image runs.
//!
//! Guarantees: everything the agent creates (namespaces, veths, processes, files under its
//! directory) is removed by [`Drop`], also during a panic; mounts exist only inside the
//! containers' private mount namespaces and go with them. Nothing is created in this machine's
//! own network namespace, and no traffic leaves the namespaces the agent made, except the
//! forwarder's connections to the apiserver on loopback. Pods asking for a feature the agent
//! does not implement are refused with a `Unsupported` status that says what (see
//! [`spec::unsupported`]), never run differently.

pub mod hosts;
pub mod images;
pub mod network;
pub mod nodes;
pub mod pod;
pub mod probes;
pub mod provisioner;
pub mod runtime;
pub mod spec;
pub mod status;
pub mod sync;
pub mod sysctls;
pub mod volumes;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kube::runtime::reflector::Store;
use kube::Client;
use tokio::sync::watch;

pub use images::{ImageMap, IMAGE_MAP_ENV};
pub use network::{ClusterNetwork, PodNet};
pub use nodes::AgentNode;

use crate::control_plane::{ControlPlane, SERVICE_IP};

/// A failure to start or use a [`NodeAgent`].
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("the node agent cannot run here: {0}")]
    Unavailable(String),
    #[error("failed to read kubeconfig {path}: {reason}")]
    Kubeconfig { path: PathBuf, reason: String },
    #[error("failed to prepare {path}: {source}")]
    Files { path: PathBuf, source: std::io::Error },
    #[error("failed to {what}: {source}")]
    Kube { what: String, source: kube::Error },
    #[error(transparent)]
    Network(#[from] network::NetError),
    #[error("pod {0} is not running on this agent")]
    NoPod(String),
    #[error("failed to run `{command}`: {source}")]
    Command { command: String, source: std::io::Error },
}

/// How to start a [`NodeAgent`].
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The nodes to register, in order (node `i` owns `10.244.<i+1>.0/24`).
    pub nodes: Vec<AgentNode>,
    /// Which binary each image runs.
    pub image_map: ImageMap,
    /// Where `hostPath` volumes live: `<node_root>/<node>/<path>`. Default: `<agent dir>/nodes`.
    pub node_root: Option<PathBuf>,
    /// The agent's directory (pods' files, logs). Default: a fresh temporary directory, removed
    /// on drop unless `KEYMESH_KEEP_TMP` is set or a panic is unwinding.
    pub dir: Option<PathBuf>,
    /// Sysctls allowed beyond Kubernetes' safe set, as a kubelet's `--allowed-unsafe-sysctls`.
    pub allowed_unsafe_sysctls: Vec<String>,
}

impl AgentOptions {
    /// The default three nodes, and `image_map`.
    pub fn new(image_map: ImageMap) -> Self {
        AgentOptions { nodes: AgentNode::defaults(), image_map, node_root: None, dir: None, allowed_unsafe_sysctls: Vec::new() }
    }
}

/// What the agent knows about one of its pods.
#[derive(Debug, Clone)]
pub struct PodInfo {
    pub uid: String,
    pub node: String,
    /// The pod's network namespace (for `ip netns exec`), once it has one.
    pub net: Option<PodNet>,
    /// The pod's hosts file (bind-mounted over each container's `/etc/hosts`).
    pub hosts_file: PathBuf,
    /// Each running container's pid (the container program itself).
    pub pids: BTreeMap<String, u32>,
}

/// One pod in the agent's registry.
pub(crate) struct PodRecord {
    seq: u64,
    namespace: String,
    name: String,
    node: usize,
    hostname: Option<String>,
    subdomain: Option<String>,
    uid: String,
    net: Option<PodNet>,
    hosts_file: PathBuf,
    pids: BTreeMap<String, u32>,
}

/// State shared by the agent's tasks and its handle.
pub struct Shared {
    pub(crate) client: Client,
    pub(crate) images: ImageMap,
    pub(crate) tools: runtime::Tools,
    pub(crate) network: ClusterNetwork,
    pub(crate) service_ip: Ipv4Addr,
    pub(crate) allowed_unsafe_sysctls: Vec<String>,
    dir: PathBuf,
    node_root: PathBuf,
    nodes: Vec<AgentNode>,
    pods: Mutex<BTreeMap<String, PodRecord>>,
    services: Store<Service>,
    endpoints: Store<Endpoints>,
}

impl Shared {
    fn registry(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, PodRecord>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn pod_dir(&self, namespace: &str, name: &str, uid: &str) -> PathBuf {
        self.dir.join("pods").join(format!("{namespace}_{name}_{}", &uid[..uid.len().min(8)]))
    }

    /// `<dir>/logs/<namespace>_<pod>/<container>.log` (appended to across restarts).
    pub(crate) fn log_path(&self, namespace: &str, pod: &str, container: &str) -> PathBuf {
        let dir = self.dir.join("logs").join(format!("{namespace}_{pod}"));
        let _ = std::fs::create_dir_all(&dir);
        dir.join(format!("{container}.log"))
    }

    /// Node `index`'s (1-based) hostPath root.
    pub(crate) fn node_root(&self, index: usize) -> PathBuf {
        self.node_root.join(&self.nodes[index - 1].name)
    }

    pub(crate) fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name).map(|i| i + 1)
    }

    pub(crate) fn set_net(&self, uid: &str, net: Option<PodNet>) {
        if let Some(r) = self.registry().get_mut(uid) {
            r.net = net;
        }
    }

    pub(crate) fn set_pid(&self, uid: &str, container: &str, pid: Option<u32>) {
        if let Some(r) = self.registry().get_mut(uid) {
            match pid {
                Some(pid) => r.pids.insert(container.to_owned(), pid),
                None => r.pids.remove(container),
            };
        }
    }

    /// Rewrites every pod's hosts file from the pods, Services and Endpoints now known.
    pub(crate) fn refresh_hosts(&self) {
        let registry = self.registry();
        let names: Vec<(hosts::PodName, PathBuf)> = registry
            .values()
            .filter_map(|r| {
                let net = r.net.as_ref()?;
                let name = hosts::PodName {
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                    hostname: r.hostname.clone(),
                    subdomain: r.subdomain.clone(),
                    ip: net.ip.to_string(),
                };
                Some((name, r.hosts_file.clone()))
            })
            .collect();
        drop(registry);
        let pods: Vec<hosts::PodName> = names.iter().map(|(n, _)| n.clone()).collect();
        let records = hosts::records(&pods, &self.services.state(), &self.endpoints.state());
        for (pod, path) in &names {
            if let Err(e) = hosts::write_in_place(path, &hosts::render(pod, &records)) {
                tracing::warn!(path = %path.display(), error = %e, "failed to write a hosts file");
            }
        }
    }

    /// Namespaces of the pods on node `index` now.
    fn pod_namespaces_on(&self, index: usize) -> Vec<String> {
        self.registry().values().filter(|r| r.node == index).filter_map(|r| r.net.as_ref().map(|n| n.ns.clone())).collect()
    }
}

/// A running node agent; see the module docs. Dropping it stops every pod and removes all it made.
pub struct NodeAgent {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
    temp: Option<tempfile::TempDir>,
}

impl NodeAgent {
    /// Starts the agent against `cp` with its admin credentials.
    pub fn start(cp: &ControlPlane, options: AgentOptions) -> Result<Self, AgentError> {
        Self::start_with_kubeconfig(cp.admin_kubeconfig(), options)
    }

    /// Starts the agent against the cluster in `kubeconfig` (whose user may manage Nodes, Leases
    /// and Pods, and read ConfigMaps, Secrets, Services and Endpoints); returns once its Nodes
    /// are registered Ready.
    pub fn start_with_kubeconfig(kubeconfig: &Path, options: AgentOptions) -> Result<Self, AgentError> {
        if let Some(why) = crate::netns::skip_reason() {
            return Err(AgentError::Unavailable(why));
        }
        let tools = runtime::Tools::locate().map_err(AgentError::Unavailable)?;
        let (temp, dir) = match &options.dir {
            Some(dir) => (None, dir.clone()),
            None => {
                let temp =
                    tempfile::Builder::new().prefix("keymesh-agent-").tempdir().map_err(|source| AgentError::Files { path: std::env::temp_dir(), source })?;
                let dir = temp.path().to_owned();
                (Some(temp), dir)
            }
        };
        let node_root = options.node_root.clone().unwrap_or_else(|| dir.join("nodes"));
        for d in [&dir, &node_root] {
            std::fs::create_dir_all(d).map_err(|source| AgentError::Files { path: d.clone(), source })?;
        }
        for node in &options.nodes {
            let root = node_root.join(&node.name);
            sysctls::init_node_files(&root).map_err(|source| AgentError::Files { path: root.clone(), source })?;
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("keymesh-node-agent")
            .build()
            .map_err(|source| AgentError::Files { path: dir.clone(), source })?;
        let service_ip: Ipv4Addr = SERVICE_IP.parse().unwrap_or(Ipv4Addr::new(10, 96, 0, 1));
        let (client, apiserver) = rt.block_on(client_for(kubeconfig))?;
        let network = ClusterNetwork::create(options.nodes.len(), service_ip)?;
        let forwarder = match network::listen_in(network.switch(), SocketAddr::from((service_ip, spec::SERVICE_HOST_PORT))) {
            Ok(l) => l,
            Err(e) => {
                network.teardown();
                return Err(e.into());
            }
        };
        let (services, endpoints, pods, notify) = rt.block_on(async { sync::start_watches(&client) });
        let shared = Arc::new(Shared {
            client,
            images: options.image_map.clone(),
            tools,
            network,
            service_ip,
            allowed_unsafe_sysctls: options.allowed_unsafe_sysctls.clone(),
            dir,
            node_root,
            nodes: options.nodes.clone(),
            pods: Mutex::new(BTreeMap::new()),
            services,
            endpoints,
        });
        rt.spawn(network::forward(forwarder, apiserver));
        if let Err(e) = rt.block_on(sync::register_nodes(&shared)) {
            shared.network.teardown();
            return Err(e);
        }
        if let Err(source) = rt.block_on(provisioner::ensure_storage_class(&shared.client)) {
            shared.network.teardown();
            return Err(AgentError::Kube { what: format!("create StorageClass {}", provisioner::STORAGE_CLASS), source });
        }
        rt.spawn(provisioner::run(shared.clone()));
        let (stop, stop_rx) = watch::channel(false);
        let task_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("keymesh-node-agent".into())
            .spawn(move || {
                rt.block_on(sync::run(task_shared, pods, notify, stop_rx));
                rt.shutdown_timeout(Duration::from_secs(2));
            })
            .map_err(|source| AgentError::Files { path: PathBuf::from("(thread)"), source })?;
        Ok(NodeAgent { shared, stop, thread: Some(thread), temp })
    }

    /// The agent's directory (pod files and logs).
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The registered nodes, in order.
    pub fn nodes(&self) -> &[AgentNode] {
        &self.shared.nodes
    }

    /// Node `node`'s hostPath root: a pod's `hostPath: /x/y` is `<this>/x/y`.
    pub fn node_root(&self, node: &str) -> Option<PathBuf> {
        self.shared.node_index(node).map(|i| self.shared.node_root(i))
    }

    /// The log file of `container` in pod `namespace/pod` (stdout and stderr, all restarts).
    pub fn log_path(&self, namespace: &str, pod: &str, container: &str) -> PathBuf {
        self.shared.log_path(namespace, pod, container)
    }

    /// What the agent knows of pod `namespace/name` (its latest incarnation), if it runs here.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<PodInfo> {
        let registry = self.shared.registry();
        let record = registry.values().filter(|r| r.namespace == namespace && r.name == name).max_by_key(|r| r.seq)?;
        Some(PodInfo {
            uid: record.uid.clone(),
            node: self.shared.nodes[record.node - 1].name.clone(),
            net: record.net.clone(),
            hosts_file: record.hosts_file.clone(),
            pids: record.pids.clone(),
        })
    }

    fn running_pod(&self, namespace: &str, name: &str) -> Result<(PodInfo, PodNet), AgentError> {
        let info = self.pod(namespace, name).ok_or_else(|| AgentError::NoPod(format!("{namespace}/{name}")))?;
        let net = info.net.clone().ok_or_else(|| AgentError::NoPod(format!("{namespace}/{name} (no network yet)")))?;
        Ok((info, net))
    }

    /// A command that runs `program` inside pod `namespace/name`: in its first running
    /// container's mount, network and UTS namespaces (so it sees the pod's `/etc/hosts` and
    /// volumes), or only in its network namespace when no container runs.
    pub fn pod_command(&self, namespace: &str, name: &str, program: impl AsRef<OsStr>) -> Result<Command, AgentError> {
        let (info, net) = self.running_pod(namespace, name)?;
        let mut cmd = match info.pids.values().next() {
            Some(pid) => {
                let mut cmd = Command::new(&self.shared.tools.nsenter);
                cmd.args(["-t", &pid.to_string(), "-m", "-n", "-u", "--"]);
                cmd
            }
            None => {
                let mut cmd = Command::new(&self.shared.tools.ip);
                cmd.args(["netns", "exec", &net.ns]);
                cmd
            }
        };
        cmd.arg(program).stdin(Stdio::null());
        Ok(cmd)
    }

    /// Runs `program args...` inside the pod (see [`NodeAgent::pod_command`]), killed after
    /// `limit`; returns its output whatever its exit status.
    pub fn pod_output<I, S>(&self, namespace: &str, name: &str, limit: Duration, program: impl AsRef<OsStr>, args: I) -> Result<Output, AgentError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = self.pod_command(namespace, name, "timeout")?;
        cmd.args(["-k", "1", &format!("{:.3}", limit.as_secs_f64())]).arg(program).args(args);
        let shown = format!("{cmd:?}");
        cmd.output().map_err(|source| AgentError::Command { command: shown, source })
    }

    /// Opens a TCP connection from inside pod `namespace/name`'s network namespace.
    pub fn connect(&self, namespace: &str, name: &str, addr: SocketAddr, timeout: Duration) -> Result<TcpStream, AgentError> {
        let (_, net) = self.running_pod(namespace, name)?;
        crate::netns::connect_in(&net.ns, addr, timeout)
            .map_err(|source| AgentError::Command { command: format!("connect to {addr} from {namespace}/{name}"), source })
    }

    /// Cuts the pods on `node` (a zone) off from the pods on every other node, both ways,
    /// including pods started later, until [`NodeAgent::heal`].
    pub fn isolate_node(&self, node: &str) -> Result<(), AgentError> {
        let others: Vec<String> = self.shared.nodes.iter().filter(|n| n.name != node).map(|n| n.name.clone()).collect();
        let others: Vec<&str> = others.iter().map(String::as_str).collect();
        self.partition_nodes(&[node], &others)
    }

    /// Cuts every pod on the nodes in `a` off from every pod on the nodes in `b`, both ways.
    pub fn partition_nodes(&self, a: &[&str], b: &[&str]) -> Result<(), AgentError> {
        let index = |n: &str| self.shared.node_index(n).ok_or_else(|| AgentError::NoPod(format!("node {n}")));
        for x in a {
            for y in b {
                let (x, y) = (index(x)?, index(y)?);
                if x != y {
                    self.shared.network.cut(x, y, &self.shared.pod_namespaces_on(x))?;
                    self.shared.network.cut(y, x, &self.shared.pod_namespaces_on(y))?;
                }
            }
        }
        Ok(())
    }

    /// Removes every partition.
    pub fn heal(&self) -> Result<(), AgentError> {
        self.shared.network.heal(|i| self.shared.pod_namespaces_on(i)).map_err(AgentError::from)
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.shared.network.teardown();
        let keep = std::thread::panicking() || std::env::var_os("KEYMESH_KEEP_TMP").is_some();
        if let (true, Some(temp)) = (keep, self.temp.take()) {
            eprintln!("keymesh-e2e: node agent files and logs kept in {}", temp.keep().display());
        }
    }
}

/// A client for `kubeconfig`, and the apiserver's socket address (for the forwarder).
async fn client_for(kubeconfig: &Path) -> Result<(Client, SocketAddr), AgentError> {
    let bad = |reason: String| AgentError::Kubeconfig { path: kubeconfig.to_owned(), reason };
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| bad(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await.map_err(|e| bad(e.to_string()))?;
    let url = &config.cluster_url;
    let host = url.host().unwrap_or("127.0.0.1").trim_start_matches('[').trim_end_matches(']').to_owned();
    let port = url.port_u16().unwrap_or(443);
    let addr =
        tokio::net::lookup_host((host.as_str(), port)).await.ok().and_then(|mut a| a.next()).ok_or_else(|| bad(format!("cannot resolve the server {url}")))?;
    let client = Client::try_from(config).map_err(|e| bad(e.to_string()))?;
    Ok((client, addr))
}

/// Records a pod in the registry (by [`sync`]).
pub(crate) fn new_record(shared: &Shared, seq: u64, pod: &Pod, node: usize) -> PodRecord {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    PodRecord {
        seq,
        hosts_file: shared.pod_dir(&namespace, &name, &uid).join("hosts"),
        namespace,
        name,
        node,
        hostname: spec.hostname,
        subdomain: spec.subdomain,
        uid,
        net: None,
        pids: BTreeMap::new(),
    }
}
