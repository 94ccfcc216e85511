//! The scale plan (DESIGN.md, "Scaling"), computed from the live StatefulSet size, the pods and
//! their engines' statuses. Pure: statuses in, decisions out.
//!
//! Membership is read from the engines themselves, so the operator keeps no state of its own:
//! a pod is *joined* (in the mesh) when another engine lists it as a peer, or when it is ready
//! and synced; otherwise it is *joining*. Pods at or above `spec.replicas` are *leaving*.
//! Rules:
//! - every joined member's peer list is exactly the other joined members; a joining pod's list
//!   is every joined member, so it syncs from pods that hold the data, never from another
//!   joining (empty) pod; a leaving pod's list is left alone;
//! - the config file's `replicaof` lines name the joined members, so a pod that (re)starts
//!   syncs from them (a new cluster's founding members all name each other);
//! - scale up grows the StatefulSet at once: new pods sync, become ready, and then join;
//! - scale down first hands each leaving pod off (`crate::handoff`: out of the client Service,
//!   clients closed, writes refused, and every remaining member that lists it confirms having
//!   merged its writes through its last sequence), then removes it from every remaining peer
//!   list, and shrinks the StatefulSet only once every remaining engine answered and none lists
//!   a leaving pod. Without the handoff, a write acknowledged by a leaving pod after its peers
//!   stopped subscribing to it would be lost. A pod that is wanted again (a scale up during a
//!   scale down) is opened again (`handoff::actions`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use keymesh_proto::{NodeStatus, Peer};

use super::{peer_of, MemberState};
use crate::handoff::{self, HandoffStep};
use crate::names::ClusterNames;

pub struct PlanInput<'a> {
    pub names: &'a ClusterNames,
    /// `spec.replicas`.
    pub desired: u32,
    /// The live StatefulSet's `spec.replicas`; `None` when it does not exist yet.
    pub statefulset_replicas: Option<u32>,
    /// Every pod of the cluster, with its engine's status.
    pub members: &'a [MemberState],
    /// Pods the client Service routes to.
    pub endpoints: &'a BTreeSet<String>,
    pub now: Timestamp,
}

/// A peer list to set on one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerUpdate {
    pub ordinal: u32,
    pub pod: String,
    pub peers: Vec<Peer>,
    /// Ordinals this update adds to the member's list.
    pub adds: Vec<u32>,
    /// Ordinals this update removes (leaving pods, or pods no longer in the mesh).
    pub removes: Vec<u32>,
}

/// Where the cluster stands on its way to `spec.replicas`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScaleStep {
    /// No StatefulSet yet: create it with every founding member.
    Create,
    /// Nothing to do about size.
    Steady,
    /// The StatefulSet grows now; its new pods join once synced.
    ScaleUp { from: u32, to: u32 },
    /// Pods below `spec.replicas` are not in the mesh yet (syncing, or not started).
    AwaitJoin { pods: Vec<String> },
    /// Leaving pods are being handed off (`crate::handoff`); they stay in the peer lists until
    /// every remaining member that lists them has merged all of their writes.
    HandOffLeaving { pods: Vec<String> },
    /// Leaving pods are removed from the remaining peer lists now; the StatefulSet keeps them.
    RemoveLeaving { pods: Vec<String> },
    /// Remaining engines did not answer, so they may still list leaving pods.
    AwaitPeerRemoval { unanswered: Vec<String> },
    /// Nobody lists a leaving pod any more: the StatefulSet shrinks now.
    ScaleDown { from: u32, to: u32 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePlan {
    pub statefulset_replicas: u32,
    /// The ordinals written as `replicaof` lines.
    pub config_peers: Vec<u32>,
    pub joined: BTreeSet<u32>,
    pub joining: BTreeSet<u32>,
    pub leaving: BTreeSet<u32>,
    pub peer_updates: Vec<PeerUpdate>,
    /// Where each leaving pod's handoff stands (every leaving pod is here; one nobody lists
    /// any more is complete).
    pub handoffs: BTreeMap<u32, HandoffStep>,
    pub step: ScaleStep,
}

impl ScalePlan {
    /// Nothing left to do: size reached, every pod joined, every peer list right.
    pub fn settled(&self) -> bool {
        self.step == ScaleStep::Steady && self.joining.is_empty() && self.leaving.is_empty() && self.peer_updates.is_empty()
    }
}

fn caught_up(status: &NodeStatus) -> bool {
    status.ready && status.synced
}

fn peer_key(peer: &Peer) -> (String, u32) {
    (peer.host.to_ascii_lowercase().trim_end_matches('.').to_string(), peer.port)
}

pub fn plan(input: &PlanInput) -> ScalePlan {
    let names = input.names;
    let desired = input.desired;
    let statuses: BTreeMap<u32, &NodeStatus> = input.members.iter().filter_map(|m| Some((m.member.ordinal, m.node_status()?))).collect();
    let highest = input.members.iter().map(|m| m.member.ordinal + 1).chain([desired, input.statefulset_replicas.unwrap_or(0)]).max().unwrap_or(0);
    let ordinal_of: BTreeMap<(String, u32), u32> = (0..highest).map(|i| (peer_key(&peer_of(names, i)), i)).collect();
    let lists: BTreeMap<u32, BTreeSet<u32>> = statuses
        .iter()
        .map(|(&i, status)| (i, status.peers.iter().filter_map(|p| ordinal_of.get(&peer_key(p.peer.as_ref()?)).copied()).filter(|&j| j != i).collect()))
        .collect();
    let listed: BTreeSet<u32> = lists.values().flatten().copied().collect();

    let current = input.statefulset_replicas;
    let assumed = || (0..desired.min(current.unwrap_or(desired))).collect::<BTreeSet<u32>>();
    let joined: BTreeSet<u32> = match current {
        None => (0..desired).collect(),
        Some(_) if statuses.is_empty() => assumed(),
        Some(_) => (0..desired).filter(|i| listed.contains(i) || statuses.get(i).is_some_and(|s| caught_up(s))).collect(),
    };
    let joining: BTreeSet<u32> = (0..desired).filter(|i| !joined.contains(i)).collect();
    let leaving: BTreeSet<u32> = input.members.iter().map(|m| m.member.ordinal).chain(desired..current.unwrap_or(0)).filter(|&i| i >= desired).collect();

    // Leaving pods that a remaining member still lists are handed off first; the ones whose
    // handoff is not complete stay listed.
    let still_listed: BTreeSet<u32> = lists.range(..desired).flat_map(|(_, list)| list.iter().copied()).filter(|j| leaving.contains(j)).collect();
    let handoffs: BTreeMap<u32, HandoffStep> = leaving
        .iter()
        .map(|&j| {
            let step = match input.members.iter().find(|m| m.member.ordinal == j) {
                Some(member) if still_listed.contains(&j) => {
                    let witnesses: Vec<&MemberState> =
                        input.members.iter().filter(|w| w.member.ordinal < desired && lists.get(&w.member.ordinal).is_some_and(|l| l.contains(&j))).collect();
                    handoff::step(names, member, input.endpoints.contains(&member.member.pod), &witnesses, false, input.now)
                }
                // Nobody streams from it any more (or it is gone): nothing left to hand off.
                _ => HandoffStep::Complete,
            };
            (j, step)
        })
        .collect();
    let unmerged: BTreeSet<u32> = handoffs.iter().filter(|(_, step)| !step.complete()).map(|(&j, _)| j).collect();
    let peer_updates = peer_updates(names, desired, &joined, &unmerged, &statuses, &lists);
    let config_peers: Vec<u32> = if joined.is_empty() { assumed().into_iter().collect() } else { joined.iter().copied().collect() };
    let pods = |set: &BTreeSet<u32>| set.iter().map(|&i| names.pod(i)).collect::<Vec<_>>();

    let (statefulset_replicas, step) = match current {
        None => (desired, ScaleStep::Create),
        Some(current) if desired > current => (desired, ScaleStep::ScaleUp { from: current, to: desired }),
        Some(current) if desired == current && joining.is_empty() => (desired, ScaleStep::Steady),
        Some(current) if desired == current => (desired, ScaleStep::AwaitJoin { pods: pods(&joining) }),
        Some(current) => {
            let still_listing: BTreeSet<u32> =
                lists.iter().filter(|(&i, list)| i < desired && list.iter().any(|j| leaving.contains(j))).map(|(&i, _)| i).collect();
            let unanswered: Vec<String> = input.members.iter().filter(|m| m.member.ordinal < desired && m.unknown()).map(|m| m.member.pod.clone()).collect();
            if !unmerged.is_empty() {
                (current, ScaleStep::HandOffLeaving { pods: pods(&unmerged) })
            } else if !still_listing.is_empty() {
                (current, ScaleStep::RemoveLeaving { pods: pods(&leaving) })
            } else if !unanswered.is_empty() {
                (current, ScaleStep::AwaitPeerRemoval { unanswered })
            } else {
                (desired, ScaleStep::ScaleDown { from: current, to: desired })
            }
        }
    };
    ScalePlan { statefulset_replicas, config_peers, joined, joining, leaving, peer_updates, handoffs, step }
}

/// The list every answering member below `desired` should have, where it differs from the one
/// it has: joined members get the other joined members, joining pods get every joined member;
/// a leaving pod in `keep` (not merged yet) stays in the lists that have it.
fn peer_updates(
    names: &ClusterNames,
    desired: u32,
    joined: &BTreeSet<u32>,
    keep: &BTreeSet<u32>,
    statuses: &BTreeMap<u32, &NodeStatus>,
    lists: &BTreeMap<u32, BTreeSet<u32>>,
) -> Vec<PeerUpdate> {
    let mut updates = Vec::new();
    for (&ordinal, status) in statuses.range(..desired) {
        let known_now = lists.get(&ordinal).cloned().unwrap_or_default();
        let want: BTreeSet<u32> = joined.iter().copied().chain(keep.intersection(&known_now).copied()).filter(|&j| j != ordinal).collect();
        let has: BTreeSet<(String, u32)> = status.peers.iter().filter_map(|p| p.peer.as_ref().map(peer_key)).collect();
        let wanted_keys: BTreeSet<(String, u32)> = want.iter().map(|&j| peer_key(&peer_of(names, j))).collect();
        if has == wanted_keys {
            continue;
        }
        let known = lists.get(&ordinal).cloned().unwrap_or_default();
        updates.push(PeerUpdate {
            ordinal,
            pod: names.pod(ordinal),
            peers: want.iter().map(|&j| peer_of(names, j)).collect(),
            adds: want.difference(&known).copied().collect(),
            removes: known.difference(&want).copied().collect(),
        });
    }
    updates
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
