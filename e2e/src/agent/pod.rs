//! One pod's life on the agent, driven by a task per pod: network and volumes, init containers
//! in order, then the containers, supervised (exits, restarts with back-off, probes) until the
//! pod is deleted (SIGTERM, the grace period, SIGKILL, clean-up, then the object is deleted
//! with grace 0, as the kubelet does) or the agent stops. Its status is patched on every change.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Preconditions};
use kube::Api;
use tokio::process::Child;
use tokio::sync::watch;

use super::network::{node_ip, PodNet};
use super::probes::{self, ProbeState};
use super::runtime::{self, Start};
use super::spec::{self, Sources};
use super::status::{self, Conditions, ContainerReport, PodReport, State};
use super::volumes;
use super::{sysctls, Shared, IMAGE_MAP_ENV};

const TICK: Duration = Duration::from_millis(500);
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A container that ran this long before exiting restarts after the first back-off again.
const BACKOFF_RESET: Duration = Duration::from_secs(10);
const RETRY_PREPARE: Duration = Duration::from_secs(2);
/// How often a running pod's ConfigMap and Secret volumes are re-read (a kubelet: about a minute).
const VOLUME_REFRESH: Duration = Duration::from_secs(2);
/// The grace a container gets when the agent itself stops.
const AGENT_STOP_GRACE: Duration = Duration::from_secs(2);

/// One container of the pod and its current run.
struct Run {
    spec: Container,
    binary: PathBuf,
    /// The image is not in the agent's image map: as a kubelet that cannot pull it, the
    /// container waits in `ErrImagePull`/`ImagePullBackOff` with this message, forever.
    image_error: Option<String>,
    pull_attempts: u32,
    child: Option<Child>,
    started_at: Option<Timestamp>,
    started_instant: Instant,
    has_run: bool,
    restarts: i32,
    last: Option<State>,
    waiting: (String, Option<String>),
    next_start: Instant,
    backoff: Duration,
    done: bool,
    readiness: Option<ProbeState>,
    liveness: Option<ProbeState>,
    startup: Option<ProbeState>,
}

impl Run {
    fn new(spec: &Container, shared: &Shared) -> Self {
        let image = spec.image.as_deref().unwrap_or("");
        let binary = shared.images.resolve(image).map(PathBuf::from);
        let image_error = binary.is_none().then(|| {
            format!("failed to pull image {image:?}: it is not in the node agent's image map ({IMAGE_MAP_ENV}; mapped: {})", shared.images.images().join(", "))
        });
        Run {
            spec: spec.clone(),
            binary: binary.unwrap_or_default(),
            image_error,
            pull_attempts: 0,
            child: None,
            started_at: None,
            started_instant: Instant::now(),
            has_run: false,
            restarts: 0,
            last: None,
            waiting: ("ContainerCreating".into(), None),
            next_start: Instant::now(),
            backoff: FIRST_BACKOFF,
            done: false,
            readiness: None,
            liveness: None,
            startup: None,
        }
    }

    fn started(&self) -> bool {
        self.child.is_some() && self.startup.as_ref().is_none_or(|p| p.passing == Some(true))
    }

    fn ready(&self) -> bool {
        self.started() && self.readiness.as_ref().is_none_or(|p| p.passing == Some(true))
    }

    fn report(&self) -> ContainerReport {
        let state = match (&self.child, self.started_at) {
            (Some(_), Some(since)) => State::Running { since },
            _ if self.done => self.last.clone().unwrap_or(State::Waiting { reason: "Completed".into(), message: None }),
            _ => State::Waiting { reason: self.waiting.0.clone(), message: self.waiting.1.clone() },
        };
        let id = self.child.as_ref().and_then(Child::id).map(|pid| format!("keymesh-agent://{pid}"));
        ContainerReport {
            name: self.spec.name.clone(),
            image: self.spec.image.clone().unwrap_or_default(),
            id,
            ready: self.ready(),
            started: self.started(),
            restart_count: self.restarts,
            state,
            last: if self.done { None } else { self.last.clone() },
        }
    }
}

enum Stage {
    /// The pod asks for something the agent does not do; nothing runs.
    Refused(String),
    /// Rejected at admission as a kubelet rejects it (phase Failed): `(reason, message)`.
    Rejected(String, String),
    /// Network or volumes not ready yet (the message says why).
    Preparing(Option<String>),
    Running,
}

/// The state of one pod's task.
pub struct Worker {
    shared: Arc<Shared>,
    uid: String,
    namespace: String,
    name: String,
    node: usize,
    dir: PathBuf,
    stage: Stage,
    net: Option<PodNet>,
    volumes: Option<BTreeMap<String, PathBuf>>,
    next_prepare: Instant,
    /// When the ConfigMap and Secret volumes are next re-read (`volumes::refresh`).
    next_volume_refresh: Instant,
    start_time: Option<Timestamp>,
    init: Vec<Run>,
    main: Vec<Run>,
    conditions: Conditions,
    reported: Option<k8s_openapi::api::core::v1::PodStatus>,
}

/// Runs pod `uid` until it is deleted, disappears (`pods` closes) or the agent stops.
pub async fn run(shared: Arc<Shared>, uid: String, node: usize, mut pods: watch::Receiver<Arc<Pod>>, mut stop: watch::Receiver<bool>) {
    let pod = pods.borrow().clone();
    let mut w = Worker::new(shared, uid, node, &pod);
    let mut gone = false;
    loop {
        let pod = pods.borrow_and_update().clone();
        if *stop.borrow() {
            w.shutdown(AGENT_STOP_GRACE).await;
            return;
        }
        if gone || pod.metadata.deletion_timestamp.is_some() {
            let grace = pod.metadata.deletion_grace_period_seconds.or(pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds)).unwrap_or(30);
            w.shutdown(Duration::from_secs(grace.max(0) as u64)).await;
            if !gone {
                w.delete_object().await;
            }
            return;
        }
        w.step(&pod).await;
        w.report(&pod).await;
        tokio::select! {
            changed = pods.changed() => gone = changed.is_err(),
            changed = stop.changed() => if changed.is_err() { return w.shutdown(AGENT_STOP_GRACE).await },
            () = tokio::time::sleep(TICK) => {}
        }
    }
}

impl Worker {
    fn new(shared: Arc<Shared>, uid: String, node: usize, pod: &Pod) -> Self {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let dir = shared.pod_dir(&namespace, &name, &uid);
        let spec = pod.spec.clone().unwrap_or_default();
        let stage = match (spec::unsupported(pod), sysctls::forbidden(pod, &shared.allowed_unsafe_sysctls)) {
            (Some(why), _) => {
                tracing::warn!(pod = %format!("{namespace}/{name}"), %why, "refusing pod");
                Stage::Refused(why)
            }
            (None, Some(message)) => {
                tracing::warn!(pod = %format!("{namespace}/{name}"), %message, "rejecting pod");
                Stage::Rejected("SysctlForbidden".into(), message)
            }
            (None, None) => Stage::Preparing(None),
        };
        let init = spec.init_containers.iter().flatten().map(|c| Run::new(c, &shared)).collect();
        let main = spec.containers.iter().map(|c| Run::new(c, &shared)).collect();
        Worker {
            shared,
            uid,
            namespace,
            name,
            node,
            dir,
            stage,
            net: None,
            volumes: None,
            next_prepare: Instant::now(),
            next_volume_refresh: Instant::now(),
            start_time: Some(Timestamp::now()),
            init,
            main,
            conditions: Conditions::default(),
            reported: None,
        }
    }

    fn restart_policy(pod: &Pod) -> String {
        pod.spec.as_ref().and_then(|s| s.restart_policy.clone()).unwrap_or_else(|| "Always".into())
    }

    async fn step(&mut self, pod: &Pod) {
        if matches!(self.stage, Stage::Refused(_) | Stage::Rejected(..)) {
            return;
        }
        if let Stage::Preparing(_) = self.stage {
            if Instant::now() < self.next_prepare {
                return;
            }
            self.next_prepare = Instant::now() + RETRY_PREPARE;
            match self.prepare(pod).await {
                Ok(()) => self.stage = Stage::Running,
                Err(why) => return self.stage = Stage::Preparing(Some(why)),
            }
            self.next_volume_refresh = Instant::now() + VOLUME_REFRESH;
        } else if Instant::now() >= self.next_volume_refresh {
            self.next_volume_refresh = Instant::now() + VOLUME_REFRESH;
            let mut sources = Sources::new(self.shared.client.clone(), &self.namespace);
            if let Err(why) = volumes::refresh(pod, &self.dir, &self.shared.node_root(self.node), &mut sources).await {
                tracing::warn!(pod = %self.name, %why, "failed to refresh volumes; keeping their files");
            }
        }
        let policy = Self::restart_policy(pod);
        for i in 0..self.init.len() {
            if !self.init[i].done {
                self.supervise(pod, true, i, &policy).await;
                if !self.init[i].done {
                    return;
                }
            }
        }
        for i in 0..self.main.len() {
            self.supervise(pod, false, i, &policy).await;
        }
    }

    /// The pod's network, hosts file and volumes.
    async fn prepare(&mut self, pod: &Pod) -> Result<(), String> {
        if self.net.is_none() {
            std::fs::create_dir_all(&self.dir).map_err(|e| format!("failed to create {}: {e}", self.dir.display()))?;
            let net = self.shared.network.add_pod(self.node).await.map_err(|e| format!("failed to set up the pod network: {e}"))?;
            self.shared.set_net(&self.uid, Some(net.clone()));
            // Per-pod sysctls live in the pod's own namespaces: set before any container starts.
            let wanted = sysctls::of(pod);
            let ns = net.ns.clone();
            self.net = Some(net);
            tokio::task::spawn_blocking(move || sysctls::apply(&ns, &wanted)).await.map_err(|e| format!("sysctls: {e}"))??;
            let resolv = format!("search {ns}.svc.cluster.local svc.cluster.local cluster.local\nnameserver 127.0.0.1\noptions ndots:5\n", ns = self.namespace);
            std::fs::write(self.dir.join("resolv.conf"), resolv).map_err(|e| format!("failed to write resolv.conf: {e}"))?;
            self.shared.refresh_hosts();
        }
        if self.volumes.is_none() {
            let mut sources = Sources::new(self.shared.client.clone(), &self.namespace);
            let node_root = self.shared.node_root(self.node);
            self.volumes = Some(volumes::materialise(pod, &self.dir, &node_root, &mut sources).await?);
        }
        Ok(())
    }

    async fn supervise(&mut self, pod: &Pod, init: bool, i: usize, policy: &str) {
        let now = Instant::now();
        let run = if init { &mut self.init[i] } else { &mut self.main[i] };
        if let Some(child) = &mut run.child {
            match child.try_wait() {
                Ok(Some(exit)) => {
                    let code = exit.code().unwrap_or(128 + exit.signal().unwrap_or(0));
                    let reason = if code == 0 { "Completed" } else { "Error" };
                    tracing::info!(pod = %self.name, container = %run.spec.name, %exit, "container exited");
                    run.last = Some(State::Terminated {
                        exit_code: code,
                        signal: exit.signal(),
                        reason: reason.into(),
                        started: run.started_at,
                        finished: Timestamp::now(),
                    });
                    run.child = None;
                    self.shared.set_pid(&self.uid, &run.spec.name, None);
                    let restart = match policy {
                        "Never" => false,
                        "OnFailure" => code != 0,
                        _ => !init || code != 0,
                    };
                    if !restart {
                        run.done = true;
                        return;
                    }
                    if now.duration_since(run.started_instant) > BACKOFF_RESET {
                        run.backoff = FIRST_BACKOFF;
                    }
                    run.next_start = now + run.backoff;
                    run.waiting = ("CrashLoopBackOff".into(), Some(format!("back-off {:?} restarting failed container", run.backoff)));
                    run.backoff = (run.backoff * 2).min(MAX_BACKOFF);
                }
                Ok(None) => {
                    if !init {
                        Self::probe(&self.shared, self.net.as_ref(), run).await;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "failed to check a container"),
            }
            return;
        }
        if run.done || now < run.next_start {
            return;
        }
        if let Some(error) = &run.image_error {
            // The kubelet's pull back-off: ErrImagePull on a failed attempt, ImagePullBackOff
            // while waiting for the next one.
            run.pull_attempts += 1;
            let reason = if run.pull_attempts % 2 == 1 { "ErrImagePull" } else { "ImagePullBackOff" };
            run.waiting = (reason.into(), Some(error.clone()));
            run.next_start = now + run.backoff;
            run.backoff = (run.backoff * 2).min(MAX_BACKOFF);
            return;
        }
        let (Some(net), Some(vols)) = (&self.net, &self.volumes) else { return };
        let mut sources = Sources::new(self.shared.client.clone(), &self.namespace);
        let host_ip = node_ip(self.node).to_string();
        let service_ip = self.shared.service_ip.to_string();
        let launch = match spec::launch(pod, &run.spec, run.binary.clone(), &net.ip.to_string(), &host_ip, &service_ip, &mut sources).await {
            Ok(l) => l,
            Err(why) => {
                run.waiting = ("CreateContainerConfigError".into(), Some(why));
                run.next_start = now + RETRY_PREPARE;
                return;
            }
        };
        let mut mounts = volumes::container_mounts(&run.spec, vols);
        for (file, target) in [("hosts", "/etc/hosts"), ("resolv.conf", "/etc/resolv.conf")] {
            mounts.push(volumes::Mount { source: self.dir.join(file), target: target.into(), read_only: false });
        }
        let layers = self.dir.join("layers").join(&run.spec.name);
        let _ = std::fs::remove_dir_all(&layers);
        let script = match volumes::mount_script(&mounts, &layers) {
            Ok(s) => s,
            Err(why) => return self.stage = Stage::Refused(format!("container {}: {why}", run.spec.name)),
        };
        let hostname = spec::hostname(pod);
        let log = self.shared.log_path(&self.namespace, &self.name, &run.spec.name);
        let start = Start { launch: &launch, netns: &net.ns, hostname: &hostname, mounts: &script, working_dir: run.spec.working_dir.as_deref(), log: &log };
        match runtime::start(&self.shared.tools, &start).await {
            Ok(child) => {
                if run.has_run {
                    run.restarts += 1;
                }
                run.has_run = true;
                self.shared.set_pid(&self.uid, &run.spec.name, child.id());
                run.child = Some(child);
                run.started_at = Some(Timestamp::now());
                run.started_instant = now;
                run.readiness = run.spec.readiness_probe.as_ref().map(|p| ProbeState::new(p, now));
                run.liveness = run.spec.liveness_probe.as_ref().map(|p| ProbeState::new(p, now));
                run.startup = run.spec.startup_probe.as_ref().map(|p| ProbeState::new(p, now));
            }
            Err(e) => {
                run.waiting = ("RunContainerError".into(), Some(format!("failed to start {}: {e}", launch.binary.display())));
                run.next_start = now + run.backoff;
            }
        }
    }

    /// Runs the container's due probes; a failed liveness or startup probe kills it (the next
    /// tick sees the exit and restarts it).
    async fn probe(shared: &Shared, net: Option<&PodNet>, run: &mut Run) {
        let Some(net) = net else { return };
        let now = Instant::now();
        let ports = run.spec.ports.clone().unwrap_or_default();
        let target = probes::Target { netns: &net.ns, ip: net.ip, pid: run.child.as_ref().and_then(Child::id), ports: &ports, tools: &shared.tools };
        let started = run.startup.as_ref().is_none_or(|p| p.passing == Some(true));
        let mut kill = false;
        let probes: [(&mut Option<ProbeState>, bool); 3] = [(&mut run.startup, !started), (&mut run.liveness, started), (&mut run.readiness, started)];
        for (index, (state, active)) in probes.into_iter().enumerate() {
            let Some(state) = state else { continue };
            if !active || !state.due(now) {
                continue;
            }
            let ok = probes::check(&state.probe().clone(), &target).await;
            if state.record(ok, Instant::now()) == Some(false) && index < 2 {
                kill = true;
            }
        }
        if kill {
            if let Some(child) = &mut run.child {
                tracing::info!(container = %run.spec.name, "probe failed: restarting the container");
                let grace = Duration::from_secs(run.spec.liveness_probe.as_ref().and_then(|p| p.termination_grace_period_seconds).unwrap_or(2).max(0) as u64);
                runtime::stop(child, grace).await;
            }
        }
    }

    /// Stops every container (SIGTERM, `grace`, SIGKILL, all at once), then removes the pod's
    /// network and files (its logs stay).
    async fn shutdown(&mut self, grace: Duration) {
        let stops = self.init.iter_mut().chain(self.main.iter_mut()).filter_map(|run| {
            let mut child = run.child.take()?;
            let name = run.spec.name.clone();
            Some(async move { (name, runtime::stop(&mut child, grace).await) })
        });
        for (container, exit) in futures::future::join_all(stops).await {
            tracing::info!(pod = %self.name, %container, ?exit, "container stopped");
            self.shared.set_pid(&self.uid, &container, None);
        }
        if let Some(net) = self.net.take() {
            self.shared.set_net(&self.uid, None);
            let shared = self.shared.clone();
            let _ = tokio::task::spawn_blocking(move || shared.network.remove_pod(&net)).await;
            self.shared.refresh_hosts();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// Deletes the pod object with grace 0 (only this incarnation, by uid).
    async fn delete_object(&self) {
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &self.namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: Some(self.uid.clone()), resource_version: None }),
            ..DeleteParams::default()
        };
        for _ in 0..5 {
            match api.delete(&self.name, &params).await {
                Ok(_) => return,
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return,
                Err(e) => {
                    tracing::warn!(pod = %self.name, error = %e, "failed to delete the pod object; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    async fn report(&mut self, pod: &Pod) {
        let report = self.pod_report(pod);
        let status = status::pod_status(pod, &report, &mut self.conditions);
        if self.reported.as_ref() == Some(&status) {
            return;
        }
        match status::patch(&self.shared.client, &self.namespace, &self.name, &status).await {
            Ok(()) => self.reported = Some(status),
            Err(e) => tracing::warn!(pod = %self.name, error = %e, "failed to patch pod status"),
        }
    }

    fn pod_report(&self, pod: &Pod) -> PodReport {
        let mut init: Vec<ContainerReport> = self.init.iter().map(Run::report).collect();
        let mut main: Vec<ContainerReport> = self.main.iter().map(Run::report).collect();
        let (mut reason, mut message) = (None, None);
        let phase = match &self.stage {
            Stage::Refused(why) => {
                for c in init.iter_mut().chain(main.iter_mut()) {
                    c.state = State::Waiting { reason: "Unsupported".into(), message: Some(why.clone()) };
                }
                reason = Some("Unsupported".to_owned());
                message = Some(format!("the keymesh node agent cannot run this pod: {why}"));
                "Pending"
            }
            Stage::Rejected(why, text) => {
                for c in init.iter_mut().chain(main.iter_mut()) {
                    c.state = State::Waiting { reason: why.clone(), message: Some(text.clone()) };
                }
                reason = Some(why.clone());
                message = Some(text.clone());
                "Failed"
            }
            Stage::Preparing(why) => {
                for c in init.iter_mut().chain(main.iter_mut()) {
                    c.state = State::Waiting { reason: "ContainerCreating".into(), message: why.clone() };
                }
                "Pending"
            }
            Stage::Running => {
                let policy = Self::restart_policy(pod);
                let ended = |r: &Run| r.done && matches!(r.last, Some(State::Terminated { .. }));
                let failed = |r: &Run| matches!(r.last, Some(State::Terminated { exit_code, .. }) if exit_code != 0);
                if self.init.iter().any(|r| !r.done) {
                    "Pending"
                } else if policy != "Always" && self.main.iter().all(ended) {
                    if self.main.iter().any(failed) {
                        "Failed"
                    } else {
                        "Succeeded"
                    }
                } else if self.main.iter().any(|r| r.has_run) {
                    "Running"
                } else {
                    "Pending"
                }
            }
        };
        let initialized = matches!(self.stage, Stage::Running) && self.init.iter().all(|r| r.done);
        PodReport {
            phase,
            reason,
            message,
            ip: self.net.as_ref().map(|n| n.ip),
            host_ip: node_ip(self.node),
            start_time: self.start_time,
            initialized,
            containers_ready: initialized && self.main.iter().all(Run::ready),
            init,
            main,
        }
    }
}
