//! The upgrade plan from observed states: every gate, the handoff order, surge, pause, failure,
//! rollback and a new spec arriving mid-failure.

use std::collections::BTreeSet;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::*;
use crate::api::{UpgradeSpec, UpgradeState, UpgradeStatus};
use crate::handoff::HandoffStep;
use crate::mesh::{self, peer_of, MemberState, PlanInput, ScalePlan};
use crate::observe::StatefulSetFacts;
use crate::test_support::{engine, full_mesh, names, REVISION};

const NEW: &str = "rev-2";

/// The observed world of one reconcile.
struct World {
    replicas: u32,
    settings: UpgradeSpec,
    built: String,
    statefulset: StatefulSetFacts,
    members: Vec<MemberState>,
    endpoints: BTreeSet<String>,
    previous: Option<UpgradeStatus>,
    now: Timestamp,
}

impl World {
    /// A running 3-pod cluster on `rev-1` whose spec now asks for `rev-2`.
    fn three() -> World {
        World {
            replicas: 3,
            settings: UpgradeSpec::default(),
            built: NEW.to_string(),
            statefulset: StatefulSetFacts { replicas: 3, partition: Some(0), template_hash: Some(REVISION.to_string()) },
            members: full_mesh(3),
            endpoints: (0..3).map(|i| format!("demo-{i}")).collect(),
            previous: None,
            now: Timestamp::from_second(1_800_000_000).expect("a timestamp"),
        }
    }

    fn run(&self) -> (Intent, ScalePlan, UpgradePlan) {
        let names = names();
        let input = UpgradeInput {
            names: &names,
            settings: &self.settings,
            replicas: self.replicas,
            target_version: "0.2.0",
            built: &self.built,
            statefulset: Some(&self.statefulset),
            members: &self.members,
            endpoints: &self.endpoints,
            previous: self.previous.as_ref(),
            current_version: Some("0.1.0"),
            persistence: false,
            now: self.now,
        };
        let intent = intent(&input);
        let scale = mesh::plan(&PlanInput {
            names: &names,
            desired: self.replicas + u32::from(intent.surge),
            statefulset_replicas: Some(self.statefulset.replicas),
            members: &self.members,
            endpoints: &self.endpoints,
            now: self.now,
        });
        let upgrade = plan(&input, &intent, &scale);
        (intent, scale, upgrade)
    }

    /// Runs a reconcile and carries its status and partition (as applied) into the next.
    fn step(&mut self) -> UpgradePlan {
        let (_, scale, upgrade) = self.run();
        self.previous = upgrade.status.clone();
        self.statefulset.partition = Some(upgrade.partition);
        self.statefulset.replicas = scale.statefulset_replicas;
        self.statefulset.template_hash = Some(upgrade.target.clone());
        upgrade
    }

    fn pod(&mut self, i: u32) -> &mut MemberState {
        self.members.iter_mut().find(|m| m.member.ordinal == i).expect("member")
    }

    /// Pod `i` has been handed off: gate closed, out of the endpoints, handoff done, and every
    /// other member merged it through its last sequence.
    fn hand_off(&mut self, i: u32) {
        self.endpoints.remove(&format!("demo-{i}"));
        let m = self.pod(i);
        m.pod.serving = Some(false);
        let status = m.status.as_mut().expect("answers");
        status.handoff = "done".into();
        status.run_id = format!("run-{i}");
        status.last_seq = 5;
        let host = peer_of(&names(), i).host;
        for w in self.members.iter_mut().filter(|m| m.member.ordinal != i) {
            if let Ok(s) = &mut w.status {
                for p in s.peers.iter_mut().filter(|p| p.peer.as_ref().is_some_and(|p| p.host == host)) {
                    p.synced_run_id = format!("run-{i}");
                    p.applied_seq = 5;
                }
            }
        }
    }

    /// Pod `i` was recreated from `revision`; `healthy` says whether it synced yet.
    fn recreate(&mut self, i: u32, revision: &str, healthy: bool) {
        let others: Vec<u32> = (0..self.statefulset.replicas.max(self.replicas)).filter(|&j| j != i).collect();
        let mut fresh = engine(i, &others, healthy);
        fresh.pod.template_hash = Some(revision.to_string());
        fresh.pod.created = Some(self.now);
        fresh.pod.serving = Some(true);
        if let Some(m) = self.members.iter_mut().find(|m| m.member.ordinal == i) {
            *m = fresh;
        } else {
            self.members.push(fresh);
            self.members.sort_by_key(|m| m.member.ordinal);
        }
        if healthy {
            self.endpoints.insert(format!("demo-{i}"));
        } else {
            self.endpoints.remove(&format!("demo-{i}"));
        }
    }
}

fn state(plan: &UpgradePlan) -> Option<UpgradeState> {
    plan.status.as_ref().map(|s| s.state)
}

#[test]
fn a_new_template_freezes_the_partition_and_hands_off_the_highest_pod_first() {
    let mut world = World::three();
    let plan = world.step();
    assert_eq!(plan.partition, 3, "the controller must replace nothing on its own: {plan:#?}");
    assert_eq!(plan.handoff, Some((2, HandoffStep::CloseGate)), "{plan:#?}");
    let status = plan.status.as_ref().expect("an upgrade status");
    assert_eq!((status.state, status.current_pod.as_deref()), (UpgradeState::Rolling, Some("demo-2")), "{status:#?}");
    assert_eq!((status.from_revision.as_deref(), status.to_revision.as_str()), (Some(REVISION), NEW), "{status:#?}");
    assert_eq!((status.from_version.as_deref(), status.to_version.as_str(), status.updated_replicas), (Some("0.1.0"), "0.2.0", 0));
    assert!(!plan.complete);
}

#[test]
fn a_pod_is_released_only_once_its_handoff_is_complete_and_the_next_waits_for_it_to_sync() {
    let mut world = World::three();
    world.step();
    // Gate closed, still routed to: wait.
    world.pod(2).pod.serving = Some(false);
    assert_eq!(world.step().handoff, Some((2, HandoffStep::AwaitEndpoints)));
    // Handed off, but demo-0 has not merged its last writes yet: still held at 3.
    world.hand_off(2);
    world.pod(0).status.as_mut().unwrap().peers.iter_mut().for_each(|p| p.applied_seq = 4);
    let plan = world.step();
    assert_eq!(plan.partition, 3, "{plan:#?}");
    assert!(matches!(&plan.handoff, Some((2, HandoffStep::AwaitPeers { behind, .. })) if behind == &["demo-0".to_string()]), "{plan:#?}");
    // demo-0 confirms: released (the controller deletes and recreates demo-2).
    world.hand_off(2);
    let plan = world.step();
    assert_eq!((plan.partition, plan.handoff.clone()), (2, None), "{plan:#?}");
    // Recreated on the new revision, syncing: nobody else goes, the partition stays.
    world.recreate(2, NEW, false);
    let plan = world.step();
    assert_eq!((plan.partition, plan.handoff.clone()), (2, None), "{plan:#?}");
    assert_eq!(plan.status.as_ref().and_then(|s| s.current_pod.as_deref()), Some("demo-2"), "{plan:#?}");
    // Synced: demo-1 is next.
    world.recreate(2, NEW, true);
    let plan = world.step();
    assert_eq!((plan.partition, plan.handoff.clone()), (2, Some((1, HandoffStep::CloseGate))), "{plan:#?}");
    assert_eq!(plan.status.as_ref().map(|s| s.updated_replicas), Some(1));
}

#[test]
fn the_whole_roll_completes_and_then_reports_nothing() {
    let mut world = World::three();
    for k in [2, 1, 0] {
        world.step();
        world.hand_off(k);
        let released = world.step();
        assert_eq!(released.partition, k, "{released:#?}");
        world.recreate(k, NEW, true);
    }
    let plan = world.step();
    assert_eq!((plan.partition, state(&plan), plan.complete), (0, None, true), "{plan:#?}");
}

#[test]
fn an_unhealthy_cluster_holds_the_roll_before_any_handoff() {
    let mut world = World::three();
    world.pod(0).status.as_mut().unwrap().peers[0].lag_ops = 3;
    let plan = world.step();
    assert_eq!((plan.partition, plan.handoff.clone(), state(&plan)), (3, None, Some(UpgradeState::Pending)), "{plan:#?}");
    assert!(plan.status.as_ref().is_some_and(|s| s.message.contains("demo-0 lags 3 ops behind demo-1")), "{plan:#?}");

    let mut world = World::three();
    world.pod(1).status.as_mut().unwrap().peers[1].link = "down".into();
    let plan = world.step();
    assert!(plan.handoff.is_none() && plan.status.as_ref().is_some_and(|s| s.message.contains("demo-1's link to demo-2 is down")), "{plan:#?}");

    let mut world = World::three();
    world.pod(1).pod_ready = false;
    assert!(world.step().handoff.is_none(), "a pod out of service holds the roll");
}

#[test]
fn pause_stops_before_the_next_pod_and_lets_a_started_one_finish() {
    let mut world = World::three();
    world.settings.paused = true;
    let plan = world.step();
    assert_eq!((state(&plan), plan.handoff.clone(), plan.partition), (Some(UpgradeState::Paused), None, 3), "{plan:#?}");

    // Resumed, the first pod's handoff starts; paused again mid-handoff, it finishes.
    world.settings.paused = false;
    assert_eq!(world.step().handoff, Some((2, HandoffStep::CloseGate)));
    world.settings.paused = true;
    world.hand_off(2);
    let plan = world.step();
    assert_eq!((plan.partition, state(&plan)), (2, Some(UpgradeState::Rolling)), "the pod in flight is released: {plan:#?}");
    world.recreate(2, NEW, true);
    let plan = world.step();
    assert_eq!((state(&plan), plan.handoff.clone(), plan.partition), (Some(UpgradeState::Paused), None, 2), "and then it pauses: {plan:#?}");
}

#[test]
fn a_pod_that_cannot_start_fails_the_upgrade_and_the_next_reconcile_rolls_it_back() {
    let mut world = World::three();
    world.step();
    world.hand_off(2);
    world.step();
    world.recreate(2, NEW, false);
    world.pod(2).pod.start_failure = Some("ErrImagePull: image keymesh/keymesh-server:broken is not mapped".into());
    let plan = world.step();
    let status = plan.status.clone().expect("status");
    assert_eq!((status.state, status.failed_pod.as_deref()), (UpgradeState::Failed, Some("demo-2")), "{status:#?}");
    assert!(status.message.contains("demo-2 cannot start: ErrImagePull"), "{status:#?}");
    assert_eq!(plan.partition, 2, "nothing else moves");

    // Rollback: the target is the previous revision; the failed pod serves nothing and goes.
    let (intent, _, plan) = world.run();
    assert_eq!((intent.target.as_str(), intent.rollback), (REVISION, true), "{intent:?}");
    assert_eq!((state(&plan), plan.partition, plan.handoff.clone()), (Some(UpgradeState::RollingBack), 2, None), "{plan:#?}");
    world.step();
    world.recreate(2, REVISION, true);
    let plan = world.step();
    assert_eq!((state(&plan), plan.partition, plan.complete), (Some(UpgradeState::RolledBack), 0, false), "{plan:#?}");
    // The failed spec is not tried again.
    let plan = world.step();
    assert_eq!((state(&plan), plan.target.as_str(), plan.handoff.clone()), (Some(UpgradeState::RolledBack), REVISION, None), "{plan:#?}");
}

#[test]
fn without_auto_rollback_a_failed_upgrade_holds_and_a_new_spec_rolls_again() {
    let mut world = World::three();
    world.settings.auto_rollback = false;
    world.step();
    world.hand_off(2);
    world.step();
    world.recreate(2, NEW, false);
    world.pod(2).pod.restarts = 3;
    world.pod(2).pod.problem = Some("CrashLoopBackOff: back-off 40s".into());
    let plan = world.step();
    assert!(plan.status.as_ref().is_some_and(|s| s.state == UpgradeState::Failed && s.message.contains("restarted 3 times: CrashLoopBackOff")), "{plan:#?}");
    for _ in 0..2 {
        let plan = world.step();
        assert_eq!((state(&plan), plan.partition, plan.handoff.clone()), (Some(UpgradeState::Failed), 2, None), "held: {plan:#?}");
    }
    // A corrected spec is accepted at once: the failed pod serves nothing and is replaced first.
    world.built = "rev-3".into();
    let plan = world.step();
    assert_eq!((state(&plan), plan.partition, plan.target.as_str()), (Some(UpgradeState::Rolling), 2, "rev-3"), "{plan:#?}");
    assert_eq!(plan.status.as_ref().and_then(|s| s.current_pod.as_deref()), Some("demo-2"));
}

#[test]
fn a_pod_not_ready_within_the_timeout_fails_the_upgrade() {
    let mut world = World::three();
    world.settings.ready_timeout_seconds = 60;
    world.step();
    world.hand_off(2);
    world.step();
    world.recreate(2, NEW, false);
    world.now += SignedDuration::from_secs(59);
    assert_eq!(state(&world.step()), Some(UpgradeState::Rolling), "within the timeout it is syncing");
    world.now += SignedDuration::from_secs(2);
    let plan = world.step();
    assert!(plan.status.as_ref().is_some_and(|s| s.state == UpgradeState::Failed && s.message.contains("not ready and synced 60s after")), "{plan:#?}");
}

#[test]
fn a_single_pod_surges_a_new_pod_first_and_removes_it_at_the_end() {
    let mut world = World::three();
    world.replicas = 1;
    world.members = vec![engine(0, &[], true)];
    world.members[0].pod.containers_ready = true;
    world.endpoints = BTreeSet::from(["demo-0".to_string()]);
    world.statefulset = StatefulSetFacts { replicas: 1, partition: Some(0), template_hash: Some(REVISION.to_string()) };

    let (intent, scale, plan) = world.run();
    assert!(intent.surge, "{intent:?}");
    assert_eq!(scale.statefulset_replicas, 2, "the StatefulSet grows by the surge pod: {scale:#?}");
    assert_eq!((plan.partition, plan.handoff.clone()), (1, None), "the surge pod (ordinal 1) gets the new revision; demo-0 waits: {plan:#?}");
    world.step();
    // The surge pod joined and synced; demo-0 lists it: now demo-0 is handed off to it.
    world.recreate(1, NEW, true);
    world.members[0] = engine(0, &[1], true);
    world.members[0].pod.containers_ready = true;
    let plan = world.step();
    assert_eq!(plan.handoff, Some((0, HandoffStep::CloseGate)), "{plan:#?}");
    world.hand_off(0);
    assert_eq!(world.step().partition, 0, "released once the surge pod holds its writes");
    world.recreate(0, NEW, true);
    let (intent, scale, plan) = world.run();
    assert!(plan.complete && !intent.surge, "{plan:#?}");
    assert_eq!(scale.leaving, BTreeSet::from([1]), "the surge pod leaves through the scale-down handoff: {scale:#?}");
}
