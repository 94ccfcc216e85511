//! `ControlPlane`: a real Kubernetes 1.20.2 control plane on loopback for tests (testing ladder
//! item 4): etcd, kube-apiserver, kube-controller-manager and kube-scheduler, each a process
//! of this test, plus the paths of a real `kubectl` and `helm`.
//!
//! The binaries come from `scripts/install-control-plane.sh` (kube-* built from Debian's
//! `kubernetes` source package into `$KEYMESH_CACHE/k8s-1.20.2/bin`, etcd from Debian) and
//! `scripts/install-kube-tools.sh` (`$KEYMESH_CACHE/bin/{kubectl,helm}`); `KEYMESH_CACHE`
//! defaults to `/var/cache/keymesh`. Without them [`ControlPlane::start`] fails saying which
//! script to run.
//!
//! Guarantees:
//! - Everything is per instance, so tests may start control planes in parallel: a fresh CA and
//!   certificates ([`pki`]), a temporary directory holding them, etcd's data and every log,
//!   and free `127.0.0.1` ports. Nothing listens anywhere but loopback, and nothing is sent
//!   anywhere else: the apiserver's advertised address is only written into the `kubernetes`
//!   Endpoints object, which no one here dials (there is no kube-proxy).
//! - [`ControlPlane::start`] returns once `/readyz` answers `ok` and the `default`
//!   ServiceAccount of namespace `default` has its token Secret (so the controller manager's
//!   token controller, and with it the StatefulSet, garbage-collector and other default
//!   controllers, are running). A failure names the component and carries its log's tail.
//! - The apiserver runs `--authorization-mode=Node,RBAC`: the admin kubeconfig
//!   (`O=system:masters`) may do anything, a ServiceAccount's kubeconfig
//!   ([`ControlPlane::service_account_kubeconfig`]) only what its bindings allow.
//! - [`Drop`] (also during a panic) kills every process it started and waits for it. The
//!   processes stay in the test's process group, so a test killed before `Drop` runs (nextest
//!   kills the whole group on timeout) takes them with it. The directory is removed unless
//!   `KEYMESH_KEEP_TMP` is set or the test is panicking; then its path is printed.

pub mod pki;

use std::ffi::OsStr;
use std::fs::File;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pki::{Credentials, Pki};

/// The Kubernetes version `scripts/install-control-plane.sh` builds.
pub const K8S_VERSION: &str = "1.20.2";
/// The service CIDR, and its first address (the `kubernetes` Service's ClusterIP).
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
pub const SERVICE_IP: &str = "10.96.0.1";
/// The address the apiserver advertises: it only goes into the `kubernetes` Endpoints object,
/// which nothing here dials (no kube-proxy, clients use the loopback URL). It cannot be
/// loopback: Endpoints validation rejects 127.0.0.0/8, so the object is never written and the
/// apiserver logs an error every 10 s. Without the flag 1.20 advertises the default-route
/// interface's address, which differs per machine and is missing in a bare network namespace.
/// So a fixed address from TEST-NET-2 (RFC 5737, documentation only).
pub const ADVERTISE_ADDRESS: &str = "198.51.100.1";
const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Bounds each start-up phase; generous because parallel tests share few cores.
const PHASE_TIMEOUT: Duration = Duration::from_secs(120);
/// Bounds each `kubectl` request made while polling.
const POLL_REQUEST_TIMEOUT: &str = "--request-timeout=5s";
const POLL_INTERVAL: Duration = Duration::from_millis(250);
const LOG_TAIL_LINES: usize = 30;
/// A start whose ports were taken by someone else between choosing and binding them is retried
/// with new ports this many times in all.
const START_ATTEMPTS: usize = 3;

/// A failure to start or use a [`ControlPlane`].
#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    #[error("{what} not found at {path}: run {script}")]
    Missing { what: String, path: PathBuf, script: &'static str },
    #[error("failed to prepare {path}: {source}")]
    Files { path: PathBuf, source: std::io::Error },
    #[error("failed to choose free loopback ports: {0}")]
    Ports(std::io::Error),
    #[error("failed to run `{command}`: {reason}")]
    Command { command: String, reason: String },
    #[error("{component} did not start: {reason}\n--- last lines of {log} ---\n{tail}")]
    Start { component: &'static str, reason: String, log: PathBuf, tail: String },
    #[error("`kubectl {args}` failed ({status}): {stderr}")]
    Kubectl { args: String, status: String, stderr: String },
    #[error("{what} not ready after {waited:?}: {last}")]
    Timeout { what: String, waited: Duration, last: String },
}

impl ControlPlaneError {
    fn is_port_clash(&self) -> bool {
        matches!(self, ControlPlaneError::Start { tail, .. } if tail.contains("address already in use"))
    }
}

/// `$KEYMESH_CACHE`, else `/var/cache/keymesh`: where the install scripts put the binaries.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("KEYMESH_CACHE").map_or_else(|| PathBuf::from("/var/cache/keymesh"), PathBuf::from)
}

/// The cached `kubectl` (from `scripts/install-kube-tools.sh`).
pub fn kubectl_binary() -> Result<PathBuf, ControlPlaneError> {
    cached_tool("kubectl")
}

/// The cached `helm` v4 (from `scripts/install-kube-tools.sh`).
pub fn helm_binary() -> Result<PathBuf, ControlPlaneError> {
    cached_tool("helm")
}

fn cached_tool(name: &str) -> Result<PathBuf, ControlPlaneError> {
    let path = cache_dir().join("bin").join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(ControlPlaneError::Missing { what: name.to_owned(), path, script: "scripts/install-kube-tools.sh" })
    }
}

/// The programs a control plane runs, all checked to exist.
#[derive(Debug, Clone)]
struct Binaries {
    etcd: PathBuf,
    apiserver: PathBuf,
    controller_manager: PathBuf,
    scheduler: PathBuf,
    kubectl: PathBuf,
    helm: PathBuf,
}

impl Binaries {
    fn locate() -> Result<Self, ControlPlaneError> {
        let bin = cache_dir().join(format!("k8s-{K8S_VERSION}/bin"));
        let kube = |name: &str| {
            let path = bin.join(name);
            if path.is_file() {
                Ok(path)
            } else {
                Err(ControlPlaneError::Missing { what: name.to_owned(), path, script: "scripts/install-control-plane.sh" })
            }
        };
        let path_dirs = std::env::var_os("PATH").unwrap_or_default();
        let etcd = std::env::split_paths(&path_dirs).map(|d| d.join("etcd")).find(|p| p.is_file()).ok_or_else(|| ControlPlaneError::Missing {
            what: "etcd".into(),
            path: "$PATH".into(),
            script: "scripts/install-control-plane.sh",
        })?;
        Ok(Binaries {
            etcd,
            apiserver: kube("kube-apiserver")?,
            controller_manager: kube("kube-controller-manager")?,
            scheduler: kube("kube-scheduler")?,
            kubectl: kubectl_binary()?,
            helm: helm_binary()?,
        })
    }
}

/// One process of the control plane.
struct Component {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

/// A running control plane; see the module docs.
pub struct ControlPlane {
    components: Vec<Component>,
    bins: Binaries,
    pki: Pki,
    api_port: u16,
    admin_kubeconfig: PathBuf,
    // Declared last so it is dropped last, after `Drop` has stopped the processes.
    dir: Option<tempfile::TempDir>,
}

impl ControlPlane {
    /// Starts etcd, the apiserver, the controller manager and the scheduler, and waits until the
    /// control plane is ready (see the module docs).
    pub fn start() -> Result<Self, ControlPlaneError> {
        let bins = Binaries::locate()?;
        let mut attempt = 1;
        loop {
            match Self::start_once(bins.clone()) {
                Err(e) if e.is_port_clash() && attempt < START_ATTEMPTS => attempt += 1,
                result => return result,
            }
        }
    }

    fn start_once(bins: Binaries) -> Result<Self, ControlPlaneError> {
        let dir = tempfile::Builder::new().prefix("keymesh-cp-").tempdir().map_err(|source| ControlPlaneError::Files { path: std::env::temp_dir(), source })?;
        let pki_dir = dir.path().join("pki");
        std::fs::create_dir(&pki_dir).map_err(|source| ControlPlaneError::Files { path: pki_dir.clone(), source })?;
        let pki = pki::generate(&pki_dir, SERVICE_IP)?;
        let [etcd_port, etcd_peer_port, api_port] = free_ports()?;
        let admin_kubeconfig = dir.path().join("admin.kubeconfig");
        let admin = Credentials::Certificate { cert: &pki.admin_cert, key: &pki.admin_key };
        pki::write_kubeconfig(&admin_kubeconfig, api_port, &pki.ca_cert, "admin", "default", admin)?;
        let mut cp = ControlPlane { components: Vec::new(), bins, pki, api_port, admin_kubeconfig, dir: Some(dir) };

        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{etcd_peer_port}");
        let etcd_args = [
            "--name=default".to_owned(),
            format!("--data-dir={}", cp.dir().join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            "--initial-cluster-state=new".to_owned(),
            "--logger=zap".to_owned(),
            "--log-outputs=stderr".to_owned(),
        ];
        let started = Instant::now();
        cp.spawn("etcd", &cp.bins.etcd.clone(), &etcd_args)?;
        // Wait for our own etcd, not just for something on its port: were the port taken (by
        // another test's etcd, say) ours exits, and the apiserver must not have written there.
        cp.wait_until("etcd", "etcd serving clients", |cp| {
            if std::fs::read_to_string(cp.log_path("etcd")).unwrap_or_default().contains("serving client traffic") {
                Ok(())
            } else {
                Err("not yet".into())
            }
        })?;
        let apiserver_args = cp.apiserver_args(&etcd_url);
        cp.spawn("kube-apiserver", &cp.bins.apiserver.clone(), &apiserver_args)?;
        cp.wait_until("kube-apiserver", "/readyz", |cp| match cp.kubectl([POLL_REQUEST_TIMEOUT, "get", "--raw", "/readyz"]) {
            Ok(out) if out.trim() == "ok" => Ok(()),
            Ok(out) => Err(out),
            Err(e) => Err(e.to_string()),
        })?;

        let controller_manager_args = cp.controller_manager_args();
        cp.spawn("kube-controller-manager", &cp.bins.controller_manager.clone(), &controller_manager_args)?;
        let scheduler_args = cp.scheduler_args();
        cp.spawn("kube-scheduler", &cp.bins.scheduler.clone(), &scheduler_args)?;
        let apiserver_ready = started.elapsed();
        cp.wait_until("kube-controller-manager", "the default ServiceAccount's token", |cp| cp.service_account_token("default", "default").map(drop))?;
        eprintln!("keymesh-e2e: control plane in {} ready in {:.1?} (apiserver ready after {apiserver_ready:.1?})", cp.dir().display(), started.elapsed());
        Ok(cp)
    }

    fn apiserver_args(&self, etcd_url: &str) -> Vec<String> {
        let pki = &self.pki;
        vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", self.api_port),
            format!("--advertise-address={ADVERTISE_ADDRESS}"),
            format!("--cert-dir={}", self.dir().join("apiserver").display()),
            format!("--tls-cert-file={}", pki.apiserver_cert.display()),
            format!("--tls-private-key-file={}", pki.apiserver_key.display()),
            format!("--client-ca-file={}", pki.ca_cert.display()),
            "--authorization-mode=Node,RBAC".into(),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
            format!("--service-account-key-file={}", pki.service_account_pub.display()),
            format!("--service-account-signing-key-file={}", pki.service_account_key.display()),
            "--allow-privileged=true".into(),
            "--profiling=false".into(),
        ]
    }

    fn controller_manager_args(&self) -> Vec<String> {
        let pki = &self.pki;
        let kubeconfig = self.admin_kubeconfig.display();
        vec![
            format!("--kubeconfig={kubeconfig}"),
            "--leader-elect=false".into(),
            // No HTTP(S) endpoints of its own: nothing here scrapes them, and fixed default
            // ports (10252, 10257) would collide between parallel control planes.
            "--port=0".into(),
            "--secure-port=0".into(),
            "--controllers=*".into(),
            // The default client rate limit (20/s) spaces the ~30 controllers' start-up by
            // ~150 ms each: the default ServiceAccount came 5 s after the apiserver was ready.
            "--kube-api-qps=200".into(),
            "--kube-api-burst=400".into(),
            // Each controller gets its own ServiceAccount token (minted by the token controller
            // with this key) and so runs under RBAC with its bootstrap role.
            "--use-service-account-credentials=true".into(),
            format!("--service-account-private-key-file={}", pki.service_account_key.display()),
            format!("--root-ca-file={}", pki.ca_cert.display()),
            format!("--cluster-signing-cert-file={}", pki.ca_cert.display()),
            format!("--cluster-signing-key-file={}", pki.ca_key.display()),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--profiling=false".into(),
        ]
    }

    fn scheduler_args(&self) -> Vec<String> {
        vec![
            format!("--kubeconfig={}", self.admin_kubeconfig.display()),
            "--leader-elect=false".into(),
            "--port=0".into(),
            "--secure-port=0".into(),
            "--profiling=false".into(),
        ]
    }

    fn spawn(&mut self, name: &'static str, program: &Path, args: &[String]) -> Result<(), ControlPlaneError> {
        let log = self.dir().join(format!("{name}.log"));
        let file_error = |source| ControlPlaneError::Files { path: log.clone(), source };
        let out = File::create(&log).map_err(file_error)?;
        let err = out.try_clone().map_err(file_error)?;
        let child = Command::new(program).args(args).current_dir(self.dir()).stdin(Stdio::null()).stdout(out).stderr(err).spawn().map_err(|e| {
            ControlPlaneError::Start { component: name, reason: format!("failed to spawn {}: {e}", program.display()), log: log.clone(), tail: String::new() }
        })?;
        self.components.push(Component { name, child, log });
        Ok(())
    }

    /// Polls `ready` until it returns `Ok`, failing early, with that component's log, if any
    /// process has exited, and after [`PHASE_TIMEOUT`] with `waiting_on`'s log.
    fn wait_until(&mut self, waiting_on: &'static str, what: &str, ready: impl Fn(&Self) -> Result<(), String>) -> Result<(), ControlPlaneError> {
        let start = Instant::now();
        loop {
            let last = match ready(self) {
                Ok(()) => return Ok(()),
                Err(why) => why,
            };
            for c in &mut self.components {
                if let Ok(Some(status)) = c.child.try_wait() {
                    return Err(start_error(c.name, &c.log, format!("exited with {status} while waiting for {what}")));
                }
            }
            if start.elapsed() > PHASE_TIMEOUT {
                let log = self.log_path(waiting_on);
                return Err(start_error(waiting_on, &log, format!("no {what} after {:?}; last: {last}", start.elapsed())));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// The temporary directory holding the certificates, kubeconfigs, etcd data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().map_or_else(|| Path::new("/nonexistent"), |d| d.path())
    }

    /// The apiserver's URL, `https://127.0.0.1:<port>`.
    pub fn server(&self) -> String {
        format!("https://127.0.0.1:{}", self.api_port)
    }

    /// The CA certificate every component's certificate is signed by.
    pub fn ca_cert(&self) -> &Path {
        &self.pki.ca_cert
    }

    /// A kubeconfig for the admin user (`O=system:masters`, allowed everything).
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// The cached `kubectl` binary (v1.33: newer than the server, which the commands the tests
    /// use do not mind).
    pub fn kubectl_path(&self) -> &Path {
        &self.bins.kubectl
    }

    /// The cached `helm` v4 binary.
    pub fn helm_path(&self) -> &Path {
        &self.bins.helm
    }

    /// Each process this fixture started, by component, in start order.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        self.components.iter().map(|c| (c.name, c.child.id())).collect()
    }

    /// The log of `component` (`etcd`, `kube-apiserver`, `kube-controller-manager`,
    /// `kube-scheduler`).
    pub fn log_path(&self, component: &str) -> PathBuf {
        self.dir().join(format!("{component}.log"))
    }

    /// The last `lines` lines of `component`'s log.
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        tail(&self.log_path(component), lines)
    }

    /// Runs `kubectl --kubeconfig <admin> args...`; returns its stdout, or an error with its
    /// stderr when it exits non-zero.
    pub fn kubectl<I, S>(&self, args: I) -> Result<String, ControlPlaneError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.kubectl_as(&self.admin_kubeconfig, args, None)
    }

    /// `kubectl <args> -o jsonpath=<path>` as admin (`args` starts with the verb, e.g. `get`).
    pub fn jsonpath(&self, args: &[&str], path: &str) -> Result<String, String> {
        let output = format!("jsonpath={path}");
        self.kubectl(args.iter().copied().chain(["-o", &output])).map_err(|e| e.to_string())
    }

    /// `kubectl get <args> -o json` as admin, parsed.
    pub fn get_json(&self, args: &[&str]) -> Result<serde_json::Value, String> {
        let out = self.kubectl(["get"].into_iter().chain(args.iter().copied()).chain(["-o", "json"])).map_err(|e| e.to_string())?;
        serde_json::from_str(&out).map_err(|e| format!("bad JSON from kubectl: {e}"))
    }

    /// `kubectl apply -f -` of `manifest` (YAML or JSON) as admin; returns kubectl's stdout.
    pub fn apply(&self, manifest: &str) -> Result<String, ControlPlaneError> {
        self.kubectl_as(&self.admin_kubeconfig, ["apply", "-f", "-"], Some(manifest))
    }

    /// Runs `kubectl --kubeconfig <kubeconfig> args...`, feeding `stdin` if given (e.g. to a
    /// ServiceAccount's kubeconfig from [`ControlPlane::service_account_kubeconfig`]).
    pub fn kubectl_as<I, S>(&self, kubeconfig: &Path, args: I, stdin: Option<&str>) -> Result<String, ControlPlaneError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let shown = || args.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ");
        let mut cmd = Command::new(&self.bins.kubectl);
        // A private discovery cache: the shared ~/.kube/cache would mix servers across runs.
        cmd.arg(format!("--kubeconfig={}", kubeconfig.display())).arg(format!("--cache-dir={}", self.dir().join("kube-cache").display())).args(&args);
        let out = run(cmd, stdin).map_err(|e| ControlPlaneError::Command { command: format!("kubectl {}", shown()), reason: e.to_string() })?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(ControlPlaneError::Kubectl { args: shown(), status: out.status.to_string(), stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned() })
        }
    }

    /// Runs `helm --kubeconfig <admin> args...` with its config, cache and data directories in
    /// this control plane's directory; returns its stdout, or an error with its stderr.
    pub fn helm<I, S>(&self, args: I) -> Result<String, ControlPlaneError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let shown = || args.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ");
        let mut cmd = helm_command(&self.bins.helm, &self.dir().join("helm"));
        cmd.arg(format!("--kubeconfig={}", self.admin_kubeconfig.display())).args(&args);
        let out = run(cmd, None).map_err(|e| ControlPlaneError::Command { command: format!("helm {}", shown()), reason: e.to_string() })?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(ControlPlaneError::Command {
                command: format!("helm {}", shown()),
                reason: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
            })
        }
    }

    /// The token of ServiceAccount `namespace/name`, from the token Secret the 1.20 token
    /// controller made for it.
    pub fn service_account_token(&self, namespace: &str, name: &str) -> Result<String, String> {
        let secrets = self
            .kubectl([POLL_REQUEST_TIMEOUT, "get", "serviceaccount", name, "-n", namespace, "-o", r#"go-template={{range .secrets}}{{.name}}{{"\n"}}{{end}}"#])
            .map_err(|e| e.to_string())?;
        let secret = secrets.lines().next().ok_or_else(|| format!("ServiceAccount {namespace}/{name} has no token Secret yet"))?;
        let token = self
            .kubectl([POLL_REQUEST_TIMEOUT, "get", "secret", secret, "-n", namespace, "-o", "go-template={{or .data.token \"\" | base64decode}}"])
            .map_err(|e| e.to_string())?;
        if token.is_empty() {
            Err(format!("Secret {namespace}/{secret} has no token yet"))
        } else {
            Ok(token)
        }
    }

    /// Writes a kubeconfig that authenticates as ServiceAccount `namespace/name` with its token
    /// (waiting for the token controller to make it) and returns its path, so a process (or
    /// [`ControlPlane::kubectl_as`]) runs with exactly that account's RBAC permissions.
    pub fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> Result<PathBuf, ControlPlaneError> {
        let start = Instant::now();
        let token = loop {
            match self.service_account_token(namespace, name) {
                Ok(token) => break token,
                Err(last) if start.elapsed() > PHASE_TIMEOUT => {
                    return Err(ControlPlaneError::Timeout { what: format!("token of ServiceAccount {namespace}/{name}"), waited: start.elapsed(), last });
                }
                Err(_) => std::thread::sleep(POLL_INTERVAL),
            }
        };
        let path = self.dir().join(format!("sa-{namespace}-{name}.kubeconfig"));
        let user = format!("system:serviceaccount:{namespace}:{name}");
        pki::write_kubeconfig(&path, self.api_port, &self.pki.ca_cert, &user, namespace, Credentials::Token(&token))?;
        Ok(path)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // Dependents first, etcd last, so nothing logs a storm of connection errors.
        for c in self.components.iter_mut().rev() {
            let _ = c.child.kill();
            let _ = c.child.wait();
        }
        let keep = std::thread::panicking() || std::env::var_os("KEYMESH_KEEP_TMP").is_some();
        if let (true, Some(dir)) = (keep, self.dir.take()) {
            eprintln!("keymesh-e2e: control plane files and logs kept in {}", dir.keep().display());
        }
    }
}

/// A `helm` command whose config, cache and data directories are under `home`, so it neither
/// reads nor writes the user's.
pub fn helm_command(helm: &Path, home: &Path) -> Command {
    let mut cmd = Command::new(helm);
    for (var, sub) in [("HELM_CONFIG_HOME", "config"), ("HELM_CACHE_HOME", "cache"), ("HELM_DATA_HOME", "data")] {
        cmd.env(var, home.join(sub));
    }
    cmd
}

/// Runs `cmd` to completion with `stdin` (or nothing) as its input, capturing its output.
fn run(mut cmd: Command, stdin: Option<&str>) -> std::io::Result<std::process::Output> {
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())?;
    }
    child.wait_with_output()
}

/// Three distinct free loopback ports. All three are held until chosen, so they differ; another
/// process may still take one before our server binds it, which [`ControlPlane::start`] retries.
fn free_ports() -> Result<[u16; 3], ControlPlaneError> {
    let listeners = (0..3).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<Result<Vec<_>, _>>().map_err(ControlPlaneError::Ports)?;
    let mut ports = [0; 3];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr().map_err(ControlPlaneError::Ports)?.port();
    }
    Ok(ports)
}

fn start_error(component: &'static str, log: &Path, reason: String) -> ControlPlaneError {
    ControlPlaneError::Start { component, reason, log: log.to_owned(), tail: tail(log, LOG_TAIL_LINES) }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
