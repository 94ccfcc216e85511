//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics, so two
//! operator replicas never act at the same time:
//!
//! - The holder renews every `RETRY_PERIOD` (2 s). It may act (`gate`: Kubernetes writes,
//!   engine admin calls) only until its last *successful* renewal's start plus
//!   `RENEW_DEADLINE` (10 s) — strictly less than the lease duration (15 s) — and stops acting
//!   at once when that passes, whatever its calls are doing (they are cut off at the deadline).
//! - A candidate takes the Lease only once it has seen the Lease's record (its
//!   `resourceVersion`, which the apiserver bumps at every renewal) unchanged for a whole
//!   `LEASE_DURATION`, measured on its own monotonic clock from the moment it observed the
//!   record. The record it observed was written after the holder's last renewal started, so
//!   the candidate starts at least `LEASE_DURATION - RENEW_DEADLINE` (5 s) after the old holder
//!   stopped acting, without trusting either replica's wall clock (the timestamps inside the
//!   Lease are informational). A released Lease (no holder) is taken at once.
//! - The acquire and renew are a read and an update guarded by `resourceVersion`: of two
//!   replicas racing for an expired Lease, one wins and the other gets a conflict.
//!
//! `decide` is the pure rule; `Leadership` runs it against the API server.

pub mod gate;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{PostParams, ResourceExt};
use kube::Api;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

pub use gate::{GateLayer, GatedMeshClient, LeaderGate, NotActing};

pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// A holder that has not renewed for this long stops acting (< `LEASE_DURATION`).
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("failed to {what} the leader Lease {namespace}/{name}: {source}")]
    Lease { what: &'static str, namespace: String, name: String, source: kube::Error },
    #[error("timed out trying to {what} the leader Lease")]
    Timeout { what: &'static str },
    #[error("the leader election task stopped")]
    Stopped,
}

/// What a replica knows of the Lease: the record it last saw, and when it first saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub holder: Option<String>,
    pub resource_version: String,
    pub since: Instant,
}

/// What to do with the Lease now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nobody holds it, or the holder's record has not changed for a lease duration.
    Acquire,
    /// This replica holds it.
    Renew,
    /// Another replica holds it; it expires (if not renewed) after `expires_in`.
    Wait { holder: String, expires_in: Duration },
}

/// The pure rule; see the module docs.
pub fn decide(identity: &str, observed: &Observed, now: Instant) -> Decision {
    match observed.holder.as_deref() {
        None | Some("") => Decision::Acquire,
        Some(holder) if holder == identity => Decision::Renew,
        Some(holder) => {
            let age = now.saturating_duration_since(observed.since);
            if age >= LEASE_DURATION {
                Decision::Acquire
            } else {
                Decision::Wait { holder: holder.to_string(), expires_in: LEASE_DURATION - age }
            }
        }
    }
}

/// A running election.
pub struct Leadership {
    state: watch::Receiver<bool>,
    task: JoinHandle<()>,
    elector: Arc<Elector>,
}

struct Elector {
    leases: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    gate: Arc<LeaderGate>,
}

impl Leadership {
    /// Starts competing for the Lease `namespace/name` as `identity` (the pod name). `client`
    /// must not pass through `gate`.
    pub fn start(client: kube::Client, namespace: &str, name: &str, identity: &str, gate: Arc<LeaderGate>) -> Leadership {
        let elector = Arc::new(Elector {
            leases: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            gate,
        });
        let (tx, state) = watch::channel(false);
        let task = tokio::spawn(elector.clone().run(tx));
        Leadership { state, task, elector }
    }

    /// Resolves once this replica leads.
    pub async fn acquired(&mut self) -> Result<(), LeaderError> {
        self.state.wait_for(|leader| *leader).await.map(|_| ()).map_err(|_| LeaderError::Stopped)
    }

    /// Resolves when this replica has stopped acting as leader (it could not renew in time).
    pub async fn lost(&mut self) {
        let _ = self.state.wait_for(|leader| !*leader).await;
    }

    /// Stops competing and, if leading, hands the Lease over at once (empties its holder).
    pub async fn release(self) {
        self.task.abort();
        let leading = self.elector.gate.remaining().is_some();
        self.elector.gate.revoke();
        if leading {
            match tokio::time::timeout(RETRY_PERIOD, self.elector.release()).await {
                Ok(Ok(())) => info!("released the leader Lease"),
                Ok(Err(e)) => warn!(error = %e, "failed to release the leader Lease"),
                Err(_) => warn!("timed out releasing the leader Lease"),
            }
        }
    }
}

impl Elector {
    async fn run(self: Arc<Self>, state: watch::Sender<bool>) {
        let mut observed: Option<Observed> = None;
        let mut leading = false;
        loop {
            let started = Instant::now();
            match tokio::time::timeout(RETRY_PERIOD, self.try_acquire_or_renew(&mut observed, started)).await {
                Ok(Ok(true)) => {
                    self.gate.act_until(started + RENEW_DEADLINE);
                    if !leading {
                        leading = true;
                        info!(identity = %self.identity, "became leader: acting until the lease cannot be renewed");
                        state.send_replace(true);
                    }
                }
                Ok(Ok(false)) => {}
                Ok(Err(e)) => warn!(error = %e, leading, "leader election round failed"),
                Err(_) => warn!(leading, "leader election round timed out"),
            }
            if leading && self.gate.remaining().is_none() {
                self.gate.revoke();
                warn!(identity = %self.identity, deadline_s = RENEW_DEADLINE.as_secs(), "stopped acting as leader: the lease was not renewed within the renew deadline");
                state.send_replace(false);
                return;
            }
            tokio::time::sleep(RETRY_PERIOD.saturating_sub(started.elapsed())).await;
        }
    }

    fn lease_error(&self, what: &'static str) -> impl FnOnce(kube::Error) -> LeaderError + '_ {
        move |source| LeaderError::Lease { what, namespace: self.namespace.clone(), name: self.name.clone(), source }
    }

    /// One round: read the Lease, then take or renew it when `decide` says so. Returns whether
    /// this replica holds it now.
    async fn try_acquire_or_renew(&self, observed: &mut Option<Observed>, now: Instant) -> Result<bool, LeaderError> {
        let Some(mut lease) = self.leases.get_opt(&self.name).await.map_err(self.lease_error("read"))? else {
            let lease = self.record(Lease { metadata: ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() }, spec: None }, true);
            return match self.leases.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    *observed =
                        Some(Observed { holder: Some(self.identity.clone()), resource_version: created.resource_version().unwrap_or_default(), since: now });
                    Ok(true)
                }
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(e) => Err(self.lease_error("create")(e)),
            };
        };
        // Observed when the read returned: a candidate's wait starts no earlier than the
        // record it saw was written.
        let record = Observed {
            holder: lease.spec.as_ref().and_then(|s| s.holder_identity.clone()),
            resource_version: lease.resource_version().unwrap_or_default(),
            since: Instant::now(),
        };
        if observed.as_ref().is_none_or(|o| o.resource_version != record.resource_version || o.holder != record.holder) {
            *observed = Some(record);
        }
        let Some(seen) = observed.as_ref() else { return Ok(false) };
        let acquiring = match decide(&self.identity, seen, Instant::now()) {
            Decision::Wait { .. } => return Ok(false),
            Decision::Renew => false,
            Decision::Acquire => true,
        };
        lease = self.record(lease, acquiring);
        match self.leases.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(updated) => {
                if acquiring {
                    info!(identity = %self.identity, previous = ?seen.holder, "acquired the leader Lease");
                }
                *observed =
                    Some(Observed { holder: Some(self.identity.clone()), resource_version: updated.resource_version().unwrap_or_default(), since: now });
                Ok(true)
            }
            // Someone else renewed or took it first: observe again next round.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(e) => Err(self.lease_error("update")(e)),
        }
    }

    /// `lease` with this replica as holder, renewed now (acquired now, if `acquiring`).
    fn record(&self, mut lease: Lease, acquiring: bool) -> Lease {
        let now = MicroTime(Timestamp::now());
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if acquiring {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + i32::from(spec.holder_identity.is_some()));
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(i32::try_from(LEASE_DURATION.as_secs()).unwrap_or(15));
        spec.renew_time = Some(now);
        lease
    }

    /// Empties the holder so that another replica takes over at once (as client-go's
    /// `ReleaseOnCancel`).
    async fn release(&self) -> Result<(), LeaderError> {
        let Some(mut lease) = self.leases.get_opt(&self.name).await.map_err(self.lease_error("read"))? else { return Ok(()) };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        self.leases.replace(&self.name, &PostParams::default(), &lease).await.map(drop).map_err(self.lease_error("release"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(holder: Option<&str>, since: Instant) -> Observed {
        Observed { holder: holder.map(str::to_string), resource_version: "1".into(), since }
    }

    #[test]
    fn the_deadlines_leave_a_gap_between_two_leaders() {
        assert!(RENEW_DEADLINE + Duration::from_secs(5) <= LEASE_DURATION, "the holder stops acting well before a candidate may start");
        assert!(RETRY_PERIOD * 4 <= RENEW_DEADLINE, "several renewals fit in the deadline");
    }

    #[test]
    fn a_candidate_waits_a_whole_lease_duration_from_when_it_saw_the_record() {
        let t0 = Instant::now();
        let seen = observed(Some("other"), t0);
        assert_eq!(decide("me", &seen, t0 + Duration::from_secs(14)), Decision::Wait { holder: "other".into(), expires_in: Duration::from_secs(1) });
        assert_eq!(decide("me", &seen, t0 + LEASE_DURATION), Decision::Acquire);
        assert_eq!(decide("me", &observed(None, t0), t0), Decision::Acquire, "a released Lease is taken at once");
        assert_eq!(decide("me", &observed(Some(""), t0), t0), Decision::Acquire);
        assert_eq!(decide("me", &observed(Some("me"), t0), t0 + Duration::from_secs(60)), Decision::Renew);
    }
}
