//! `LocalCluster`: KeyMesh's main job on one machine (issue 5, testing ladder item 5). A real
//! Kubernetes 1.20 control plane ([`ControlPlane`]), three zoned nodes that really run pods
//! ([`NodeAgent`]), and the operator installed by `helm install` of `charts/keymesh-operator`,
//! running as the chart's own pods with in-cluster credentials (the agent forwards the
//! `kubernetes` Service to the apiserver). `keymesh-local-cluster` and `tests/cluster_e2e.rs`
//! both start it through [`LocalCluster::start`], so the tests exercise what users run.
//!
//! - [`cache`]: a CacheCluster's status, pods and password, and waiting for it to be Ready.
//! - [`client`]: Redis access to an engine pod (redis-cli inside the pod, RESP connections
//!   opened in the pod's network namespace, `INFO replication` parsed into peer lists).
//! - [`load`]: a steady write load whose acknowledged writes can be checked on every pod.
//!
//! Images: no container images exist here; the agent maps image references to the release
//! binaries (see [`Options::image_map`]): `keymesh/keymesh-server:<workspace version>` (the
//! operator's default engine image) and `keymesh/keymesh-operator:<chart appVersion>` (the
//! chart's default), plus any extra engine tags (`keymesh/keymesh-server:<tag>` → another build,
//! for upgrade tests).
//!
//! Guarantees: every phase is timed ([`LocalCluster::phases`]); a wait that runs out reports what
//! it last saw; with [`Options::cancel`] set, waits stop early once it turns true. Dropping the
//! cluster stops every pod and process and removes every namespace and file it made (the
//! agent first, then the control plane), also during a panic (files are then kept and their
//! path printed, as the fixtures do).

pub mod cache;
pub mod client;
pub mod load;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::agent::{AgentError, AgentOptions, ImageMap, NodeAgent};
use crate::control_plane::{ControlPlane, ControlPlaneError};

/// The namespace the chart is installed into.
pub const OPERATOR_NAMESPACE: &str = "keymesh-system";
/// The Helm release name; equal to the chart's name, so the chart's objects are called
/// `keymesh-operator` (the chart's `fullname` drops a release name that contains it).
pub const RELEASE: &str = "keymesh-operator";
/// The engine image repository (the operator's default, `DEFAULT_IMAGE_REPOSITORY`).
pub const SERVER_REPOSITORY: &str = "keymesh/keymesh-server";
/// The operator image repository (the chart's `image.repository`).
pub const OPERATOR_REPOSITORY: &str = "keymesh/keymesh-operator";
/// The workspace version: the operator's default engine tag (`DEFAULT_VERSION`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The version of the second engine build the upgrade tests roll to: the same code, built by
/// `scripts/build-next-engine.sh` with `KEYMESH_BUILD_VERSION=<VERSION>-next`, mapped to the tag
/// of that name.
pub fn next_version() -> String {
    format!("{VERSION}-next")
}

/// The unsafe sysctls the local cluster's kubelets (the node agent) allow.
pub const LOCAL_UNSAFE_SYSCTLS: [&str; 2] = ["net.core.somaxconn", "net.ipv4.tcp_max_syn_backlog"];

/// The example the main job applies (a 3-replica CacheCluster named `demo`).
pub const EXAMPLE: &str = "manifests/examples/cachecluster.yaml";
pub const EXAMPLE_NAME: &str = "demo";

/// The kubeconfig file an in-pod kube-rs client run as root would find; see
/// [`LocalCluster::start`].
const ROOT_KUBECONFIG: &str = "/root/.kube/config";
const POLL: Duration = Duration::from_millis(250);
const OPERATOR_READY: Duration = Duration::from_secs(120);

/// A failure to start or use a [`LocalCluster`].
#[derive(Debug, thiserror::Error)]
pub enum LocalClusterError {
    #[error("{what} not found at {path}: {hint}")]
    Missing { what: String, path: PathBuf, hint: String },
    #[error(transparent)]
    ControlPlane(#[from] ControlPlaneError),
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error("{what}: not after {waited:.0?}; last seen: {last}")]
    Timeout { what: String, waited: Duration, last: String },
    #[error("stopped by a signal while waiting for {0}")]
    Cancelled(String),
    #[error("failed to {what}: {reason}")]
    Failed { what: String, reason: String },
}

/// How to start a [`LocalCluster`].
#[derive(Debug, Clone)]
pub struct Options {
    /// The repository checkout (the chart and the examples are read from it).
    pub repo: PathBuf,
    pub server_binary: PathBuf,
    pub operator_binary: PathBuf,
    /// More engine builds, as `(tag, binary)`: `keymesh/keymesh-server:<tag>` runs `binary`.
    pub extra_server_tags: Vec<(String, PathBuf)>,
    /// `--set` values for `helm install`.
    pub helm_set: Vec<String>,
    /// Install the chart from this reference (e.g. `oci://127.0.0.1:5000/charts/keymesh-operator`)
    /// instead of the checkout's `charts/keymesh-operator`.
    pub chart_ref: Option<String>,
    /// More `helm install` flags (e.g. `--version 0.1.0`, `--plain-http`).
    pub helm_args: Vec<String>,
    /// When it turns true, every wait returns [`LocalClusterError::Cancelled`].
    pub cancel: Option<Arc<AtomicBool>>,
}

impl Options {
    /// The release builds in `$CARGO_TARGET_DIR` (default `<repo>/target`), overridable with
    /// `KEYMESH_SERVER` and `KEYMESH_OPERATOR`.
    pub fn release_build() -> Self {
        let repo = repo_root();
        let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo.join("target"), PathBuf::from);
        let pick = |var: &str, name: &str| std::env::var_os(var).map_or_else(|| target.join("release").join(name), PathBuf::from);
        Options {
            server_binary: pick("KEYMESH_SERVER", "keymesh-server"),
            operator_binary: pick("KEYMESH_OPERATOR", "keymesh-operator"),
            repo,
            extra_server_tags: Vec::new(),
            helm_set: Vec::new(),
            chart_ref: None,
            helm_args: Vec::new(),
            cancel: None,
        }
    }

    /// Adds the upgrade tests' second engine build (`KEYMESH_SERVER_NEXT`, default
    /// `keymesh-server-next` beside the release build) as tag [`next_version`].
    pub fn with_next_engine(mut self) -> Self {
        let next = std::env::var_os("KEYMESH_SERVER_NEXT").map_or_else(|| self.server_binary.with_file_name("keymesh-server-next"), PathBuf::from);
        self.extra_server_tags.push((next_version(), next));
        self
    }

    pub fn chart(&self) -> PathBuf {
        self.repo.join("charts/keymesh-operator")
    }

    /// The chart's `appVersion`: the operator image tag its Deployment uses by default.
    pub fn chart_app_version(&self) -> Result<String, LocalClusterError> {
        let path = self.chart().join("Chart.yaml");
        let text =
            std::fs::read_to_string(&path).map_err(|e| LocalClusterError::Missing { what: "the chart".into(), path: path.clone(), hint: e.to_string() })?;
        text.lines()
            .find_map(|l| l.strip_prefix("appVersion:"))
            .map(|v| v.trim().trim_matches('"').trim_matches('\'').to_owned())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| LocalClusterError::Missing { what: "appVersion".into(), path, hint: "the chart must name its appVersion".into() })
    }

    /// Image → binary for the agent: the engine at the operator's default tag, the operator at
    /// the chart's default tag, and the extra engine tags. Every binary must exist.
    pub fn image_map(&self) -> Result<ImageMap, LocalClusterError> {
        let exists = |what: &str, path: &Path| {
            if path.is_file() {
                Ok(())
            } else {
                Err(LocalClusterError::Missing {
                    what: what.into(),
                    path: path.to_owned(),
                    hint: "build it with `cargo build --release -p keymesh-engine -p keymesh-operator`".into(),
                })
            }
        };
        exists("keymesh-server", &self.server_binary)?;
        exists("keymesh-operator", &self.operator_binary)?;
        let mut map = ImageMap::new()
            .with(&format!("{SERVER_REPOSITORY}:{VERSION}"), &self.server_binary)
            .with(&format!("{OPERATOR_REPOSITORY}:{}", self.chart_app_version()?), &self.operator_binary);
        for (tag, binary) in &self.extra_server_tags {
            if !binary.is_file() {
                return Err(LocalClusterError::Missing {
                    what: format!("keymesh-server for tag {tag}"),
                    path: binary.clone(),
                    hint: "build it with scripts/build-next-engine.sh (scripts/test.sh does)".into(),
                });
            }
            map = map.with(&format!("{SERVER_REPOSITORY}:{tag}"), binary);
        }
        Ok(map)
    }
}

/// The repository root (this crate's parent directory).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// How long one start-up phase took.
#[derive(Debug, Clone)]
pub struct Phase {
    pub name: String,
    pub took: Duration,
}

/// A running local cluster; see the module docs.
pub struct LocalCluster {
    // Field order is drop order: the agent stops its pods while the apiserver still answers.
    agent: NodeAgent,
    cp: ControlPlane,
    options: Options,
    phases: Mutex<Vec<Phase>>,
}

impl LocalCluster {
    /// Starts the control plane and the node agent, installs the chart, and returns once the
    /// operator's pods are Ready and one of them holds the leader Lease.
    pub fn start(options: Options) -> Result<Self, LocalClusterError> {
        let images = options.image_map()?;
        // Pods see this machine's files, and kube-rs prefers a kubeconfig file (for root without
        // $HOME: /root/.kube/config) to its in-cluster credentials: the operator pods would
        // manage whatever cluster that file names.
        let kubeconfig = Path::new(ROOT_KUBECONFIG);
        if kubeconfig.exists() {
            return Err(LocalClusterError::Failed {
                what: "start the operator pods safely".into(),
                reason: format!("{ROOT_KUBECONFIG} exists and the operator pods (run by the node agent on this machine's files) would use it instead of the local cluster; move it away while the local cluster runs"),
            });
        }
        let started = Instant::now();
        let cp = ControlPlane::start()?;
        let cp_took = started.elapsed();
        check_cancel(&options, "the node agent")?;
        let started = Instant::now();
        // As the docs tell EKS users to do for the listen backlog.
        let agent_options = AgentOptions { allowed_unsafe_sysctls: LOCAL_UNSAFE_SYSCTLS.iter().map(|s| s.to_string()).collect(), ..AgentOptions::new(images) };
        let agent = NodeAgent::start(&cp, agent_options)?;
        let cluster = LocalCluster { agent, cp, phases: Mutex::new(Vec::new()), options };
        cluster.record("control plane (etcd, apiserver, controller manager, scheduler)", cp_took);
        cluster.record("node agent (3 nodes Ready)", started.elapsed());
        cluster.timed("helm install; operator pods Ready and leading", |c| c.install_operator())?;
        Ok(cluster)
    }

    fn install_operator(&self) -> Result<(), LocalClusterError> {
        let chart = match &self.options.chart_ref {
            Some(reference) => reference.clone(),
            None => {
                let chart = self.options.chart();
                if !chart.join("templates/deployment.yaml").is_file() {
                    return Err(LocalClusterError::Missing {
                        what: "the Helm chart's templates".into(),
                        path: chart.join("templates"),
                        hint: "charts/keymesh-operator is incomplete".into(),
                    });
                }
                chart.to_string_lossy().into_owned()
            }
        };
        let mut args: Vec<String> =
            ["install", RELEASE, &chart, "--namespace", OPERATOR_NAMESPACE, "--create-namespace"].iter().map(|s| s.to_string()).collect();
        for value in &self.options.helm_set {
            args.extend(["--set".to_owned(), value.clone()]);
        }
        args.extend(self.options.helm_args.iter().cloned());
        self.cp.helm(&args)?;
        let selector = format!("app.kubernetes.io/instance={RELEASE}");
        self.wait_for("the operator's pods to be Ready", OPERATOR_READY, || {
            let pods = self.get_json(&["pods", "-n", OPERATOR_NAMESPACE, "-l", &selector])?;
            let items = pods["items"].as_array().cloned().unwrap_or_default();
            let ready = items.iter().filter(|p| cache::pod_ready(p)).count();
            if !items.is_empty() && ready == items.len() {
                Ok(())
            } else {
                Err(format!("{ready}/{} Ready; {}", items.len(), cache::pod_states(&items)))
            }
        })?;
        self.wait_for("an operator pod to hold the leader Lease", OPERATOR_READY, || {
            let lease = self.get_json(&["lease", "-n", OPERATOR_NAMESPACE])?;
            let holders: Vec<String> =
                lease["items"].as_array().into_iter().flatten().filter_map(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned)).collect();
            if holders.iter().any(|h| !h.is_empty()) {
                Ok(())
            } else {
                Err(format!("leases: {lease}"))
            }
        })
    }

    /// Applies `manifests/examples/cachecluster.yaml` in `namespace` and waits until it is Ready
    /// (see [`cache::ready`]); records the phase.
    pub fn create_example(&self, namespace: &str, limit: Duration) -> Result<cache::ClusterView, LocalClusterError> {
        let example = self.options.repo.join(EXAMPLE);
        self.timed(&format!("CacheCluster {namespace}/{EXAMPLE_NAME} applied until Ready"), |c| {
            c.ensure_namespace(namespace)?;
            c.cp.kubectl(["apply", "-n", namespace, "-f", &example.to_string_lossy()])?;
            c.wait_cache_ready(namespace, EXAMPLE_NAME, limit)
        })
    }

    /// Creates `namespace` unless it exists.
    pub fn ensure_namespace(&self, namespace: &str) -> Result<(), LocalClusterError> {
        if self.cp.kubectl(["get", "namespace", namespace, "-o", "name"]).is_err() {
            self.cp.kubectl(["create", "namespace", namespace])?;
        }
        Ok(())
    }

    pub fn control_plane(&self) -> &ControlPlane {
        &self.cp
    }

    pub fn agent(&self) -> &NodeAgent {
        &self.agent
    }

    /// Every phase timed so far, in order.
    pub fn phases(&self) -> Vec<Phase> {
        self.phases.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Runs `f`, recording how long it took as phase `name`.
    pub fn timed<T>(&self, name: &str, f: impl FnOnce(&Self) -> Result<T, LocalClusterError>) -> Result<T, LocalClusterError> {
        let started = Instant::now();
        let out = f(self)?;
        self.record(name, started.elapsed());
        Ok(out)
    }

    /// Records (and prints) that phase `name` took `took`.
    fn record(&self, name: &str, took: Duration) {
        eprintln!("local-cluster: {name}: {took:.1?}");
        self.phases.lock().unwrap_or_else(|e| e.into_inner()).push(Phase { name: name.to_owned(), took });
    }

    /// `kubectl get <args> -o json` as admin, parsed.
    pub fn get_json(&self, args: &[&str]) -> Result<serde_json::Value, String> {
        let mut all = vec!["--request-timeout=10s", "get"];
        all.extend_from_slice(args);
        all.extend(["-o", "json"]);
        let out = self.cp.kubectl(&all).map_err(|e| e.to_string())?;
        serde_json::from_str(&out).map_err(|e| format!("bad JSON from kubectl get {}: {e}", args.join(" ")))
    }

    /// Polls `check` every 250 ms until it returns `Ok`; fails after `limit` with its last error,
    /// or at once when the cancel flag is set.
    pub fn wait_for<T>(&self, what: &str, limit: Duration, mut check: impl FnMut() -> Result<T, String>) -> Result<T, LocalClusterError> {
        let started = Instant::now();
        loop {
            check_cancel(&self.options, what)?;
            match check() {
                Ok(value) => return Ok(value),
                Err(last) if started.elapsed() > limit => {
                    return Err(LocalClusterError::Timeout { what: what.to_owned(), waited: started.elapsed(), last });
                }
                Err(_) => std::thread::sleep(POLL),
            }
        }
    }

    /// The lines that tell a user how to reach the cluster and the example's pods.
    pub fn how_to_reach(&self, namespace: &str, name: &str) -> Result<String, LocalClusterError> {
        let kubeconfig = self.cp.admin_kubeconfig().display().to_string();
        let kubectl = self.cp.kubectl_path().display().to_string();
        let view = self.cache_view(namespace, name).map_err(|reason| LocalClusterError::Failed { what: format!("read {namespace}/{name}"), reason })?;
        let mut out = format!(
            "kubectl (v1.33, from the cache; any kubectl works):\n  {kubectl} --kubeconfig {kubeconfig} get cacheclusters -A\n  export KUBECONFIG={kubeconfig}\n\nredis-cli inside each pod's network namespace (password from Secret {name}-auth):\n",
        );
        let password = self.password(namespace, name).map_err(|reason| LocalClusterError::Failed { what: "read the password".into(), reason })?;
        for pod in &view.pods {
            let Some(net) = self.agent.pod(namespace, &pod.name).and_then(|p| p.net) else { continue };
            out.push_str(&format!(
                "  {pod} ({zone}): ip netns exec {ns} redis-cli -h {ip} -a '{password}' --no-auth-warning\n",
                pod = pod.name,
                zone = pod.zone,
                ns = net.ns,
                ip = net.ip,
            ));
        }
        out.push_str(&format!(
            "\nlogs: {agent}/logs/<namespace>_<pod>/<container>.log; control plane: {cp}\n",
            agent = self.agent.dir().display(),
            cp = self.cp.dir().display()
        ));
        Ok(out)
    }
}

/// Holds the machine-wide lock that lets only one local cluster run at a time (two clusters
/// under load on a small machine would make every time measured meaningless); released on drop.
pub struct Serial(#[allow(dead_code)] std::fs::File);

/// Takes the lock (see [`Serial`]), waiting for another cluster test to finish.
pub fn serial() -> Serial {
    let path = std::env::temp_dir().join("keymesh-cluster-e2e.lock");
    let file = std::fs::File::create(&path).unwrap_or_else(|e| panic!("create the lock file {}: {e}", path.display()));
    let started = Instant::now();
    if let Err(e) = file.lock() {
        panic!("lock {}: {e}", path.display());
    }
    if started.elapsed() > Duration::from_secs(1) {
        eprintln!("waited {:.1?} for another cluster test to finish", started.elapsed());
    }
    Serial(file)
}

fn check_cancel(options: &Options, what: &str) -> Result<(), LocalClusterError> {
    match &options.cancel {
        Some(flag) if flag.load(Ordering::Relaxed) => Err(LocalClusterError::Cancelled(what.to_owned())),
        _ => Ok(()),
    }
}
