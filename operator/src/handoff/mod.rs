//! The handoff of a pod that leaves the mesh (DESIGN.md, "Handoff"), shared by scale down (the
//! pod is removed) and rolling upgrades (the pod is replaced). Every step is an observed fact,
//! never a timing assumption:
//!
//! 1. **Close the gate**: the pod's readiness gate `keymesh.io/serving` is set False, so the
//!    pod stops being ready at once and the endpoints controller drops it from the client
//!    Service (no readiness probe period to wait out).
//! 2. **Out of the endpoints**: wait until the client Service's ready addresses no longer
//!    name the pod, and then until the gate has been closed for `PROPAGATION` (what kube-proxy
//!    and clients' own endpoint caches take to follow), so no new client is sent there.
//! 3. **Hand the clients off**: the engine's admin `Handoff` closes idle client connections at
//!    once and busy ones after `spec.upgrade.handoffGraceSeconds` (clients reconnect through
//!    the Service to another pod), then refuses writes; its `last_seq` is then final.
//! 4. **Peers confirm**: every witness (the members that stream from it) reports having
//!    merged that run of the pod through `last_seq` (`synced_run_id`, `applied_seq`): nothing
//!    the pod acknowledged can be lost any more. Only then is the pod removed or replaced.
//! 5. **Snapshot** (a pod an upgrade replaces, with `spec.persistence` on): the engine's admin
//!    `Save` writes a snapshot that started after writes were refused and covers `last_seq`, so
//!    the replacement, which mounts the same volume, starts from everything the pod held (and a
//!    cluster whose pods all go down during the roll keeps it). A failed snapshot is asked for
//!    again; the status shows why.
//!
//! A pod whose engine does not answer and whose containers are not ready serves no client and
//! can give nothing more: its handoff is complete once it is out of the endpoints.
//!
//! Pods that are not leaving get their gate opened and any handoff cancelled (a scale down
//! reverted, a paused upgrade). `plan` and `actions` are pure; `apply` carries them out.

mod apply;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::mesh::{peer_of, MemberState};
use crate::names::ClusterNames;

pub use apply::{apply, HandoffError, HandoffReport};

/// The readiness gate the engine pods carry (`spec.readinessGates`) and the operator sets.
pub const SERVING_CONDITION: &str = "keymesh.io/serving";

/// How long after its gate closed a pod keeps serving before its clients are handed off:
/// the Endpoints change must reach kube-proxy on every node (and clients that cache
/// endpoints) before the engine closes connections, or reconnecting clients land on it again.
pub const PROPAGATION: SignedDuration = SignedDuration::from_secs(3);

/// Where one leaving pod's handoff stands: the next thing to do or to wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandoffStep {
    /// Set the pod's readiness gate False.
    CloseGate,
    /// The gate is closed; the client Service still routes to the pod.
    AwaitEndpoints,
    /// Out of the endpoints; the change is still propagating (`PROPAGATION`).
    AwaitPropagation,
    /// Ask the engine to hand its clients off.
    Start,
    /// The engine is closing its client connections.
    AwaitClients { clients: u64 },
    /// The engine does not answer while its containers are ready: it may still hold clients.
    AwaitEngine { error: String },
    /// Writes are refused; these witnesses have not confirmed merging through `last_seq` yet.
    AwaitPeers { last_seq: u64, behind: Vec<String> },
    /// Ask the engine for a snapshot (`error`: why the last one failed, if it did).
    Snapshot { error: Option<String> },
    /// The engine is writing its snapshot.
    AwaitSnapshot,
    /// Everything the pod acknowledged is on its witnesses: it may be removed or replaced.
    Complete,
}

impl HandoffStep {
    pub fn complete(&self) -> bool {
        *self == HandoffStep::Complete
    }

    /// A short human description, for status messages.
    pub fn describe(&self, pod: &str) -> String {
        match self {
            HandoffStep::CloseGate => format!("taking {pod} out of the client Service"),
            HandoffStep::AwaitEndpoints => format!("waiting for the client Service to stop routing to {pod}"),
            HandoffStep::AwaitPropagation => format!("{pod} left the client Service; waiting for the change to reach every client"),
            HandoffStep::Start => format!("asking {pod} to hand its clients off"),
            HandoffStep::AwaitClients { clients } => format!("{pod} is closing its client connections ({clients} left)"),
            HandoffStep::AwaitEngine { error } => format!("{pod} does not answer while its containers are ready: {error}"),
            HandoffStep::AwaitPeers { last_seq, behind } => {
                format!("{pod} refuses writes; waiting for {} to confirm its writes through sequence {last_seq}", behind.join(", "))
            }
            HandoffStep::Snapshot { error: None } => format!("asking {pod} for a snapshot of its volume before it is replaced"),
            HandoffStep::Snapshot { error: Some(error) } => format!("{pod}'s snapshot failed ({error}); asking for another"),
            HandoffStep::AwaitSnapshot => format!("{pod} is writing a snapshot to its volume before it is replaced"),
            HandoffStep::Complete => format!("{pod} handed off: every write it acknowledged is on its peers"),
        }
    }
}

/// Where the handoff of `leaving` stands. `witnesses` are the members that must hold its
/// writes (for a scale down, the remaining members that stream from it; for an upgrade, every
/// other member). `in_endpoints`: the client Service still routes to it. `snapshot`: the pod
/// must also have written a snapshot after it stopped taking writes (step 5).
pub fn step(names: &ClusterNames, leaving: &MemberState, in_endpoints: bool, witnesses: &[&MemberState], snapshot: bool, now: Timestamp) -> HandoffStep {
    if leaving.pod.serving != Some(false) {
        return HandoffStep::CloseGate;
    }
    if in_endpoints {
        return HandoffStep::AwaitEndpoints;
    }
    let propagated = leaving.pod.serving_since.is_some_and(|since| now.duration_since(since) >= PROPAGATION);
    let handing_off = leaving.node_status().is_some_and(|s| s.handoff == "closing" || s.handoff == "done");
    if !propagated && !handing_off && leaving.pod.containers_ready {
        return HandoffStep::AwaitPropagation;
    }
    let status = match &leaving.status {
        Ok(status) => status,
        Err(_) if !leaving.pod.containers_ready => return HandoffStep::Complete,
        Err(error) => return HandoffStep::AwaitEngine { error: error.clone() },
    };
    match status.handoff.as_str() {
        "done" => {}
        "closing" => return HandoffStep::AwaitClients { clients: status.clients },
        _ => return HandoffStep::Start,
    }
    let host = peer_of(names, leaving.member.ordinal).host;
    let behind: Vec<String> = witnesses
        .iter()
        .filter(|w| w.member.ordinal != leaving.member.ordinal)
        .filter(|w| {
            let Some(witness) = w.node_status() else { return true };
            !witness.peers.iter().any(|p| {
                p.peer.as_ref().is_some_and(|peer| peer.host.trim_end_matches('.').eq_ignore_ascii_case(&host))
                    && p.synced_run_id == status.run_id
                    && p.applied_seq >= status.last_seq
            })
        })
        .map(|w| w.member.pod.clone())
        .collect();
    if !behind.is_empty() {
        return HandoffStep::AwaitPeers { last_seq: status.last_seq, behind };
    }
    if snapshot {
        return snapshot_step(status);
    }
    HandoffStep::Complete
}

/// Step 5: done once a snapshot that started after writes were refused succeeded.
fn snapshot_step(status: &keymesh_proto::NodeStatus) -> HandoffStep {
    let Some(snapshot) = status.snapshot.as_ref() else {
        // An engine that reports no snapshots (an older build): nothing to wait for.
        return HandoffStep::Complete;
    };
    if !snapshot.enabled {
        return HandoffStep::Complete;
    }
    let covered = snapshot.last_save_unix_ms > 0 && snapshot.last_save_after_handoff && snapshot.last_save_seq >= status.last_seq;
    if covered && !snapshot.in_progress {
        HandoffStep::Complete
    } else if snapshot.in_progress {
        HandoffStep::AwaitSnapshot
    } else {
        HandoffStep::Snapshot { error: (!snapshot.last_ok && !snapshot.last_error.is_empty()).then(|| snapshot.last_error.clone()) }
    }
}

/// What to do to one pod's gate or engine.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum HandoffAction {
    /// Set the pod's `keymesh.io/serving` condition.
    SetGate { ordinal: u32, pod: String, serving: bool },
    /// Start the engine's handoff.
    Start { ordinal: u32, pod: String },
    /// Cancel the engine's handoff: it takes writes again.
    Cancel { ordinal: u32, pod: String },
    /// Ask the engine for a snapshot.
    Save { ordinal: u32, pod: String },
}

/// The actions for every pod: leaving pods (with their steps) move their handoff on; every
/// other pod is opened (gate True, handoff cancelled). Pods being deleted are left alone.
pub fn actions(members: &[MemberState], leaving: &BTreeMap<u32, HandoffStep>) -> Vec<HandoffAction> {
    let mut actions = BTreeSet::new();
    for m in members.iter().filter(|m| !m.pod.deleting) {
        let (ordinal, pod) = (m.member.ordinal, m.member.pod.clone());
        match leaving.get(&ordinal) {
            Some(HandoffStep::CloseGate) => {
                actions.insert(HandoffAction::SetGate { ordinal, pod, serving: false });
            }
            Some(HandoffStep::Start) => {
                actions.insert(HandoffAction::Start { ordinal, pod });
            }
            Some(HandoffStep::Snapshot { .. }) => {
                actions.insert(HandoffAction::Save { ordinal, pod });
            }
            Some(_) => {}
            None => {
                if m.pod.serving != Some(true) {
                    actions.insert(HandoffAction::SetGate { ordinal, pod: pod.clone(), serving: true });
                }
                if m.node_status().is_some_and(|s| s.handoff != "serving" && !s.handoff.is_empty()) {
                    actions.insert(HandoffAction::Cancel { ordinal, pod });
                }
            }
        }
    }
    actions.into_iter().collect()
}

#[cfg(test)]
mod tests;
