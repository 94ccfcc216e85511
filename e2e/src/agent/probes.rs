//! Readiness, liveness and startup probes, run from inside the pod's network namespace (HTTP and
//! TCP connect to the pod's address from a thread that entered it; exec runs the command with
//! `nsenter` in the container's mount, network and UTS namespaces), with the kubelet's periods,
//! initial delays and success/failure thresholds.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerPort, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::runtime::Tools;
use crate::netns::connect_in;

/// One probe of one container run, and its verdict so far.
#[derive(Debug, Clone)]
pub struct ProbeState {
    probe: Probe,
    next: Instant,
    successes: i32,
    failures: i32,
    /// `None` until the thresholds give a verdict.
    pub passing: Option<bool>,
}

impl ProbeState {
    /// A probe of a container started at `started`.
    pub fn new(probe: &Probe, started: Instant) -> Self {
        let delay = Duration::from_secs(probe.initial_delay_seconds.unwrap_or(0).max(0) as u64);
        ProbeState { probe: probe.clone(), next: started + delay, successes: 0, failures: 0, passing: None }
    }

    pub fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    /// Records one result and schedules the next run; returns the verdict.
    pub fn record(&mut self, ok: bool, now: Instant) -> Option<bool> {
        self.next = now + Duration::from_secs(self.probe.period_seconds.unwrap_or(10).max(1) as u64);
        if ok {
            self.failures = 0;
            self.successes += 1;
            if self.successes >= self.probe.success_threshold.unwrap_or(1).max(1) {
                self.passing = Some(true);
            }
        } else {
            self.successes = 0;
            self.failures += 1;
            if self.failures >= self.probe.failure_threshold.unwrap_or(3).max(1) {
                self.passing = Some(false);
            }
        }
        self.passing
    }
}

/// Where a probe runs.
pub struct Target<'a> {
    pub netns: &'a str,
    pub ip: Ipv4Addr,
    pub pid: Option<u32>,
    pub ports: &'a [ContainerPort],
    pub tools: &'a Tools,
}

/// Runs `probe` once; `true` when it passed within its timeout.
pub async fn check(probe: &Probe, t: &Target<'_>) -> bool {
    let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64);
    if let Some(http) = &probe.http_get {
        let Some(port) = port(&http.port, t.ports) else { return false };
        let path = http.path.clone().unwrap_or_else(|| "/".into());
        let (ns, addr) = (t.netns.to_owned(), SocketAddr::from((t.ip, port)));
        return tokio::task::spawn_blocking(move || http_get(&ns, addr, &path, timeout)).await.unwrap_or(false);
    }
    if let Some(tcp) = &probe.tcp_socket {
        let Some(port) = port(&tcp.port, t.ports) else { return false };
        let (ns, addr) = (t.netns.to_owned(), SocketAddr::from((t.ip, port)));
        return tokio::task::spawn_blocking(move || connect_in(&ns, addr, timeout).is_ok()).await.unwrap_or(false);
    }
    if let (Some(exec), Some(pid)) = (&probe.exec, t.pid) {
        let command = exec.command.clone().unwrap_or_default();
        let mut cmd = tokio::process::Command::new(&t.tools.nsenter);
        cmd.args(["-t", &pid.to_string(), "-m", "-n", "-u", "--"])
            .args(&command)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        return matches!(tokio::time::timeout(timeout, cmd.status()).await, Ok(Ok(s)) if s.success());
    }
    false
}

fn port(port: &IntOrString, ports: &[ContainerPort]) -> Option<u16> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).ok(),
        IntOrString::String(name) => ports.iter().find(|p| p.name.as_deref() == Some(name)).and_then(|p| u16::try_from(p.container_port).ok()),
    }
}

/// A `GET` whose status is 200-399 passes, as the kubelet's.
fn http_get(ns: &str, addr: SocketAddr, path: &str, timeout: Duration) -> bool {
    let Ok(mut stream) = connect_in(ns, addr, timeout) else { return false };
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(timeout));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.20\r\nAccept: */*\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 64];
    let mut got = 0;
    while got < 12 {
        match stream.read(&mut head[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    let line = String::from_utf8_lossy(&head[..got]);
    let code: Option<u16> = line.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    matches!(code, Some(200..=399))
}
