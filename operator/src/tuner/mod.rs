//! The node tuner (`keymesh-operator tune`): the program the node-tuning DaemonSet runs on every
//! node a CacheCluster's pods may run on (DESIGN.md, "Node tuning"). It sets node-wide kernel
//! settings through the host's `/sys` and `/proc/sys` (mounted by hostPath), verifiably and
//! reversibly:
//!
//! - it records each setting's previous value in the node's state file (`state`) before it
//!   changes anything, writes the wanted value and reads it back;
//! - every `interval` it checks again: a value changed from outside is reported at once (not
//!   ready, the status says what changed), reapplied after `drift_hold`, and no longer
//!   reapplied after three drifts in an hour (something else manages it: reported, never
//!   fought over);
//! - another CacheCluster's tuner on the same node that claims a different value is a conflict:
//!   reported, nothing written;
//! - on SIGTERM (DaemonSet deleted, tuning disabled) it gives up its claims, and the last claim
//!   on a setting restores the value recorded before;
//! - it serves `/readyz` (200 only while every wanted value holds) and `/status` (JSON: each
//!   setting's wanted and observed value and state), which the operator reads for `NodeTuned`.
//!
//! It labels and annotates nothing.

pub mod settings;
pub mod state;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

pub use settings::{Roots, Setting};
pub use state::StateDir;
use state::{Claim, Release};

/// Drifts reapplied within an hour before the tuner only reports them.
const MAX_REAPPLIES_PER_HOUR: usize = 3;

#[derive(Debug, Clone)]
pub struct TunerConfig {
    /// The CacheCluster (`<namespace>/<name>`) this tuner works for.
    pub owner: String,
    /// The node it runs on (for the status).
    pub node: String,
    /// The settings to manage and their wanted values ("unchanged" ones are left out).
    pub wanted: Vec<(Setting, String)>,
    pub roots: Roots,
    pub state: StateDir,
    pub interval: Duration,
    pub drift_hold: Duration,
    pub listen: SocketAddr,
}

/// One setting as the tuner sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettingStatus {
    pub setting: String,
    pub wanted: String,
    pub observed: Option<String>,
    /// `applied`, `drifted`, `conflict`, `error` or `pending`.
    pub state: String,
    pub message: String,
    pub reapplied: u32,
}

/// What `/status` answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TunerStatus {
    pub owner: String,
    pub node: String,
    pub ready: bool,
    pub settings: Vec<SettingStatus>,
}

#[derive(Debug, thiserror::Error)]
pub enum TunerError {
    #[error("failed to bind {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error(transparent)]
    Value(#[from] settings::FormatError),
}

/// One managed setting's life in this tuner.
struct Managed {
    setting: Setting,
    value: String,
    granted: bool,
    drift_since: Option<Instant>,
    reapplies: VecDeque<Instant>,
    status: SettingStatus,
}

struct Tuner {
    config: TunerConfig,
    managed: Vec<Managed>,
}

impl Tuner {
    fn new(config: TunerConfig) -> Result<Tuner, TunerError> {
        let mut managed = Vec::new();
        for (setting, value) in &config.wanted {
            let value = setting.validate(value)?;
            let status = SettingStatus {
                setting: setting.key().to_string(),
                wanted: value.clone(),
                observed: None,
                state: "pending".into(),
                message: String::new(),
                reapplied: 0,
            };
            managed.push(Managed { setting: *setting, value, granted: false, drift_since: None, reapplies: VecDeque::new(), status });
        }
        Ok(Tuner { config, managed })
    }

    fn status(&self) -> TunerStatus {
        TunerStatus {
            owner: self.config.owner.clone(),
            node: self.config.node.clone(),
            ready: self.managed.iter().all(|m| m.status.state == "applied"),
            settings: self.managed.iter().map(|m| m.status.clone()).collect(),
        }
    }

    /// One check of every setting; see the module docs.
    fn round(&mut self, now: Instant) {
        let (roots, state, owner, hold) = (&self.config.roots, &self.config.state, &self.config.owner, self.config.drift_hold);
        for m in &mut self.managed {
            let key = m.setting.key();
            let current = match m.setting.read(roots) {
                Ok(v) => v,
                Err(e) => {
                    set(m, "error", None, e);
                    continue;
                }
            };
            if !m.granted {
                match state.update(|s| s.claim(key, owner, &m.value, &current)) {
                    Ok(Claim::Granted) => {
                        m.granted = true;
                        if current != m.value {
                            if let Err(e) = m.setting.write(roots, &m.value) {
                                set(m, "error", Some(current), e);
                                continue;
                            }
                            info!(setting = key, from = %current, to = %m.value, "applied");
                        }
                        set(m, "applied", Some(m.value.clone()), format!("{key} is {}", m.value));
                    }
                    Ok(Claim::Conflict(others)) => {
                        let who: Vec<String> = others.iter().map(|(o, v)| format!("{o} wants {v}")).collect();
                        let message = format!("{key}: another CacheCluster on this node wants a different value ({}); left at {current}", who.join(", "));
                        if m.status.state != "conflict" {
                            warn!(%message, "conflicting node settings are reported, never fought over");
                        }
                        set(m, "conflict", Some(current), message);
                    }
                    Err(e) => set(m, "error", Some(current), e.to_string()),
                }
                continue;
            }
            if current == m.value {
                m.drift_since = None;
                set(m, "applied", Some(current), format!("{key} is {}", m.value));
                continue;
            }
            let since = *m.drift_since.get_or_insert_with(|| {
                warn!(setting = key, wanted = %m.value, observed = %current, "changed outside KeyMesh");
                now
            });
            while m.reapplies.front().is_some_and(|t| now.duration_since(*t) > Duration::from_secs(3600)) {
                m.reapplies.pop_front();
            }
            if m.reapplies.len() >= MAX_REAPPLIES_PER_HOUR {
                let message = format!("{key} was changed to {current} outside KeyMesh again; not reapplied ({MAX_REAPPLIES_PER_HOUR} times in an hour: something else manages it)");
                set(m, "drifted", Some(current), message);
            } else if now.duration_since(since) >= hold {
                match m.setting.write(roots, &m.value) {
                    Ok(()) => {
                        m.reapplies.push_back(now);
                        m.status.reapplied += 1;
                        m.drift_since = None;
                        info!(setting = key, from = %current, to = %m.value, "reapplied after an outside change");
                        set(m, "applied", Some(m.value.clone()), format!("{key} is {} (reapplied after it was changed to {current})", m.value));
                    }
                    Err(e) => set(m, "error", Some(current), e),
                }
            } else {
                let left = hold.saturating_sub(now.duration_since(since)).as_secs();
                set(
                    m,
                    "drifted",
                    Some(current.clone()),
                    format!("{key} was changed to {current} outside KeyMesh (wanted {}); reapplying in {left} s", m.value),
                );
            }
        }
    }

    /// Gives up every claim; the last claim on a setting restores its original value.
    fn release(&mut self) {
        let (roots, state, owner) = (&self.config.roots, &self.config.state, &self.config.owner);
        for m in self.managed.iter_mut().filter(|m| m.granted) {
            let key = m.setting.key();
            match state.update(|s| s.release(key, owner)) {
                Ok(Release::Restore(original)) => match m.setting.write(roots, &original) {
                    Ok(()) => info!(setting = key, to = %original, "restored the value from before"),
                    Err(e) => warn!(setting = key, error = %e, "failed to restore"),
                },
                Ok(Release::Keep) => info!(setting = key, "left as it is: another CacheCluster still wants it"),
                Ok(Release::Nothing) => {}
                Err(e) => warn!(setting = key, error = %e, "failed to release"),
            }
            m.granted = false;
        }
    }
}

fn set(m: &mut Managed, state: &str, observed: Option<String>, message: String) {
    m.status.state = state.to_string();
    m.status.observed = observed;
    m.status.message = message;
}

type Shared = Arc<Mutex<TunerStatus>>;

fn router(status: Shared) -> Router {
    Router::new().route("/readyz", get(readyz)).route("/status", get(report)).route("/healthz", get(|| async { "ok\n" })).with_state(status)
}

async fn readyz(State(status): State<Shared>) -> (StatusCode, String) {
    let status = status.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let lines: Vec<String> = status.settings.iter().map(|s| format!("{}: {}", s.state, s.message)).collect();
    let code = if status.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, lines.join("\n") + "\n")
}

async fn report(State(status): State<Shared>) -> (StatusCode, [(axum::http::header::HeaderName, &'static str); 1], String) {
    let status = status.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let body = serde_json::to_string(&status).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    (StatusCode::OK, [(axum::http::header::CONTENT_TYPE, "application/json")], body)
}

/// Runs the tuner until SIGTERM/SIGINT, then releases its claims.
pub async fn run(config: TunerConfig) -> Result<(), TunerError> {
    let listener = tokio::net::TcpListener::bind(config.listen).await.map_err(|source| TunerError::Bind { addr: config.listen, source })?;
    let mut tuner = Tuner::new(config)?;
    let shared: Shared = Arc::new(Mutex::new(tuner.status()));
    let app = router(shared.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    info!(owner = %tuner.config.owner, node = %tuner.config.node, wanted = ?tuner.config.wanted, "node tuner started");
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let mut tick = tokio::time::interval(tuner.config.interval);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                tuner.round(Instant::now());
                *shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = tuner.status();
            }
            _ = async { match terminate.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending().await } } => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    info!("stopping: giving the node settings back");
    tuner.release();
    server.abort();
    Ok(())
}

#[cfg(test)]
mod tests;
